"""What the log itself says about one frontier: its reviews, their decisions, its resume, what failed.

DESIGN.md "Decide from the log": whoever sends a decision back to a run, or records that a tool
ran, decides from the entries, never from the projection rows (``signoff_review``,
``signoff_frontier``) alone. A row is only an index here: the frontier row says where the
frontier's ``review.opened`` entries start, and the entries must agree. A row that disagrees with
the log is an alarm (:func:`alarm`), never an instruction.

The readers work inside a write transaction (``rows`` is ``Tx.rows``, and ``pending`` the entries
an earlier writer of the same group commit appended, not yet in the table) and outside one
(``rows`` is ``Store.read_rows``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from signoff.audit import values
from signoff.audit.decided import failure_reason, review_from_entries
from signoff.audit.entry import ABANDONED, NEVER_RUN, Entry, subject_of
from signoff.audit.errors import AuditError, UnknownFrontier
from signoff.audit.reader import parse_entry
from signoff.audit.review_types import Review

Rows = Callable[..., list[Any]]
"""``rows(sql, *params)``: driver-level SQL with ``?`` placeholders (``Tx.rows`` or ``Store.read_rows``)."""

_RANGE = "SELECT seq, raw FROM signoff_entry WHERE log = ? AND seq >= ? AND seq <= ? ORDER BY seq"
_BY_SUBJECT = "SELECT seq, raw FROM signoff_entry WHERE subject = ? AND log = ? ORDER BY seq"
_FRONTIER_ROW = "SELECT opened_seq, size FROM signoff_frontier WHERE id = ? AND log = ?"
FRONTIER_KINDS = frozenset({"run.resumed", "run.resume_failed", "run.replied"}) | ABANDONED

log = logging.getLogger("signoff.audit")
ALARMS: Counter[str] = Counter()  # kind of disagreement -> times seen in this process (the desk's /metrics)
_ALARM_LOCK = threading.Lock()


class ProjectionDisagrees(AuditError):
    """A projection row says something the log does not; nothing is decided from it."""


def alarm(kind: str, message: str) -> None:
    """A projection row disagrees with the log: a warning in the log output and a count in :data:`ALARMS`."""
    with _ALARM_LOCK:
        ALARMS[kind] += 1
    log.warning("projection disagrees with the log (%s): %s; the log decides", kind, message)


@dataclass(frozen=True)
class FrontierOnLog:
    """One frontier as its own entries tell it."""

    id: str
    reviews: tuple[Review, ...]  # in the order they were opened
    resumed: Entry | None  # its run.resumed
    failed: dict[str, Entry]  # review id -> the run.resume_failed (run.rewound, run.cancelled) that names it
    replied: bool
    abandoned: Entry | None = None  # its run.rewound or run.cancelled: the run is gone; nothing resumes

    @property
    def decided(self) -> bool:
        return all(review.final for review in self.reviews)

    @property
    def closed(self) -> Entry | None:
        """The entry after which the frontier waits for nothing: its ``run.resumed``, ``run.rewound`` or
        ``run.cancelled``."""
        return self.resumed or self.abandoned


def read_frontier(
    rows: Rows,
    log_id: str,
    frontier_id: str,
    *,
    pending: Sequence[Entry] = (),
    hint: tuple[int, int] | None = None,
    reveal: bool = False,
) -> FrontierOnLog:
    """The frontier's reviews and resume, from the entries (raises ``UnknownFrontier`` or
    :class:`ProjectionDisagrees`). ``reveal``: on a sealed log, with their values from beside the log,
    each checked (the rules and the write path work on the sealed forms, and leave it off).

    The frontier row (or ``hint``, its ``(opened_seq, size)``) says where its ``review.opened``
    entries lie; they must be exactly there, one transaction's worth, each naming the frontier in
    its own body (the verifier holds the log to that: a frontier opens in one transaction).
    """
    if hint is None:
        found = rows(_FRONTIER_ROW, frontier_id, log_id)
        if not found:
            raise UnknownFrontier(frontier_id)
        hint = (int(found[0].opened_seq), int(found[0].size))
    first, size = hint
    found_rows = rows(_RANGE, log_id, max(0, first - 1), first + size)
    around = _entries(found_rows, pending, range(first - 1, first + size + 1))
    members = [e for e in around if _opens(e, frontier_id)]
    if [e.seq for e in members] != list(range(first, first + size)) or size < 1:
        where = ", ".join(f"seq {e.seq}" for e in members) or "nowhere"
        message = f"frontier {frontier_id}: its row says {size} review(s) opened from seq {first}, the log at {where}"
        alarm("frontier row", message)
        raise ProjectionDisagrees(message)
    ids = [str(e.body["review"]) for e in members]
    own = _by_subject(rows, log_id, [frontier_id, *ids], pending)
    about = [e for e in own.get(frontier_id, []) if e.kind in FRONTIER_KINDS and e.body.get("frontier") == frontier_id]
    resumed = next((e for e in about if e.kind == "run.resumed"), None)
    abandoned = next((e for e in about if e.kind in ABANDONED), None)
    failed: dict[str, Entry] = {}
    for item in about:
        if item.kind in NEVER_RUN:  # an abandoned frontier's approved calls never run either
            for rid in item.body.get("reviews") or []:
                failed.setdefault(str(rid), item)
    lookup = values.lookup_for(rows, log_id, [*ids, frontier_id]) if reveal else None
    reviews = tuple(
        review_from_entries(
            rid,
            [e for e in own.get(rid, []) if e.body.get("review") == rid],
            resumed is not None,
            failed=_reason(failed.get(rid)),
            lookup=lookup,
        )
        for rid in ids
    )
    replied = any(e.kind == "run.replied" for e in about)
    return FrontierOnLog(frontier_id, reviews, resumed, failed, replied, abandoned)


def _opens(item: Entry, frontier_id: str) -> bool:
    return item.kind == "review.opened" and item.body.get("frontier") == frontier_id


def _reason(item: Entry | None) -> str:
    return "" if item is None else failure_reason(item)


def _entries(found: Sequence[Any], pending: Sequence[Entry], seqs: range) -> list[Entry]:
    """Rows parsed, with the entries of this (group-commit) transaction not yet in the table."""
    out = {int(row.seq): parse_entry(bytes(row.raw)) for row in found}
    for item in pending:
        if item.seq in seqs:
            out[item.seq] = item
    return [out[seq] for seq in sorted(out)]


def _by_subject(rows: Rows, log_id: str, subjects: Sequence[str], pending: Sequence[Entry]) -> dict[str, list[Entry]]:
    """Each subject's entries, oldest first (committed ones, then this transaction's)."""
    out: dict[str, list[Entry]] = {}
    for subject in subjects:
        out[subject] = [parse_entry(bytes(row.raw)) for row in rows(_BY_SUBJECT, subject, log_id)]
    committed = {e.seq for items in out.values() for e in items}
    for item in pending:
        if item.seq in committed:
            continue
        about = subject_of(item.body)
        if about is not None and about in out:
            out[about].append(item)
    return out


def read_review_in(
    rows: Rows, log_id: str, review_id: str, frontier_id: str | None, *, pending: Sequence[Entry] = ()
) -> tuple[Review, FrontierOnLog | None]:
    """One review as the log tells it, with its frontier (``None`` for an auto-approved call, which never
    paused); raises :class:`ProjectionDisagrees` when the review is not one of the frontier's on the log."""
    if frontier_id:
        front = read_frontier(rows, log_id, frontier_id, pending=pending)
        found = next((r for r in front.reviews if r.id == review_id), None)
        if found is None:
            raise ProjectionDisagrees(f"review {review_id}: its row names frontier {frontier_id}, the log does not")
        return found, front
    own = [e for e in _by_subject(rows, log_id, [review_id], pending)[review_id] if e.body.get("review") == review_id]
    if not own:
        raise ProjectionDisagrees(f"review {review_id}: its row has no entry on the log")
    return review_from_entries(review_id, own, False), None
