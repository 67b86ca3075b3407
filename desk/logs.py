"""The logs one desk serves: a :class:`Desk` for each, and which one a request is about.

One store may hold many logs (one per app, team or environment: ``audit init --new-log``). ``desk serve``
serves every log in its store, or those ``--log`` names. Each log keeps its own :class:`Desk` (its store
handle, review service, accounts, event broker, caches and verifier): nothing of one log is read or
written through another's.

A request is about one log when it names a review (the review's own row says which log holds it), or
a ``log`` query parameter; otherwise it is about the log its session was opened on, or the first log.
Pages that list (the queue, Decided, Not yet run) and the event stream span every log where the
signed-in person is an enabled reviewer (desk/across.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import bindparam, select
from sqlmodel import col

from signoff.audit.tables import ReviewRow
from signoff.desk.context import Desk

_LOG_OF_REVIEW = select(col(ReviewRow.log)).where(col(ReviewRow.id) == bindparam("id"))


@dataclass
class Desks:
    """Every log this desk serves, in the store's order (oldest first); the first is the default."""

    by_log: dict[str, Desk]

    def __post_init__(self) -> None:
        if not self.by_log:
            raise ValueError("a desk serves at least one log")

    @property
    def default(self) -> Desk:
        return next(iter(self.by_log.values()))

    @property
    def many(self) -> bool:
        """More than one log: the pages then name the log on each row."""
        return len(self.by_log) > 1

    def __iter__(self) -> Iterator[Desk]:
        return iter(self.by_log.values())

    def __len__(self) -> int:
        return len(self.by_log)

    def get(self, log: str) -> Desk | None:
        return self.by_log.get(log)

    def for_review(self, review_id: str) -> Desk | None:
        """The desk of the log that holds ``review_id`` (one indexed read), if this desk serves it."""
        if not self.many:
            return self.default
        store = self.default.store
        with store.read_engine.connect() as conn:
            log = conn.execute(_LOG_OF_REVIEW, {"id": review_id}).scalar()
        return self.by_log.get(str(log)) if log is not None else None

    def label(self, log: str) -> str:
        """How pages name a log: its C2SP origin (``audit init --origin``), which says whose it is."""
        desk = self.by_log.get(log)
        return str(desk.store.rules.origin) if desk is not None else log
