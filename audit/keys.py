"""Ed25519 keys and signatures (RFC 8032): keys and signing through ``cryptography``, checking
through PyNaCl (libsodium), which checks a signature in ~43 µs here against ~100 µs for
``cryptography`` and lets other threads run meanwhile (``tests/benchmarks/audit_bench.py``
measures both). libsodium checks RFC 8032 §5.1.7 and also refuses small-order keys and
``R`` points, which no honest signer makes.

A private key lives in a PEM file with mode 0600 and never enters the log or the
database. Public keys are written as ``ed25519:<base64 of the 32 raw bytes>`` and
named by their fingerprint, ``ed25519:<hex SHA-256 of the raw bytes>``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from signoff.audit.errors import KeyFileError

ALG = "Ed25519"


def encode_public(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + base64.b64encode(raw).decode("ascii")


def decode_public(text: str) -> Ed25519PublicKey:
    if not isinstance(text, str) or not text.startswith("ed25519:"):
        raise ValueError(f"expected a public key 'ed25519:<base64>', found {text[:40]!r}")
    try:
        raw = base64.b64decode(text[len("ed25519:") :], validate=True)
        if len(raw) != 32:
            raise ValueError(f"{len(raw)} bytes")
        return Ed25519PublicKey.from_public_bytes(raw)
    except ValueError as exc:
        raise ValueError(f"expected 32 raw Ed25519 public key bytes in base64, found {text[:60]!r}") from exc


@functools.lru_cache(maxsize=4096)
def public_bytes(public: str) -> bytes:
    """The 32 raw bytes of a public key written by :func:`encode_public` (ValueError otherwise)."""
    return decode_public(public).public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@functools.lru_cache(maxsize=4096)
def fingerprint(public: str) -> str:
    """``ed25519:<hex SHA-256 of the raw public key>`` for a key written by :func:`encode_public`.

    Raises ValueError unless ``public`` is 32 raw Ed25519 bytes in base64.
    """
    return "ed25519:" + hashlib.sha256(public_bytes(public)).hexdigest()


@dataclass(frozen=True)
class Signer:
    """An actor's private key, used to sign statements and checkpoints."""

    private: Ed25519PrivateKey

    @property
    def public(self) -> str:
        return encode_public(self.private.public_key())

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public)

    def sign(self, message: bytes) -> dict[str, str]:
        value = base64.b64encode(self.private.sign(message)).decode("ascii")
        return {"key": self.fingerprint, "alg": ALG, "value": value}

    @classmethod
    def generate(cls) -> Signer:
        return cls(Ed25519PrivateKey.generate())


def verify_signature(public: str, sig: dict[str, str], message: bytes) -> bool:
    """Check an Ed25519 ``sig`` object over ``message`` with the given public key."""
    if sig.get("alg") != ALG or sig.get("key") != fingerprint(public):
        return False
    try:
        return check_raw(public_bytes(public), base64.b64decode(sig.get("value", ""), validate=True), message)
    except ValueError:
        return False


def check_raw(public: bytes, signature: bytes, message: bytes) -> bool:
    """RFC 8032 §5.1.7 over raw bytes (libsodium's ``crypto_sign_open``): the one place a signature
    is checked, by the write transaction, the gate and ``audit verify``'s workers alike."""
    if len(signature) != 64 or len(public) != 32:
        return False
    try:
        crypto_sign_open(signature + message, public)
    except (BadSignatureError, ValueError):
        return False
    return True


def write_private_key(signer: Signer, path: str | Path) -> Path:
    """Write the key as unencrypted PKCS#8 PEM with mode 0600; refuse to overwrite."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    pem = signer.private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeyFileError(f"{target}: expected no key file, found one already (refusing to overwrite)") from None
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(target, 0o600)
    return target


def read_private_key(path: str | Path) -> Signer:
    target = Path(path)
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{target}: expected a readable PEM key file, found {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{target}: expected an unencrypted PEM private key, found {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{target}: expected an Ed25519 key, found {type(key).__name__}")
    return Signer(key)
