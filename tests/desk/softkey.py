"""A software passkey for the fast desk tests: a real ES256 or EdDSA key that answers WebAuthn
registrations (attestation "none", WebAuthn §8.7) and assertions byte for byte as an
authenticator and browser would (authenticator data §6.1, client data §5.8.1).

It stands in for the authenticator only; the desk, fido2 and audit code it talks to are the real
ones. The browser tests (test_desk_passkeys_browser.py) use Chromium's own virtual authenticator.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fido2 import cbor
from fido2.cose import ES256, EdDSA

UP, UV, AT = 0x01, 0x04, 0x40


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class SoftPasskey:
    alg: str = "ES256"  # or "EdDSA"
    rp_id: str = "localhost"
    origin: str = "http://localhost"
    credential_id: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    counter: int = 0
    user_verified: bool = True

    def __post_init__(self) -> None:
        self.private: Any = (
            ec.generate_private_key(ec.SECP256R1()) if self.alg == "ES256" else Ed25519PrivateKey.generate()
        )

    @property
    def cose(self) -> bytes:
        cls = ES256 if self.alg == "ES256" else EdDSA
        return bytes(cbor.encode(dict(cls.from_cryptography_key(self.private.public_key()))))

    def _auth_data(self, flags: int, attested: bytes = b"") -> bytes:
        self.counter += 1
        rp_hash = hashlib.sha256(self.rp_id.encode()).digest()
        return rp_hash + bytes([flags]) + self.counter.to_bytes(4, "big") + attested

    def _sign(self, data: bytes) -> bytes:
        if self.alg == "ES256":
            return bytes(self.private.sign(data, ec.ECDSA(hashes.SHA256())))
        return bytes(self.private.sign(data))

    def create(self, options: dict[str, Any], *, origin: str | None = None) -> dict[str, Any]:
        """A ``navigator.credentials.create`` response (JSON form) to ``options["publicKey"]``-style options."""
        client = {
            "type": "webauthn.create",
            "challenge": options["challenge"],
            "origin": origin or self.origin,
            "crossOrigin": False,
        }
        client_data = json.dumps(client).encode()
        attested = bytes(16) + len(self.credential_id).to_bytes(2, "big") + self.credential_id + self.cose
        flags = UP | AT | (UV if self.user_verified else 0)
        attestation = cbor.encode({"fmt": "none", "attStmt": {}, "authData": self._auth_data(flags, attested)})
        return {
            "id": b64url(self.credential_id),
            "rawId": b64url(self.credential_id),
            "type": "public-key",
            "response": {"clientDataJSON": b64url(client_data), "attestationObject": b64url(attestation)},
            "clientExtensionResults": {},
        }

    def assertion(self, statement: bytes) -> tuple[bytes, bytes, bytes]:
        """(authenticator data, client data JSON, signature) for a ``get`` whose challenge is SHA-256(statement)."""
        challenge = b64url(hashlib.sha256(statement).digest())
        client = {"type": "webauthn.get", "challenge": challenge, "origin": self.origin, "crossOrigin": False}
        client_data = json.dumps(client).encode()
        auth = self._auth_data(UP | (UV if self.user_verified else 0))
        return auth, client_data, self._sign(auth + hashlib.sha256(client_data).digest())

    def form_fields(self, statement: bytes) -> dict[str, str]:
        """The hidden fields desk.js adds to a decision form after the ceremony."""
        auth, client, sig = self.assertion(statement)
        return {
            "sig_credential": b64url(self.credential_id),
            "sig_authenticator_data": b64url(auth),
            "sig_client_data": b64url(client),
            "sig_value": b64url(sig),
        }
