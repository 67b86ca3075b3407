"""Desk-only tables: sign-in accounts, sessions, API tokens, sign-in throttling, passkey challenges.

These are not projections of the log. Reviewer *enrollment* (roles, tool globs) lives on
the log through ``ReviewService.enroll_reviewer``; this module only holds the secrets the
desk needs to recognise a person, and those are stored hashed. Every row carries the log
id, so several logs may share one database.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Field, Session, SQLModel, create_engine

from signoff.desk.signin_links import SignInLink


def utcnow() -> datetime:
    return datetime.now(UTC)


class Account(SQLModel, table=True):
    """One reviewer's password (scrypt) and lockout counter."""

    __tablename__ = "desk_account"

    log: str = Field(primary_key=True)
    reviewer: str = Field(primary_key=True)  # "human:alice@example.org"
    password_hash: str
    must_change: bool = True
    failed: int = 0
    locked_until: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)


class SessionRow(SQLModel, table=True):
    """A signed-in browser. ``token_hash`` is SHA-256 of the cookie value."""

    __tablename__ = "desk_session"

    token_hash: str = Field(primary_key=True)
    log: str = Field(index=True)
    reviewer: str
    csrf: str
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime


class ApiToken(SQLModel, table=True):
    """A per-reviewer bearer token. Only its SHA-256 is stored."""

    __tablename__ = "desk_api_token"

    token_hash: str = Field(primary_key=True)
    log: str = Field(index=True)
    reviewer: str = Field(index=True)
    label: str = ""
    prefix: str = ""  # first characters, so a person can tell tokens apart
    created_at: datetime = Field(default_factory=utcnow)
    revoked: bool = False


class PasskeyChallenge(SQLModel, table=True):
    """A passkey registration's challenge (WebAuthn §7.1 step 8), kept until it is used or expires.

    In the database rather than in memory, so that desk replicas behind one load balancer share it.
    The enrolment code is never stored: the page sends it with the request that uses it.
    """

    __tablename__ = "desk_passkey_challenge"

    challenge: str = Field(primary_key=True)  # base64url, as the client data carries it
    log: str = Field(index=True)
    reviewer: str
    expires_at: datetime


class ThrottleRow(SQLModel, table=True):
    """Failed sign-ins for one key, ``ip:<address>`` or ``account:<reviewer>`` (desk/throttle.py)."""

    __tablename__ = "desk_throttle"

    log: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    failures: int = 0
    last_failure: datetime
    wait_until: datetime | None = None


def engine_url(store_url: str) -> str:
    """SQLAlchemy URL for the same database the audit store uses."""
    if store_url.startswith("postgresql://") or store_url.startswith("postgres://"):
        return "postgresql+psycopg://" + store_url.split("://", 1)[1]
    return store_url


def make_engine(store_url: str) -> Engine:
    url = engine_url(store_url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(conn, _record):  # type: ignore[no-untyped-def]
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

    else:
        engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
    SQLModel.metadata.create_all(
        engine,
        tables=[
            Account.__table__,  # type: ignore[attr-defined]
            SessionRow.__table__,  # type: ignore[attr-defined]
            ApiToken.__table__,  # type: ignore[attr-defined]
            PasskeyChallenge.__table__,  # type: ignore[attr-defined]
            ThrottleRow.__table__,  # type: ignore[attr-defined]
            SignInLink.__table__,  # type: ignore[attr-defined]
        ],
    )
    from signoff.desk import sso

    sso.create_tables(engine)
    return engine


__all__ = [
    "Account",
    "ApiToken",
    "PasskeyChallenge",
    "Session",
    "SessionRow",
    "ThrottleRow",
    "make_engine",
    "utcnow",
]
