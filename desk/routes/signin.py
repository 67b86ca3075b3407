"""Sign-in, sign-out and the account page (API tokens)."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from signoff.desk.auth import SignInRefused
from signoff.desk.context import Desk
from signoff.desk.csrf import CsrfForm, check_sign_in_form
from signoff.desk.deps import PRE_CSRF_COOKIE, SESSION_COOKIE, DeskDep, PageReviewer
from signoff.desk.web import me, render, safe_next, secure_cookies

router = APIRouter(include_in_schema=False)


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/queue", status_code=303)


def _signin_page(
    request: Request,
    desk: Desk,
    *,
    error: str = "",
    status: int = 200,
    email: str = "",
    nxt: str = "/queue",
    change: bool = False,
) -> HTMLResponse:
    token = request.cookies.get(PRE_CSRF_COOKIE) or secrets.token_urlsafe(32)
    resp = render(
        request,
        "signin.html",
        {"error": error, "csrf": token, "email": email, "next": safe_next(nxt), "change": change},
        status,
    )
    resp.set_cookie(
        PRE_CSRF_COOKIE, token, httponly=True, samesite="strict", secure=secure_cookies(request, desk), path="/"
    )
    return resp


@router.get("/signin")
def signin_form(request: Request, desk: DeskDep, next: str = "/queue") -> HTMLResponse:
    return _signin_page(request, desk, nxt=next)


@router.post("/signin")
async def signin(request: Request, desk: DeskDep) -> Response:
    form = await request.form()
    check_sign_in_form(request, form)
    email = str(form.get("email", "")).strip().lower()
    password = str(form.get("password", ""))
    nxt = str(form.get("next", "/queue"))
    reviewer = "human:" + email
    try:
        await run_in_threadpool(desk.accounts.authenticate, reviewer, password)
    except SignInRefused as exc:
        return _signin_page(request, desk, error=str(exc), status=429 if exc.locked else 401, email=email, nxt=nxt)
    info = desk.svc.reviewer(reviewer)
    if info is None or not info.enabled:
        return _signin_page(
            request, desk, error="This reviewer is not enrolled or has been disabled.", status=403, email=email, nxt=nxt
        )
    new = str(form.get("new_password", ""))
    account = desk.accounts.account(reviewer)
    if account is not None and account.must_change:
        if not new:
            return _signin_page(
                request,
                desk,
                email=email,
                nxt=nxt,
                change=True,
                error="" if not form.get("change") else "Choose a new password.",
            )
        if len(new) < 10 or new == password:
            return _signin_page(
                request,
                desk,
                email=email,
                nxt=nxt,
                change=True,
                status=422,
                error="The new password needs at least 10 characters and must differ from the initial one.",
            )
        await run_in_threadpool(desk.accounts.set_password, reviewer, new, must_change=False)
    cookie, _csrf = desk.accounts.open_session(reviewer)
    resp = RedirectResponse(safe_next(nxt), status_code=303)
    resp.set_cookie(
        SESSION_COOKIE,
        cookie,
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request, desk),
        path="/",
        max_age=12 * 3600,
    )
    resp.delete_cookie(PRE_CSRF_COOKIE, path="/")
    return resp


@router.post("/signout")
def signout(request: Request, desk: DeskDep, form: CsrfForm) -> Response:
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        desk.accounts.close_session(token)
    resp = RedirectResponse("/signin", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


# -- account ------------------------------------------------------------------------------


@router.get("/account")
def account(request: Request, desk: DeskDep, who: PageReviewer) -> HTMLResponse:
    return render(
        request,
        "account.html",
        {
            "me": me(desk, who),
            "csrf": who.csrf,
            "nav": "account",
            "tokens": desk.accounts.tokens(who.reviewer),
            "new_token": None,
        },
    )


@router.post("/account/tokens")
def new_token(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm) -> HTMLResponse:
    token = desk.accounts.new_token(who.reviewer, str(form.get("label", ""))[:100])
    return render(
        request,
        "account.html",
        {
            "me": me(desk, who),
            "csrf": who.csrf,
            "nav": "account",
            "tokens": desk.accounts.tokens(who.reviewer),
            "new_token": token,
        },
    )
