"""The notifier's tables, in the same database as the store (like :mod:`signoff.desk.db`). Not public.

They are desk state, not projections of the log: endpoints, the cursor (the next ``seq`` to
read), one job per (endpoint, event) and one row per delivery attempt. The cursor moves in the
same transaction that writes the jobs for the entries it passes, so after a crash the notifier
resumes exactly where its last commit left it: nothing is derived twice, and nothing is skipped.
Every row carries the log id, so several logs may share one database.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import Connection, Engine, Index, UniqueConstraint, create_engine, text
from sqlmodel import Field, SQLModel

from signoff.audit.driver import sqlite_engine
from signoff.desk.db import engine_url
from signoff.desk.signin_links import SignInLink


class NotifyEndpoint(SQLModel, table=True):
    """One place to send notifications: a webhook, a Slack incoming webhook or an e-mail route."""

    __tablename__ = "desk_notify_endpoint"

    log: str = Field(primary_key=True)
    name: str = Field(primary_key=True)
    kind: str  # webhook | slack | email
    settings: str  # JSON: the channel's own settings (url, secret, SMTP host, addresses…)
    tools: str = "[]"  # JSON list of tool globs; empty: every tool
    roles: str = "[]"  # JSON list of roles; empty: every review
    events: str = "[]"  # JSON list of event names; empty: every event
    deadline_lead: float = 600.0  # seconds before a deadline that review.deadline_near is sent
    redact_args: bool = False
    enabled: bool = True
    created_at: str = ""


class NotifyCursor(SQLModel, table=True):
    """Where the notifier follows the log from: the next ``seq`` it has not turned into jobs."""

    __tablename__ = "desk_notify_cursor"

    log: str = Field(primary_key=True)
    position: int
    updated_at: str = ""


class NotifyJob(SQLModel, table=True):
    """One event for one endpoint, until it is delivered, skipped or given up on."""

    __tablename__ = "desk_notify_job"
    __table_args__ = (
        UniqueConstraint("log", "endpoint", "event_id", name="uq_desk_notify_job_event"),
        Index("ix_desk_notify_job_due", "log", "state", "next_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    log: str
    endpoint: str
    event_id: str
    event: str  # the event type, review.opened …
    review: str
    seq: int
    payload: str  # JSON, fixed when the job is made: every attempt sends the same body
    state: str = "pending"  # pending | delivered | failed | skipped
    attempts: int = 0
    next_at: float  # unix seconds: when the next attempt is due
    created_at: str = ""
    done_at: str | None = None
    last_error: str = ""


class NotifyAttempt(SQLModel, table=True):
    """One delivery attempt: when, how long, and what the receiver answered."""

    __tablename__ = "desk_notify_attempt"

    id: int | None = Field(default=None, primary_key=True)
    log: str
    job: int = Field(index=True)
    endpoint: str
    event_id: str
    attempt: int  # 1 for the first
    at: str
    duration_ms: float
    outcome: str  # delivered | retry | failed
    status: int | None = None  # HTTP status or SMTP reply code
    error: str = ""


class NotifySlackMessage(SQLModel, table=True):
    """A message a Slack app endpoint posted for a review (``chat.postMessage``): where it is, so that
    later events update it in place (``chat.update``), and the thread of its frontier."""

    __tablename__ = "notify_slack_message"
    __table_args__ = (Index("ix_notify_slack_thread", "log", "endpoint", "frontier", "channel"),)

    log: str = Field(primary_key=True)
    endpoint: str = Field(primary_key=True)
    review: str = Field(primary_key=True)
    channel: str = Field(primary_key=True)  # as Slack answered it (a DM's channel id, not the user id)
    target: str  # what it was posted to: the configured channel, or the reviewer (human:…)
    frontier: str
    ts: str  # Slack's message id in the channel
    thread_ts: str = ""  # the frontier's first message, when this one is a reply to it


class NotifySent(SQLModel, table=True):
    """One person's reminder of one job (desk/notify/_reminders.py): marked ``sending`` in a commit before it
    goes out and ``sent`` in one after, so that a job retried after a crash sends it to nobody twice."""

    __tablename__ = "notify_sent"

    log: str = Field(primary_key=True)
    endpoint: str = Field(primary_key=True)
    event_id: str = Field(primary_key=True)
    recipient: str = Field(primary_key=True)  # the reviewer (human:…)
    state: str  # sending | sent | absent (no Slack user, no address: nothing to send)
    started: float  # unix seconds of the (last) send begun
    ref: str = ""  # Slack's channel:ts, or the e-mail's Message-ID
    resent: int = 0  # e-mails sent again after a send a crash cut off (the same Message-ID)


# A sign-in link (desk/signin_links.py) is minted by the notifier and used at the desk.
TABLES = [NotifyEndpoint, NotifyCursor, NotifyJob, NotifyAttempt, NotifySlackMessage, NotifySent, SignInLink]


def _sqlite_engine(url: str, *, write: bool) -> Engine:
    """A SQLite engine for the notifier's own rows (:func:`signoff.audit.driver.sqlite_engine`) with
    ``synchronous=NORMAL``: in WAL mode a commit then survives a crash of the process, and a power cut
    can at worst undo the notifier's last commits, which it redoes (delivery is at least once). The
    log's own commits keep ``synchronous=FULL``."""
    return sqlite_engine(url, write=write, synchronous="NORMAL", pool_size=4, max_overflow=8)


class Engines:
    """A write and a read engine on the store's database, with the notifier's tables made."""

    def __init__(self, store_url: str) -> None:
        url = engine_url(store_url)
        self.backend = "sqlite" if url.startswith("sqlite") else "postgresql"
        if self.backend == "sqlite":
            self.write = _sqlite_engine(url, write=True)
            self.read = _sqlite_engine(url, write=False)
        else:
            self.write = create_engine(url, pool_pre_ping=True, pool_size=4, max_overflow=8)
            self.read = self.write
        with self.write.begin() as conn:
            if self.backend == "postgresql":  # processes making the tables at once take turns
                conn.execute(text("SELECT pg_advisory_xact_lock(727013)"))
            SQLModel.metadata.create_all(conn, tables=[t.__table__ for t in TABLES])  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def busy_write(self) -> Iterator[Connection]:
        """A write transaction for the notifier's own bookkeeping (jobs, cursor, attempts). On
        PostgreSQL it commits without waiting for the WAL flush (``synchronous_commit = off``):
        a server crash can at worst undo the last of these commits, which the notifier redoes
        (delivery is at least once), and the log's own commits still wait for theirs."""
        with self.write.begin() as conn:
            if self.backend == "postgresql":
                conn.execute(text("SET LOCAL synchronous_commit TO OFF"))
            yield conn

    def dispose(self) -> None:
        self.write.dispose()
        if self.read is not self.write:
            self.read.dispose()
