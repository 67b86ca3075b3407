"""FastAPI dependencies, as ``Annotated`` aliases so routes stay a few lines long."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from signoff.desk import sso
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.logs import Desks

SESSION_COOKIE = "desk_session"
PRE_CSRF_COOKIE = "desk_csrf"


async def get_desks(request: Request) -> Desks:
    desks: Desks = request.app.state.desks
    return desks


DesksDep = Annotated[Desks, Depends(get_desks)]


async def get_desk(request: Request, desks: DesksDep) -> Desk:
    """The log this request is about (desk/logs.py): the one holding the review it names, or the one its
    ``log`` parameter names, or the one its session (or API token) was opened on; else the first."""
    # async: with one log no I/O at all, and a sync dependency would cost a thread-pool hop per request
    if not desks.many:
        return desks.default
    if desks.default.store.backend == "sqlite":  # indexed reads of a local WAL file: cheaper than a hop
        return _which(desks, request)
    return await run_in_threadpool(_which, desks, request)


def _which(desks: Desks, request: Request) -> Desk:
    review_id = request.path_params.get("review_id")
    if review_id:  # a review no served log holds: the first log's desk answers "no such review"
        return desks.for_review(str(review_id)) or desks.default
    named = request.query_params.get("log")
    if named:
        found = desks.get(named)
        if found is None:
            raise HTTPException(404, f"This desk serves no log {named!r}.")
        return found
    accounts = desks.default.accounts
    cookie = request.cookies.get(SESSION_COOKIE)
    log = accounts.session_log(cookie) if cookie else None
    if log is None:
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            log = accounts.token_log(bearer[7:].strip())
    return (desks.get(log) if log else None) or desks.default


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
    """The person signed in, as the request's log knows them. On a desk serving several logs a session
    opened on one log serves the others where the person is an enabled reviewer with a desk account, or
    any where they are enrolled when the identity provider vouched for them (desk/across.py); elsewhere
    the page answers as for a review they may not see."""
    token = request.cookies.get(SESSION_COOKIE)
    who = desk.accounts.session(token, any_log=True) if token else None
    if who is None:
        raise NeedSignIn()
    info = desk.svc.reviewer(who.reviewer)
    if desk.sso is not None and sso.of_session(desk.accounts.engine, who.session) is not None:
        who = replace(who, sso=True)
    here = who.log == desk.accounts.log
    if here and (info is None or not info.enabled):
        desk.accounts.close_session(token or "")
        raise NeedSignIn()
    if not here and (info is None or not info.enabled or not (who.sso or desk.accounts.has_account(who.reviewer))):
        from signoff.desk.web import Refused

        raise Refused(404, "Not here", "You are not a reviewer on the log this page is about.")
    if desk.sso is not None and not sso.still_admitted(desk, who.reviewer, info.roles if info else (), who.session):
        # The identity provider disabled them, or took them out of a group a role needs: from this request on.
        sso.forget(desk.accounts.engine, who.session)
        desk.accounts.close_session(token or "")
        raise NeedSignIn()
    return replace(who, info=info)


PageReviewer = Annotated[SignedIn, Depends(page_reviewer)]
