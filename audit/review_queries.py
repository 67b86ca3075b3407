"""Reading reviews: one review or frontier, the queue of open reviews, and waiting for a decision.

:class:`ReviewQueries` is a base of :class:`signoff.audit.reviews.ReviewService`. Every read
goes to the review projection; what a decided review will run with is checked against the log.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlmodel import col

from signoff.audit.canonical import digest
from signoff.audit.entry import Entry, parse_time
from signoff.audit.errors import StoreError, UnknownFrontier, UnknownReview
from signoff.audit.review_types import Frontier, Review, review_from_row
from signoff.audit.store import Store
from signoff.audit.tables import FrontierRow, ReviewRow

# Statements built once (bound per call): building SQLAlchemy expressions on every
# operation cost more than running them.
_REVIEW = select(ReviewRow).where(col(ReviewRow.id) == bindparam("id"), col(ReviewRow.log) == bindparam("log"))
FRONTIER = select(FrontierRow).where(col(FrontierRow.id) == bindparam("id"), col(FrontierRow.log) == bindparam("log"))
FRONTIER_REVIEWS = (
    select(ReviewRow).where(col(ReviewRow.frontier) == bindparam("frontier")).order_by(col(ReviewRow.opened_seq))
)
_RESUMED_SEQ = select(col(FrontierRow.resumed_seq)).where(col(FrontierRow.id) == bindparam("id"))


class ReviewQueries:
    """Review reads over :attr:`store` (set by :class:`~signoff.audit.reviews.ReviewService`)."""

    store: Store

    # -- queries -----------------------------------------------------------------------

    def get(self, review_id: str) -> Review:
        with self.store.read_engine.connect() as conn:
            row = conn.execute(_REVIEW, {"id": review_id, "log": self.store.log_id}).first()
            if row is None:
                raise UnknownReview(review_id)
            resumed = conn.execute(_RESUMED_SEQ, {"id": row.frontier}).scalar()
        review = review_from_row(row, resumed is not None)
        if row.final_digest is not None:
            self._check_final_args(review, row.final_digest)
        return review

    def find(self, session: str, *, confirmation_id: str | None = None, call_id: str | None = None) -> Review | None:
        """The review of one paused call in a session, by its confirmation call id or original call id."""
        if (confirmation_id is None) == (call_id is None):
            raise ValueError("find: expected exactly one of confirmation_id or call_id")
        query = select(col(ReviewRow.id)).where(
            col(ReviewRow.log) == self.store.log_id, col(ReviewRow.session) == session
        )
        if confirmation_id is not None:
            query = query.where(col(ReviewRow.confirmation_id) == confirmation_id)
        else:
            query = query.where(col(ReviewRow.call_id) == call_id)
        with self.store.read_engine.connect() as conn:
            found = conn.execute(query.order_by(col(ReviewRow.opened_seq).desc()).limit(1)).first()
        return None if found is None else self.get(found[0])

    def _check_final_args(self, review: Review, final_digest: str) -> None:
        """What the tool will run with must be what the log says was decided, not just what the queue says."""
        found = digest(review.final_args) if review.final_args is not None else None
        decided = self.store.entry(review.decision_seq).body.get("args_digest") if review.decision_seq else None
        if not (found == final_digest == decided):
            raise StoreError(
                f"review {review.id}: expected the projection's args to match the decision at seq "
                f"{review.decision_seq} ({decided}), found {found} (run `audit verify`)"
            )

    def frontier(self, frontier_id: str) -> Frontier:
        with self.store.read_engine.connect() as conn:
            front = conn.execute(FRONTIER, {"id": frontier_id, "log": self.store.log_id}).first()
            if front is None:
                raise UnknownFrontier(frontier_id)
            rows = conn.execute(FRONTIER_REVIEWS, {"frontier": frontier_id}).all()
        resumed = front.resumed_seq is not None
        return Frontier(frontier_id, tuple(review_from_row(row, resumed) for row in rows), resumed)

    def _pending_query(self, tool: str | None, agent: str | None) -> Any:
        query = select(ReviewRow).where(ReviewRow.log == self.store.log_id, ReviewRow.status == "pending")  # type: ignore[arg-type]
        if tool:
            query = query.where(ReviewRow.tool == tool)  # type: ignore[arg-type]
        if agent:
            query = query.where(ReviewRow.agent == agent)  # type: ignore[arg-type]
        return query

    def pending(
        self, *, tool: str | None = None, agent: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[Review]:
        """Open reviews, oldest first."""
        query = self._pending_query(tool, agent).order_by(ReviewRow.opened_seq).limit(limit).offset(offset)
        with self.store.read_engine.connect() as conn:
            rows = conn.execute(query).all()
        return [review_from_row(row, False) for row in rows]

    def count_pending(self, *, tool: str | None = None, agent: str | None = None) -> int:
        query = self._pending_query(tool, agent).with_only_columns(func.count())
        with self.store.read_engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def next_deadline(self) -> datetime | None:
        """The earliest deadline among open reviews (for waking to expire them), or None."""
        query = select(func.min(col(ReviewRow.deadline))).where(
            col(ReviewRow.log) == self.store.log_id, col(ReviewRow.status) == "pending"
        )
        with self.store.read_engine.connect() as conn:
            found = conn.execute(query).scalar()
        return parse_time(found) if found else None

    def ready_frontiers(self, limit: int = 100) -> list[Frontier]:
        """Frontiers whose every review is final and that nobody has resumed yet."""
        with self.store.read_engine.connect() as conn:
            ids = conn.execute(
                select(FrontierRow.id)  # type: ignore[call-overload]
                .where(
                    FrontierRow.log == self.store.log_id,
                    FrontierRow.open_count == 0,
                    FrontierRow.resumed_seq.is_(None),  # type: ignore[union-attr]
                )
                .order_by(FrontierRow.opened_seq)
                .limit(limit)
            ).all()
        return [self.frontier(row[0]) for row in ids]

    def history(self, review_id: str) -> list[Entry]:
        """Every entry about one review, oldest first (including its frontier's ``run.resumed``)."""
        review = self.get(review_id)
        found = list(self.store.entries(review=review_id))
        for resumed in self.store.entries(start=review.opened_seq, kind="run.resumed"):
            if resumed.body.get("frontier") == review.frontier:
                found.append(resumed)
                break
        return sorted(found, key=lambda e: e.seq)

    # -- waiting -----------------------------------------------------------------------

    def wait_for_decision(
        self, review_id: str | None = None, frontier_id: str | None = None, timeout: float = 30.0
    ) -> Review | Frontier | None:
        """Block until the review is final (or every review of the frontier is); ``None`` on timeout.

        Wakes at once on a commit in this process, and within milliseconds on one elsewhere
        (:mod:`audit.notify`); there is no slow poll.
        """
        if (review_id is None) == (frontier_id is None):
            raise ValueError("wait_for_decision: expected exactly one of review_id or frontier_id")
        deadline = time.monotonic() + timeout
        while True:
            seen = self.store.feed.version
            if review_id is not None:
                review = self.get(review_id)
                if review.final:
                    return review
            else:
                assert frontier_id is not None
                front = self.frontier(frontier_id)
                if front.decided:
                    return front
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.store.feed.wait(seen, remaining)

    async def wait_for_decision_async(
        self, review_id: str | None = None, frontier_id: str | None = None, timeout: float = 30.0
    ) -> Review | Frontier | None:
        return await asyncio.to_thread(self.wait_for_decision, review_id, frontier_id, timeout)

    def wait_for_change(self, after_size: int, timeout: float) -> int:
        return self.store.wait_for_change(after_size, timeout)
