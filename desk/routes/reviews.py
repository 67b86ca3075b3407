"""The queue, live updates (SSE) and one review with its three decisions.

A decision form carries the person's passkey assertion over the decision statement the page
built from what it showed (desk/static/desk.js); it becomes the entry's ``sig``
(:func:`signoff.desk.passkeys.form_sig`). A log that allows unsigned decisions (the demo's) also
takes a form without one, from a reviewer who has no key.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import jsonpatch
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.datastructures import FormData

from signoff.audit.errors import AuditError, UnknownReview
from signoff.desk import passkeys
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


def _signing(request: Request, desk: Desk, who: SignedIn) -> dict[str, Any]:
    """How this reviewer decides on this page: must they sign, and with which passkeys (for this RP)."""
    rp = passkeys.relying_party(request, desk.rp_id, desk.origin)
    keys = desk.svc.keys(who.reviewer)
    mine = passkeys.passkeys_of(keys)
    here = [passkeys.credential_json(p) for p in mine if p.rp_id == rp.id]
    return {
        # The log requires signed decisions, or this reviewer has a key (then every entry of theirs is signed).
        "must": desk.signed_decisions or bool(keys),
        "rp_id": rp.id,
        "passkeys": here,
        "elsewhere": sorted({p.rp_id for p in mine if p.rp_id != rp.id}),
        "key_files": sum(1 for k in keys if k.passkey is None),
    }


def _review_ctx(request: Request, desk: Desk, who: SignedIn, review_id: str) -> dict[str, Any]:
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
    signing = _signing(request, desk, who)
    decision = next((e for e in history if e.seq == review.decision_seq), None)
    sig = decision.sig if decision is not None else None
    return {
        "me": me(desk, who),
        "csrf": who.csrf,
        "nav": "queue",
        "r": review,
        "call": call,
        "others": others,
        "can_decide": can,
        "history": history,
        "signing": signing,
        "decision_sig": sig,
        "signed_by": {"WebAuthn": "passkey", "Ed25519": "key file"}.get(str(sig.get("alg"))) if sig else None,
        # The page signs what it shows: these args, on this log, as this reviewer (desk.js builds the
        # decision body exactly as signoff.audit.decision does).
        "data": {
            "id": review.id,
            "args": call.args,
            "schema": call.tool_schema,
            "payload": call.payload,
            "deadline": review.deadline.isoformat() if review.deadline else None,
            "log": desk.store.log_id,
            "actor": who.reviewer,
            "sign": {"must": signing["must"], "rp_id": signing["rp_id"], "passkeys": signing["passkeys"]},
        },
    }


@router.get("/reviews/{review_id}")
def review_page(request: Request, desk: DeskDep, who: PageReviewer, review_id: str, done: str = "") -> HTMLResponse:
    ctx = _review_ctx(request, desk, who, review_id)
    ctx["done"] = done
    return render(request, "review.html", ctx)


def _decision_failed(
    request: Request, desk: Desk, who: SignedIn, review_id: str, exc: Exception, form: FormData
) -> HTMLResponse:
    status, summary = classify(exc)
    ctx = _review_ctx(request, desk, who, review_id)
    ctx.update({"error": summary, "error_detail": str(exc), "form": dict(form)})
    return render(request, "review.html", ctx, status)


def _text(form: FormData, name: str) -> str:
    """A text field as the page's script read (and signed) it: form submission turns every line
    break into CR LF (HTML "constructing the entry list"), the textarea's value has LF."""
    return str(form.get(name, "") or "").replace("\r\n", "\n")


def _sig(desk: Desk, who: SignedIn, form: FormData) -> dict[str, Any] | None:
    return passkeys.form_sig(desk.svc.keys(who.reviewer), form)


def _json_field(form: FormData, name: str) -> Any:
    raw = str(form.get(name, "") or "").strip()
    if not raw:
        return None
    return json.loads(raw)


@router.post("/reviews/{review_id}/approve")
def approve(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    try:
        payload = _json_field(form, "payload")
        sig = _sig(desk, who, form)
        decide.approve(desk, who.reviewer, review_id, _text(form, "rationale"), payload, sig)
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
        decide.edit(desk, who.reviewer, review_id, patch, _text(form, "rationale"), payload, _sig(desk, who, form))
    except AuditError as exc:
        return _decision_failed(request, desk, who, review_id, exc, form)
    except ValueError as exc:
        return _bad_json(request, desk, who, review_id, form, exc)
    return RedirectResponse(f"/reviews/{quote(review_id)}?done=edited", status_code=303)


@router.post("/reviews/{review_id}/reject")
def reject(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    try:
        decide.reject(desk, who.reviewer, review_id, _text(form, "reason"), _sig(desk, who, form))
    except AuditError as exc:
        return _decision_failed(request, desk, who, review_id, exc, form)
    return RedirectResponse(f"/reviews/{quote(review_id)}?done=rejected", status_code=303)


def _bad_json(
    request: Request, desk: Desk, who: SignedIn, review_id: str, form: FormData, exc: Exception
) -> HTMLResponse:
    ctx = _review_ctx(request, desk, who, review_id)
    ctx.update({"error": "That is not valid JSON; nothing was recorded.", "error_detail": str(exc), "form": dict(form)})
    return render(request, "review.html", ctx, 422)
