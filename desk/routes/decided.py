"""The Decided view: every decision the reader may see, newest first, with filters and search.

Filters: mine, tool, agent, outcome and a date range; search by a review id (or its start, as
lists show it), a session id or a frontier id. Paged by decision seq (keyset), so the 200th page
costs what the first does; the queries are in desk/queries.py.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from signoff.desk import across, queries
from signoff.desk.auth import SignedIn
from signoff.desk.deps import DeskDep, DesksDep, PageReviewer
from signoff.desk.logs import Desks
from signoff.desk.routes.queue import suggestions, suggestions_across
from signoff.desk.web import PAGE_SIZE, me, render

router = APIRouter(include_in_schema=False)


@router.get("/decided")
def decided_page(
    request: Request,
    desk: DeskDep,
    desks: DesksDep,
    who: PageReviewer,
    mine: str = "",
    tool: str = "",
    agent: str = "",
    outcome: str = "",
    since: str = "",
    until: str = "",
    q: str = "",
    before: Annotated[int | None, Query(ge=0)] = None,
    after: Annotated[int | None, Query(ge=0)] = None,
    before_at: str = "",
    before_id: str = "",
) -> HTMLResponse:
    scope = desk.scope(who)
    f = queries.HistoryQuery(
        mine=who.reviewer if mine else "",
        tool=tool.strip(),
        agent=agent.strip(),
        outcome=outcome if outcome in queries.OUTCOME_NAMES else "",
        since=since if queries.day(since) else "",
        until=until if queries.day(until) else "",
        q=q.strip(),
    )
    params = f.params()
    if desks.many:
        ctx = _across(desks, who, f, (before_at, before_id) if before_at else None)
    else:
        visible = desk.visible(scope)
        page = desk.cache.read(
            ("decided", scope, f, before, after),
            lambda: queries.decided(desk.store, visible, f, before=before, after=after, limit=PAGE_SIZE),
        )
        ctx = {
            "page": page,
            "outcomes": desk.cache.read(
                ("decided-outcomes", scope, f, before, after), lambda: queries.outcomes(desk.store, page.items)
            ),
            "older_url": f"/decided?{urlencode({**params, 'before': page.older})}" if page.older is not None else None,
            "newer_url": f"/decided?{urlencode({**params, 'after': page.newer})}" if page.newer is not None else None,
            **suggestions(desk, scope),
        }
    return render(
        request,
        "decided.html",
        {
            "me": me(desk, who),
            "csrf": who.csrf,
            "nav": "decided",
            "f": f,
            "mine": bool(mine),
            "filtered": bool(params),
            "outcome_names": queries.OUTCOME_NAMES,
            **ctx,
        },
    )


def _across(desks: Desks, who: SignedIn, f: queries.HistoryQuery, before: tuple[str, str] | None) -> dict[str, Any]:
    """Decided, on a desk serving several logs: every log where the person reviews, newest decision first,
    paged by (decided at, review id) across the logs; each row names its log."""
    mine = across.seats_now(desks, who)
    page = across.decided(mine, f, before=before, size=PAGE_SIZE)
    params = f.params()
    older = {**params, "before_at": page.older[0], "before_id": page.older[1]} if page.older else None
    return {
        "page": page,
        "outcomes": across.outcomes(mine, page),
        "older_url": f"/decided?{urlencode(older)}" if older else None,
        "newer_url": f"/decided?{urlencode(params)}" if before is not None else None,  # back to the newest
        "log_of": page.log_of,
        "logs": {seat.log: desks.label(seat.log) for seat in mine},
        **suggestions_across(mine),
    }
