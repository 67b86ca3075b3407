"""Reading reviews: one review or frontier, the queue of open reviews, and waiting for a decision.

:class:`ReviewQueries` is a base of :class:`signoff.audit.reviews.ReviewService`. Every read
that lists goes to the review projection; one review is read from its own log entries.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlmodel import col

from signoff.audit import values
from signoff.audit.decided import read_review
from signoff.audit.entry import Entry, format_time, parse_time
from signoff.audit.log_state import ProjectionDisagrees, read_frontier
from signoff.audit.revealing import reveal_review
from signoff.audit.review_types import Frontier, Review, review_from_row
from signoff.audit.rules import RUNNABLE
from signoff.audit.store import Store
from signoff.audit.tables import FrontierRow, ReviewRow

# Statements built once (bound per call): building SQLAlchemy expressions on every
# operation cost more than running them.
_REVIEW = select(ReviewRow).where(col(ReviewRow.id) == bindparam("id"), col(ReviewRow.log) == bindparam("log"))
FRONTIER = select(FrontierRow).where(col(FrontierRow.id) == bindparam("id"), col(FrontierRow.log) == bindparam("log"))
FRONTIER_REVIEWS = (
    select(ReviewRow).where(col(ReviewRow.frontier) == bindparam("frontier")).order_by(col(ReviewRow.opened_seq))
)
# Runnable reviews of resumed frontiers with no tool.executed (the status index narrows it to those).
_STALLED_SQL = (
    "SELECT r.id AS id, f.resumed_seq AS resumed_seq FROM signoff_review r JOIN signoff_frontier f "
    "ON f.id = r.frontier WHERE r.log = ? AND r.status IN ('approved', 'edited') AND r.executed_seq IS NULL "
    "AND f.resumed_seq IS NOT NULL ORDER BY f.resumed_seq LIMIT ?"
)
_OPEN_SESSIONS_SQL = (
    "SELECT f.id AS frontier, MIN(r.session) AS session FROM signoff_frontier f JOIN signoff_review r "
    "ON r.frontier = f.id WHERE f.log = ? AND f.resumed_seq IS NULL AND f.open_count > 0 AND r.app = ? "
    "GROUP BY f.id, f.opened_seq ORDER BY f.opened_seq LIMIT ?"
)
RESUMED_SEQ = select(col(FrontierRow.resumed_seq)).where(col(FrontierRow.id) == bindparam("id"))


@dataclass(frozen=True)
class Stalled:
    """An approved call whose run was resumed (``claim``) but whose tool has not run."""

    review: Review
    claim: Entry


class ReviewQueries:
    """Review reads over :attr:`store` (set by :class:`~signoff.audit.reviews.ReviewService`)."""

    store: Store

    # -- queries -----------------------------------------------------------------------

    def get(self, review_id: str) -> Review:
        """One review, as its own log entries tell it (:func:`signoff.audit.decided.read_review`): its
        status, final args, patch and answer come from its opening and closing entries, bound by
        review id, never from the queue's projection row."""
        return read_review(self.store, review_id)

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

    def frontier(self, frontier_id: str) -> Frontier:
        """One frontier as its own entries tell it (:func:`signoff.audit.log_state.read_frontier`): its
        reviews, their decisions, its ``run.resumed`` and any ``run.resume_failed``. The frontier row only
        says where its openings lie; a row that disagrees raises ``ProjectionDisagrees``."""
        on_log = read_frontier(self.store.read_rows, self.store.log_id, frontier_id, reveal=True)
        claim = on_log.resumed
        return Frontier(frontier_id, on_log.reviews, claim is not None, claim=claim, replied=on_log.replied)

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
        found = [review_from_row(row, False) for row in rows]
        if not any(review.sealed for review in found):
            return found
        lookup = values.lookup_for(self.store.read_rows, self.store.log_id, [r.id for r in found])
        return [reveal_review(review, (), lookup) if review.sealed else review for review in found]

    def count_pending(self, *, tool: str | None = None, agent: str | None = None) -> int:
        query = self._pending_query(tool, agent).with_only_columns(func.count())
        with self.store.read_engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def pending_by_tool(self) -> dict[str, int]:
        """How many reviews are open, per tool (one grouped count over the projection's status index)."""
        query = (
            select(col(ReviewRow.tool), func.count())
            .where(col(ReviewRow.log) == self.store.log_id, col(ReviewRow.status) == "pending")
            .group_by(col(ReviewRow.tool))
        )
        with self.store.read_engine.connect() as conn:
            return {str(tool): int(count) for tool, count in conn.execute(query).all()}

    def next_deadline(self) -> datetime | None:
        """The earliest deadline among open reviews (for waking to expire them), or None."""
        query = select(func.min(col(ReviewRow.deadline))).where(
            col(ReviewRow.log) == self.store.log_id, col(ReviewRow.status) == "pending"
        )
        with self.store.read_engine.connect() as conn:
            found = conn.execute(query).scalar()
        return parse_time(found) if found else None

    def ready_frontiers(self, limit: int = 100) -> list[Frontier]:
        """Frontiers whose every review is final and that nobody has resumed yet, per their rows, each read
        from the log (one whose rows disagree with the log is left out, with an alarm)."""
        found = []
        for frontier_id in self.ready_frontier_ids(limit):
            try:
                found.append(self.frontier(frontier_id))
            except ProjectionDisagrees:
                continue
        return found

    def ready_frontier_ids(self, limit: int = 100) -> list[str]:
        """The ids of frontiers that the projection says are decided and not resumed, oldest first: the
        candidates a resumer looks at (it decides from the log, :meth:`frontier`)."""
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
        return [str(row[0]) for row in ids]

    def row_resumed(self, frontier_id: str) -> bool:
        """Whether the frontier's projection row says it waits for nothing more (resumed, rewound or
        cancelled): a reader that found the log ahead of the rows it listed earlier asks again."""
        with self.store.read_engine.connect() as conn:
            found = conn.execute(RESUMED_SEQ, {"id": frontier_id}).first()
        return found is not None and found[0] is not None

    def failed_resumes(self, *, limit: int = 500) -> list[Stalled]:
        """Approved calls that a ``run.resume_failed`` says will never run, each with that entry (its
        ``reason``): decided, but never run. Oldest first."""
        found: list[Stalled] = []
        seen: set[str] = set()
        for entry in self.store.entries(kind="run.resume_failed"):
            for review_id in entry.body.get("reviews") or []:
                if review_id in seen or len(found) >= limit:
                    continue
                seen.add(str(review_id))
                found.append(Stalled(self.get(str(review_id)), entry))
        return found

    def open_frontier_sessions(self, app: str, *, limit: int = 10_000) -> list[tuple[str, str]]:
        """``(frontier, session)`` of each frontier of ``app`` with a review still open, per the projection:
        where a resumer looks for a rewind or a cancel (a decided one is looked at when it is claimed).
        Oldest first."""
        rows = self.store.read_rows(_OPEN_SESSIONS_SQL, self.store.log_id, app, limit)
        return [(str(row.frontier), str(row.session)) for row in rows]

    def stalled(self, older_than: float, *, limit: int = 500) -> list[Stalled]:
        """Approved or edited reviews whose run was resumed at least ``older_than`` seconds ago and whose
        tool has no ``tool.executed``: approved, but not (yet) run. Oldest resume first."""
        cutoff = format_time(self.store.clock() - timedelta(seconds=older_than))
        rows = self.store.read_rows(_STALLED_SQL, self.store.log_id, limit)
        found: list[Stalled] = []
        for row in rows:
            claim = self.store.entry(int(row.resumed_seq))
            if claim.kind != "run.resumed" or claim.at > cutoff:
                continue
            review = self.get(row.id)
            if review.executed or review.resume_failed or review.status not in RUNNABLE:
                continue  # the projection said so, the log does not (or the log says it never runs)
            found.append(Stalled(review, claim))
        return found

    def history(self, review_id: str) -> list[Entry]:
        """Every entry about one review, oldest first, with its frontier's own (``run.resumed``,
        ``run.replied``, ``run.rewound``, ``run.cancelled``, and each ``run.resume_failed`` that names it)."""
        review = self.get(review_id)
        found = list(self.store.entries(review=review_id))
        if review.frontier:
            found += [
                e
                for e in self.store.entries(review=review.frontier)
                if e.body.get("frontier") == review.frontier
                and (e.kind != "run.resume_failed" or review_id in (e.body.get("reviews") or ()))
            ]
        return sorted({e.seq: e for e in found}.values(), key=lambda e: e.seq)

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
