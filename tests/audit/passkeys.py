"""A software authenticator for the tests: real WebAuthn assertions made with ``cryptography``.

It does what a browser and a platform authenticator do for ``navigator.credentials.get`` (WebAuthn
Level 3 §6.3.3 and §7.2): authenticatorData = SHA-256(rp id) || flags || sign counter (4 bytes,
big-endian); clientDataJSON = {"type": "webauthn.get", "challenge": base64url(SHA-256(statement)),
"origin", "crossOrigin"}; the signature covers authenticatorData || SHA-256(clientDataJSON). The
credential's public key is a COSE key (RFC 9053) made by ``fido2``. ES256 (ECDSA P-256, DER
signature) and EdDSA (Ed25519) are both supported, as the log accepts both.

The knobs of :meth:`SoftPasskey.assertion` make the assertions an attacker (or a broken client)
would send: another origin or relying party, no user verification, another challenge, a client
data text edited after signing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fido2 import cbor
from fido2.cose import ES256, EdDSA

from signoff.audit.webauthn import Passkey, assertion_sig, challenge

RP_ID = "localhost"
ORIGIN = "http://localhost:8000"
UP, UV = 0x01, 0x04  # user present, user verified (WebAuthn §6.1 flags)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class SoftPasskey:
    """One credential on a software authenticator, for one relying party."""

    def __init__(self, alg: str = "ES256", *, rp_id: str = RP_ID, origin: str = ORIGIN) -> None:
        self.alg = alg
        self.rp_id = rp_id
        self.origin = origin
        self.counter = 0
        self._ec: ec.EllipticCurvePrivateKey | None = None
        self._ed: Ed25519PrivateKey | None = None
        if alg == "ES256":
            self._ec = ec.generate_private_key(ec.SECP256R1())
            cose: Any = ES256.from_cryptography_key(self._ec.public_key())
        elif alg == "Ed25519":
            self._ed = Ed25519PrivateKey.generate()
            cose = EdDSA.from_cryptography_key(self._ed.public_key())
        else:
            raise ValueError(f"alg: expected ES256 or Ed25519, found {alg!r}")
        self.passkey = Passkey(cbor.encode(dict(cose)), os.urandom(16), rp_id)

    @property
    def fingerprint(self) -> str:
        return self.passkey.fingerprint

    def _sign(self, message: bytes) -> bytes:
        if self._ec is not None:
            return self._ec.sign(message, ec.ECDSA(hashes.SHA256()))  # DER, as authenticators write it
        assert self._ed is not None
        return self._ed.sign(message)

    def assertion(
        self,
        statement: bytes,
        *,
        origin: str | None = None,
        rp_id: str | None = None,
        flags: int = UP | UV,
        client_type: str = "webauthn.get",
        cross_origin: bool = False,
        edit_client_data: Callable[[bytes], bytes] | None = None,
    ) -> dict[str, str]:
        """The entry ``sig`` for an assertion over ``statement`` (its SHA-256 is the challenge).

        ``edit_client_data`` changes the clientDataJSON after it was signed, as a tampering server would.
        """
        self.counter += 1
        auth_data = hashlib.sha256((rp_id or self.rp_id).encode("utf-8")).digest()
        auth_data += bytes([flags]) + struct.pack(">I", self.counter)
        client = {
            "type": client_type,
            "challenge": b64url(challenge(statement)),
            "origin": origin or self.origin,
            "crossOrigin": cross_origin,
        }
        client_data = json.dumps(client, separators=(",", ":")).encode("utf-8")
        signature = self._sign(auth_data + hashlib.sha256(client_data).digest())
        if edit_client_data is not None:
            client_data = edit_client_data(client_data)
        return assertion_sig(self.passkey, auth_data, client_data, signature)

    def sign(self, statement: bytes) -> dict[str, str]:
        """A good assertion over ``statement`` (the same call shape as ``Signer.sign``)."""
        return self.assertion(statement)
