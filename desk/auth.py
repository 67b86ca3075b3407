"""Passwords (scrypt, RFC 7914), browser sessions and API tokens.

Nothing here decides *what* a reviewer may do: roles and tool globs are on the log and
``audit`` enforces them when a decision is written. This module only answers *who* is
asking.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.exceptions import InvalidKey
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from sqlalchemy import bindparam
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from signoff.desk.db import Account, ApiToken, SessionRow, utcnow

# RFC 7914 §2 parameters; N=2^14, r=8, p=1 is the interactive-login recommendation.
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SESSION_TTL = timedelta(hours=12)
_DUMMY_HASH: str | None = None
_SESSION = select(SessionRow.log, SessionRow.expires_at).where(SessionRow.token_hash == bindparam("token_hash"))
_TOKEN = select(ApiToken.reviewer, ApiToken.revoked, ApiToken.log).where(ApiToken.token_hash == bindparam("token_hash"))


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    key = Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(password.encode())
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(key).decode()}"


def check_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, key = stored.split("$")
        if scheme != "scrypt":
            return False
        kdf = Scrypt(salt=base64.b64decode(salt), length=32, n=int(n), r=int(r), p=int(p))
        kdf.verify(password.encode(), base64.b64decode(key))
        return True
    except (ValueError, InvalidKey):
        return False


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _aware(dt: datetime | None) -> datetime | None:
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


def new_password() -> str:
    return secrets.token_urlsafe(12)


@dataclass(frozen=True)
class SignedIn:
    reviewer: str
    csrf: str
    via: str  # "session" | "token"
    info: Any = None  # the reviewer's ReviewerInfo from the log, once looked up
    session: str = ""  # SHA-256 of the session cookie (browser sessions), to end its event streams
    log: str = ""  # the log the session was opened on (a desk serving several logs: desk/logs.py)
    sso: bool = False  # opened through the identity provider (desk/sso.py), which vouches for who it is


class SignInRefused(Exception):
    """Sign-in failed. The message is safe to show; it never says which part was wrong."""

    def __init__(self, message: str, locked: bool = False) -> None:
        self.locked = locked
        super().__init__(message)


def token_hash(token: str) -> str:
    return _sha(token)


class Accounts:
    """Desk-side accounts for one log."""

    def __init__(self, engine: Engine, log: str) -> None:
        self.engine = engine
        self.log = log

    # -- passwords -------------------------------------------------------------------
    def set_password(self, reviewer: str, password: str, *, must_change: bool = True) -> None:
        with Session(self.engine) as s:
            row = s.get(Account, (self.log, reviewer))
            if row is None:
                row = Account(log=self.log, reviewer=reviewer, password_hash="")
            row.password_hash = hash_password(password)
            row.must_change = must_change
            row.failed = 0
            row.locked_until = None
            s.add(row)
            s.commit()

    def has_account(self, reviewer: str) -> bool:
        return self.account(reviewer) is not None

    def account(self, reviewer: str) -> Account | None:
        with Session(self.engine) as s:
            return s.get(Account, (self.log, reviewer))

    def authenticate(self, reviewer: str, password: str) -> None:
        """Raise :class:`SignInRefused` unless the password matches. Throttling happens before this
        (:mod:`signoff.desk.throttle`): a throttled attempt never reaches the password check."""
        global _DUMMY_HASH
        row = self.account(reviewer)
        if row is None:
            # Spend the same time as a real check so timing does not reveal accounts.
            if _DUMMY_HASH is None:
                _DUMMY_HASH = hash_password(secrets.token_hex(8))
            check_password(password, _DUMMY_HASH)
            raise SignInRefused("Wrong e-mail or password.")
        if not check_password(password, row.password_hash):
            raise SignInRefused("Wrong e-mail or password.")

    # -- sessions --------------------------------------------------------------------
    def open_session(self, reviewer: str) -> tuple[str, str]:
        """Return (cookie value, csrf token)."""
        token = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        with Session(self.engine) as s:
            s.add(
                SessionRow(
                    token_hash=_sha(token),
                    log=self.log,
                    reviewer=reviewer,
                    csrf=csrf,
                    expires_at=utcnow() + SESSION_TTL,
                )
            )
            s.commit()
        return token, csrf

    def session(self, token: str, *, any_log: bool = False) -> SignedIn | None:
        """The open session of this cookie, on this log (``any_log``: on whichever log it was opened)."""
        with Session(self.engine) as s:
            row = s.get(SessionRow, _sha(token))
            if row is None or (row.log != self.log and not any_log):
                return None
            expires = _aware(row.expires_at)
            if expires is None or expires < utcnow():
                return None
            return SignedIn(row.reviewer, row.csrf, "session", session=row.token_hash, log=row.log)

    def session_log(self, token: str) -> str | None:
        """The log the session of this cookie was opened on (one indexed read), if there is one."""
        with self.engine.connect() as conn:
            row = conn.execute(_SESSION, {"token_hash": _sha(token)}).first()
        return str(row.log) if row is not None else None

    def session_alive(self, token_hash: str, *, any_log: bool = False) -> bool:
        """Whether the session with this hash is still open (an event stream asks every half second)."""
        with self.engine.connect() as conn:
            row = conn.execute(_SESSION, {"token_hash": token_hash}).first()
        if row is None or (row.log != self.log and not any_log):
            return False
        expires = _aware(row.expires_at)
        return expires is not None and expires >= utcnow()

    def close_session(self, token: str) -> None:
        with Session(self.engine) as s:
            row = s.get(SessionRow, _sha(token))
            if row is not None:
                s.delete(row)
                s.commit()

    def close_all_sessions(self, reviewer: str) -> None:
        with Session(self.engine) as s:
            for row in s.exec(select(SessionRow).where(SessionRow.log == self.log, SessionRow.reviewer == reviewer)):
                s.delete(row)
            s.commit()

    # -- API tokens ------------------------------------------------------------------
    def new_token(self, reviewer: str, label: str = "") -> str:
        token = "sot_" + secrets.token_urlsafe(32)
        with Session(self.engine) as s:
            s.add(
                ApiToken(
                    token_hash=_sha(token),
                    log=self.log,
                    reviewer=reviewer,
                    label=label,
                    prefix=token[:10],
                )
            )
            s.commit()
        return token

    def token(self, token: str) -> SignedIn | None:
        # Every API request asks this, so it is one indexed read without an ORM session.
        with self.engine.connect() as conn:
            row = conn.execute(_TOKEN, {"token_hash": _sha(token)}).first()
        if row is None or row.revoked or row.log != self.log:
            return None
        return SignedIn(row.reviewer, "", "token", log=row.log)

    def token_log(self, token: str) -> str | None:
        """The log an API token was made on, if it is one (revoked or not)."""
        with self.engine.connect() as conn:
            row = conn.execute(_TOKEN, {"token_hash": _sha(token)}).first()
        return str(row.log) if row is not None else None

    def tokens(self, reviewer: str) -> list[ApiToken]:
        with Session(self.engine) as s:
            return list(
                s.exec(
                    select(ApiToken).where(
                        ApiToken.log == self.log,
                        ApiToken.reviewer == reviewer,
                        ApiToken.revoked == False,  # noqa: E712
                    )
                )
            )

    def revoke_all(self, reviewer: str) -> None:
        with Session(self.engine) as s:
            for row in s.exec(select(ApiToken).where(ApiToken.log == self.log, ApiToken.reviewer == reviewer)):
                row.revoked = True
                s.add(row)
            s.commit()


def same(a: str, b: str) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())
