"""c2sp.org/tlog-checkpoint@v1.0.0: a signed note whose text is a log's Merkle tree head.

Follows the spec as in the C2SP repository. :class:`Checkpoint` is the note text ("Note text");
:func:`sign_checkpoint` / :func:`verify_checkpoint` go through :mod:`signoff.audit.signed_note`
("Signatures": clients MUST ignore unknown signatures, which :func:`~signoff.audit.signed_note.verify_note`
does). :func:`check_origin` is the origin SHOULD, which our own logs enforce.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from signoff.audit.c2sp_errors import CheckpointFormatError
from signoff.audit.merkle import HASH_SIZE
from signoff.audit.signed_note import (
    Note,
    Signer,
    VerifiedNote,
    Verifier,
    decode_base64,
    sign_note,
    verify_note,
)

__all__ = [
    "MAX_SIZE",
    "Checkpoint",
    "VerifiedCheckpoint",
    "check_origin",
    "parse",
    "parse_decimal",
    "sign_checkpoint",
    "verify_checkpoint",
]

MAX_SIZE = (1 << 64) - 1
"""Largest tree size we read (a uint64, as Go's checkpoint parsers)."""

_DECIMAL = re.compile(r"0|[1-9][0-9]*")


def parse_decimal(text: str, what: str, error: type[Exception] = CheckpointFormatError, limit: int = MAX_SIZE) -> int:
    """An ASCII decimal "with no leading zeroes (unless ... `0`)", at most ``limit``, or ``error``."""
    if not _DECIMAL.fullmatch(text):
        raise error(f"{what}: expected an ASCII decimal with no leading zeroes, found {text[:40]!r}")
    value = int(text)
    if value > limit:
        raise error(f"{what}: expected at most {limit}, found {text}")
    return value


def check_origin(name: str) -> str:
    """The origin SHOULD ("Note text" 1): a schema-less URL containing neither Unicode spaces nor plus,
    such as ``example.com/log42``; we also refuse a leading or trailing slash (tlog-tiles "Parameters":
    the prefix "with no trailing slashes"). Returns ``name``; raises :class:`CheckpointFormatError`
    (a ``ValueError``) naming the rule broken."""
    rule = "a schema-less URL with no spaces and no '+' such as example.com/log42"
    if not name:
        raise CheckpointFormatError(f"origin: expected {rule}, found an empty origin")
    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:(?![0-9]+(/|$))", name)
    if "://" in name or scheme:
        raise CheckpointFormatError(f"origin {name!r}: expected {rule}, found a URL scheme")
    if "+" in name:
        raise CheckpointFormatError(f"origin {name!r}: expected {rule}, found a plus sign (U+002B)")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise CheckpointFormatError(f"origin {name!r}: expected {rule}, found a space or control character")
    if name.startswith("/") or name.endswith("/"):
        raise CheckpointFormatError(f"origin {name!r}: expected {rule}, found a leading or trailing slash")
    return name


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint note text ("Note text"): origin, tree size, root hash, extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "extensions", tuple(self.extensions))
        if not self.origin or "\n" in self.origin:
            # "The origin MUST be non-empty" (and is one line)
            raise CheckpointFormatError(f"origin: expected a non-empty line, found {self.origin!r}")
        if not 0 <= self.size <= MAX_SIZE:
            raise CheckpointFormatError(f"tree size: expected 0..{MAX_SIZE}, found {self.size}")
        if len(self.root) != HASH_SIZE:
            raise CheckpointFormatError(f"root hash: expected {HASH_SIZE} bytes, found {len(self.root)}")
        for line in self.extensions:
            if not line or "\n" in line:
                # "Extension lines, if any, MUST be non-empty."
                raise CheckpointFormatError(f"extension line: expected a non-empty line, found {line!r}")

    def text(self) -> bytes:
        """The note text: each line ending in a newline."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode("ascii"), *self.extensions]
        return "".join(line + "\n" for line in lines).encode("utf-8")


def parse(text: bytes | str) -> Checkpoint:
    """Parse and check a checkpoint's note text ("Note text"); raises :class:`CheckpointFormatError`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointFormatError("checkpoint: expected valid UTF-8 text, found invalid bytes") from None
    if any(ch < " " and ch != "\n" for ch in text):
        raise CheckpointFormatError("checkpoint: expected no control characters but newline, found one")
    if not text.endswith("\n"):
        raise CheckpointFormatError("checkpoint: expected newline-terminated lines, found no final newline")
    # "a sequence of at least three non-empty lines, separated by newlines"
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointFormatError(f"checkpoint: expected at least 3 lines, found {len(lines)}")
    origin, size, root, *extensions = lines
    # "clients MUST NOT assume that the origin is following this format": only non-empty is checked here.
    if not origin:
        raise CheckpointFormatError("checkpoint origin: expected a non-empty line, found an empty one")
    parsed_size = parse_decimal(size, "checkpoint tree size")
    raw_root = decode_base64(root, "checkpoint root hash", CheckpointFormatError)
    if len(raw_root) != HASH_SIZE:
        raise CheckpointFormatError(f"checkpoint root hash: expected {HASH_SIZE} bytes, found {len(raw_root)}")
    return Checkpoint(origin, parsed_size, raw_root, tuple(extensions))


def sign_checkpoint(checkpoint: Checkpoint, signers: Sequence[Signer]) -> bytes:
    """The checkpoint as a signed note. The log's key name SHOULD match the origin ("Signatures").

    "A log MUST not sign any checkpoint which is inconsistent with any checkpoint it previously signed":
    that is the caller's duty (it alone knows what it signed before)."""
    return sign_note(checkpoint.text(), signers)


@dataclass(frozen=True)
class VerifiedCheckpoint:
    checkpoint: Checkpoint
    note: VerifiedNote


def verify_checkpoint(
    note: bytes | Note, verifiers: Iterable[Verifier], *, origin: str | None = None
) -> VerifiedCheckpoint:
    """Verify the note with :func:`~signoff.audit.signed_note.verify_note` ("clients MUST ignore unknown
    signatures"), then parse its text; with ``origin``, the checkpoint must be for that origin."""
    verified = verify_note(note, verifiers)
    checkpoint = parse(verified.text)
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointFormatError(f"checkpoint: expected origin {origin!r}, found {checkpoint.origin!r}")
    return VerifiedCheckpoint(checkpoint, verified)
