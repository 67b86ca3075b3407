"""FastAPI dependencies, as ``Annotated`` aliases so routes stay a few lines long."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk

SESSION_COOKIE = "desk_session"
PRE_CSRF_COOKIE = "desk_csrf"


async def get_desk(request: Request) -> Desk:
    # async: no I/O here, and a sync dependency would cost a thread-pool hop per request
    desk: Desk = request.app.state.desk
    return desk


DeskDep = Annotated[Desk, Depends(get_desk)]


async def get_svc(desk: DeskDep) -> Any:
    return desk.svc


ServiceDep = Annotated[Any, Depends(get_svc)]

_bearer = HTTPBearer(
    auto_error=False, description="Per-reviewer API token (desk account page or `desk reviewer token`)."
)


def _token_reviewer(desk: Desk, token: str) -> SignedIn:
    who = desk.accounts.token(token)
    if who is None:
        raise HTTPException(401, "Unknown or revoked API token.", headers={"WWW-Authenticate": "Bearer"})
    info = desk.svc.reviewer(who.reviewer)
    if info is None or not info.enabled:
        raise HTTPException(403, "This reviewer is not enrolled or has been disabled.")
    return replace(who, info=info)


async def api_reviewer(
    desk: DeskDep, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> SignedIn:
    """The reviewer behind the bearer token, checked on every request (a revoked token or a
    disabled reviewer is refused at once)."""
    if creds is None or creds.scheme.lower() != "bearer":
        raise HTTPException(
            401, "An API token is required (Authorization: Bearer …).", headers={"WWW-Authenticate": "Bearer"}
        )
    if desk.store.backend == "sqlite":
        # Two indexed reads of a local WAL file (~0.1 ms, never blocked by a writer) cost
        # less than the thread-pool hop a sync dependency takes on every API request.
        return _token_reviewer(desk, creds.credentials)
    return await run_in_threadpool(_token_reviewer, desk, creds.credentials)


ApiReviewer = Annotated[SignedIn, Depends(api_reviewer)]


class NeedSignIn(Exception):
    pass


def page_reviewer(request: Request, desk: DeskDep) -> SignedIn:
    token = request.cookies.get(SESSION_COOKIE)
    who = desk.accounts.session(token) if token else None
    if who is None:
        raise NeedSignIn()
    info = desk.svc.reviewer(who.reviewer)
    if info is None or not info.enabled:
        desk.accounts.close_session(token or "")
        raise NeedSignIn()
    return replace(who, info=info)


PageReviewer = Annotated[SignedIn, Depends(page_reviewer)]
