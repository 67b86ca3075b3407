"""Single sign-on through an OpenID Connect provider (issue 23 §1): who someone is, never what they may do.

OpenID Connect Core 1.0, the authorization code flow (§3.1), through authlib's OAuth 2.0 client and
joserfc for the ID token:

* **The request** (§3.1.2.1): ``response_type=code``, the desk's ``redirect_uri``, ``scope`` with
  ``openid``, and a fresh ``state`` (RFC 6749 §10.12), ``nonce`` (§15.5.2) and PKCE ``code_challenge``
  (RFC 7636 §4.2, ``S256``). The three secrets wait server-side in ``desk_oidc_request`` for
  :data:`REQUEST_TTL`; the callback takes its row once, so a replayed ``state`` finds nothing.
* **The response** (§3.1.2.5–7): the ``state`` must be a waiting one; an ``iss`` parameter, when the
  provider sends one (RFC 9207 §2.4), must be the issuer.
* **The token** (§3.1.3): the code is exchanged with the client secret (``client_secret_basic``) and the
  PKCE verifier; the ID token is validated as §3.1.3.7 says: signed (not ``none``) with a key of the
  issuer's JWKS, ``iss`` the issuer, ``aud`` holding the client id (``azp`` the client id when there are
  several), unexpired, issued in the past, and its ``nonce`` the request's.
* **Every request after** (§5.3): the desk asks the UserInfo endpoint with the access token, so that a
  person the IdP disabled, or removed from a group a role needs (``sso.required``, on the log), is refused
  from their next request on (desk/deps.py); their event streams ask every few seconds.

Discovery (OpenID Connect Discovery 1.0 §4) and the JWKS are fetched once and kept; an ID token signed
with a key the JWKS does not hold makes the desk fetch the JWKS again, once.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import httpx
from sqlalchemy import delete
from sqlalchemy.engine import Engine
from sqlmodel import Field, Session, SQLModel

if TYPE_CHECKING:  # authlib and joserfc are imported when a sign-in needs them (the desk's commands start fast)
    from authlib.integrations.httpx_client import OAuth2Client
    from joserfc import jwt
    from joserfc.jwk import KeySet

REQUEST_TTL = timedelta(minutes=10)
TIMEOUT = 10.0
UNSIGNED = {"none"}


class SignInFailed(Exception):
    """The provider's answer does not sign anyone in; the message names what was wrong with it."""


class OidcRequest(SQLModel, table=True):
    """An authorization request on its way: its ``state``, ``nonce`` and PKCE verifier, used once."""

    __tablename__ = "desk_oidc_request"

    state: str = Field(primary_key=True)
    nonce: str
    verifier: str
    next: str
    expires_at: float  # unix seconds


class SsoSession(SQLModel, table=True):
    """A desk session opened through the provider: the access token its requests are checked with."""

    __tablename__ = "desk_sso_session"

    token_hash: str = Field(primary_key=True)  # the desk session's (desk_session.token_hash)
    subject: str
    access_token: str


def create_tables(engine: Engine) -> None:
    SQLModel.metadata.create_all(engine, tables=[OidcRequest.__table__, SsoSession.__table__])  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Settings:
    """``desk serve --oidc-issuer … --oidc-client-id … --oidc-client-secret-env VAR``."""

    issuer: str
    client_id: str
    client_secret: str
    claim: str = "email"  # the claim that names the reviewer (human:<value>)
    groups_claim: str = "groups"
    scope: str = "openid email groups"
    passwords: bool = True  # --no-passwords: sign-in through the provider only


@dataclass(frozen=True)
class Identity:
    """Who the provider says signed in: the reviewer the claim names, and the groups it puts them in."""

    subject: str
    reviewer: str
    groups: tuple[str, ...]


class Provider:
    """The OpenID Provider as the desk knows it: its metadata and keys (fetched once), the flow, the checks."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._metadata: dict[str, Any] | None = None
        self._keys: KeySet | None = None
        self._answers: dict[str, tuple[float, Identity | None]] = {}  # access token -> (when, what UserInfo said)
        self._lock = threading.Lock()
        # One client, its connections kept: a new one per request costs more than the request (its TLS setup).
        self._http = httpx.Client(timeout=TIMEOUT)
        self._clients: dict[str, OAuth2Client] = {}  # redirect URI -> authlib's client for it

    # -- what the provider publishes ---------------------------------------------------------------

    @property
    def metadata(self) -> dict[str, Any]:
        """Its discovery document (OpenID Connect Discovery 1.0 §4), whose ``issuer`` must be the one set (§4.3)."""
        with self._lock:
            if self._metadata is None:
                url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
                found = self._http.get(url).raise_for_status().json()
                if found.get("issuer") != self.settings.issuer:
                    raise SignInFailed(f"issuer: expected {self.settings.issuer!r}, found {found.get('issuer')!r}")
                self._metadata = found
            return self._metadata

    def keys(self, *, again: bool = False) -> KeySet:
        from joserfc.jwk import KeySet

        url = self.metadata_url("jwks_uri")  # (before the lock: reading the metadata takes it too)
        with self._lock:
            if self._keys is None or again:
                self._keys = KeySet.import_key_set(self._http.get(url).raise_for_status().json())
            return self._keys

    def metadata_url(self, name: str) -> str:
        value = self.metadata.get(name)
        if not isinstance(value, str):
            raise SignInFailed(f"provider metadata: expected {name}, found none")
        return value

    def _client(self, redirect_uri: str) -> OAuth2Client:
        """authlib's client for this redirect URI, made once (each is an HTTP client whose set-up costs more
        than a token request); it keeps no state the desk reads between requests."""
        with self._lock:
            found = self._clients.get(redirect_uri)
            if found is None:
                found = self._clients[redirect_uri] = self._new_client(redirect_uri)
            return found

    def _new_client(self, redirect_uri: str) -> OAuth2Client:
        from authlib.integrations.httpx_client import OAuth2Client

        return OAuth2Client(
            self.settings.client_id,
            self.settings.client_secret,
            scope=self.settings.scope,
            redirect_uri=redirect_uri,
            code_challenge_method="S256",
            token_endpoint_auth_method="client_secret_basic",
            timeout=TIMEOUT,
        )

    # -- the flow ------------------------------------------------------------------------------------

    def begin(self, engine: Engine, redirect_uri: str, next_url: str) -> str:
        """The authorization request's URL; its ``state``, ``nonce`` and verifier wait server-side."""
        state, nonce, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        url, _state = self._client(redirect_uri).create_authorization_url(
            self.metadata_url("authorization_endpoint"), state=state, nonce=nonce, code_verifier=verifier
        )
        now = time.time()
        with Session(engine) as s:
            s.exec(delete(OidcRequest).where(OidcRequest.expires_at < now))  # type: ignore[arg-type]
            until = now + REQUEST_TTL.total_seconds()
            s.add(OidcRequest(state=state, nonce=nonce, verifier=verifier, next=next_url, expires_at=until))
            s.commit()
        return str(url)

    def finish(self, engine: Engine, redirect_uri: str, params: dict[str, str]) -> tuple[Identity, str, str]:
        """The authorization response: (who signed in, the access token, where to go next)."""
        if "error" in params:
            raise SignInFailed(f"provider: {params['error']}: {params.get('error_description', '')}".rstrip(": "))
        request = _take(engine, params.get("state", ""))
        if "iss" in params and params["iss"] != self.settings.issuer:  # RFC 9207 §2.4
            raise SignInFailed(f"iss: expected {self.settings.issuer!r}, found {params['iss']!r}")
        code = params.get("code")
        if not code:
            raise SignInFailed("code: expected an authorization code, found none")
        try:
            token = self._client(redirect_uri).fetch_token(
                self.metadata_url("token_endpoint"),
                grant_type="authorization_code",
                code=code,
                code_verifier=request.verifier,
            )
        except Exception as exc:  # noqa: BLE001 - the provider refused the code: say what it said
            raise SignInFailed(f"token endpoint: {exc}") from None
        claims = self.check_id_token(str(token.get("id_token") or ""), request.nonce)
        access = str(token.get("access_token") or "")
        if not access:
            raise SignInFailed("access_token: expected one beside the ID token, found none")
        return self.identity(claims), access, request.next

    def check_id_token(self, raw: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims, once it is validated as OpenID Connect Core §3.1.3.7 says."""
        if not raw:
            raise SignInFailed("id_token: expected one in the token response, found none")
        offered = self.metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        allowed = [alg for alg in offered if alg not in UNSIGNED]
        token = self._decode(raw, allowed)
        from joserfc import jwt
        from joserfc.errors import JoseError

        claims = dict(token.claims)
        registry = jwt.JWTClaimsRegistry(
            iss={"essential": True, "value": self.settings.issuer},
            sub={"essential": True},
            exp={"essential": True},
            iat={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        try:
            registry.validate(claims)
        except JoseError as exc:
            raise SignInFailed(f"id_token: {exc}") from None
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.settings.client_id not in audiences:
            raise SignInFailed(f"id_token.aud: expected {self.settings.client_id!r}, found {audience!r}")
        if len(audiences) > 1 and claims.get("azp") != self.settings.client_id:
            raise SignInFailed(f"id_token.azp: expected {self.settings.client_id!r}, found {claims.get('azp')!r}")
        return claims

    def _decode(self, raw: str, allowed: list[str]) -> jwt.Token:
        """The ID token, its signature checked with the provider's keys (fetched again, once, for a key it
        does not hold: the provider rotated its keys)."""
        from joserfc import jwt
        from joserfc.errors import JoseError

        try:
            return jwt.decode(raw, self.keys(), algorithms=allowed)
        except (JoseError, ValueError) as exc:
            failed: Exception = exc
        if "key" in str(failed).lower() and "signature" not in str(failed).lower():
            try:
                return jwt.decode(raw, self.keys(again=True), algorithms=allowed)
            except (JoseError, ValueError) as exc:
                failed = exc
        raise SignInFailed(f"id_token: not signed by the provider ({type(failed).__name__}: {failed})")

    def identity(self, claims: dict[str, Any]) -> Identity:
        """The reviewer the configured claim names (``human:<value>``), and the groups the provider gives."""
        value = claims.get(self.settings.claim)
        if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
            raise SignInFailed(f"{self.settings.claim}: expected the claim that names the reviewer, found {value!r}")
        if self.settings.claim == "email" and claims.get("email_verified") is False:
            raise SignInFailed("email_verified: expected the provider to have verified the e-mail, found false")
        groups = claims.get(self.settings.groups_claim) or []
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise SignInFailed(f"{self.settings.groups_claim}: expected a list of group names, found {groups!r}")
        return Identity(str(claims.get("sub")), "human:" + value.strip().lower(), tuple(groups))

    def current(self, access_token: str, max_age: float = 0.0) -> Identity | None:
        """Who the access token is for now, as the UserInfo endpoint says (§5.3); ``None`` when the provider
        no longer answers for it (the person disabled, signed out there, or the token expired). ``max_age``:
        an answer that many seconds old will do (an event stream's checks; a request asks afresh)."""
        if max_age > 0:
            with self._lock:
                kept = self._answers.get(access_token)
            if kept is not None and time.monotonic() - kept[0] < max_age:
                return kept[1]
        found = self._userinfo(access_token)
        with self._lock:
            self._answers[access_token] = (time.monotonic(), found)
            while len(self._answers) > 10_000:
                self._answers.pop(next(iter(self._answers)))
        return found

    def _userinfo(self, access_token: str) -> Identity | None:
        try:
            answer = self._http.get(
                self.metadata_url("userinfo_endpoint"), headers={"Authorization": f"Bearer {access_token}"}
            )
        except httpx.HTTPError:
            return None
        if answer.status_code != 200:
            return None
        try:
            return self.identity(answer.json())
        except (SignInFailed, ValueError):
            return None


def _take(engine: Engine, state: str) -> OidcRequest:
    """Use a waiting request once: a ``state`` unknown, used or expired signs nobody in."""
    with Session(engine) as s:
        row = s.get(OidcRequest, state) if state else None
        if row is not None:
            s.delete(row)
            s.commit()
    if row is None or row.expires_at < time.time():
        raise SignInFailed(
            "state: expected one this desk sent in the last few minutes, found an unknown, used or expired one; "
            "sign in again"
        )
    return row


def remember(engine: Engine, session_hash: str, identity: Identity, access_token: str) -> None:
    with Session(engine) as s:
        s.add(SsoSession(token_hash=session_hash, subject=identity.subject, access_token=access_token))
        s.commit()


def of_session(engine: Engine, session_hash: str) -> SsoSession | None:
    with Session(engine) as s:
        return s.get(SsoSession, session_hash)


def forget(engine: Engine, session_hash: str) -> None:
    """The session ended (signed out, or refused): its access token is kept no longer."""
    with Session(engine) as s:
        row = s.get(SsoSession, session_hash)
        if row is not None:
            s.delete(row)
            s.commit()


def still_admitted(desk: Any, reviewer: str, roles: Iterable[str], session_hash: str, max_age: float = 0.0) -> bool:
    """Whether a session may go on, on a desk that signs people in through a provider: an SSO session's
    person is still the one the provider answers for, in the groups each of their roles here needs
    (``sso.required``); a password session only while passwords are on. desk/deps.py asks on every request,
    an event stream every few seconds."""
    from signoff.audit import sso_required

    provider: Provider | None = desk.sso
    if provider is None:
        return True
    held = of_session(desk.accounts.engine, session_hash)
    if held is None:
        return bool(provider.settings.passwords)
    now = provider.current(held.access_token, max_age)
    if now is None or now.subject != held.subject or now.reviewer != reviewer:
        return False
    return not sso_required.missing(sso_required.requirements(desk.store), roles, now.groups)
