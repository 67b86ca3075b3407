"""Passkey signatures: WebAuthn assertions over a statement, checked offline.

A reviewer who decides in the desk signs the decision statement with a passkey: the page asks
the authenticator for an assertion whose challenge is SHA-256 of the statement's canonical bytes.
The log keeps the assertion (authenticator data, client data, signature) in the entry's ``sig``
and the credential's public key (COSE, RFC 9053) in the reviewer's ``key.enrolled`` entry, so
an auditor checks it with nothing but the log, as WebAuthn Level 3 §7.2 "Verifying an
Authentication Assertion" does (steps that need the server's session state, such as a
server-chosen challenge or the sign counter, do not apply: the challenge is the statement).

Pure: bytes in, :class:`SignatureError` out. COSE keys and CBOR through ``fido2``, imported when a
passkey is first checked.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature

from signoff.audit.errors import AuditError

if TYPE_CHECKING:  # fido2 loads when a passkey is checked, so logs without passkeys verify without it
    from fido2.cose import CoseKey

ALG = "WebAuthn"
KEY_PREFIX = "webauthn:"
# COSE algorithms (RFC 9053 §2.1, RFC 8812): EdDSA (Ed25519) and ES256 (ECDSA P-256 with SHA-256).
COSE_ALGORITHMS = {-8: "Ed25519", -7: "ES256"}
_FLAG_UP = 0x01  # user present
_FLAG_UV = 0x04  # user verified (PIN, biometrics)


class SignatureError(AuditError, ValueError):
    """A signature does not verify; the message names the check that failed."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: Any, field: str) -> bytes:
    """Standard base64 (padding optional); base64url is accepted too, as browsers write it."""
    if not isinstance(text, str):
        raise SignatureError(f"{field}: expected base64 text, found {type(text).__name__}")
    padded = text + "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError(f"{field}: expected base64, found {text[:40]!r}") from None


@dataclass(frozen=True)
class Passkey:
    """A WebAuthn credential as the log enrolls it: its COSE public key, id and relying party."""

    cose: bytes  # the COSE_Key, CBOR-encoded (WebAuthn §6.5.1.1 credentialPublicKey)
    credential_id: bytes
    rp_id: str

    @property
    def fingerprint(self) -> str:
        return KEY_PREFIX + hashlib.sha256(self.cose).hexdigest()

    @property
    def algorithm(self) -> str:
        return COSE_ALGORITHMS.get(int(self.key().ALGORITHM or 0), "unsupported")

    def key(self) -> CoseKey:
        from fido2 import cbor
        from fido2.cose import CoseKey, UnsupportedKey

        try:
            decoded = cbor.decode(self.cose)
        except Exception as exc:  # noqa: BLE001 - any CBOR failure means: not a COSE key
            raise SignatureError(f"key: expected a CBOR COSE key, found undecodable bytes ({exc})") from None
        if not isinstance(decoded, Mapping):
            raise SignatureError("key: expected a COSE key map")
        parsed = CoseKey.parse(decoded)
        if isinstance(parsed, UnsupportedKey) or parsed.ALGORITHM not in COSE_ALGORITHMS:
            raise SignatureError(
                f"key: expected a COSE key for EdDSA (-8) or ES256 (-7), found algorithm {decoded.get(3)!r}"
            )
        return parsed

    def to_body(self) -> dict[str, str]:
        """The ``key.enrolled`` fields that carry this credential."""
        return {"alg": ALG, "key": b64(self.cose), "credential": b64(self.credential_id), "rp_id": self.rp_id}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Passkey:
        rp_id = body.get("rp_id")
        if not isinstance(rp_id, str) or not rp_id:
            raise SignatureError(f"rp_id: expected the relying party id the passkey belongs to, found {rp_id!r}")
        passkey = cls(unb64(body.get("key"), "key"), unb64(body.get("credential"), "credential"), rp_id)
        passkey.key()  # refuse a key we could never verify with, at enrolment
        return passkey


def challenge(statement: bytes) -> bytes:
    """The challenge a passkey signs for ``statement``: its SHA-256 (DESIGN.md "Who holds which key")."""
    return hashlib.sha256(statement).digest()


def assertion_sig(passkey: Passkey, authenticator_data: bytes, client_data: bytes, signature: bytes) -> dict[str, str]:
    """The entry's ``sig`` for an assertion made with ``passkey``."""
    return {
        "key": passkey.fingerprint,
        "alg": ALG,
        "authenticator_data": b64(authenticator_data),
        "client_data": b64(client_data),
        "value": b64(signature),
    }


def verify_assertion(passkey: Passkey, sig: Mapping[str, Any], statement: bytes) -> None:
    """Check a WebAuthn assertion over ``statement`` (WebAuthn Level 3 §7.2, steps 11-21).

    Raises :class:`SignatureError` naming the failed step; returns quietly when it holds.
    """
    from fido2.rpid import verify_rp_id
    from fido2.webauthn import AuthenticatorData

    if sig.get("alg") != ALG:
        raise SignatureError(f"sig.alg: expected {ALG!r}, found {sig.get('alg')!r}")
    if sig.get("key") != passkey.fingerprint:
        raise SignatureError(f"sig.key: expected {passkey.fingerprint}, found {sig.get('key')!r}")
    auth_bytes = unb64(sig.get("authenticator_data"), "sig.authenticator_data")
    client_bytes = unb64(sig.get("client_data"), "sig.client_data")
    signature = unb64(sig.get("value"), "sig.value")
    try:
        client = json.loads(client_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise SignatureError("sig.client_data: expected the clientDataJSON the browser signed, found no JSON") from None
    if not isinstance(client, dict):
        raise SignatureError("sig.client_data: expected a JSON object")
    if client.get("type") != "webauthn.get":  # §7.2 step 11
        raise SignatureError(f"sig.client_data.type: expected 'webauthn.get', found {client.get('type')!r}")
    expected = base64.urlsafe_b64encode(challenge(statement)).rstrip(b"=").decode("ascii")
    if client.get("challenge") != expected:  # step 12: the challenge is this statement's SHA-256
        raise SignatureError(
            f"sig.client_data.challenge: expected SHA-256 of this statement ({expected}), "
            f"found {client.get('challenge')!r}"
        )
    origin = client.get("origin")
    if not isinstance(origin, str) or not verify_rp_id(passkey.rp_id, origin):  # step 13
        raise SignatureError(f"sig.client_data.origin: expected an origin of {passkey.rp_id!r}, found {origin!r}")
    if client.get("crossOrigin") is True:
        raise SignatureError("sig.client_data.crossOrigin: expected a same-origin assertion, found a cross-origin one")
    try:
        auth = AuthenticatorData(auth_bytes)
    except (ValueError, KeyError, IndexError) as exc:
        raise SignatureError(f"sig.authenticator_data: expected WebAuthn authenticator data, found {exc}") from None
    if auth.rp_id_hash != hashlib.sha256(passkey.rp_id.encode("utf-8")).digest():  # step 15
        raise SignatureError(f"sig.authenticator_data: expected the RP ID hash of {passkey.rp_id!r}, found another")
    if not auth.flags & _FLAG_UP:  # step 16
        raise SignatureError("sig.authenticator_data: expected the user-present flag, found it clear")
    if not auth.flags & _FLAG_UV:  # step 17: a decision needs the person, not just a touch
        raise SignatureError("sig.authenticator_data: expected the user-verified flag, found it clear")
    try:  # steps 19-21: signature over authenticatorData || SHA-256(clientDataJSON)
        passkey.key().verify(auth_bytes + hashlib.sha256(client_bytes).digest(), signature)
    except (InvalidSignature, ValueError):
        raise SignatureError(
            f"sig.value: expected a valid {passkey.algorithm} signature by {passkey.fingerprint}, found an invalid one"
        ) from None
