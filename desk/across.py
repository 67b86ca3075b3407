"""What one person sees across the logs a desk serves (desk/logs.py): one queue, one Decided list, one
Not-yet-run list, and the "Just decided" panel, each row naming its log.

A person's **seats** are the served logs where they are an enabled reviewer with a desk account (the log
their session was opened on, or one whose admin gave them an account there too; signed in through the
identity provider, every log where they are enrolled: desk/sso.py): the pages list those
logs' reviews, each through that log's own scope (roles, tools, delegations). Nothing is decided here:
a decision goes to the review's own log, through its own desk, and is signed for that log.

The lists are merged in two steps, so that a page reads as many reviews from the logs as it shows: the
sort keys of the first rows of each log (one index walk each), then the page's reviews from their logs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlmodel import col

from signoff.audit.tables import ReviewRow
from signoff.desk import queries, sso
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.logs import Desks
from signoff.desk.scope import Scope


@dataclass(frozen=True)
class Seat:
    """One log where the person reviews: its desk, the person as that log knows them, their scope there."""

    desk: Desk
    who: SignedIn
    scope: Scope

    @property
    def log(self) -> str:
        return str(self.desk.store.log_id)


def seats(desks: Desks, who: SignedIn) -> list[Seat]:
    """The served logs where ``who`` is an enabled reviewer, and (but for the log they signed in on) has a
    desk account its admin made."""
    found = []
    for desk in desks:
        info = desk.svc.reviewer(who.reviewer)
        if info is None or not info.enabled:
            continue
        if desk.accounts.log != who.log and not (who.sso or desk.accounts.has_account(who.reviewer)):
            continue  # (the identity provider vouches for a person on every log; a log's own password, not)
        if who.sso and not sso.still_admitted(desk, who.reviewer, info.roles, who.session, max_age=2.0):
            continue  # not in the IdP groups this log's roles need
        here = replace(who, info=info)
        found.append(Seat(desk, here, desk.scope(here)))
    return found


def seats_now(desks: Desks, who: SignedIn) -> list[Seat]:
    """:func:`seats`, read again once any served log grew (an enrolment, a role, a delegation is an entry)
    or 5 s passed (a delegation also ends by the clock), else from the first log's page cache."""
    sizes = tuple((desk.store.log_id, desk.store.size()) for desk in desks)
    key = ("seats", who.reviewer, who.session, who.log, int(time.monotonic() // 5))
    return desks.default.cache.read_at(key, sizes, lambda: seats(desks, who))


@dataclass(frozen=True)
class Merged:
    """A page of a merged list: the rows, how many in all, and each row's log."""

    items: list[queries.Listed]
    total: int
    log_of: dict[str, str]  # review id -> log id
    info: dict[str, queries.FrontierInfo]
    older: tuple[str, str] | None = None  # (decided_at, id) of the last row, when more are older


def _sort_key(sort: str, row: Any) -> tuple[Any, ...]:
    if sort == "deadline":  # soonest first, the reviews without one last, oldest first
        return (row.deadline is None, row.deadline or "", row.opened_at, row.id)
    return (row.opened_at, row.id)


def queue(mine: Sequence[Seat], *, tool: str | None, agent: str | None, sort: str, page: int, size: int) -> Merged:
    """Page ``page`` of the open reviews the person sees in every log, oldest (or soonest deadline) first."""
    keys: list[tuple[tuple[Any, ...], str, str]] = []
    total = 0
    for seat in mine:
        store = seat.desk.store
        where = queries.pending_where(store, seat.desk.visible(seat.scope), tool, agent)
        order = (
            [col(ReviewRow.deadline).is_(None), col(ReviewRow.deadline), col(ReviewRow.opened_at)]
            if sort == "deadline"
            else [col(ReviewRow.opened_at)]
        )
        with store.read_engine.connect() as conn:
            total += int(conn.execute(select(func.count()).select_from(ReviewRow).where(*where)).scalar_one())
            rows = conn.execute(
                select(col(ReviewRow.id), col(ReviewRow.opened_at), col(ReviewRow.deadline))
                .where(*where)
                .order_by(*order, col(ReviewRow.id))
                .limit(page * size)
            ).all()
        keys += [(_sort_key(sort, row), str(row.id), seat.log) for row in rows]
    keys.sort()
    chosen = keys[(page - 1) * size : page * size]
    return _page(mine, [(review_id, log) for _key, review_id, log in chosen], total, pending=True)


def _page(mine: Sequence[Seat], chosen: list[tuple[str, str]], total: int, *, pending: bool) -> Merged:
    """The chosen reviews, read from their own logs, in the chosen order."""
    by_log: dict[str, list[str]] = {}
    for review_id, log in chosen:
        by_log.setdefault(log, []).append(review_id)
    listed: dict[str, queries.Listed] = {}
    info: dict[str, queries.FrontierInfo] = {}
    for seat in mine:
        ids = by_log.get(seat.log)
        if not ids:
            continue
        rows = queries.rows_of(seat.desk.store, ids)
        items = queries.from_log(seat.desk.store, rows) if pending else queries.listed(seat.desk.store, rows)
        listed.update({item.id: item for item in items})
        info.update(queries.frontiers(seat.desk.store, (item.review.frontier for item in items)))
    items = [listed[review_id] for review_id, _log in chosen if review_id in listed]
    return Merged(items, total, {review_id: log for review_id, log in chosen}, info)


def decided(
    mine: Sequence[Seat], f: queries.HistoryQuery, *, before: tuple[str, str] | None, size: int, count: bool = True
) -> Merged:
    """The decided reviews the person sees in every log, newest decision first, paged by (decided at, id)."""
    keys: list[tuple[str, str, str]] = []
    total = 0
    for seat in mine:
        store = seat.desk.store
        mine_here = replace(f, mine=seat.who.reviewer) if f.mine else f
        where = queries.decided_where(store, seat.desk.visible(seat.scope), mine_here)
        # Along (log, decided_at, id) from its end, past the open reviews' NULLs (revision 0006).
        keyed = [*where, col(ReviewRow.decided_at).is_not(None)]
        if before is not None:
            at, review_id = before
            keyed.append(
                or_(
                    col(ReviewRow.decided_at) < at,
                    and_(col(ReviewRow.decided_at) == at, col(ReviewRow.id) < review_id),
                )
            )
        with store.read_engine.connect() as conn:
            if count:
                total += int(conn.execute(select(func.count()).select_from(ReviewRow).where(*where)).scalar_one())
            rows = conn.execute(
                select(col(ReviewRow.id), col(ReviewRow.decided_at))
                .where(*keyed)
                .order_by(col(ReviewRow.decided_at).desc(), col(ReviewRow.id).desc())
                .limit(size + 1)
            ).all()
        keys += [(str(row.decided_at), str(row.id), seat.log) for row in rows]
    keys.sort(reverse=True)
    more = len(keys) > size
    chosen = keys[:size]
    page = _page(mine, [(review_id, log) for _at, review_id, log in chosen], total, pending=False)
    return replace(page, older=(chosen[-1][0], chosen[-1][1]) if more and chosen else None)


def outcomes(mine: Sequence[Seat], page: Merged) -> dict[str, queries.Outcome]:
    """What happened after each decided review of the page, read from its own log."""
    found: dict[str, queries.Outcome] = {}
    for seat in mine:
        items = [item for item in page.items if page.log_of.get(item.id) == seat.log]
        if items:
            found.update(queries.outcomes(seat.desk.store, items))
    return found


def stalled(mine: Sequence[Seat]) -> list[tuple[Seat, Any]]:
    """Approved calls whose run was resumed but whose tool has not run, in every log, oldest claim first."""
    found = [
        (seat, one)
        for seat in mine
        for one in seat.desk.svc.stalled(seat.desk.stalled_after)
        if seat.scope.sees_review(one.review)
    ]
    return sorted(found, key=lambda pair: pair[1].claim.at)
