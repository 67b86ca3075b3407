"""One review with its three decisions, and what happened after (the queue and the other lists: desk/routes/queue.py).

A decision form carries the person's passkey assertion over the decision statement the page
built from what it showed (desk/static/desk.js); it becomes the entry's ``sig``
(:func:`signoff.desk.passkeys.form_sig`). A log that allows unsigned decisions (the demo's) also
takes a form without one, from a reviewer who has no key.

A review outside the reader's roles and tools does not exist for them (desk/scope.py): 404.

On a sealed log (desk/reveal.py) the pages show the values revealed from beside the log, each checked
against its commitment; a review whose values do not check is shown without any of them, and the page
signs a decision over the commitments the entries hold, as ``signoff.audit.decision`` builds it, sending
the salts it chose beside the signature.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jsonpatch
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from sqlalchemy import select
from sqlmodel import col
from starlette.datastructures import FormData

from signoff.audit.canonical import digest
from signoff.audit.entry import parse_time
from signoff.audit.errors import AuditError, UnknownReview
from signoff.audit.tables import ReviewRow
from signoff.desk import forms, passkeys, proposing, queries, quorum, reveal
from signoff.desk import summary as summaries
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.csrf import CsrfForm
from signoff.desk.deps import DeskDep, PageReviewer
from signoff.desk.errors import classify, statement_mismatch
from signoff.desk.routes import decide
from signoff.desk.scope import Scope
from signoff.desk.web import Refused, me, render

router = APIRouter(include_in_schema=False)

NO_SUCH_REVIEW = "There is no review with this id that you may see."


# -- one review ---------------------------------------------------------------------------


def visible_review(desk: Desk, who: SignedIn, review_id: str) -> Any:
    """The review, if this reviewer may see it; else the same 404 as for no review at all. On a sealed log
    its values are revealed and checked (``ReviewService.get``); pages show it through :func:`reveal.shown`."""
    try:
        review = desk.svc.get(review_id)
    except UnknownReview:
        raise Refused(404, "No such review", NO_SUCH_REVIEW) from None
    if not desk.scope(who).sees_review(review):
        raise Refused(404, "No such review", NO_SUCH_REVIEW)
    return review


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


def _neighbours(desk: Desk, scope: Scope, review: Any) -> tuple[str | None, str | None]:
    """The previous and next pending review in queue order that this reviewer sees (keyboard j/k)."""
    visible = desk.visible(scope)
    base = [col(ReviewRow.log) == desk.store.log_id, col(ReviewRow.status) == "pending", visible]
    seq = col(ReviewRow.opened_seq)
    with desk.store.read_engine.connect() as conn:
        prev = conn.execute(
            select(col(ReviewRow.id)).where(*base, seq < review.opened_seq).order_by(seq.desc()).limit(1)
        ).first()
        nxt = conn.execute(
            select(col(ReviewRow.id)).where(*base, seq > review.opened_seq).order_by(seq).limit(1)
        ).first()
        if nxt is None and review.status != "pending":
            nxt = conn.execute(select(col(ReviewRow.id)).where(*base).order_by(seq).limit(1)).first()
    return (str(prev[0]) if prev else None), (str(nxt[0]) if nxt else None)


def outcome_ctx(desk: Desk, review: Any, entries: list[Any], open_siblings: int = 0) -> dict[str, Any]:
    """What the outcome card shows: the decision, the run, the tool's run and result, the reply."""
    outcome = queries.outcome_of(entries, review, desk.store)
    stalled_for = None
    if review.status in ("approved", "edited", "auto_approved") and outcome.resumed_at and not outcome.executed_seq:
        waited = (datetime.now(UTC) - parse_time(outcome.resumed_at)).total_seconds()
        if waited >= desk.stalled_after:
            stalled_for = int(waited)
    runnable = review.status in ("approved", "edited", "auto_approved")
    final_args = review.final_args if review.final_args is not None else (review.call.args if runnable else None)
    decision = next((e for e in entries if e.seq == review.decision_seq), None)
    sig = decision.sig if decision is not None else None
    return {
        "r": review,
        "call": review.call,
        "timeline": entries,
        "arg_names": summaries.ordered(final_args, review.call.tool_schema) if final_args is not None else [],
        "outcome": outcome,
        "runnable": runnable,
        "final_args": final_args,
        "stalled_for": stalled_for,
        "open_siblings": open_siblings,
        "decision_sig": sig,
        "signed_by": _signed_with(sig),
        "withheld": reveal.withheld(review),
        "erased_all": reveal.erased_all(review),
        "final_erased": reveal.erased_all(review, final_args),
    }


def _signed_with(sig: dict[str, Any] | None) -> str | None:
    """What signed a decision, in words ("passkey", "key file"); None when it is unsigned."""
    return {"WebAuthn": "passkey", "Ed25519": "key file"}.get(str(sig.get("alg"))) if sig else None


def progress_ctx(desk: Desk, who: SignedIn, review: Any, entries: list[Any]) -> dict[str, Any]:
    """Quorum, claim and escalation, for the review page and its live fragment (desk/quorum.py)."""
    reviewers = desk.cache.read(("reviewers",), desk.svc.reviewers) if review.status == "pending" else None
    progress = quorum.progress(review, who.reviewer, reviewers)
    by_seq = {e.seq: e for e in entries}
    first = by_seq.get(review.approvals[0][1]) if review.approvals else None
    mine = next((by_seq.get(seq) for by, seq in review.approvals if by == who.reviewer), None)
    edit = first if review.round and first is not None and first.kind == "review.edited" else None
    return {
        "progress": progress,
        "claim": quorum.active_claim(review, who.reviewer),
        "may_claim": desk.scope(who).may_decide(review),
        # A round's later approvals must give its first one's answer (audit.rules.decide).
        "round_answer": review.round_payload,
        "round_edit": edit,
        "my_approval": mine,
        "my_approval_by": _signed_with(mine.sig if mine is not None else None),
    }


def _review_ctx(request: Request, desk: Desk, who: SignedIn, review_id: str) -> dict[str, Any]:
    scope = desk.scope(who)

    def load() -> tuple[Any, list[Any], list[Any]]:
        review = desk.svc.get(review_id)
        frontier = desk.svc.frontier(review.frontier)
        others = reveal.revealed(desk.store, [r for r in frontier.reviews if r.id != review.id])
        return review, others, queries.timeline(desk.store, review)

    try:
        # On a sealed log, keyed on the review's values too: one changed beside the log is checked again.
        found, others, entries = desk.cache.read(("review", review_id, reveal.version(desk.store, review_id)), load)
    except UnknownReview:
        raise Refused(404, "No such review", NO_SUCH_REVIEW) from None
    if not scope.sees_review(found):
        raise Refused(404, "No such review", NO_SUCH_REVIEW)
    review = reveal.shown(found)  # none of its values when they do not check (desk/reveal.py)
    others = [reveal.shown(o) for o in others]
    progress = progress_ctx(desk, who, review, entries)
    answer = progress["round_answer"] if progress["progress"].approved_by else review.call.payload
    can = scope.may_decide(review) and not reveal.withheld(review)
    acting_for = scope.acting_for(review) if can else None  # a delegate decides for the delegator (rule 2b)
    call = review.call
    signing = _signing(request, desk, who)
    prev_id, next_id = _neighbours(desk, scope, review)
    args = quorum.round_args(review)  # what the current round approves: what will run, and what is signed
    summary = summaries.of_review(review)  # what will run (or ran), the proposal struck beside what changed
    may_propose = proposing.may_propose(desk, who, review) and not reveal.withheld(review)
    ran_with = review.final_args if review.final_args is not None else call.args
    return {
        # "Allow calls like this from now on" (desk/routes/proposals.py): for those whose own roles cover it.
        "may_propose": may_propose,
        "condition_rows": proposing.condition_rows(ran_with, summaries.ordered(ran_with, call.tool_schema))
        if may_propose
        else [],
        "proposal_signer": {"log": desk.store.log_id, "actor": who.reviewer, "sign": signing},
        "me": me(desk, who),
        "csrf": who.csrf,
        "nav": "queue",
        "r": review,
        "call": call,
        "summary": summary,
        "others": [(o, summaries.of_review(o)) for o in others if scope.sees_review(o)],
        "hidden_others": sum(1 for o in others if not scope.sees_review(o)),
        "can_decide": can,
        "acting_for": acting_for,
        "call_args": summaries.ordered(call.args, call.tool_schema),
        "observer": scope.observer and not can and review.status == "pending",
        "timeline": entries,
        "signing": signing,
        "args": args,
        # What an approval signs the digest of: the round's args as the entries hold them (sealed, on a sealed log).
        "round_digest": digest(review.sealed_round_args if review.sealed_round_args is not None else args),
        "changes": quorum.changes(call.args, args) if review.status == "pending" and review.round else [],
        "answer": answer,
        "round_arg_names": summaries.ordered(args, call.tool_schema),
        "arg_fields": forms.arg_fields(call.tool_schema, args),
        "payload_fields": forms.payload_fields(answer),
        "prev_id": prev_id,
        "next_id": next_id,
        **outcome_ctx(desk, review, entries, sum(1 for o in others if o.status == "pending")),
        **progress,
        # The page signs what it shows: these args, on this log, as this reviewer (desk.js builds the
        # decision body exactly as signoff.audit.decision does: on a review that needs several people,
        # the current round's args and its number).
        "data": {
            "id": review.id,
            "frontier": review.frontier,
            "args": args,
            "round": quorum.signed_round(review),
            "schema": call.tool_schema,
            "payload": answer,
            "deadline": review.deadline.isoformat() if review.deadline else None,
            "log": desk.store.log_id,
            "actor": who.reviewer,
            "acting_for": acting_for,
            "status": review.status,
            "prev": prev_id,
            "next": next_id,
            "sign": {"must": signing["must"], "rp_id": signing["rp_id"], "passkeys": signing["passkeys"]},
            # A sealed log: the commitments an approval signs the digest of, and how an edit seals its values.
            **(reveal.signing(desk.store, review) if can else {"sealed": False}),
        },
    }


@router.get("/reviews/{review_id}")
def review_page(request: Request, desk: DeskDep, who: PageReviewer, review_id: str, done: str = "") -> HTMLResponse:
    return review_page_response(request, desk, who, review_id, done=done)


def review_page_response(
    request: Request, desk: Desk, who: SignedIn, review_id: str, *, status: int = 200, **extra: Any
) -> HTMLResponse:
    """The review page, with ``extra`` in its context (a proposal's draft or error: desk/routes/proposals.py)."""
    size = desk.store.size()  # before reading: the page's live updates start from here
    ctx = _review_ctx(request, desk, who, review_id)
    ctx["log_size"] = size
    ctx["page_log"] = desk.store.log_id  # its live updates are of this review's log alone
    ctx.setdefault("done", "")
    log_vkey, witness_vkeys, quorum, configured = desk.witnessing()
    ctx["witnessing"] = {
        "log_vkey": log_vkey,
        "witnesses": witness_vkeys,
        "quorum": quorum,
        "configured": configured,
        "covered": _in_a_checkpoint(desk, ctx["r"].decision_seq),
    }
    ctx.update(extra)
    return render(request, "review.html", ctx, status)


def _in_a_checkpoint(desk: Desk, seq: int | None) -> bool:
    """Whether a note checkpoint covers entry ``seq``, so that its receipt can be made: until then the page
    says so itself, and the browser asks for no receipt (a 404 it would report as an error)."""
    if seq is None:
        return False
    newest = desk.store.latest_checkpoint()
    return newest is not None and bool(newest.note) and newest.size > seq


@router.get("/reviews/{review_id}/receipt.tlog-proof")
def review_receipt(desk: DeskDep, who: PageReviewer, review_id: str) -> Response:
    """The decision's receipt, c2sp.org/tlog-proof@v1 (the entry, its path, the newest cosigned checkpoint
    that covers it): the review page checks it in the browser; ``audit check-proof`` checks it offline."""
    from signoff.audit.errors import StoreError
    from signoff.audit.proofs import build_tlog_proof

    review = visible_review(desk, who, review_id)
    if review.decision_seq is None:
        return PlainTextResponse("expected a decided review, found it pending\n", status_code=404)
    try:
        body = build_tlog_proof(desk.store, review.decision_seq)
    except StoreError as exc:
        return PlainTextResponse(f"{exc}\n", status_code=404)
    name = f"{review_id}-seq{review.decision_seq}.tlog-proof"
    headers = {"Content-Disposition": f'inline; filename="{name}"', "Cache-Control": "no-store"}
    return Response(body, media_type="text/plain; charset=utf-8", headers=headers)


@router.get("/reviews/{review_id}/outcome")
def review_outcome(request: Request, desk: DeskDep, who: PageReviewer, review_id: str) -> HTMLResponse:
    """The outcome and timeline cards alone, for the review page to refresh live (resumed, ran, replied)."""
    review = visible_review(desk, who, review_id)
    entries = queries.timeline(desk.store, review)
    siblings = sum(1 for o in desk.svc.frontier(review.frontier).reviews if o.id != review.id and o.status == "pending")
    shown = reveal.shown(review)
    return render(request, "_live.html", {"me": me(desk, who), **outcome_ctx(desk, shown, entries, siblings)})


@router.get("/reviews/{review_id}/progress")
def review_progress(request: Request, desk: DeskDep, who: PageReviewer, review_id: str) -> HTMLResponse:
    """The approvals, claim and escalation card and the timeline alone, for the review page to refresh live."""
    review = reveal.shown(visible_review(desk, who, review_id))
    entries = queries.timeline(desk.store, review)
    ctx = {"me": me(desk, who), "csrf": who.csrf, "r": review, "timeline": entries}
    return render(request, "_progress_live.html", {**ctx, **progress_ctx(desk, who, review, entries)})


@router.post("/reviews/{review_id}/claim")
def claim(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    """Say "I'm on it": a claim the others see until it lapses. It never stops anyone deciding."""
    try:
        decide.claim(desk, who, review_id)
    except AuditError as exc:
        return _decision_failed(request, desk, who, review_id, exc, FormData())
    return RedirectResponse(f"/reviews/{quote(review_id)}#claim", status_code=303)


def _decision_failed(
    request: Request, desk: Desk, who: SignedIn, review_id: str, exc: Exception, form: FormData
) -> HTMLResponse:
    status, summary = classify(exc)
    ctx = _review_ctx(request, desk, who, review_id)  # 404 when the review is not theirs to see
    ctx.update({"error": summary, "error_detail": str(exc), "form": _shown(ctx["args"], form)})
    # The signed page and the server's copy differ: the same form would fail again, so none is offered,
    # only a fresh copy of the review (decide.py told the operator).
    ctx["mismatch"] = statement_mismatch(exc)
    return render(request, "review.html", ctx, status)


def _shown(args: dict[str, Any], form: FormData) -> dict[str, Any]:
    """The refused form as it was, to show again; the page's script sends the patch without the whole
    args (desk.js ``lighten``), so they are rebuilt from it when it applies."""
    shown: dict[str, Any] = dict(form)
    if not shown.get("args") and shown.get("patch"):
        try:
            edited = jsonpatch.apply_patch(args, json.loads(str(shown["patch"])))
            shown["args"] = json.dumps(edited, indent=2, ensure_ascii=False, sort_keys=True)
        except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError):
            pass
    return shown


def _text(form: FormData, name: str) -> str:
    """A text field as the page's script read (and signed) it: form submission turns every line
    break into CR LF (HTML "constructing the entry list"), the textarea's value has LF."""
    return str(form.get(name, "") or "").replace("\r\n", "\n")


def _sig(desk: Desk, who: SignedIn, form: FormData) -> dict[str, Any] | None:
    return passkeys.form_sig(desk.svc.keys(who.reviewer), form)


def _round(form: FormData) -> int | None:
    """The round of approvals the page showed (a hidden field on a review that needs several people)."""
    raw = str(form.get("round", "") or "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(f"round: expected the round number the page showed, found {raw[:20]!r}")
    return int(raw)


def _json_field(form: FormData, name: str) -> Any:
    raw = str(form.get(name, "") or "").strip()
    if not raw:
        return None
    return json.loads(raw)


def _salts(form: FormData) -> dict[str, str] | None:
    """The salts the page sealed an edit's new values with (a sealed log; hex per member, ``""`` for the
    whole args): the service seals them the same way, so that it records the body the page signed."""
    found = _json_field(form, "salts")
    if found is not None and not isinstance(found, dict):
        raise ValueError("salts: expected a JSON object of hex salts, one per argument")
    return found


def _acting_for(form: FormData) -> str | None:
    """The reviewer the page's decision is made for (a hidden field: the delegator whose delegation the
    signed-in reviewer decides under, rule 2b); it is part of what the passkey signed."""
    return str(form.get("acting_for", "") or "").strip() or None


def _payload_salt(form: FormData) -> str | None:
    """The salt the page sealed its answer with (a sealed log), hex; None: the service picks it."""
    return str(form.get("payload_salt", "") or "").strip() or None


@router.post("/reviews/{review_id}/approve")
def approve(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    try:
        payload = _json_field(form, "payload")
        sig = _sig(desk, who, form)
        decide.approve(
            desk,
            who,
            review_id,
            _text(form, "rationale"),
            payload,
            sig,
            shown_round=_round(form),
            payload_salt=_payload_salt(form),
            acting_for=_acting_for(form),
        )
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
            # On the args of the round the page showed (a stale round is refused below, before any write).
            patch = jsonpatch.make_patch(quorum.round_args(visible_review(desk, who, review_id)), new_args).patch
        if not isinstance(patch, list):
            raise ValueError("the patch must be a JSON array (RFC 6902)")
        decide.edit(
            desk,
            who,
            review_id,
            patch,
            _text(form, "rationale"),
            payload,
            _sig(desk, who, form),
            shown_round=_round(form),
            salts=_salts(form),
            payload_salt=_payload_salt(form),
            acting_for=_acting_for(form),
        )
    except AuditError as exc:
        return _decision_failed(request, desk, who, review_id, exc, form)
    except ValueError as exc:
        return _bad_json(request, desk, who, review_id, form, exc)
    return RedirectResponse(f"/reviews/{quote(review_id)}?done=edited", status_code=303)


@router.post("/reviews/{review_id}/reject")
def reject(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    try:
        decide.reject(desk, who, review_id, _text(form, "reason"), _sig(desk, who, form), _acting_for(form))
    except AuditError as exc:
        return _decision_failed(request, desk, who, review_id, exc, form)
    return RedirectResponse(f"/reviews/{quote(review_id)}?done=rejected", status_code=303)


def _bad_json(
    request: Request, desk: Desk, who: SignedIn, review_id: str, form: FormData, exc: Exception
) -> HTMLResponse:
    ctx = _review_ctx(request, desk, who, review_id)
    ctx.update(
        {
            "error": "That is not valid JSON; nothing was recorded.",
            "error_detail": str(exc),
            "form": _shown(ctx["args"], form),
        }
    )
    return render(request, "review.html", ctx, 422)
