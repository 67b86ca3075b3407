"""Sign-in, sign-out and the account page (API tokens and passkeys)."""

from __future__ import annotations

import contextlib
import secrets
from typing import Any, Literal
from urllib.parse import quote, urlparse

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from signoff.audit.errors import AuditError
from signoff.desk import passkeys, signin_links, sso
from signoff.desk.account import account_ctx
from signoff.desk.auth import SignInRefused, token_hash
from signoff.desk.context import Desk
from signoff.desk.csrf import CsrfForm, CsrfReviewer, check_sign_in_form
from signoff.desk.deps import PRE_CSRF_COOKIE, SESSION_COOKIE, DeskDep, DesksDep, PageReviewer
from signoff.desk.logs import Desks
from signoff.desk.web import render, safe_next, secure_cookies

router = APIRouter(include_in_schema=False)

THROTTLED = "Too many failed sign-ins. Wait {seconds} seconds, then try again."
PASSWORDS_OFF = "This desk signs people in through the identity provider only: use the button above."


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
        {
            "error": error,
            "csrf": token,
            "email": email,
            "next": safe_next(nxt),
            "change": change,
            "sso": urlparse(desk.sso.settings.issuer).netloc if desk.sso is not None else None,
            "passwords": desk.passwords,
        },
        status,
    )
    resp.set_cookie(
        PRE_CSRF_COOKIE, token, httponly=True, samesite="strict", secure=secure_cookies(request, desk), path="/"
    )
    return resp


@router.get("/signin")
def signin_form(request: Request, desk: DeskDep, next: str = "/queue") -> HTMLResponse:
    return _signin_page(request, desk, nxt=next)


def _account_desk(desks: Desks, reviewer: str, password: str) -> Desk:
    """The served log whose desk account for ``reviewer`` this password opens (the first, oldest log first);
    raises :class:`SignInRefused` as one log's check does (a person without any account costs a check too)."""
    holding = [one for one in desks if one.accounts.has_account(reviewer)]
    for one in holding:
        try:
            one.accounts.authenticate(reviewer, password)
            return one
        except SignInRefused:
            continue
    if not holding:
        desks.default.accounts.authenticate(reviewer, password)  # spends a real check's time, then refuses
    raise SignInRefused("Wrong e-mail or password.")


@router.post("/signin")
async def signin(request: Request, desk: DeskDep, desks: DesksDep) -> Response:
    form = await request.form()
    check_sign_in_form(request, form)
    if not desk.passwords:
        return _signin_page(request, desk, error=PASSWORDS_OFF, status=403)
    email = str(form.get("email", "")).strip().lower()
    password = str(form.get("password", ""))
    nxt = str(form.get("next", "/queue"))
    reviewer = "human:" + email
    ip = request.client.host if request.client else ""
    throttle = desk.throttle
    wait = await run_in_threadpool(throttle.check, ip, reviewer)
    if wait is not None:
        # Refused without looking at the password: a throttled guess costs nothing and says nothing.
        page = _signin_page(
            request, desk, error=THROTTLED.format(seconds=wait.seconds), status=429, email=email, nxt=nxt
        )
        page.headers["Retry-After"] = str(wait.seconds)
        return page
    try:
        desk = await run_in_threadpool(_account_desk, desks, reviewer, password)
    except SignInRefused as exc:
        await run_in_threadpool(throttle.failed, ip, reviewer)
        return _signin_page(request, desk, error=str(exc), status=401, email=email, nxt=nxt)
    await run_in_threadpool(throttle.succeeded, reviewer)
    info = desk.svc.reviewer(reviewer)
    if info is None or not info.enabled:
        return _signin_page(
            request, desk, error="This reviewer is not enrolled or has been disabled.", status=403, email=email, nxt=nxt
        )
    new = str(form.get("new_password", ""))
    account = desk.accounts.account(reviewer)
    first = account is not None and account.must_change
    if first:
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
    if first and desk.signed_decisions:
        # The initial password was the enrolment code: register a passkey with it now (the page keeps it).
        nxt = "/account?first=1#passkeys"
    return signed_in(request, desk, reviewer, safe_next(nxt))[0]


def signed_in(
    request: Request, desk: Desk, reviewer: str, target: str, *, samesite: Literal["lax", "strict"] = "strict"
) -> tuple[Response, str]:
    """A new session for ``reviewer`` (its cookie set, the sign-in form's token dropped), then ``target``;
    and the cookie. ``samesite="lax"`` where the sign-in ends in a cross-site redirect (desk/sso.py)."""
    cookie, _csrf = desk.accounts.open_session(reviewer)
    resp = RedirectResponse(target, status_code=303)
    resp.set_cookie(
        SESSION_COOKIE,
        cookie,
        httponly=True,
        samesite=samesite,
        secure=secure_cookies(request, desk),
        path="/",
        max_age=12 * 3600,
    )
    resp.delete_cookie(PRE_CSRF_COOKIE, path="/")
    return resp, cookie


# -- one-time sign-in links (desk/signin_links.py) -------------------------------------------------


def _link_page(request: Request, desk: Desk, token: str, *, status: int = 200) -> HTMLResponse:
    """ "Sign in as … and open …?": the link's confirmation, with a form that uses it (a POST: a link scanner
    that fetches the URL signs nobody in)."""
    found = signin_links.peek(desk.accounts.engine, desk.store.log_id, token)
    ctx: dict[str, Any] = {"found": found, "review": "", "tool": "", "agent": ""}
    if found is not None:
        with contextlib.suppress(AuditError):
            review = desk.svc.get(found.review)
            ctx.update(tool=review.call.tool, agent=review.call.agent)
    pre = request.cookies.get(PRE_CSRF_COOKIE) or secrets.token_urlsafe(32)
    ctx.update(csrf=pre, action=signin_links.PATH + quote(token, safe=""), me=None)
    resp = render(request, "signin_link.html", ctx, status if found is not None else 410)
    resp.set_cookie(
        PRE_CSRF_COOKIE, pre, httponly=True, samesite="strict", secure=secure_cookies(request, desk), path="/"
    )
    return resp


def _link_desk(desks: Desks, token: str) -> Desk:
    """The served log a sign-in link was made for (the first log's desk when none: it answers "used up")."""
    if desks.many:
        for one in desks:
            if signin_links.peek(one.accounts.engine, one.store.log_id, token) is not None:
                return one
    return desks.default


@router.get("/signin/link/{token}")
def signin_link(request: Request, desks: DesksDep, token: str) -> HTMLResponse:
    return _link_page(request, _link_desk(desks, token), token)


@router.post("/signin/link/{token}")
async def use_signin_link(request: Request, desks: DesksDep, token: str) -> Response:
    """Use the link up (once), sign its reviewer in, and open its review."""
    form = await request.form()
    check_sign_in_form(request, form)
    desk = await run_in_threadpool(_link_desk, desks, token)
    if not desk.passwords:  # a link stands in for a password: off with them, or it would pass the provider by
        return _signin_page(request, desk, error=PASSWORDS_OFF, status=403)
    found = await run_in_threadpool(signin_links.use, desk.accounts.engine, desk.store.log_id, token)
    if found is None:
        return _link_page(request, desk, token)
    info = desk.svc.reviewer(found.reviewer)
    if info is None or not info.enabled:
        return _signin_page(request, desk, error="This reviewer is not enrolled or has been disabled.", status=403)
    return signed_in(request, desk, found.reviewer, f"/reviews/{quote(found.review, safe='')}")[0]


@router.post("/signout")
def signout(request: Request, desk: DeskDep, desks: DesksDep, form: CsrfForm) -> Response:
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        desk.accounts.close_session(token)
        sso.forget(desk.accounts.engine, token_hash(token))
        for one in desks:  # this tab's live updates (of every log it listens to) end now, not at the next check
            one.broker.end(session=token_hash(token))
    resp = RedirectResponse("/signin", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


# -- account ------------------------------------------------------------------------------


@router.get("/account")
def account(
    request: Request,
    desk: DeskDep,
    who: PageReviewer,
    first: str = "",
    registered: str = "",
    delegated: str = "",
    revoked: str = "",
) -> HTMLResponse:
    ctx = account_ctx(request, desk, who, first=bool(first), registered=registered)
    return render(request, "account.html", {**ctx, "delegated": delegated[:40], "revoked": bool(revoked)})


@router.post("/account/tokens")
def new_token(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm) -> HTMLResponse:
    token = desk.accounts.new_token(who.reviewer, str(form.get("label", ""))[:100])
    return render(request, "account.html", account_ctx(request, desk, who, new_token=token))


# -- passkeys (the page's script: desk/static/desk.js) -------------------------------------------


class PasskeyOptionsIn(BaseModel):
    code: str = Field(max_length=200, description="the one-time enrolment code from the administrator")


class PasskeyIn(PasskeyOptionsIn):
    credential: dict[str, Any] = Field(description="the navigator.credentials.create() response, base64url fields")


def _refused(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail, "recorded": False}, status_code=status)


CODE_REFUSED = (
    "That enrolment code does not open a passkey registration for you: it is not the code your administrator "
    "gave you, or it was used already (one code, one passkey). Ask for a new one (desk reviewer reset)."
)


@router.post("/account/passkeys/options")
def passkey_options(request: Request, desk: DeskDep, who: CsrfReviewer, body: PasskeyOptionsIn) -> JSONResponse:
    """Step 1: check the code against the log's commitment, then the creation options (WebAuthn §5.4)."""
    if not passkeys.code_is_live(desk.store, who.reviewer, body.code.strip()):
        return _refused(403, CODE_REFUSED)
    rp = passkeys.relying_party(request, desk.rp_id, desk.origin)
    existing = passkeys.passkeys_of(desk.svc.keys(who.reviewer))
    try:
        options = passkeys.begin_registration(desk.accounts.engine, rp, desk.store.log_id, who.reviewer, existing)
    except passkeys.RegistrationFailed as exc:
        return _refused(400, str(exc))
    return JSONResponse({"publicKey": options})


@router.post("/account/passkeys")
def passkey_register(request: Request, desk: DeskDep, who: CsrfReviewer, body: PasskeyIn) -> JSONResponse:
    """Step 2: verify the new credential and enroll it on the log with the code (``key.enrolled``)."""
    rp = passkeys.relying_party(request, desk.rp_id, desk.origin)
    try:
        passkey = passkeys.complete_registration(
            desk.accounts.engine, rp, desk.store.log_id, who.reviewer, body.credential
        )
    except passkeys.RegistrationFailed as exc:
        return _refused(400, str(exc))
    try:
        entry = desk.svc.enroll_passkey(who.reviewer, passkey, code=body.code.strip())
    except AuditError as exc:
        return _refused(403, f"The log refused the passkey; nothing was recorded: {exc}")
    return JSONResponse(
        {"fingerprint": passkey.fingerprint, "alg": passkey.algorithm, "rp_id": passkey.rp_id, "seq": entry.seq},
        status_code=201,
    )
