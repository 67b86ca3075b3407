"""c2sp.org/signed-note@v1.0.0: text signed by one or more keys.

Follows the spec as in the C2SP repository (signature types as of that version plus 0x06,
which only adds an identifier). Pure functions over bytes; signatures are made with
``cryptography`` and checked with libsodium (:func:`signoff.audit.keys.check_raw`).

* :func:`key_id`, :func:`check_key_name`, :func:`parse_vkey` / :func:`format_vkey` ("Verifier keys");
* :func:`parse_note` / :func:`format_note` / :func:`sign_note` ("Format");
* :func:`verify_note` ("Signatures"), with any :class:`Verifier`: :class:`Ed25519Verifier` here,
  :class:`signoff.audit.tlog_cosignature.CosignatureVerifier` for witness cosignatures (either from its
  vkey: :func:`signoff.audit.vkeys.verifier_from_vkey`).

Limits (the spec: verifiers SHOULD apply one, MUST accept at least 16 signatures): a note holds at
most :data:`MAX_SIGNATURES` (100, as Go's golang.org/x/mod/sumdb/note) signature lines and
:data:`MAX_NOTE_SIZE` (1 MiB) bytes, room for 100 post-quantum signatures of ~5 kB.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.audit.c2sp_errors import KeyFormatError, NoteFormatError, NoteNotVerified
from signoff.audit.keys import check_raw

__all__ = [
    "MAX_NOTE_SIZE",
    "MAX_SIGNATURES",
    "SIG_COSIGNATURE_V1",
    "SIG_ED25519",
    "Ed25519Signer",
    "Ed25519Verifier",
    "Note",
    "Signature",
    "Signer",
    "VerifiedNote",
    "Verifier",
    "VerifierKey",
    "check_key_name",
    "decode_base64",
    "format_note",
    "format_vkey",
    "key_id",
    "parse_note",
    "parse_signature_line",
    "parse_vkey",
    "sign_note",
    "verify_note",
]

SIG_ED25519 = 0x01
"""Signature type of plain Ed25519 note signatures ("Signature types")."""
SIG_COSIGNATURE_V1 = 0x04
"""Signature type of timestamped Ed25519 checkpoint cosignatures (c2sp.org/tlog-cosignature)."""

MAX_SIGNATURES = 100
"""Most signature lines a note may hold ("Format": SHOULD limit, MUST accept at least 16)."""
MAX_NOTE_SIZE = 1 << 20
"""Most bytes a note may hold (the same SHOULD, as an overall size)."""

EM_DASH_PREFIX = "\u2014 "
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_KEY_ID_HEX = re.compile(r"[0-9a-f]{8}")
_ED25519_KEY_SIZE = 32


def decode_base64(text: str, what: str, error: type[Exception] = NoteFormatError) -> bytes:
    """Standard padded base64 of RFC 4648 §4 (the encoding every C2SP spec uses), or ``error``."""
    if len(text) % 4 or not _BASE64.fullmatch(text):
        raise error(f"{what}: expected standard padded base64 (RFC 4648 §4), found {text[:60]!r}")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise error(f"{what}: expected standard padded base64 (RFC 4648 §4), found {text[:60]!r}") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def check_key_name(name: str) -> str:
    """Key names: "Key names MUST be non-empty and MUST NOT contain any Unicode spaces or plus (U+002B) characters"
    ("Format"). Returns ``name``; raises :class:`KeyFormatError`."""
    if not name:
        raise KeyFormatError("key name: expected a non-empty name, found an empty one")
    if "+" in name:
        raise KeyFormatError(f"key name {name!r}: expected no plus sign (U+002B), found one")
    for ch in name:
        # Unicode spaces: what Go's unicode.IsSpace reports (White_Space), plus the Zs category.
        if ch.isspace() or unicodedata.category(ch) == "Zs" or ch in "\x85\xa0":
            raise KeyFormatError(f"key name {name!r}: expected no Unicode spaces, found {ch!r}")
    if any(ord(ch) < 0x20 or 0xD800 <= ord(ch) <= 0xDFFF for ch in name):
        raise KeyFormatError(f"key name {name!r}: expected no control characters or surrogates, found one")
    return name


def key_id(name: str, sig_type: int, public: bytes) -> bytes:
    """``SHA-256(key name || 0x0A || signature type || public key)[:4]`` ("Signatures"; for Ed25519,
    "Ed25519 signatures"; for cosignatures, c2sp.org/tlog-cosignature "Format"). The type byte is hashed,
    so a key reused for another signature type gets another key ID ("Verifier keys": MUST)."""
    if not 0 <= sig_type <= 0xFF:
        raise KeyFormatError(f"signature type: expected one byte, found {sig_type}")
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([sig_type]) + public).digest()[:4]


# -- verifier keys ----------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifierKey:
    """A parsed vkey: ``<key name>+hex(32-bit key ID)+base64(signature type || public key)``."""

    name: str
    key_id: bytes
    sig_type: int
    public: bytes

    def text(self) -> str:
        return format_vkey(self.name, self.sig_type, self.public)


def format_vkey(name: str, sig_type: int, public: bytes) -> str:
    """The vkey text for a key ("Verifier keys"), its key ID computed as recommended."""
    check_key_name(name)
    return f"{name}+{key_id(name, sig_type, public).hex()}+{_b64(bytes([sig_type]) + public)}"


def parse_vkey(text: str) -> VerifierKey:
    """Parse and check a vkey ("Verifier keys"): a valid name, 8 lowercase hex digits that match the
    key ID the name and key material give, and for types 0x01 and 0x04 a 32-byte Ed25519 key."""
    # Split on the first two plus signs only: base64 may itself contain "+".
    parts = text.split("+", 2)
    if len(parts) != 3:
        raise KeyFormatError(f"vkey: expected <name>+<hex key id>+<base64 key>, found {text[:80]!r}")
    name, id_hex, key64 = parts
    check_key_name(name)
    if not _KEY_ID_HEX.fullmatch(id_hex):
        raise KeyFormatError(f"vkey {name}: expected a key ID of 8 lowercase hex digits, found {id_hex!r}")
    material = decode_base64(key64, f"vkey {name}", KeyFormatError)
    if not material:
        raise KeyFormatError(f"vkey {name}: expected a signature type byte and a key, found nothing")
    sig_type, public = material[0], material[1:]
    if sig_type in (SIG_ED25519, SIG_COSIGNATURE_V1) and len(public) != _ED25519_KEY_SIZE:
        # "The public key material for Ed25519 vkeys is the 32-byte Ed25519 public key" (and tlog-cosignature).
        raise KeyFormatError(
            f"vkey {name}: expected a {_ED25519_KEY_SIZE}-byte Ed25519 key for type 0x{sig_type:02x}, "
            f"found {len(public)} bytes"
        )
    expected = key_id(name, sig_type, public)
    if bytes.fromhex(id_hex) != expected:
        # "The key name and ID MUST match those used in the signatures."
        raise KeyFormatError(f"vkey {name}: expected key ID {expected.hex()}, found {id_hex}")
    return VerifierKey(name, expected, sig_type, public)


# -- signers and verifiers --------------------------------------------------------------------


class Verifier(Protocol):
    """What :func:`verify_note` needs of a key: its name, its 4-byte ID and a signature check."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> bytes: ...

    def verify(self, text: bytes, signature: bytes) -> bool:
        """Whether ``signature`` (the bytes after the key ID) signs the note ``text``."""
        ...


class Signer(Protocol):
    """What :func:`sign_note` needs of a key."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> bytes: ...

    def sign(self, text: bytes) -> bytes: ...


@dataclass(frozen=True)
class Ed25519Verifier:
    """A type 0x01 key: RFC 8032 Ed25519 over the note text ("Ed25519 signatures")."""

    name: str
    public: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if len(self.public) != _ED25519_KEY_SIZE:
            raise KeyFormatError(f"Ed25519 key: expected 32 bytes, found {len(self.public)}")

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, SIG_ED25519, self.public)

    def vkey(self) -> str:
        return format_vkey(self.name, SIG_ED25519, self.public)

    def verify(self, text: bytes, signature: bytes) -> bool:
        return check_raw(self.public, signature, text)


@dataclass(frozen=True)
class Ed25519Signer:
    """A type 0x01 note signer holding a ``cryptography`` Ed25519 private key."""

    name: str
    private: Ed25519PrivateKey

    def __post_init__(self) -> None:
        check_key_name(self.name)

    @property
    def public(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, SIG_ED25519, self.public)

    def verifier(self) -> Ed25519Verifier:
        return Ed25519Verifier(self.name, self.public)

    def vkey(self) -> str:
        return format_vkey(self.name, SIG_ED25519, self.public)

    def sign(self, text: bytes) -> bytes:
        return self.private.sign(text)


# -- notes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    """One signature line: ``— <key name> base64(32-bit key ID || signature)``."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        """The line, without its newline."""
        return f"{EM_DASH_PREFIX}{self.name} {_b64(self.key_id + self.signature)}"


@dataclass(frozen=True)
class Note:
    """A parsed (not verified) note: the text, final newline included, and its signatures."""

    text: bytes
    signatures: tuple[Signature, ...]

    def format(self) -> bytes:
        return format_note(self.text, self.signatures)


def _check_chars(data: bytes, what: str) -> str:
    """UTF-8 and characters: "Signed notes MUST be valid UTF-8 and MUST NOT contain any ASCII control characters (those
    below U+0020) other than newline" ("Format")."""
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoteFormatError(f"{what}: expected valid UTF-8, found an invalid byte at offset {exc.start}") from None
    for i, ch in enumerate(decoded):
        if ch < " " and ch != "\n":
            raise NoteFormatError(f"{what}: expected no control characters but newline, found {ch!r} at {i}")
    return decoded


def parse_signature_line(line: str) -> Signature:
    """One signature line without its newline: em dash, space, key name, space, base64 of 4+n bytes."""
    if not line.startswith(EM_DASH_PREFIX):
        raise NoteFormatError(f"signature line: expected it to start with '\u2014 ', found {line[:40]!r}")
    name, sep, sig64 = line[len(EM_DASH_PREFIX) :].partition(" ")
    if not sep:
        raise NoteFormatError(f"signature line: expected '\u2014 <name> <base64>', found {line[:80]!r}")
    try:
        check_key_name(name)
    except KeyFormatError as exc:
        raise NoteFormatError(f"signature line: {exc}") from None
    raw = decode_base64(sig64, f"signature line of {name}")
    if len(raw) < 5:
        # "Signatures are the base64 encoding of 4+n bytes" (a key ID and a non-empty signature).
        raise NoteFormatError(f"signature line of {name}: expected a 4-byte key ID and a signature, found {len(raw)}")
    return Signature(name, raw[:4], raw[4:])


def parse_note(data: bytes) -> Note:
    """Split a note into its text and signature lines ("Format"), checking the structure only."""
    if len(data) > MAX_NOTE_SIZE:
        raise NoteFormatError(f"note: expected at most {MAX_NOTE_SIZE} bytes, found {len(data)}")
    _check_chars(data, "note")
    # "the text is separated from the signatures by the last empty line in the note"
    split = data.rfind(b"\n\n")
    if split < 0:
        raise NoteFormatError("note: expected a text, an empty line and signature lines, found no empty line")
    text, block = data[: split + 1], data[split + 2 :]
    if not block or not block.endswith(b"\n"):
        # "followed by one or more signature lines of this form: ..., newline"
        raise NoteFormatError("note: expected one or more newline-terminated signature lines after the empty line")
    lines = block[:-1].decode("utf-8").split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteFormatError(f"note: expected at most {MAX_SIGNATURES} signatures, found {len(lines)}")
    return Note(text, tuple(parse_signature_line(line) for line in lines))


def format_note(text: bytes, signatures: Iterable[Signature]) -> bytes:
    """``text`` (ending in a newline), an empty line and one line per signature ("Format")."""
    _check_text(text)
    lines = [sig.line() for sig in signatures]
    if not lines:
        raise NoteFormatError("note: expected one or more signatures, found none")
    return text + b"\n" + "".join(line + "\n" for line in lines).encode("utf-8")


def _check_text(text: bytes) -> None:
    if not text.endswith(b"\n"):
        raise NoteFormatError("note text: expected it to end in a newline (U+000A), found none")
    _check_chars(text, "note text")


def sign_note(text: bytes, signers: Sequence[Signer]) -> bytes:
    """The note of ``text`` signed by each signer ("Format", "Signatures")."""
    _check_text(text)
    return format_note(text, [Signature(check_key_name(s.name), s.key_id, s.sign(text)) for s in signers])


@dataclass(frozen=True)
class VerifiedNote:
    """A note whose text a known key vouched for: the verifiers whose signature verified (each once, in
    order of first signature), those signatures, and the signatures from unknown keys. "The text MUST be
    ignored unless the note is signed by a trusted key and the signature has been verified": only
    :func:`verify_note` hands one out."""

    text: bytes
    verifiers: tuple[Verifier, ...]
    signatures: tuple[Signature, ...]
    unknown: tuple[Signature, ...]

    def verified_by(self, verifier: Verifier) -> Signature | None:
        for v, sig in zip(self.verifiers, self.signatures, strict=True):
            if v is verifier:
                return sig
        return None


def verify_note(data: bytes | Note, verifiers: Iterable[Verifier]) -> VerifiedNote:
    """Check a note against the known keys ("Signatures").

    * signatures whose (name, key ID) matches no known key are ignored ("MUST ignore");
    * every signature from a known key is verified ("MUST verify"), repeats included, and one that
      fails rejects the whole note (the SHOULD), raising :class:`NoteNotVerified`;
    * a note no known key verified is rejected ("MUST reject"), raising :class:`NoteNotVerified`.
    """
    note = data if isinstance(data, Note) else parse_note(data)
    known: dict[tuple[str, bytes], Verifier] = {}
    for v in verifiers:
        pair = (v.name, bytes(v.key_id))
        if pair in known and known[pair] is not v:
            raise KeyFormatError(f"verifiers: expected one key per name and key ID, found two for {v.name}")
        known[pair] = v
    seen: dict[tuple[str, bytes], tuple[Verifier, Signature]] = {}
    unknown: list[Signature] = []
    for sig in note.signatures:
        pair = (sig.name, sig.key_id)
        verifier = known.get(pair)
        if verifier is None:
            # "Verifiers MUST ignore signatures from unknown keys, even if they share a name or ID (but not both)"
            unknown.append(sig)
            continue
        # "If the key name and ID match a known key, verifiers MUST verify the signature." A failure rejects
        # the whole note (the SHOULD; tlog-witness makes it a MUST, answering 403).
        if not verifier.verify(note.text, sig.signature):
            raise NoteNotVerified(
                f"note: expected a valid signature from known key {sig.name}+{sig.key_id.hex()}, found an invalid one"
            )
        seen.setdefault(pair, (verifier, sig))
    if not seen:
        # "If no signature from a known key verifies successfully, clients MUST reject the note."
        names = ", ".join(sorted({name for name, _ in known})) or "none"
        raise NoteNotVerified(f"note: expected a signature from a known key ({names}), found none that verifies")
    return VerifiedNote(
        note.text,
        tuple(v for v, _ in seen.values()),
        tuple(s for _, s in seen.values()),
        tuple(unknown),
    )
