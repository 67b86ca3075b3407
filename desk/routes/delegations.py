"""Delegation in the desk (SPEC.md §7 rule 2b): on the Account page a reviewer lends their roles to another
enrolled reviewer until a date, or ends a delegation, each signed with their passkey (the page builds the
body as ``signoff.audit.delegation`` does and signs it; desk.js ``setupDelegations``); the JSON API does the
same with a ``sig`` in the request.

Domain rules stay in ``audit``; what it refuses is shown on the page (or returned as the API's problem).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from starlette.datastructures import FormData

from signoff.audit.delegation import Delegation
from signoff.audit.entry import TIME, format_time
from signoff.audit.errors import AuditError, InvalidEntry
from signoff.desk import passkeys
from signoff.desk.account import account_ctx
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.csrf import CsrfForm
from signoff.desk.deps import ApiReviewer, DeskDep, PageReviewer
from signoff.desk.errors import classify
from signoff.desk.models import SIG_DOC, DecisionSig
from signoff.desk.web import render

router = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api", tags=["api"])

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def until_text(value: str) -> str:
    """A date from the page's date field (the delegation ends as that day begins, UTC: what the page
    signs too), or an exact time as the log writes it."""
    text = value.strip()
    if _DATE.match(text):
        return f"{text}T00:00:00.000000Z"
    if TIME.match(text):
        return text
    raise InvalidEntry(f"until: expected a date (YYYY-MM-DD) or a time as the log writes it, found {text[:40]!r}")


def _page(request: Request, desk: Desk, who: SignedIn, **extra: Any) -> HTMLResponse:
    status = int(extra.pop("status", 200))
    return render(request, "account.html", account_ctx(request, desk, who, **extra), status)


def _roles(form: FormData) -> list[str]:
    return [str(r) for r in form.getlist("roles") if str(r).strip()]


@router.post("/account/delegations")
def grant(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm) -> Response:
    """Lend roles to another reviewer until a date, signed with the reviewer's passkey (``delegation.granted``)."""
    try:
        made = desk.svc.delegate(
            who.reviewer,
            str(form.get("delegate", "")).strip(),
            until=until_text(str(form.get("until", ""))),
            roles=_roles(form) or None,
            reason=str(form.get("reason", "") or "").replace("\r\n", "\n"),
            sig=passkeys.form_sig(desk.svc.keys(who.reviewer), form),
            delegation_id=str(form.get("delegation", "") or "").strip() or None,
        )
    except AuditError as exc:
        status, summary = classify(exc)
        return _page(request, desk, who, delegation_error=summary, delegation_detail=str(exc), status=status)
    return RedirectResponse(f"/account?delegated={made.id}{_same_log(request)}#delegations", status_code=303)


@router.post("/account/delegations/{delegation_id}/revoke")
def revoke(request: Request, desk: DeskDep, who: PageReviewer, form: CsrfForm, delegation_id: str) -> Response:
    """End a delegation from or to the signed-in reviewer before its date, signed (``delegation.revoked``)."""
    try:
        desk.svc.revoke_delegation(
            delegation_id,
            actor=who.reviewer,
            reason=str(form.get("reason", "") or "").replace("\r\n", "\n"),
            sig=passkeys.form_sig(desk.svc.keys(who.reviewer), form),
        )
    except AuditError as exc:
        status, summary = classify(exc)
        return _page(request, desk, who, delegation_error=summary, delegation_detail=str(exc), status=status)
    return RedirectResponse(f"/account?revoked=1{_same_log(request)}#delegations", status_code=303)


def _same_log(request: Request) -> str:
    """Back to the account page of the log the form was about (a desk serving several: desk/logs.py)."""
    log = request.query_params.get("log")
    return f"&log={quote(log)}" if log else ""


# -- the JSON API -----------------------------------------------------------------------------------


class DelegationPublic(BaseModel):
    """One delegation on the log: who lends which roles to whom, until when, and whether it was revoked."""

    delegation: str
    delegator: str
    delegate: str
    roles: list[str]
    until: str = Field(description="when it ends (the log's time format, UTC)")
    seq: int = Field(description="the log entry that granted it (delegation.granted)")
    at: str
    by: str = Field(description="who granted it: the delegator, or an admin")
    revoked_seq: int | None = Field(None, description="the delegation.revoked that ended it early, if one did")
    active: bool = Field(description="in force now")

    @classmethod
    def of(cls, found: Delegation, now: str) -> DelegationPublic:
        return cls(**found.to_json(), active=found.active(now))


GRANT_DOC = (
    "Sign the body `{delegation, delegator: you, delegate, roles (sorted), until, reason?}` "
    "(`signoff.audit.delegation.grant_body`) as a decision is signed: the statement is RFC 8785 of "
    '`{"log", "kind": "delegation.granted", "actor": you, "body"}`. ' + SIG_DOC.split("\n\n")[0]
)


class DelegateIn(BaseModel):
    delegation: str = Field(pattern=r"^dg_[0-9a-f]{16}$", description="the id you chose: dg_ and 16 hex digits")
    delegate: str = Field(max_length=220, description="the reviewer you lend your roles to (human:…)")
    roles: list[str] = Field(min_length=1, max_length=32, description="roles of yours, sorted")
    until: str = Field(description="YYYY-MM-DDTHH:MM:SS.ffffffZ, when it ends")
    reason: str = Field("", max_length=10_000)
    sig: DecisionSig | None = Field(None, description=GRANT_DOC)


class RevokeIn(BaseModel):
    reason: str = Field(min_length=1, max_length=10_000)
    sig: DecisionSig | None = Field(
        None,
        description="your signature over `{delegation, delegator, delegate, reason}` as kind `delegation.revoked`",
    )


@api.get("/delegations", response_model=list[DelegationPublic])
def list_delegations(desk: DeskDep, who: ApiReviewer) -> list[DelegationPublic]:
    """The delegations from and to you, oldest first, each saying whether it is in force."""
    now = format_time(desk.store.clock())
    return [DelegationPublic.of(d, now) for d in desk.svc.delegations(reviewer=who.reviewer)]


@api.post("/delegations", response_model=DelegationPublic, status_code=201)
def api_grant(desk: DeskDep, who: ApiReviewer, body: DelegateIn) -> DelegationPublic:
    """Lend your roles (some of them) to another enrolled reviewer until a time: they then decide, for you,
    what those roles cover. It cannot lend more than you hold, and a delegate cannot lend it on."""
    made = desk.svc.delegate(
        who.reviewer,
        body.delegate,
        until=body.until,
        roles=body.roles,
        reason=body.reason,
        sig=body.sig.model_dump() if body.sig is not None else None,
        delegation_id=body.delegation,
    )
    return DelegationPublic.of(made, format_time(desk.store.clock()))


@api.post("/delegations/{delegation_id}/revoke", response_model=DelegationPublic)
def api_revoke(desk: DeskDep, who: ApiReviewer, delegation_id: str, body: RevokeIn) -> DelegationPublic:
    """End a delegation from or to you before its time."""
    desk.svc.revoke_delegation(
        delegation_id,
        actor=who.reviewer,
        reason=body.reason,
        sig=body.sig.model_dump() if body.sig is not None else None,
    )
    found = desk.svc.delegation(delegation_id)
    assert found is not None
    return DelegationPublic.of(found, format_time(desk.store.clock()))
