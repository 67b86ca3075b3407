"""A verifier for any vkey a Signoff log or its witnesses give (c2sp.org/signed-note "Verifier keys").

Type 0x01 is c2sp.org/signed-note's Ed25519 (:class:`signoff.audit.signed_note.Ed25519Verifier`), type 0x04
c2sp.org/tlog-cosignature's ``cosignature/v1`` (:class:`signoff.audit.tlog_cosignature.CosignatureVerifier`).
It sits above both spec modules, so that each knows only its own type and neither imports the other.
"""

from __future__ import annotations

from signoff.audit.c2sp_errors import KeyFormatError
from signoff.audit.signed_note import SIG_COSIGNATURE_V1, SIG_ED25519, Ed25519Verifier, Verifier, parse_vkey
from signoff.audit.tlog_cosignature import CosignatureVerifier

__all__ = ["verifier_from_vkey"]


def verifier_from_vkey(text: str) -> Verifier:
    """A :class:`Verifier` for a type 0x01 or 0x04 vkey; other types raise :class:`KeyFormatError`."""
    vkey = parse_vkey(text)
    if vkey.sig_type == SIG_ED25519:
        return Ed25519Verifier(vkey.name, vkey.public)
    if vkey.sig_type == SIG_COSIGNATURE_V1:
        return CosignatureVerifier(vkey.name, vkey.public)
    raise KeyFormatError(f"vkey {vkey.name}: expected signature type 0x01 or 0x04, found 0x{vkey.sig_type:02x}")
