"""HTML pages: sign-in, queue, one review, log, account.

Every POST form carries a CSRF token (synchronizer token bound to the session; the
sign-in form uses a double-submit cookie because there is no session yet). A POST without
a valid token gets 403 and nothing happens.
"""

from __future__ import annotations

import json
import secrets
from typing import Annotated, Any
from urllib.parse import quote

import jsonpatch
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.datastructures import FormData

from audit.errors import AuditError, UnknownReview
from desk.app import Desk
from desk.auth import SignedIn, SignInRefused, same
from desk.deps import PRE_CSRF_COOKIE, SESSION_COOKIE, DeskDep, PageReviewer
from desk.errors import classify
from desk.models import as_json
from desk.routes import decide

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50
MAX_PAGE = 200


class Refused(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        self.status = status
        self.title = title
        self.message = message


def _secure(request: Request, desk: Desk) -> bool:
    if desk.secure_cookies is not None:
        return desk.secure_cookies
    return request.url.scheme == "https"


def to_sign_in(request: Request) -> Response:
    if request.url.path == "/events":
        return Response("sign in first", status_code=401)
    nxt = request.url.path if request.method == "GET" else "/queue"
    return RedirectResponse(f"/signin?next={quote(nxt)}", status_code=303)


def render(request: Request, name: str, ctx: dict[str, Any], status: int = 200) -> HTMLResponse:
    desk: Desk = request.app.state.desk
    ctx.setdefault("me", None)
    ctx.setdefault("csrf", "")
    ctx.setdefault("nav", "")
    return desk.templates.TemplateResponse(request, name, ctx, status_code=status)


def refusal_page(request: Request, exc: Refused) -> HTMLResponse:
    return render(request, "error.html", {"title": exc.title, "message": exc.message}, exc.status)


async def checked_form(request: Request, who: PageReviewer) -> FormData:
    form = await request.form()
    token = form.get("csrf")
    if not isinstance(token, str) or not same(token, who.csrf):
        raise Refused(
            403,
            "Form refused",
            "This form was missing its security token (CSRF). Nothing was done. Reload the page and try again.",
        )
    return form


CsrfForm = Annotated[FormData, Depends(checked_form)]


def _safe_next(value: str | None) -> str:
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/queue"


# -- sign-in ------------------------------------------------------------------------------


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
        {"error": error, "csrf": token, "email": email, "next": _safe_next(nxt), "change": change},
        status,
    )
    resp.set_cookie(PRE_CSRF_COOKIE, token, httponly=True, samesite="strict", secure=_secure(request, desk), path="/")
    return resp


@router.get("/signin")
def signin_form(request: Request, desk: DeskDep, next: str = "/queue") -> HTMLResponse:
    return _signin_page(request, desk, nxt=next)


@router.post("/signin")
async def signin(request: Request, desk: DeskDep) -> Response:
    form = await request.form()
    token = form.get("csrf")
    if not isinstance(token, str) or not same(token, request.cookies.get(PRE_CSRF_COOKIE, "")):
        raise Refused(403, "Form refused", "The sign-in form was missing its security token. Reload and try again.")
    email = str(form.get("email", "")).strip().lower()
    password = str(form.get("password", ""))
    nxt = str(form.get("next", "/queue"))
    reviewer = "human:" + email
    try:
        await _run(desk.accounts.authenticate, reviewer, password)
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
        await _run(desk.accounts.set_password, reviewer, new, must_change=False)
    cookie, _csrf = desk.accounts.open_session(reviewer)
    resp = RedirectResponse(_safe_next(nxt), status_code=303)
    resp.set_cookie(
        SESSION_COOKIE,
        cookie,
        httponly=True,
        samesite="strict",
        secure=_secure(request, desk),
        path="/",
        max_age=12 * 3600,
    )
    resp.delete_cookie(PRE_CSRF_COOKIE, path="/")
    return resp


async def _run(fn: Any, *args: Any, **kw: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn, *args, **kw)


@router.post("/signout")
def signout(request: Request, desk: DeskDep, form: CsrfForm) -> Response:
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        desk.accounts.close_session(token)
    resp = RedirectResponse("/signin", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


# -- queue --------------------------------------------------------------------------------


def _me(desk: Desk, who: SignedIn) -> dict[str, Any]:
    info = who.info if who.info is not None else desk.svc.reviewer(who.reviewer)
    return {"id": who.reviewer, "roles": list(info.roles) if info else [], "tools": list(info.tools) if info else []}


@router.get("/queue")
def queue(
    request: Request,
    desk: DeskDep,
    who: PageReviewer,
    tool: str = "",
    agent: str = "",
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    t, a = tool.strip() or None, agent.strip() or None
    total = desk.svc.count_pending(tool=t, agent=a)
    pages = max(1, (total + PAGE_SIZE - 1) // PAGE_SIZE)
    page = min(page, pages)
    items = desk.svc.pending(tool=t, agent=a, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    return render(
        request,
        "queue.html",
        {
            "me": _me(desk, who),
            "csrf": who.csrf,
            "nav": "queue",
            "items": items,
            "total": total,
            "page": page,
            "pages": pages,
            "tool": tool,
            "agent": agent,
            "page_size": PAGE_SIZE,
            "first": page == 1,
        },
    )


@router.get("/events")
async def events(request: Request, desk: DeskDep, who: PageReviewer) -> StreamingResponse:
    return StreamingResponse(
        desk.broker.stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


# -- one review ---------------------------------------------------------------------------


def _review_ctx(desk: Desk, who: SignedIn, review_id: str) -> dict[str, Any]:
    try:
        review = desk.svc.get(review_id)
    except UnknownReview:
        raise Refused(404, "No such review", "There is no review with this id.") from None
    frontier = desk.svc.frontier(review.frontier)
    others = [r for r in frontier.reviews if r.id != review.id]
    can = desk.svc.can_decide(who.reviewer, review)
    call = review.call
    return {
        "me": _me(desk, who),
        "csrf": who.csrf,
        "nav": "queue",
        "r": review,
        "call": call,
        "others": others,
        "can_decide": can,
        "history": desk.svc.history(review.id),
        "data": {
            "id": review.id,
            "args": call.args,
            "schema": call.tool_schema,
            "payload": call.payload,
            "deadline": review.deadline.isoformat() if review.deadline else None,
        },
    }


@router.get("/reviews/{review_id}")
def review_page(request: Request, desk: DeskDep, who: PageReviewer, review_id: str, done: str = "") -> HTMLResponse:
    ctx = _review_ctx(desk, who, review_id)
    ctx["done"] = done
    return render(request, "review.html", ctx)


def _decision_failed(
    request: Request, desk: Desk, who: SignedIn, review_id: str, exc: Exception, form: FormData
) -> HTMLResponse:
    status, summary = classify(exc)
    ctx = _review_ctx(desk, who, review_id)
    ctx.update({"error": summary, "error_detail": str(exc), "form": dict(form)})
    return render(request, "review.html", ctx, status)


def _json_field(form: FormData, name: str) -> Any:
    raw = str(form.get(name, "") or "").strip()
    if not raw:
        return None
    return json.loads(raw)


@router.post("/reviews/{review_id}/approve")
def approve(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    try:
        payload = _json_field(form, "payload")
        decide.approve(desk, who.reviewer, review_id, str(form.get("rationale", "")), payload)
    except AuditError as exc:
        return _decision_failed(request, desk, who, review_id, exc, form)
    except ValueError as exc:
        return _bad_json(request, desk, who, review_id, form, exc)
    return RedirectResponse(f"/reviews/{quote(review_id)}?done=approved", status_code=303)


@router.post("/reviews/{review_id}/edit")
def edit(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    try:
        payload = _json_field(form, "payload")
        patch = _json_field(form, "patch")
        if patch is None:
            # Without JavaScript the form sends the whole edited args; derive the RFC 6902 patch.
            new_args = _json_field(form, "args")
            if not isinstance(new_args, dict):
                raise ValueError("the edited args must be a JSON object")
            patch = jsonpatch.make_patch(desk.svc.get(review_id).call.args, new_args).patch
        if not isinstance(patch, list):
            raise ValueError("the patch must be a JSON array (RFC 6902)")
        decide.edit(desk, who.reviewer, review_id, patch, str(form.get("rationale", "")), payload)
    except AuditError as exc:
        return _decision_failed(request, desk, who, review_id, exc, form)
    except ValueError as exc:
        return _bad_json(request, desk, who, review_id, form, exc)
    return RedirectResponse(f"/reviews/{quote(review_id)}?done=edited", status_code=303)


@router.post("/reviews/{review_id}/reject")
def reject(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    try:
        decide.reject(desk, who.reviewer, review_id, str(form.get("reason", "")))
    except AuditError as exc:
        return _decision_failed(request, desk, who, review_id, exc, form)
    return RedirectResponse(f"/reviews/{quote(review_id)}?done=rejected", status_code=303)


def _bad_json(
    request: Request, desk: Desk, who: SignedIn, review_id: str, form: FormData, exc: Exception
) -> HTMLResponse:
    ctx = _review_ctx(desk, who, review_id)
    ctx.update({"error": "That is not valid JSON; nothing was recorded.", "error_detail": str(exc), "form": dict(form)})
    return render(request, "review.html", ctx, 422)


# -- log ----------------------------------------------------------------------------------


@router.get("/log")
def log_page(
    request: Request,
    desk: DeskDep,
    who: PageReviewer,
    kind: str = "",
    actor: str = "",
    review: str = "",
    before: Annotated[int | None, Query(ge=0)] = None,
) -> HTMLResponse:
    size = desk.store.size()
    stop = min(before, size) if before is not None else None
    rows = list(
        desk.store.entries(
            stop=stop,
            kind=kind or None,
            actor=actor or None,
            review=review or None,
            newest_first=True,
            limit=PAGE_SIZE + 1,
        )
    )
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    status = desk.verifier.status()
    cp = desk.store.latest_checkpoint()
    return render(
        request,
        "log.html",
        {
            "me": _me(desk, who),
            "csrf": who.csrf,
            "nav": "log",
            "entries": rows,
            "size": size,
            "kind": kind,
            "actor": actor,
            "review": review,
            "next_before": rows[-1].seq if more and rows else None,
            "status": status,
            "checkpoint": as_json(cp) if cp else None,
            "can_sign": desk.key_path is not None,
        },
    )


@router.post("/log/checkpoint")
def sign_checkpoint(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm) -> Response:
    if desk.key_path is None:
        raise Refused(409, "No log key", "This desk was started without the log's key, so it cannot sign checkpoints.")
    desk.store.checkpoint(desk.key_path)
    return RedirectResponse("/log", status_code=303)


@router.get("/log/proof/{seq}.json")
def proof_download(desk: DeskDep, who: PageReviewer, seq: int, size: int | None = None) -> Response:
    """Inclusion proof against the latest checkpoint when it covers ``seq``, else the current tree."""
    from desk.routes.api import inclusion_body

    current = desk.store.size()
    if not 0 <= seq < current:
        raise Refused(404, "No such entry", f"The log has no entry {seq}.")
    cp = desk.store.latest_checkpoint()
    if size is None:
        size = cp.size if cp is not None and seq < cp.size else current
    body: dict[str, Any] = inclusion_body(desk, seq, size).model_dump()
    if cp is not None and cp.size == size:
        body["checkpoint"] = cp.to_json()
        body["log_public_key"] = desk.store.public_key
    return JSONResponse(body, headers={"Content-Disposition": f'attachment; filename="inclusion-{seq}.json"'})


@router.get("/log/checkpoint.json")
def checkpoint_download(desk: DeskDep, who: PageReviewer) -> Response:
    cp = desk.store.latest_checkpoint()
    if cp is None:
        raise Refused(404, "No checkpoint yet", "The log has no signed checkpoint yet.")
    return JSONResponse(
        cp.to_json(),
        headers={"Content-Disposition": 'attachment; filename="checkpoint.json"'},
    )


# -- account ------------------------------------------------------------------------------


@router.get("/account")
def account(request: Request, desk: DeskDep, who: PageReviewer) -> HTMLResponse:
    return render(
        request,
        "account.html",
        {
            "me": _me(desk, who),
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
            "me": _me(desk, who),
            "csrf": who.csrf,
            "nav": "account",
            "tokens": desk.accounts.tokens(who.reviewer),
            "new_token": token,
        },
    )
