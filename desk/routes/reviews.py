"""The queue, live updates (SSE) and one review with its three decisions."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import jsonpatch
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.datastructures import FormData

from signoff.audit.errors import AuditError, UnknownReview
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.csrf import CsrfForm
from signoff.desk.deps import DeskDep, PageReviewer
from signoff.desk.errors import classify
from signoff.desk.routes import decide
from signoff.desk.web import PAGE_SIZE, Refused, me, render

router = APIRouter(include_in_schema=False)


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
    items, total = desk.cache.pending(desk.svc, tool=t, agent=a, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    pages = max(1, (total + PAGE_SIZE - 1) // PAGE_SIZE)
    if page > pages:
        page = pages
        items, total = desk.cache.pending(desk.svc, tool=t, agent=a, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    return render(
        request,
        "queue.html",
        {
            "me": me(desk, who),
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
    def load() -> tuple[Any, list[Any], list[Any]]:
        review = desk.svc.get(review_id)
        frontier = desk.svc.frontier(review.frontier)
        return review, [r for r in frontier.reviews if r.id != review.id], desk.svc.history(review.id)

    try:
        review, others, history = desk.cache.read(("review", review_id), load)
    except UnknownReview:
        raise Refused(404, "No such review", "There is no review with this id.") from None
    can = desk.svc.can_decide(who.reviewer, review)
    call = review.call
    return {
        "me": me(desk, who),
        "csrf": who.csrf,
        "nav": "queue",
        "r": review,
        "call": call,
        "others": others,
        "can_decide": can,
        "history": history,
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
