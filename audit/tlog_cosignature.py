"""c2sp.org/tlog-cosignature@v1.0.1: Ed25519 ``cosignature/v1`` checkpoint cosignatures (type 0x04).

Follows the spec as in the C2SP repository (the Ed25519 type only; not ML-DSA-44, not subtrees).
A cosignature is a note signature (signed-note) over a checkpoint whose signature bytes are a
``timestamped_signature``: a big-endian u64 POSIX timestamp and a 64-byte Ed25519 signature of
:func:`signed_message`. :class:`CosignatureVerifier` plugs into
:func:`signoff.audit.signed_note.verify_note`; :func:`timestamp_of` reads the time back from a
signature that verified. We do not reject timestamps in the future (the spec's MAY).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.audit import tlog_checkpoint
from signoff.audit.c2sp_errors import C2SPFormatError, KeyFormatError
from signoff.audit.keys import check_raw
from signoff.audit.signed_note import (
    SIG_COSIGNATURE_V1,
    Signature,
    check_key_name,
    format_vkey,
    key_id,
    parse_vkey,
)

__all__ = [
    "HEADER",
    "MAX_TIMESTAMP",
    "SIGNATURE_SIZE",
    "CosignatureVerifier",
    "Cosigner",
    "cosignature_key_id",
    "signed_message",
    "timestamp_of",
    "timestamped_signature",
]

HEADER = b"cosignature/v1\n"
"""The header line: "the fixed string `cosignature/v1`" ("Ed25519 signed message")."""
MAX_TIMESTAMP = (1 << 63) - 1
"""`timestamp` "MUST NOT exceed 2^63 - 1" ("Format")."""
SIGNATURE_SIZE = 8 + 64
"""Length of an Ed25519 ``timestamped_signature``: u64 timestamp || ed25519_signature[64]."""


def cosignature_key_id(name: str, public: bytes) -> bytes:
    """``SHA-256(<name> || "\\n" || 0x04 || 32-byte Ed25519 cosigner public key)[:4]`` ("Format": MUST)."""
    return key_id(name, SIG_COSIGNATURE_V1, public)


def _check_timestamp(timestamp: int) -> None:
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise C2SPFormatError(f"cosignature timestamp: expected 0..2^63-1, found {timestamp}")


def signed_message(checkpoint_text: bytes, timestamp: int) -> bytes:
    """The message: "two newline (U+000A) terminated lines (one header line and one timestamp line) followed by the
    whole note body of the cosigned checkpoint (including the final newline, but not including any
    signature lines)" ("Ed25519 signed message": MUST). The timestamp line is ``time``, a space and
    the timestamp "as an ASCII decimal with no leading zeroes"; extension lines are included."""
    _check_timestamp(timestamp)
    return HEADER + b"time " + str(timestamp).encode("ascii") + b"\n" + checkpoint_text


def timestamped_signature(timestamp: int, signature: bytes) -> bytes:
    """The ``timestamped_signature`` struct: "serialized in sequence, with the timestamp encoded in
    big-endian order" (RFC 8446 §3.3) ("Format": the signature MUST be this structure)."""
    _check_timestamp(timestamp)
    if len(signature) != 64:
        raise C2SPFormatError(f"Ed25519 signature: expected 64 bytes, found {len(signature)}")
    return struct.pack(">Q", timestamp) + signature


def timestamp_of(signature: bytes) -> int:
    """The timestamp of a ``timestamped_signature`` (the bytes after the key ID)."""
    if len(signature) != SIGNATURE_SIZE:
        raise C2SPFormatError(f"cosignature: expected {SIGNATURE_SIZE} bytes, found {len(signature)}")
    value: int = struct.unpack(">Q", signature[:8])[0]
    return value


def _is_checkpoint(text: bytes) -> bool:
    try:
        tlog_checkpoint.parse(text)
    except C2SPFormatError:
        return False
    return True


@dataclass(frozen=True)
class CosignatureVerifier:
    """A witness's type 0x04 key, for :func:`~signoff.audit.signed_note.verify_note`."""

    name: str
    public: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if len(self.public) != 32:
            raise KeyFormatError(f"cosigner key: expected a 32-byte Ed25519 key, found {len(self.public)} bytes")

    @classmethod
    def from_vkey(cls, text: str) -> CosignatureVerifier:
        vkey = parse_vkey(text)
        if vkey.sig_type != SIG_COSIGNATURE_V1:
            raise KeyFormatError(f"vkey {vkey.name}: expected signature type 0x04, found 0x{vkey.sig_type:02x}")
        return cls(vkey.name, vkey.public)

    @property
    def key_id(self) -> bytes:
        return cosignature_key_id(self.name, self.public)

    def vkey(self) -> str:
        return format_vkey(self.name, SIG_COSIGNATURE_V1, self.public)

    def check(self, text: bytes, signature: bytes) -> int | None:
        """The timestamp of a valid cosignature of checkpoint ``text``, or None."""
        if len(signature) != SIGNATURE_SIZE or not _is_checkpoint(text):
            return None
        timestamp = timestamp_of(signature)
        if timestamp > MAX_TIMESTAMP:
            return None
        return timestamp if check_raw(self.public, signature[8:], signed_message(text, timestamp)) else None

    def verify(self, text: bytes, signature: bytes) -> bool:
        return self.check(text, signature) is not None


@dataclass(frozen=True)
class Cosigner:
    """A witness's Ed25519 key, cosigning checkpoints as ``name`` (type 0x04). As a
    :class:`~signoff.audit.signed_note.Signer` it stamps the current time.

    "A cosigner operator that operates multiple Ed25519 cosigners ... MUST use distinct public keys for
    each cosigner": the message does not name the cosigner, so give each cosigner its own key."""

    name: str
    private: Ed25519PrivateKey
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def __post_init__(self) -> None:
        check_key_name(self.name)

    @property
    def public(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def key_id(self) -> bytes:
        return cosignature_key_id(self.name, self.public)

    def verifier(self) -> CosignatureVerifier:
        return CosignatureVerifier(self.name, self.public)

    def vkey(self) -> str:
        return format_vkey(self.name, SIG_COSIGNATURE_V1, self.public)

    def sign_at(self, checkpoint_text: bytes, timestamp: int) -> bytes:
        """The ``timestamped_signature`` over a checkpoint's text at ``timestamp``.

        tlog-witness: "The cosignature MUST NOT omit the timestamp, i.e. the timestamp MUST NOT be zero."
        """
        if not 0 < timestamp <= MAX_TIMESTAMP:
            raise C2SPFormatError(f"cosignature timestamp: expected 1..2^63-1, found {timestamp}")
        tlog_checkpoint.parse(checkpoint_text)  # only checkpoints are cosigned
        return timestamped_signature(timestamp, self.private.sign(signed_message(checkpoint_text, timestamp)))

    def sign(self, text: bytes) -> bytes:
        return self.sign_at(text, int(self.clock()))

    def cosign(self, checkpoint_text: bytes, timestamp: int | None = None) -> Signature:
        """The note signature line's content for a cosignature of ``checkpoint_text``."""
        stamp = int(self.clock()) if timestamp is None else timestamp
        return Signature(self.name, self.key_id, self.sign_at(checkpoint_text, stamp))
