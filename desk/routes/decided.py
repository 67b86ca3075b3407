"""The Decided view: every decision the reader may see, newest first, with filters and search.

Filters: mine, tool, agent, outcome and a date range; search by a review id (or its start, as
lists show it), a session id or a frontier id. Paged by decision seq (keyset), so the 200th page
costs what the first does; the queries are in desk/queries.py.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from signoff.desk import queries
from signoff.desk.deps import DeskDep, PageReviewer
from signoff.desk.routes.reviews import suggestions
from signoff.desk.web import PAGE_SIZE, me, render

router = APIRouter(include_in_schema=False)


@router.get("/decided")
def decided_page(
    request: Request,
    desk: DeskDep,
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
    visible = desk.visible(scope)
    page = desk.cache.read(
        ("decided", scope, f, before, after),
        lambda: queries.decided(desk.store, visible, f, before=before, after=after, limit=PAGE_SIZE),
    )
    done = desk.cache.read(
        ("decided-outcomes", scope, f, before, after), lambda: queries.outcomes(desk.store, page.items)
    )
    params = f.params()
    return render(
        request,
        "decided.html",
        {
            "me": me(desk, who),
            "csrf": who.csrf,
            "nav": "decided",
            "page": page,
            "outcomes": done,
            "f": f,
            "mine": bool(mine),
            "filtered": bool(params),
            "older_url": f"/decided?{urlencode({**params, 'before': page.older})}" if page.older is not None else None,
            "newer_url": f"/decided?{urlencode({**params, 'after': page.newer})}" if page.newer is not None else None,
            "outcome_names": queries.OUTCOME_NAMES,
            **suggestions(desk, scope),
        },
    )
