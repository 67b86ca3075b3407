"""One-time sign-in links (issue 22 §1 and §2): a review link sent to one person signs them in and opens
that review.

An endpoint that sends to one person (a Slack app's direct messages, reminder e-mails to a reviewer's own
address) with ``--sign-in-links`` mints a link per person and review: ``<desk>/signin/link/<token>``,
where ``token`` is 32 random bytes (base64url) of which the desk keeps only the SHA-256. Opening it shows
"Sign in as … to review …?"; confirming (a POST, so that a link scanner fetching the URL spends nothing)
uses the token up in one statement (``used_at`` set only where it is unset and unexpired), opens a session
for that reviewer and lands on the review. A link works once, for its reviewer only, until it expires
(12 hours by default), and never for a reviewer who is disabled by then.

A sign-in link only says who you are, as a password does: every decision on a log that requires signed
decisions is still signed by the reviewer's own passkey. Links are never put in a channel message, which
others read. Not public.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from urllib.parse import quote

from sqlalchemy import Connection, Engine, insert, select, update
from sqlmodel import Field, SQLModel, col

DEFAULT_TTL = 12 * 3600.0  # seconds a link stays usable
PATH = "/signin/link/"


class SignInLink(SQLModel, table=True):
    """One link: whose, to which review, until when, and whether it was used. Only the token's hash."""

    __tablename__ = "desk_sign_in_link"

    token_hash: str = Field(primary_key=True)
    log: str = Field(index=True)
    reviewer: str
    review: str
    created_at: float  # unix seconds
    expires_at: float
    used_at: float | None = None


def create_table(engine: Engine) -> None:
    SQLModel.metadata.create_all(engine, tables=[SignInLink.__table__])  # type: ignore[attr-defined]


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint(conn: Connection, log: str, reviewer: str, review: str, ttl: float = DEFAULT_TTL) -> str:
    """A new link's token for ``reviewer`` to open ``review``, stored hashed in the caller's transaction."""
    token = secrets.token_urlsafe(32)
    now = time.time()
    conn.execute(
        insert(SignInLink),
        {
            "token_hash": _hash(token),
            "log": log,
            "reviewer": reviewer,
            "review": review,
            "created_at": now,
            "expires_at": now + ttl,
        },
    )
    return token


def url(desk_url: str, token: str) -> str:
    return f"{desk_url.rstrip('/')}{PATH}{quote(token, safe='')}"


@dataclass(frozen=True)
class Found:
    reviewer: str
    review: str


def peek(engine: Engine, log: str, token: str) -> Found | None:
    """The link's reviewer and review while it is unused and unexpired (the confirmation page)."""
    with engine.connect() as conn:
        row = conn.execute(
            select(SignInLink).where(
                col(SignInLink.token_hash) == _hash(token),
                col(SignInLink.log) == log,
                col(SignInLink.used_at).is_(None),
                col(SignInLink.expires_at) > time.time(),
            )
        ).first()
    return Found(row.reviewer, row.review) if row is not None else None


def use(engine: Engine, log: str, token: str) -> Found | None:
    """Use the link up: one statement marks it used only where it is unused and unexpired, so two clicks
    (or two replicas) can never both sign in with it."""
    with engine.begin() as conn:
        done = conn.execute(
            update(SignInLink)
            .where(
                col(SignInLink.token_hash) == _hash(token),
                col(SignInLink.log) == log,
                col(SignInLink.used_at).is_(None),
                col(SignInLink.expires_at) > time.time(),
            )
            .values(used_at=time.time())
        )
        if done.rowcount != 1:
            return None
        row = conn.execute(select(SignInLink).where(col(SignInLink.token_hash) == _hash(token))).one()
    return Found(row.reviewer, row.review)
