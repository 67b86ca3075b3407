"""The lists a reviewer works from: the queue, its "Just decided" panel, the live updates (SSE) and the
approved calls not yet run, on a desk serving one log or several (desk/across.py, desk/across_stream.py).

One review's page and its decisions are in desk/routes/reviews.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from signoff.audit.entry import format_time
from signoff.desk import across, queries, quorum, reveal, sso
from signoff.desk import summary as summaries
from signoff.desk.across_stream import format_after, merged, parse_after
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.deps import DeskDep, DesksDep, PageReviewer
from signoff.desk.logs import Desks
from signoff.desk.scope import Scope
from signoff.desk.web import PAGE_SIZE, me, render

router = APIRouter(include_in_schema=False)
SSO_EVERY = 2.0  # seconds between an event stream's checks with the identity provider


# -- the queue ----------------------------------------------------------------------------------


def _queue_ctx(desk: Desk, who: SignedIn, scope: Scope) -> dict[str, Any]:
    def stalled() -> int:
        return sum(1 for s in desk.svc.stalled(desk.stalled_after) if scope.sees_review(s.review))

    return {
        "recent": recent_items(desk, scope),
        # "Not yet run" depends on the clock anyway: counted again every 10 s at most (sooner when
        # the desk calls a call stalled sooner).
        "stalled": desk.cache.read_for(("stalled", scope), min(10.0, desk.stalled_after), stalled),
        **suggestions(desk, scope),
        "scope": scope,
    }


def suggestions(desk: Desk, scope: Scope) -> dict[str, list[str]]:
    """The tool and agent names a filter suggests (at most a minute old)."""
    visible = desk.visible(scope)
    return {
        "tools": sorted(t for t, roles in desk.tool_roles.refresh().items() if scope.sees(t, roles)),
        "agents": desk.cache.read_for(("agents", scope), 60.0, lambda: queries.distinct(desk.store, "agent", visible)),
    }


def suggestions_across(mine: list[across.Seat]) -> dict[str, list[str]]:
    """The tool and agent names a filter suggests, in every log where the person reviews."""
    lists = [suggestions(seat.desk, seat.scope) for seat in mine]
    return {key: sorted({name for one in lists for name in one[key]}) for key in ("tools", "agents")}


def recent_items(desk: Desk, scope: Scope) -> list[dict[str, Any]]:
    """The "Just decided" panel: the latest decisions the reader sees, and what happened after each."""

    def load() -> list[dict[str, Any]]:
        items = queries.recent(desk.store, desk.visible(scope))
        done = queries.outcomes(desk.store, items)
        return [{"item": i, "outcome": done.get(i.id, queries.Outcome())} for i in items]

    return desk.cache.read(("recent", scope), load)


@router.get("/queue")
def queue(
    request: Request,
    desk: DeskDep,
    desks: DesksDep,
    who: PageReviewer,
    tool: str = "",
    agent: str = "",
    sort: str = "oldest",
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    sort = sort if sort in queries.SORTS else "oldest"
    t, a = tool.strip() or None, agent.strip() or None
    if desks.many:
        load, ctx = _across(desk, desks, who, t, a, sort)
    else:
        load, ctx = _one_log(desk, who, t, a, sort)
    found = load(page)
    pages = max(1, (found.total + PAGE_SIZE - 1) // PAGE_SIZE)
    if page > pages:
        page = pages
        found = load(page)
    return render(
        request,
        "queue.html",
        {
            "me": me(desk, who),
            "csrf": who.csrf,
            "nav": "queue",
            "coord": {
                i.id: {
                    "progress": quorum.progress(i.review, who.reviewer),
                    "claim": quorum.active_claim(i.review, who.reviewer),
                }
                for i in found.items
            },
            "groups": queries.grouped(found.items, found.info),
            "log_of": found.log_of,
            "items": found.items,
            "total": found.total,
            "page": page,
            "pages": pages,
            "tool": tool,
            "agent": agent,
            "sort": sort,
            "page_size": PAGE_SIZE,
            **ctx,
        },
    )


Loader = Callable[[int], across.Merged]


def _one_log(desk: Desk, who: SignedIn, t: str | None, a: str | None, sort: str) -> tuple[Loader, dict[str, Any]]:
    """The queue of a desk serving one log: a page loader (cached until the log grows) and the page's context."""
    size = desk.store.size()  # before reading: the page's live updates start from here
    scope = desk.scope(who)

    def read(page: int) -> across.Merged:
        items, total = queries.pending(
            desk.store, desk.visible(scope), tool=t, agent=a, sort=sort, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE
        )
        return across.Merged(items, total, {}, queries.frontiers(desk.store, (i.review.frontier for i in items)))

    def load(page: int) -> across.Merged:
        return desk.cache.read(("queue", scope, t, a, sort, page), lambda: read(page))

    return load, {"log_size": size, **_queue_ctx(desk, who, scope)}


def _across(
    desk: Desk, desks: Desks, who: SignedIn, t: str | None, a: str | None, sort: str
) -> tuple[Loader, dict[str, Any]]:
    """The queue of a desk serving several logs: every log where the person reviews, each row naming its log;
    a page is cached until one of its logs grows (desk/cache.py)."""
    mine = across.seats_now(desks, who)
    sizes = {seat.log: seat.desk.store.size() for seat in mine}  # before reading, as for one log
    at = tuple(sizes.items())
    scopes = tuple((seat.log, seat.scope) for seat in mine)

    def load(page: int) -> across.Merged:
        return desk.cache.read_at(
            ("queue-across", scopes, t, a, sort, page),
            at,
            lambda: across.queue(mine, tool=t, agent=a, sort=sort, page=page, size=PAGE_SIZE),
        )

    def stalled() -> int:
        return len(across.stalled(mine))

    return load, {
        "log_size": format_after(sizes),
        "logs": {seat.log: desks.label(seat.log) for seat in mine},
        "recent": desk.cache.read_at(("recent-across", scopes), at, lambda: _recent_across(mine)),
        "stalled": desk.cache.read_for(("stalled-across", scopes), min(10.0, desk.stalled_after), stalled),
        **suggestions_across(mine),
        "scope": desk.scope(who),
    }


def _recent_across(mine: list[across.Seat]) -> list[dict[str, Any]]:
    page = across.decided(mine, queries.HistoryQuery(), before=None, size=6, count=False)
    done = across.outcomes(mine, page)
    return [{"item": i, "outcome": done.get(i.id, queries.Outcome()), "log": page.log_of.get(i.id)} for i in page.items]


@router.get("/queue/recent")
def queue_recent(request: Request, desk: DeskDep, desks: DesksDep, who: PageReviewer) -> HTMLResponse:
    """The "Just decided" panel alone, for the queue page to refresh live."""
    if desks.many:
        mine = across.seats_now(desks, who)
        logs = {seat.log: desks.label(seat.log) for seat in mine}
        return render(request, "_recent.html", {"recent": _recent_across(mine), "logs": logs})
    return render(request, "_recent.html", {"recent": recent_items(desk, desk.scope(who))})


def _alive(desk: Desk, who: SignedIn, scope: Scope) -> Any:
    """Whether ``who``'s stream of ``desk``'s log may go on: their session open, and they an enabled
    reviewer there whose delegation (if that is what they see it through) has not ended."""

    def alive() -> bool:
        info = desk.svc.reviewer(who.reviewer)
        ended = scope.lent_until is not None and format_time(desk.store.clock()) >= scope.lent_until
        if info is None or not info.enabled or ended or not desk.accounts.session_alive(who.session, any_log=True):
            return False
        # Through single sign-on: the provider still answers for them, in their roles' groups (asked every 2 s).
        return sso.still_admitted(desk, who.reviewer, info.roles, who.session, max_age=SSO_EVERY)

    return alive


@router.get("/events")
async def events(
    request: Request, desk: DeskDep, desks: DesksDep, who: PageReviewer, after: str | None = None
) -> StreamingResponse:
    """Live updates for this reviewer (desk/sse.py); ``after``: the log size the page was rendered at.
    On a desk serving several logs, the queue's stream spans every log where the person reviews, and
    ``after`` holds one size per log (desk/across_stream.py); ``?log=ID`` streams that log alone."""
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    if desks.many and "log" not in request.query_params:
        mine = await asyncio.to_thread(across.seats, desks, who)
        sizes = parse_after(after)
        streams = [
            seat.desk.broker.stream(
                scope=seat.scope,
                session=who.session,
                alive=_alive(seat.desk, seat.who, seat.scope),
                after=sizes.get(seat.log),
                log=seat.log,
            )
            for seat in mine
        ]
        return StreamingResponse(merged(streams), media_type="text/event-stream", headers=headers)
    scope = desk.scope(who)
    size = int(after) if after and after.isdigit() else None
    return StreamingResponse(
        desk.broker.stream(scope=scope, session=who.session, alive=_alive(desk, who, scope), after=size),
        media_type="text/event-stream",
        headers=headers,
    )


# -- approved, not yet run ------------------------------------------------------------------------


@router.get("/stalled")
def stalled_page(request: Request, desk: DeskDep, desks: DesksDep, who: PageReviewer) -> HTMLResponse:
    """Approved calls whose run was resumed but whose tool has not run (``ReviewService.stalled``), in every
    log where the person reviews."""
    if desks.many:
        found = [(seat.log, s) for seat, s in across.stalled(across.seats_now(desks, who))]
        logs = {log: desks.label(log) for log, _s in found}
    else:
        scope = desk.scope(who)
        found = [(desk.store.log_id, s) for s in desk.svc.stalled(desk.stalled_after) if scope.sees_review(s.review)]
        logs = {}
    rows = [
        {"review": r, "summary": summaries.of_review(r), "claim": s.claim, "since": s.claim.at, "log": log}
        for log, s in found
        for r in (reveal.shown(s.review),)
    ]
    return render(
        request,
        "stalled.html",
        {
            "me": me(desk, who),
            "csrf": who.csrf,
            "nav": "stalled",
            "rows": rows,
            "after": int(desk.stalled_after),
            "logs": logs,
        },
    )
