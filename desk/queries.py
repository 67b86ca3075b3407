"""The desk's lists, read from the review projection: the queue, the decided history, the outcomes.

Every list is filtered by what the reader may see (:func:`signoff.desk.scope.visible_filter`) in
SQL, so a page and its count never include a review the reader cannot open. Lists that sort by
something other than the projection's queue index (deadline, decision order) first select only
ids and sort keys, then read the rows of one page, so a page costs the same at 10 or 10,000 rows
whatever their args weigh.

What happened after a decision (the run resumed, the tool ran and its result's preview, the
agent's next words) is read from the log entries themselves, in a few batched reads per page
(:func:`outcomes`).

The queue shows only what the log says (DESIGN.md "Decide from the log"): the projection picks and
orders one page of pending reviews, then each is read from its own entries, one batched read of the
subject index per page (:func:`from_log`). The call (tool, args, agent, hint, schema), the round a
reviewer's edit started, the approvals, claim and escalation all come from there; a row that says
otherwise is marked (:attr:`Listed.disagrees`) and raises a projection alarm
(:func:`signoff.audit.log_state.alarm`, the ``signoff_projection_alarms`` metric).

On a sealed log every list reveals its reviews' values from beside the log, each checked against its
commitment, one read per page (desk/reveal.py); a review whose values do not check is listed without
any of them (:attr:`Listed.withheld`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import col

from signoff.audit.decided import review_from_entries
from signoff.audit.entry import ABANDONED, NEVER_RUN
from signoff.audit.errors import UnknownReview
from signoff.audit.log_state import alarm
from signoff.audit.reader import parse_entry
from signoff.audit.revealing import reveal_review
from signoff.audit.review_types import Review, review_from_row
from signoff.audit.sealing import Lookup
from signoff.audit.tables import EntryRow, FrontierRow, ReviewRow
from signoff.desk import reveal
from signoff.desk import summary as summaries
from signoff.desk.reveal import own_entries

SORTS = ("oldest", "deadline")
OUTCOME_NAMES = ("approved", "edited", "rejected", "expired", "withdrawn", "auto_approved")
"""Every status a review has once decided (``audit.entry.OUTCOMES``, and a policy's automatic approval)."""
CLOSING_KINDS = tuple(f"review.{name}" for name in OUTCOME_NAMES)
"""The entries that decide a review, one of each status."""


@dataclass(frozen=True)
class Listed:
    """One review in a list, with its plain-words summary and where its run is."""

    review: Review
    summary: summaries.Summary
    executed_seq: int | None = None
    disagrees: str = ""  # what the projection row says other than the log (the log's values are shown)
    unlogged: bool = False  # the row names a review the log does not have: nothing of it is shown

    @property
    def id(self) -> str:
        return self.review.id

    @property
    def withheld(self) -> bool:
        """A sealed review whose values do not check (desk/reveal.py): listed without any of them."""
        return reveal.withheld(self.review)


@dataclass(frozen=True)
class FrontierInfo:
    size: int
    open: int
    resumed_seq: int | None


@dataclass(frozen=True)
class Outcome:
    """What happened after a review was decided, from the log."""

    resumed_seq: int | None = None
    resumed_at: str | None = None
    executed_seq: int | None = None
    executed_at: str | None = None
    result_preview: str | None = None
    reply_seq: int | None = None
    reply: str | None = None
    failed_seq: int | None = None  # a run.resume_failed naming the review: its call never runs
    failed_reason: str | None = None
    # On a sealed log, why a text is not shown ("" when it is): reveal.ERASED, MISSING or TAMPERED.
    result_note: str = ""
    reply_note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "failed": self.failed_seq is not None,
            "failed_seq": self.failed_seq,
            "failed_reason": self.failed_reason,
            "resumed": self.resumed_seq is not None,
            "resumed_seq": self.resumed_seq,
            "executed": self.executed_seq is not None,
            "executed_seq": self.executed_seq,
            "result_preview": self.result_preview,
            "reply": self.reply,
            "reply_seq": self.reply_seq,
            "result_note": self.result_note,
            "reply_note": self.reply_note,
        }


def listed(store: Any, rows: Sequence[Any], resumed: dict[str, bool] | None = None) -> list[Listed]:
    found = [review_from_row(row, (resumed or {}).get(row.frontier, False)) for row in rows]
    out = []
    for row, review in zip(rows, reveal.revealed(store, found), strict=True):
        review = reveal.shown(review)
        # A review a reviewer changed reads as what will run (a pending round's args, an edit's), the proposal beside.
        out.append(Listed(review, summaries.of_review(review), row.executed_seq))
    return out


UNLOGGED = "This row names a review the log does not have; nothing to review. Tell your administrator."

# What a queue row shows, compared between the projection row and the log (the row's columns the
# filters use are compared with the log's call too).
_SHOWN = ("status", "frontier", "call", "args_digest", "policy", "deadline", "opened_seq", "round", "round_args",
          "approvals", "claim", "escalated_role")  # fmt: skip


def _differ(row: Any, projected: Review, logged: Review) -> list[str]:
    """The fields a queue row shows in which the projection row says other than the log."""
    names = [n for n in _SHOWN if getattr(projected, n) != getattr(logged, n)]
    for column, value in (("tool", logged.call.tool), ("agent", logged.call.agent), ("session", logged.call.session)):
        if getattr(row, column, value) != value:
            names.append(column)
    return names


def _logged(store: Any, ids: Sequence[str]) -> dict[str, tuple[Review, Review]]:
    """Each review of ``ids`` as its own log entries hold it (on a sealed log, with commitments) and with its
    values revealed and checked (the same review on a log that keeps values in its entries)."""
    sealed: dict[str, tuple[Review, list[Any]]] = {}
    for rid, entries in own_entries(store, ids).items():
        try:
            sealed[rid] = (review_from_entries(rid, entries, False), entries)
        except (UnknownReview, KeyError, TypeError, ValueError):
            continue
    owners = [r.id for r, _e in sealed.values() if r.sealed]
    look = reveal.lookup(store, owners) if owners else None
    out = {}
    for rid, (review, entries) in sealed.items():
        out[rid] = (review, reveal_review(review, entries, look) if look is not None and review.sealed else review)
    return out


def logged_reviews(store: Any, ids: Sequence[str]) -> dict[str, Review]:
    """The reviews ``ids`` as their own log entries tell them (:func:`own_entries`), their values revealed
    (desk/reveal.py); one the log does not have is missing from the answer. The frontier's resume is not
    read: for reviews still open."""
    return {rid: revealed for rid, (_sealed, revealed) in _logged(store, ids).items()}


def from_log(store: Any, rows: Sequence[Any]) -> list[Listed]:
    """The pending reviews of ``rows`` (projection rows, in the page's order) as the log tells them
    (:func:`logged_reviews`). A row that disagrees with the log is marked and raises an alarm; one whose
    review is not on the log is listed as such, with none of its values."""
    logged = _logged(store, [str(row.id) for row in rows])
    out = []
    for row in rows:
        projected = review_from_row(row, False)
        found = logged.get(str(row.id))
        if found is None:
            alarm("review row", f"review {row.id}: a pending row in the queue, no review.opened on the log")
            out.append(Listed(projected, summaries.summarize("", {}), row.executed_seq, UNLOGGED, unlogged=True))
            continue
        sealed, review = found[0], reveal.shown(found[1])
        differ = _differ(row, projected, sealed)  # both as the entries hold them (commitments, on a sealed log)
        if differ:
            alarm("review row", f"review {row.id}: the queue row says other than the log about {', '.join(differ)}")
        note = f"the row's {', '.join(differ)} differ from the log" if differ else ""
        out.append(Listed(review, summaries.of_review(review), row.executed_seq, note))
    return out


def rows_of(store: Any, ids: Sequence[str]) -> list[Any]:
    """Whole projection rows for ``ids``, in that order."""
    if not ids:
        return []
    with store.read_engine.connect() as conn:
        rows = conn.execute(select(ReviewRow).where(col(ReviewRow.id).in_(list(ids)))).all()
    by_id = {row.id: row for row in rows}
    return [by_id[i] for i in ids if i in by_id]


# -- the queue ----------------------------------------------------------------------------------


def pending_where(store: Any, visible: ColumnElement[bool], tool: str | None, agent: str | None) -> list[Any]:
    where = [col(ReviewRow.log) == store.log_id, col(ReviewRow.status) == "pending", visible]
    if tool:
        where.append(col(ReviewRow.tool) == tool)
    if agent:
        where.append(col(ReviewRow.agent) == agent)
    return where


def pending(
    store: Any,
    visible: ColumnElement[bool],
    *,
    tool: str | None = None,
    agent: str | None = None,
    sort: str = "oldest",
    limit: int = 50,
    offset: int = 0,
) -> tuple[list[Listed], int]:
    """Open reviews the reader sees (oldest first, or by deadline: soonest first, none last), and their count."""
    where = pending_where(store, visible, tool, agent)
    with store.read_engine.connect() as conn:
        total = int(conn.execute(select(func.count()).select_from(ReviewRow).where(*where)).scalar_one())
        if sort == "deadline":
            # Soonest deadline first along the (log, status, deadline) index, then the reviews
            # without one, oldest first: two index walks rather than one sort of every pending row.
            dated = [*where, col(ReviewRow.deadline).is_not(None)]
            with_deadline = int(conn.execute(select(func.count()).select_from(ReviewRow).where(*dated)).scalar_one())
            ids: list[str] = []
            if offset < with_deadline:
                ids += [
                    str(r[0])
                    for r in conn.execute(
                        select(col(ReviewRow.id))
                        .where(*dated)
                        .order_by(col(ReviewRow.deadline), col(ReviewRow.opened_seq))
                        .limit(limit)
                        .offset(offset)
                    )
                ]
            if len(ids) < limit:
                ids += [
                    str(r[0])
                    for r in conn.execute(
                        select(col(ReviewRow.id))
                        .where(*where, col(ReviewRow.deadline).is_(None))
                        .order_by(col(ReviewRow.opened_seq))
                        .limit(limit - len(ids))
                        .offset(max(0, offset - with_deadline))
                    )
                ]
            rows = rows_of(store, ids)
        else:
            query: Select[Any] = (
                select(ReviewRow).where(*where).order_by(col(ReviewRow.opened_seq)).limit(limit).offset(offset)
            )
            rows = list(conn.execute(query).all())
    return from_log(store, rows), total


def frontiers(store: Any, ids: Iterable[str]) -> dict[str, FrontierInfo]:
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    query = select(
        col(FrontierRow.id), col(FrontierRow.size), col(FrontierRow.open_count), col(FrontierRow.resumed_seq)
    ).where(col(FrontierRow.id).in_(wanted))
    with store.read_engine.connect() as conn:
        return {str(i): FrontierInfo(int(s), int(o), r) for i, s, o, r in conn.execute(query)}


@dataclass(frozen=True)
class Group:
    """Reviews of one frontier on one page: the calls one pause of the agent made together."""

    frontier: str
    items: list[Listed]
    size: int  # calls in the whole frontier
    open: int  # of them still pending


def grouped(items: list[Listed], info: dict[str, FrontierInfo]) -> list[Group]:
    """The page's reviews grouped by frontier, each group where its first review is."""
    groups: dict[str, Group] = {}
    for item in items:
        f = item.review.frontier
        if f not in groups:
            fi = info.get(f)
            groups[f] = Group(f, [], fi.size if fi else 1, fi.open if fi else 1)
        groups[f].items.append(item)
    return list(groups.values())


# -- the decided history --------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryQuery:
    """Filters of the Decided view; empty strings mean "any"."""

    mine: str = ""  # the reviewer's own id when "mine" is ticked
    tool: str = ""
    agent: str = ""
    outcome: str = ""
    since: str = ""  # YYYY-MM-DD, inclusive
    until: str = ""  # YYYY-MM-DD, inclusive
    q: str = ""  # a review id (or its start), a session id or a frontier id

    def params(self) -> dict[str, str]:
        out = {
            "mine": "1" if self.mine else "",
            "tool": self.tool,
            "agent": self.agent,
            "outcome": self.outcome,
            "since": self.since,
            "until": self.until,
            "q": self.q,
        }
        return {k: v for k, v in out.items() if v}


def day(text: str) -> date | None:
    try:
        return date.fromisoformat(text.strip()) if text.strip() else None
    except ValueError:
        return None


SORT_AT_MOST = 2000
"""Up to this many matching decisions, a page sorts them; beyond, it walks the log's decision entries."""
SEARCH_LIMIT = 1000
"""Reviews one search may name (a session's or a frontier's)."""


def _named(store: Any, q: str) -> list[str]:
    """The reviews a search names, each alternative from its own index (the id or its start, a session,
    a frontier): the search runs first, so the other filters apply to those few reviews alone."""
    log = col(ReviewRow.log) == store.log_id
    found = [and_(log, col(ReviewRow.session) == q)]
    if q.startswith("rv_") and len(q) >= 7:  # a review id, or its start (4 hex digits or more)
        found.append(and_(log, col(ReviewRow.id) >= q, col(ReviewRow.id) < q + "\uffff"))
    elif q.startswith("fr_"):
        found.append(and_(log, col(ReviewRow.frontier) == q))
    with store.read_engine.connect() as conn:
        rows = conn.execute(select(col(ReviewRow.id)).where(or_(*found)).limit(SEARCH_LIMIT)).all()
    return [str(r[0]) for r in rows]


def decided_where(store: Any, visible: ColumnElement[bool], f: HistoryQuery) -> list[ColumnElement[bool]]:
    q = f.q.strip()
    where: list[ColumnElement[bool]] = [visible]
    if q:
        # A search names few reviews (of this log: _named): they are looked up by their ids, the
        # primary key, and no other term offers an index a planner could prefer to it.
        where += [col(ReviewRow.id).in_(_named(store, q) or [""]), col(ReviewRow.decided_seq).is_not(None)]
    else:
        # "Decided" as the status column says it: counts then read the (log, status, …) indexes alone.
        where += [col(ReviewRow.log) == store.log_id, col(ReviewRow.status).in_(OUTCOME_NAMES)]
    if f.mine:
        where.append(col(ReviewRow.decided_by) == f.mine)
    if f.tool:
        where.append(col(ReviewRow.tool) == f.tool)
    if f.agent:
        where.append(col(ReviewRow.agent) == f.agent)
    if f.outcome in OUTCOME_NAMES:
        where.append(col(ReviewRow.status) == f.outcome)
    since, until = day(f.since), day(f.until)
    if since is not None:
        where.append(col(ReviewRow.decided_at) >= since.isoformat())
    if until is not None:
        where.append(col(ReviewRow.decided_at) < (until + timedelta(days=1)).isoformat())
    return where


@dataclass(frozen=True)
class HistoryPage:
    items: list[Listed]
    total: int
    older: int | None  # pass as ``before`` for the next older page
    newer: int | None  # pass as ``after`` for the next newer page


def decided(
    store: Any,
    visible: ColumnElement[bool],
    f: HistoryQuery,
    *,
    before: int | None = None,
    after: int | None = None,
    limit: int = 50,
    count: bool = True,
) -> HistoryPage:
    """Decided reviews the reader sees, newest decision first, paged by decision seq (keyset)."""
    where = decided_where(store, visible, f)
    keyed = list(where)
    if before is not None:
        keyed.append(col(ReviewRow.decided_seq) < before)
    if after is not None:
        keyed.append(col(ReviewRow.decided_seq) > after)
    with store.read_engine.connect() as conn:
        counting = select(func.count()).select_from(ReviewRow).where(*where)
        total = int(conn.execute(counting).scalar_one()) if count else -1
        if not count or 0 <= total <= SORT_AT_MOST or f.q.strip():
            # Few (or a first page, uncounted: the "Just decided" panel): along the (log, decided_seq)
            # index from its end, its range starting past the open reviews' NULLs, so that a page reads
            # decided rows alone even when the reader sees fewer decisions than it shows.
            order = col(ReviewRow.decided_seq).asc() if after is not None else col(ReviewRow.decided_seq).desc()
            keying = (
                select(col(ReviewRow.id), col(ReviewRow.decided_seq))
                .where(*keyed, col(ReviewRow.decided_seq).is_not(None))
                .order_by(order)
            )
        else:  # many, so dense along the log: walked in its order
            keying = _by_decision(store, keyed, before, after)
        keys = conn.execute(keying.limit(limit + 1)).all()
    more = len(keys) > limit
    keys = keys[:limit]
    if after is not None:
        keys = list(reversed(keys))
    ids = [str(k[0]) for k in keys]
    items = listed(store, rows_of(store, ids))
    first, last = (keys[0][1], keys[-1][1]) if keys else (None, None)
    if after is not None:
        older = last if keys else None
        newer = first if more else None
    else:
        older = last if more else None
        newer = first if before is not None and keys else None
    return HistoryPage(items, total, older, newer)


def _by_decision(store: Any, where: list[ColumnElement[bool]], before: int | None, after: int | None) -> Any:
    """(id, decision seq) of the decided reviews matching ``where``, in decision order, walked along
    the log itself: its decision entries in seq order (the entry table's primary key), each joined to
    its review's row, so a page reads about as many rows as it shows, without sorting every
    decision. ``decided_seq = seq`` keeps the entry that closed the review (not an earlier approval
    of a review that needs several)."""
    seq = col(EntryRow.seq)
    query = (
        select(col(ReviewRow.id), col(ReviewRow.decided_seq))
        .select_from(EntryRow)
        .join(ReviewRow, and_(col(ReviewRow.id) == col(EntryRow.subject), col(ReviewRow.decided_seq) == seq))
        .where(col(EntryRow.log) == store.log_id, col(EntryRow.kind).in_(CLOSING_KINDS), *where)
    )
    if before is not None:
        query = query.where(seq < before)
    if after is not None:
        query = query.where(seq > after)
    return query.order_by(seq.asc() if after is not None else seq.desc())


def recent(store: Any, visible: ColumnElement[bool], limit: int = 6) -> list[Listed]:
    """The latest decisions the reader sees (the queue's "Just decided" panel)."""
    return decided(store, visible, HistoryQuery(), limit=limit, count=False).items


# -- outcomes -------------------------------------------------------------------------------------


def outcomes(store: Any, items: Sequence[Listed]) -> dict[str, Outcome]:
    """For each decided review: run resumed, tool ran (with its result's preview), the agent's reply."""
    decided_items = [i for i in items if i.review.status != "pending"]
    if not decided_items:
        return {}
    info = frontiers(store, (i.review.frontier for i in decided_items))
    seqs = [s for s in (i.executed_seq for i in decided_items) if s is not None]
    seqs += [fi.resumed_seq for fi in info.values() if fi.resumed_seq is not None]
    log = store.log_id
    by_seq: dict[int, Any] = {}
    replies: dict[str, Any] = {}
    failures: dict[str, Any] = {}  # review id -> the run.resume_failed naming it
    with store.read_engine.connect() as conn:
        if seqs:
            for seq, raw in conn.execute(
                select(col(EntryRow.seq), col(EntryRow.raw)).where(
                    col(EntryRow.log) == log, col(EntryRow.seq).in_(seqs)
                )
            ):
                by_seq[int(seq)] = parse_entry(bytes(raw))
        resumed_frontiers = [f for f, fi in info.items() if fi.resumed_seq is not None]
        if resumed_frontiers:
            # ``log || ''``: the subject index, sought once per frontier. Given ``log = ?`` and a few frontiers,
            # SQLite prefers the (log, kind, seq) index and walks every reply the log holds.
            for (raw,) in conn.execute(
                select(col(EntryRow.raw)).where(
                    col(EntryRow.log).concat("") == log,
                    col(EntryRow.subject).in_(resumed_frontiers),
                    col(EntryRow.kind).in_(("run.replied", "run.resume_failed")),
                )
            ):
                entry = parse_entry(bytes(raw))
                if entry.kind == "run.replied":
                    replies.setdefault(str(entry.body.get("frontier")), entry)
                else:
                    for rid in entry.body.get("reviews") or []:
                        failures.setdefault(str(rid), entry)
    sealed = [i.review for i in decided_items if i.review.sealed]
    look = reveal.lookup(store, [*(r.id for r in sealed), *(r.frontier for r in sealed)]) if sealed else None
    out = {}
    for item in decided_items:
        fi = info.get(item.review.frontier)
        resumed = by_seq.get(fi.resumed_seq) if fi and fi.resumed_seq is not None else None
        failed = failures.get(item.id)
        if resumed is not None and resumed.kind in ABANDONED:  # the frontier's row names its run.rewound
            resumed, failed = None, failed or resumed
        executed = by_seq.get(item.executed_seq) if item.executed_seq is not None else None
        reply = replies.get(item.review.frontier)
        out[item.id] = _outcome(resumed, executed, reply, failed, look, item.review)
    return out


def _outcome(
    resumed: Any,
    executed: Any,
    reply: Any,
    failed: Any = None,
    look: Lookup | None = None,
    review: Review | None = None,
) -> Outcome:
    """An :class:`Outcome` from a review's ``run.resumed``, ``tool.executed``, ``run.replied`` and
    ``run.resume_failed`` entries (each ``None`` when it is not on the log yet); ``look``: the values beside
    a sealed log, for the result preview and the reply (desk/reveal.py :func:`~signoff.desk.reveal.text`),
    neither of which is shown for a review whose values do not check."""
    erased = review.erased if review is not None else frozenset()
    preview, preview_note = reveal.text(executed.body.get("result_preview") if executed else None, look, erased)
    said, said_note = reveal.text((reply.body.get("text") or "") if reply else None, look, erased)
    if review is not None and reveal.withheld(review):
        preview, preview_note = (None, reveal.TAMPERED) if executed else (None, "")
        said, said_note = (None, reveal.TAMPERED) if reply else (None, "")
    return Outcome(
        failed_seq=failed.seq if failed is not None else None,
        failed_reason=str(failed.body.get("reason") or "") if failed is not None else None,
        resumed_seq=resumed.seq if resumed else None,
        resumed_at=resumed.at if resumed else None,
        executed_seq=executed.seq if executed else None,
        executed_at=executed.at if executed else None,
        result_preview=preview,
        reply_seq=reply.seq if reply else None,
        reply=said if reply else None,
        result_note=preview_note,
        reply_note=said_note,
    )


def timeline(store: Any, review: Review) -> list[Any]:
    """Every entry about one review and its frontier (opened … decided, resumed, executed, replied), by seq."""
    own = list(store.entries(review=review.id))
    about_frontier = [
        e for e in store.entries(review=review.frontier) if e.kind.startswith("run.")
    ]  # run.resumed, run.replied
    return sorted([*own, *about_frontier], key=lambda e: e.seq)


def outcome_of(entries: Sequence[Any], review: Review, store: Any = None) -> Outcome:
    """The outcome of one review from its timeline (:func:`timeline`); ``store``: where a sealed review's
    result preview and the agent's reply are revealed from."""
    resumed = next((e for e in entries if e.kind == "run.resumed"), None)
    executed = next((e for e in entries if e.kind == "tool.executed" and e.body.get("review") == review.id), None)
    reply = next((e for e in entries if e.kind == "run.replied"), None)
    failed = next((e for e in entries if e.kind in NEVER_RUN and review.id in (e.body.get("reviews") or [])), None)
    look = reveal.lookup(store, [review.id, review.frontier]) if store is not None and review.sealed else None
    return _outcome(resumed, executed, reply, failed, look, review)


def distinct(store: Any, column: str, visible: ColumnElement[bool], limit: int = 200) -> list[str]:
    """Tool or agent names the reader sees (for the filters' suggestions)."""
    target = col(ReviewRow.tool) if column == "tool" else col(ReviewRow.agent)
    query = select(target).where(col(ReviewRow.log) == store.log_id, visible).distinct().limit(limit)
    with store.read_engine.connect() as conn:
        return sorted(str(r[0]) for r in conn.execute(query) if r[0])


__all__ = [
    "SORTS",
    "FrontierInfo",
    "Group",
    "HistoryPage",
    "HistoryQuery",
    "Listed",
    "Outcome",
    "decided",
    "distinct",
    "from_log",
    "frontiers",
    "logged_reviews",
    "own_entries",
    "grouped",
    "outcome_of",
    "outcomes",
    "pending",
    "recent",
    "timeline",
]
