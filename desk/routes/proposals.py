"""Standing rules proposed from a review (issue 22 §5; SPEC.md §7 rule 7), in the desk.

On a review, a reviewer whose own roles cover its tool picks conditions ("allow calls like this from now on":
this agent, an argument equal to a value, ending with a text, at most a number). The desk drafts the
``policy.proposed`` body (``ReviewService.draft_proposal``) and shows it as the CEL ``review_when`` rule it
would make; the reviewer's passkey signs that body (desk.js, ``setupSignedForms``) and the service checks it
again as it records it. The Rules page lists the policies in force and every proposal with its state; an
admin approves or declines with ``audit policy approve|decline`` (the admin key stays offline).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from signoff.audit.errors import AuditError, InvalidEntry
from signoff.audit.proposals import Proposal
from signoff.desk import passkeys
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.csrf import CsrfForm
from signoff.desk.deps import ApiReviewer, DeskDep, PageReviewer
from signoff.desk.errors import classify
from signoff.desk.models import DecisionSig
from signoff.desk.proposing import conditions_from, may_propose
from signoff.desk.routes.api import visible
from signoff.desk.routes.reviews import review_page_response, visible_review
from signoff.desk.web import me, render

router = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api", tags=["api"])


def _review_page(request: Request, desk: Desk, who: SignedIn, review_id: str, **extra: Any) -> HTMLResponse:
    return review_page_response(request, desk, who, review_id, **extra)


@router.post("/reviews/{review_id}/proposal")
def draft(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    """Preview: the proposal the ticked conditions make, as its rule and the policy an admin would sign."""
    review = visible_review(desk, who, review_id)
    try:
        if not may_propose(desk, who, review):
            raise InvalidEntry(f"proposer: expected a reviewer whose own roles cover {review.call.tool}")
        args = review.final_args if review.final_args is not None else review.call.args
        conditions, agent = conditions_from(form, args)
        body = desk.svc.draft_proposal(
            review_id, conditions=conditions, agent=agent, note=str(form.get("note", "") or "")[:500]
        )
    except AuditError as exc:
        status, summary = classify(exc)
        return _review_page(request, desk, who, review_id, proposal_error=f"{summary} {exc}", status=status)
    return _review_page(request, desk, who, review_id, proposal_draft=body)


@router.post("/reviews/{review_id}/proposal/sign")
def propose(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, review_id: str) -> Response:
    """Record the previewed proposal, signed with the reviewer's passkey (the service checks it again)."""
    try:
        body = json.loads(str(form.get("body", "") or "{}"))
        if not isinstance(body, dict) or body.get("from_review") != review_id:
            raise InvalidEntry("body: expected the proposal this review's preview drafted")
        made = desk.svc.propose(body, proposer=who.reviewer, sig=passkeys.form_sig(desk.svc.keys(who.reviewer), form))
    except ValueError as exc:
        status, summary = classify(exc)
        return _review_page(request, desk, who, review_id, proposal_error=f"{summary} {exc}", status=status)
    except AuditError as exc:
        status, summary = classify(exc)
        return _review_page(request, desk, who, review_id, proposal_error=f"{summary} {exc}", status=status)
    return RedirectResponse(f"/rules?proposed={quote(made.id)}#{quote(made.id)}", status_code=303)


@router.get("/rules")
def rules_page(request: Request, desk: DeskDep, who: PageReviewer, proposed: str = "") -> HTMLResponse:
    """The policies in force and every proposal, newest first, with what became of it."""
    found = sorted(desk.svc.proposals(), key=lambda p: p.seq, reverse=True)
    live = [p for p in desk.svc.policies() if not p.retired]
    return render(
        request,
        "rules.html",
        {
            "me": me(desk, who),
            "csrf": who.csrf,
            "nav": "rules",
            "open": [p for p in found if p.state == "open"],
            "closed": [p for p in found if p.state != "open"][:50],
            "policies": sorted(live, key=lambda p: p.name),
            "proposed": proposed[:40],
        },
    )


# -- the JSON API -----------------------------------------------------------------------------------


class ConditionIn(BaseModel):
    arg: str = Field(max_length=200)
    op: str = Field(description="equals, ends_with or at_most")
    value: Any


class DraftIn(BaseModel):
    conditions: list[ConditionIn] = Field([], max_length=32)
    agent: bool = Field(True, description="only calls from the review's agent")
    note: str = Field("", max_length=500)


class ProposalPublic(BaseModel):
    """A proposed standing rule and its state: open, approved (an admin's policy.set) or declined."""

    proposal: str
    proposer: str
    tool: str
    policy: dict[str, Any] = Field(description="the policy.set body an admin signs to approve it")
    base: dict[str, Any] | None = None
    seq: int
    at: str
    from_review: str | None = None
    note: str = ""
    state: str
    closed_seq: int | None = None
    reason: str = ""

    @classmethod
    def of(cls, found: Proposal) -> ProposalPublic:
        return cls(**found.to_json())


class ProposeIn(BaseModel):
    body: dict[str, Any] = Field(description="the body a draft returned, exactly")
    sig: DecisionSig | None = Field(
        None, description='your signature over {"log", "kind": "policy.proposed", "actor": you, "body"} (RFC 8785)'
    )


@api.post("/reviews/{review_id}/proposal/draft")
def api_draft(desk: DeskDep, who: ApiReviewer, review_id: str, body: DraftIn) -> dict[str, Any]:
    """The ``policy.proposed`` body that allows calls like this one from now on, to sign and send to
    ``POST /api/proposals``; its ``policy.review_when`` is the CEL rule it would make."""
    review = visible(desk, who, review_id)
    if not may_propose(desk, who, review):
        raise InvalidEntry(f"proposer: expected a reviewer whose own roles cover {review.call.tool}")
    conditions = [(c.arg, c.op, c.value) for c in body.conditions]
    return desk.svc.draft_proposal(review_id, conditions=conditions, agent=body.agent, note=body.note)


@api.post("/proposals", response_model=ProposalPublic, status_code=201)
def api_propose(desk: DeskDep, who: ApiReviewer, body: ProposeIn) -> ProposalPublic:
    """Propose a standing rule (signed by you); it changes nothing until an admin approves it."""
    sig = body.sig.model_dump() if body.sig is not None else None
    return ProposalPublic.of(desk.svc.propose(body.body, proposer=who.reviewer, sig=sig))


@api.get("/proposals", response_model=list[ProposalPublic])
def api_proposals(desk: DeskDep, who: ApiReviewer) -> list[ProposalPublic]:
    """Every proposal on the log, oldest first, with its state."""
    return [ProposalPublic.of(p) for p in desk.svc.proposals()]
