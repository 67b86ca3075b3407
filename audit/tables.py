"""SQLModel tables: the log, its entries, Merkle nodes, checkpoints and the review projections.

The entry table is the source of truth. ``review``, ``frontier`` and ``reviewer`` are
projections written in the same transaction as the entry they follow from; ``audit
verify`` rebuilds them from the log and compares.
"""

from __future__ import annotations

from sqlalchemy import Column, Index, LargeBinary, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


class LogRow(SQLModel, table=True):
    """One log: its id and public key. The head is the entry with the highest ``seq``."""

    __tablename__ = "signoff_log"

    id: str = Field(primary_key=True)
    created_at: str
    public_key: str


class EntryRow(SQLModel, table=True):
    """One entry: its exact canonical bytes, its leaf hash, and the Merkle nodes it completed.

    ``nodes`` holds the 32-byte hashes of the perfect subtrees (levels 1, 2, …) whose last
    leaf is this entry, so a proof or the compact range costs O(log n) point reads and an
    append writes one row. ``subject`` is the review, frontier or reviewer it is about.
    """

    __tablename__ = "signoff_entry"
    __table_args__ = (
        Index("ix_signoff_entry_subject", "subject", "seq"),
        Index("ix_signoff_entry_kind", "log", "kind", "seq"),  # revision 0005: verify --incremental's trust entries
    )

    log: str = Field(primary_key=True)
    seq: int = Field(primary_key=True)
    hash: str
    kind: str
    actor: str
    subject: str | None = None
    raw: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    nodes: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class CheckpointRow(SQLModel, table=True):
    __tablename__ = "signoff_checkpoint"

    log: str = Field(primary_key=True)
    size: int = Field(primary_key=True)
    root: str
    at: str
    signed: str = Field(sa_column=Column(Text, nullable=False))  # the checkpoint JSON with its sig


class ReviewRow(SQLModel, table=True):
    """Projection: one row per review, the queue the desk lists."""

    __tablename__ = "signoff_review"
    __table_args__ = (
        Index("ix_signoff_review_queue", "log", "status", "opened_seq"),
        Index("ix_signoff_review_tool", "log", "status", "tool", "opened_seq"),
        Index("ix_signoff_review_agent", "log", "status", "agent", "opened_seq"),
        Index("ix_signoff_review_deadline", "log", "status", "deadline"),
        UniqueConstraint("log", "app", "session", "confirmation_id", name="uq_signoff_review_call"),
        Index("ix_signoff_review_call_id", "log", "session", "call_id"),
        Index("ix_signoff_review_decided", "log", "decided_seq"),  # revision 0002: the desk's Decided history
        Index("ix_signoff_review_decided_at", "log", "decided_at", "id"),  # revision 0006: Decided over many logs
    )

    id: str = Field(primary_key=True)
    log: str
    frontier: str = Field(index=True)
    status: str
    tool: str
    agent: str
    app: str
    session: str
    confirmation_id: str
    call_id: str
    opened_seq: int
    opened_at: str
    deadline: str | None = None
    decided_seq: int | None = None
    decided_by: str | None = None
    decided_at: str | None = None
    args_digest: str  # digest of the args as opened
    final_digest: str | None = None  # digest of the args to run with (approved or edited)
    executed_seq: int | None = None
    data: str = Field(sa_column=Column(Text, nullable=False))  # JSON: call, policy, decision details


class FrontierRow(SQLModel, table=True):
    __tablename__ = "signoff_frontier"
    __table_args__ = (Index("ix_signoff_frontier_ready", "log", "open_count", "resumed_seq"),)

    id: str = Field(primary_key=True)
    log: str
    opened_seq: int
    size: int
    open_count: int
    resumed_seq: int | None = None  # its run.resumed, or its run.rewound: the frontier waits for nothing more


class ReviewerRow(SQLModel, table=True):
    __tablename__ = "signoff_reviewer"

    log: str = Field(primary_key=True)
    id: str = Field(primary_key=True)
    roles: str  # JSON list
    tools: str  # JSON list of globs
    enabled: bool = True
    enrolled_seq: int


class KeyRow(SQLModel, table=True):
    __tablename__ = "signoff_key"
    __table_args__ = (Index("ix_signoff_key_actor", "log", "actor"),)

    log: str = Field(primary_key=True)
    fingerprint: str = Field(primary_key=True)
    actor: str = Field(primary_key=True)  # one key may be enrolled for several actors (the log and its service)
    public_key: str
    enrolled_seq: int


class ValueRow(SQLModel, table=True):
    """A value beside the log (:mod:`signoff.audit.sealing`): what a commitment in an entry stands for.
    ``owner`` is the review (or, for a reply, the frontier) whose entry holds the commitment; erasing
    deletes the row, and a ``data.erased`` entry on the log says so."""

    __tablename__ = "signoff_value"
    __table_args__ = (Index("ix_signoff_value_owner", "log", "owner"),)

    log: str = Field(primary_key=True)
    commitment: str = Field(primary_key=True)
    owner: str
    salt: str  # hex, 32 bytes
    value: str = Field(sa_column=Column(Text, nullable=False))  # RFC 8785 text


class ResumeLeaseRow(SQLModel, table=True):
    """Who is sending a claimed frontier now (:mod:`signoff.audit.resume_leases`), and until when it
    promises to renew that. Not a projection of the log and not part of the record: a worker that
    took over a frontier learns here that the claimant is alive. ``until`` is seconds since the epoch."""

    __tablename__ = "signoff_resume_lease"
    __table_args__ = (Index("ix_signoff_resume_lease_holder", "log", "holder"),)

    log: str = Field(primary_key=True)
    frontier: str = Field(primary_key=True)
    holder: str
    until: float
