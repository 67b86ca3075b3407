"""Where the log meets the C2SP specs: its key as a note signer, its checkpoints as signed notes, and the
witnesses an admin names on it.

The log key (``ed25519:<base64>``, enrolled at entry 0) signs checkpoints as an Ed25519 note signature
(c2sp.org/signed-note, type 0x01) under the key name of the log's origin (c2sp.org/tlog-checkpoint
"Signatures": the key name SHOULD match the origin). Its verifier key is
``<origin>+<hex key id>+<base64(0x01 || public key)>``. Witnesses cosign with type 0x04
(c2sp.org/tlog-cosignature). The pure formats live in :mod:`signed_note`, :mod:`tlog_checkpoint` and
:mod:`tlog_cosignature`; this module only binds them to the log's own keys and entries.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from signoff.audit import keys
from signoff.audit.c2sp_errors import C2SPError
from signoff.audit.entry import parse_hash
from signoff.audit.signed_note import Ed25519Signer, Ed25519Verifier, parse_note, parse_signature_line, parse_vkey
from signoff.audit.tlog_checkpoint import Checkpoint, verify_checkpoint
from signoff.audit.tlog_cosignature import CosignatureVerifier

WITNESS_KINDS = frozenset({"witness.added", "witness.removed", "witness.quorum"})
MAX_WITNESSES = 16  # a note verifier "MUST accept at least up to 16 signatures": the log plus 15 witnesses


def log_signer(origin: str, signer: keys.Signer) -> Ed25519Signer:
    """The log key as the note signer of its checkpoints (key name: the origin)."""
    return Ed25519Signer(origin, signer.private)


def log_verifier(origin: str, public_key: str) -> Ed25519Verifier:
    """The log key ``ed25519:<base64>`` as a note verifier under the origin's key name."""
    return Ed25519Verifier(origin, keys.public_bytes(public_key))


def log_vkey(origin: str, public_key: str) -> str:
    """The log's verifier key (c2sp.org/signed-note "Verifier keys"), as ``audit vkey`` prints it."""
    return log_verifier(origin, public_key).vkey()


def checkpoint_of(origin: str, size: int, root: str) -> Checkpoint:
    """The checkpoint note text's content for the tree head ``(size, root)`` (``root``: ``sha256:<hex>``)."""
    return Checkpoint(origin, size, parse_hash(root))


def sign_checkpoint(origin: str, size: int, root: str, signer: keys.Signer) -> str:
    """The checkpoint of ``(size, root)`` as a note signed by the log key (c2sp.org/tlog-checkpoint)."""
    from signoff.audit.tlog_checkpoint import sign_checkpoint as sign

    return sign(checkpoint_of(origin, size, root), [log_signer(origin, signer)]).decode("utf-8")


def verify_log_note(note: bytes, origin: str, public_key: str) -> Checkpoint:
    """A checkpoint note that the log key signed under ``origin`` (raises a C2SP error otherwise)."""
    return verify_checkpoint(note, [log_verifier(origin, public_key)], origin=origin).checkpoint


def note_text(note: str) -> bytes:
    """The text of a note (its lines before the signatures), as cosignatures sign it."""
    return parse_note(note.encode("utf-8")).text


@dataclass(frozen=True)
class Witness:
    """A witness an admin named on the log (``witness.added``): its key name, vkey and submission URL."""

    name: str
    vkey: str
    url: str

    def verifier(self) -> CosignatureVerifier:
        return CosignatureVerifier.from_vkey(self.vkey)


def check_witness_body(kind: str, body: dict[str, Any], active: dict[str, Witness], quorum: int) -> None:
    """The rules of the admin's witness entries (SPEC.md "Witnesses"); ``ValueError`` naming the field.

    * ``witness.added`` ``{witness, vkey, url}``: a type 0x04 (cosignature/v1) vkey whose key name is
      ``witness``, an ``http(s)://`` URL, a name not active already, at most :data:`MAX_WITNESSES`;
    * ``witness.removed`` ``{witness, reason}``: an active witness, a reason; the quorum must still be met;
    * ``witness.quorum`` ``{quorum}``: an integer from 0 to the number of active witnesses.
    """
    name = body.get("witness")
    if kind == "witness.added":
        if not isinstance(name, str) or name in active:
            raise ValueError(f"body.witness: expected the key name of a witness not yet on the log, found {name!r}")
        try:
            vkey = parse_vkey(str(body.get("vkey")))
        except C2SPError as exc:
            raise ValueError(f"body.vkey: {exc}") from None
        if vkey.sig_type != 0x04 or vkey.name != name:
            raise ValueError(
                f"body.vkey: expected a cosignature/v1 vkey (type 0x04) named {name!r}, found type "
                f"0x{vkey.sig_type:02x} named {vkey.name!r}"
            )
        url = body.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
            raise ValueError(f"body.url: expected the witness's http(s):// submission prefix, found {url!r}")
        if len(active) >= MAX_WITNESSES:
            raise ValueError(f"body.witness: expected at most {MAX_WITNESSES} witnesses, found {len(active)} already")
    elif kind == "witness.removed":
        if name not in active:
            raise ValueError(f"body.witness: expected a witness on the log, found {name!r}")
        if not isinstance(body.get("reason"), str) or not str(body.get("reason")).strip():
            raise ValueError("body.reason: expected why the witness is removed, found none")
        if quorum > len(active) - 1:
            raise ValueError(f"body.witness: expected the quorum {quorum} met without it; lower the quorum first")
    elif kind == "witness.quorum":
        wanted = body.get("quorum")
        if isinstance(wanted, bool) or not isinstance(wanted, int) or not 0 <= wanted <= len(active):
            raise ValueError(f"body.quorum: expected 0..{len(active)} (the witnesses on the log), found {wanted!r}")
    else:
        raise ValueError(f"kind: expected a witness entry, found {kind!r}")


def apply_witness_entry(kind: str, body: dict[str, Any], active: dict[str, Witness], quorum: int) -> int:
    """Apply a checked witness entry to ``active``; returns the quorum after it."""
    if kind == "witness.added":
        name = str(body["witness"])
        active[name] = Witness(name, str(body["vkey"]), str(body["url"]))
    elif kind == "witness.removed":
        active.pop(str(body["witness"]), None)
    elif kind == "witness.quorum":
        return int(body["quorum"])
    return quorum


def check_cosignature(witness: Witness, text: bytes, line: str) -> int:
    """A cosignature line by ``witness`` over the checkpoint ``text``; its timestamp (``ValueError`` if it
    is not the witness's, or does not verify)."""
    try:
        sig = parse_signature_line(line)
    except C2SPError as exc:
        raise ValueError(f"body.cosignature: {exc}") from None
    verifier = witness.verifier()
    if sig.name != witness.name or sig.key_id != verifier.key_id:
        raise ValueError(
            f"body.cosignature: expected a signature line of {witness.name}+{verifier.key_id.hex()}, "
            f"found {sig.name}+{sig.key_id.hex()}"
        )
    timestamp = verifier.check(text, sig.signature)
    if timestamp is None:
        raise ValueError(f"body.cosignature: expected {witness.name}'s valid cosignature/v1, found an invalid one")
    return timestamp


def root_base64(root: str) -> str:
    """``sha256:<hex>`` as the base64 a checkpoint's third line holds."""
    return base64.b64encode(parse_hash(root)).decode("ascii")


__all__ = [
    "MAX_WITNESSES",
    "WITNESS_KINDS",
    "Witness",
    "apply_witness_entry",
    "check_cosignature",
    "check_witness_body",
    "checkpoint_of",
    "log_signer",
    "log_verifier",
    "log_vkey",
    "note_text",
    "root_base64",
    "sign_checkpoint",
    "verify_log_note",
]
