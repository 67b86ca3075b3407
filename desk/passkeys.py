"""Passkeys in the desk: a reviewer registers one with an enrolment code, and signs each decision with it.

DESIGN.md "Who holds which key": the decision is the person's own signature, made by their
authenticator over the statement the page builds from what it shows them
(:mod:`signoff.audit.decision`); the desk only forwards it. This module holds the two server
sides of that:

* **Registration** (WebAuthn Level 3 §7.1) through ``fido2``'s ``Fido2Server``: ES256 (-7) or
  EdDSA (-8), user verification required, no attestation. The challenge waits in the desk's
  own table (:class:`signoff.desk.db.PasskeyChallenge`) for at most :data:`CHALLENGE_TTL`; the
  credential is then enrolled *on the log* by the reviewer, signed with the key derived from the
  one-time code an admin gave them (``ReviewService.enroll_passkey``). The code is never stored here.
* **Assertions**: the authenticator data, client data and signature a page posts with a decision
  become the entry's ``sig`` (:func:`signoff.audit.webauthn.assertion_sig`) for the passkey the
  log enrolled for this reviewer; the review service checks it against the body it builds.

The relying party: ``desk serve --rp-id/--origin`` fix it (behind a proxy); otherwise the
origin is the request's own (scheme, host and port) and the RP ID its host name.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

from fido2 import cbor
from fido2.server import Fido2Server
from fido2.utils import websafe_encode
from fido2.webauthn import (
    AttestationConveyancePreference,
    PublicKeyCredentialDescriptor,
    PublicKeyCredentialParameters,
    PublicKeyCredentialRpEntity,
    PublicKeyCredentialType,
    PublicKeyCredentialUserEntity,
    RegistrationResponse,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)
from sqlalchemy import delete
from sqlmodel import Session

from signoff.audit import trust
from signoff.audit.errors import AuditError, NotAllowed
from signoff.audit.trust import PublicKey
from signoff.audit.webauthn import Passkey, SignatureError, assertion_sig, unb64
from signoff.desk.db import PasskeyChallenge, utcnow

# COSE algorithms a passkey may use here (RFC 9053 §2.1, RFC 8812), in order of preference.
ALGORITHMS = (-8, -7)  # EdDSA (Ed25519), ES256
CHALLENGE_TTL = timedelta(minutes=5)
ORIGIN_HELP = "start the desk with --origin https://<host> (and --rp-id) when it runs behind a proxy"


class RegistrationFailed(AuditError):
    """A passkey registration was refused; the message says why and is safe to show."""


@dataclass(frozen=True)
class RelyingParty:
    """Who the passkeys belong to: the RP ID (a domain) and the one origin the desk is served from."""

    id: str
    origin: str

    @property
    def usable(self) -> bool:
        """WebAuthn needs a domain: an IP address is not a valid RP ID (WebAuthn §5.1.3 via HTML's
        "registrable domain suffix"), so a desk opened at http://127.0.0.1 cannot use passkeys."""
        if not self.id:
            return False
        try:
            ipaddress.ip_address(self.id.strip("[]"))
        except ValueError:
            return True
        return False


def relying_party(request: Any, rp_id: str | None, origin: str | None) -> RelyingParty:
    """The configured RP ID and origin, or the request's own: ``scheme://host[:port]`` and its host."""
    if origin is None:
        origin = f"{request.url.scheme}://{request.url.netloc}"
    origin = origin.rstrip("/")
    return RelyingParty(rp_id or urlparse(origin).hostname or "", origin)


def user_handle(log: str, reviewer: str) -> bytes:
    """The WebAuthn user handle (§5.4.3: opaque, no personal data): SHA-256 of the log and reviewer."""
    return hashlib.sha256(f"signoff user\x00{log}\x00{reviewer}".encode()).digest()


def passkeys_of(keys: Sequence[PublicKey]) -> list[Passkey]:
    return [k.passkey for k in keys if k.passkey is not None]


def _server(rp: RelyingParty) -> Fido2Server:
    server = Fido2Server(
        PublicKeyCredentialRpEntity(name="Signoff desk", id=rp.id),
        attestation=AttestationConveyancePreference.NONE,
        verify_origin=lambda found: found == rp.origin,
    )
    server.allowed_algorithms = [
        PublicKeyCredentialParameters(type=PublicKeyCredentialType.PUBLIC_KEY, alg=alg) for alg in ALGORITHMS
    ]
    return server


# -- registration -------------------------------------------------------------------------


def code_is_live(store: Any, reviewer: str, code: str) -> bool:
    """Whether ``code`` is the reviewer's unused enrolment code: the public half of the key derived
    from it (:func:`signoff.audit.trust.code_signer`) is the ``code_key`` of their latest
    ``reviewer.enrolled``, and no key was enrolled by code since. A check before the authenticator is
    asked to make a credential; the log's own transaction decides (``ReviewService.enroll_passkey``)."""
    committed: str | None = None
    for entry in store.entries(review=reviewer):  # the subject index: entries about this reviewer
        if entry.kind == "reviewer.enrolled" and entry.body.get("reviewer") == reviewer:
            key = entry.body.get("code_key")
            committed = key if isinstance(key, str) else None
        elif entry.actor == reviewer and trust.by_code(entry.kind, reviewer, entry.body):
            committed = None  # one code, one key
    return committed is not None and hmac.compare_digest(committed, trust.code_signer(code).public)


def begin_registration(
    engine: Any, rp: RelyingParty, log: str, reviewer: str, existing: Sequence[Passkey]
) -> dict[str, Any]:
    """``PublicKeyCredentialCreationOptions`` (JSON form, base64url) for a new passkey; the challenge
    is kept until :func:`complete_registration` uses it."""
    if not rp.usable:
        raise RegistrationFailed(
            f"passkeys need the desk at a domain name, found {rp.id!r}: open it as http://localhost:<port> "
            f"or https://<host>, or {ORIGIN_HELP}"
        )
    name = reviewer.removeprefix("human:")
    options, state = _server(rp).register_begin(
        PublicKeyCredentialUserEntity(name=name, id=user_handle(log, reviewer), display_name=name),
        credentials=[
            PublicKeyCredentialDescriptor(type=PublicKeyCredentialType.PUBLIC_KEY, id=p.credential_id)
            for p in existing
            if p.rp_id == rp.id
        ],
        resident_key_requirement=ResidentKeyRequirement.PREFERRED,
        user_verification=UserVerificationRequirement.REQUIRED,
        challenge=secrets.token_bytes(32),
    )
    with Session(engine) as s:
        s.exec(delete(PasskeyChallenge).where(PasskeyChallenge.expires_at < utcnow()))  # type: ignore[arg-type]
        s.add(
            PasskeyChallenge(
                challenge=state["challenge"], log=log, reviewer=reviewer, expires_at=utcnow() + CHALLENGE_TTL
            )
        )
        s.commit()
    public_key: dict[str, Any] = dict(options)["publicKey"]
    return public_key


def _take_challenge(engine: Any, log: str, reviewer: str, challenge: str) -> None:
    """Use a registration challenge once: it must be this reviewer's, on this log, and unexpired."""
    with Session(engine) as s:
        row = s.get(PasskeyChallenge, challenge)
        if row is not None:
            s.delete(row)
            s.commit()
    expires = row.expires_at if row is not None else None
    if expires is not None and expires.tzinfo is None:
        expires = expires.replace(tzinfo=utcnow().tzinfo)
    if row is None or row.log != log or row.reviewer != reviewer or expires is None or expires < utcnow():
        raise RegistrationFailed(
            "challenge: expected one this desk gave you in the last few minutes, found an unknown, used or "
            "expired one; start the registration again"
        )


def complete_registration(
    engine: Any, rp: RelyingParty, log: str, reviewer: str, response: Mapping[str, Any]
) -> Passkey:
    """Check a ``navigator.credentials.create`` response (WebAuthn §7.1, through ``fido2``) and return
    the passkey to enroll: its COSE key (CBOR), credential id and RP ID."""
    try:
        registration = RegistrationResponse.from_dict(response)
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistrationFailed(f"credential: expected a WebAuthn registration response, found {exc}") from None
    challenge = websafe_encode(registration.response.client_data.challenge)
    _take_challenge(engine, log, reviewer, challenge)
    state = {"challenge": challenge, "user_verification": UserVerificationRequirement.REQUIRED}
    try:
        auth_data = _server(rp).register_complete(state, registration)
    except ValueError as exc:
        origin = registration.response.client_data.origin
        hint = (
            f" (the page's origin is {origin}, the desk expects {rp.origin}: {ORIGIN_HELP})"
            if "origin" in str(exc)
            else ""
        )
        raise RegistrationFailed(f"credential: the authenticator's response does not verify: {exc}{hint}") from None
    credential = auth_data.credential_data
    if credential is None:
        raise RegistrationFailed("credential: expected attested credential data, found none")
    passkey = Passkey(cbor.encode(dict(credential.public_key)), bytes(credential.credential_id), rp.id)
    try:
        passkey.key()
    except SignatureError as exc:
        raise RegistrationFailed(str(exc)) from None
    return passkey


# -- assertions -----------------------------------------------------------------------------

ASSERTION_FIELDS = ("sig_credential", "sig_authenticator_data", "sig_client_data", "sig_value")


def form_sig(keys: Sequence[PublicKey], form: Mapping[str, Any]) -> dict[str, str] | None:
    """The entry's ``sig`` for an assertion a decision form carries (base64url fields, as the page
    writes them), or None when the form carries none. The credential must be one the log enrolled
    for this reviewer."""
    values = {name: str(form.get(name) or "") for name in ASSERTION_FIELDS}
    if not any(values.values()):
        return None
    if not all(values.values()):
        missing = [name for name, value in values.items() if not value]
        raise NotAllowed(f"sig: expected a complete passkey assertion, found {', '.join(missing)} missing")
    try:
        credential = unb64(values["sig_credential"], "sig.credential")
        passkey = next((p for p in passkeys_of(keys) if p.credential_id == credential), None)
        if passkey is None:
            raise NotAllowed(
                f"sig.key: expected one of your enrolled passkeys, found credential "
                f"{websafe_encode(credential)[:24]}… not enrolled for you on this log"
            )
        return assertion_sig(
            passkey,
            unb64(values["sig_authenticator_data"], "sig.authenticator_data"),
            unb64(values["sig_client_data"], "sig.client_data"),
            unb64(values["sig_value"], "sig.value"),
        )
    except SignatureError as exc:
        raise NotAllowed(str(exc)) from None


def credential_json(passkey: Passkey) -> dict[str, str]:
    """What a page needs to ask for an assertion with this passkey (``allowCredentials``)."""
    return {"id": websafe_encode(passkey.credential_id), "rp_id": passkey.rp_id, "alg": passkey.algorithm}


__all__ = [
    "ALGORITHMS",
    "RegistrationFailed",
    "RelyingParty",
    "begin_registration",
    "code_is_live",
    "complete_registration",
    "credential_json",
    "form_sig",
    "passkeys_of",
    "relying_party",
    "user_handle",
]
