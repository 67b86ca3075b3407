"""The JSON API under ``/api``: everything the pages offer, for scripts and other UIs.

Authentication is a per-reviewer bearer token. Domain errors become HTTP statuses in
``desk.errors`` (409 stale or duplicate decision, 422 bad patch or schema break, 403 role).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from signoff.desk.deps import ApiReviewer, DeskDep
from signoff.desk.models import (
    ApproveIn,
    EditIn,
    EntryPublic,
    KeyPublic,
    LogPage,
    Me,
    RejectIn,
    ReviewDetail,
    ReviewPage,
    ReviewPublic,
    RulesCheck,
    Verification,
    as_json,
    sig_of,
)
from signoff.desk.routes import decide

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing or unknown API token"},
    403: {
        "description": "The reviewer's role does not cover this tool, the reviewer is disabled, or the decision's "
        "signature is missing or does not verify over what the server would record (nothing recorded)"
    },
    404: {"description": "No such review"},
    409: {"description": "Stale or duplicate decision: already decided, expired or withdrawn; nothing recorded"},
    422: {"description": "Bad patch, schema break, missing reason or malformed JSON; nothing recorded"},
}

router = APIRouter(prefix="/api", tags=["api"], responses={401: ERRORS[401]})


def _hex(h: bytes) -> str:
    return "sha256:" + h.hex()


@router.get("/me", response_model=Me)
def me(desk: DeskDep, who: ApiReviewer) -> Me:
    info = who.info
    return Me(
        reviewer=who.reviewer,
        roles=list(info.roles),
        tools=list(info.tools),
        enabled=info.enabled,
        log=desk.store.log_id,
        signed_decisions=desk.signed_decisions,
        keys=[KeyPublic.of(k) for k in desk.svc.keys(who.reviewer)],
    )


@router.get("/reviews", response_model=ReviewPage)
def list_reviews(
    desk: DeskDep,
    who: ApiReviewer,
    tool: str | None = None,
    agent: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> ReviewPage:
    """Pending reviews, oldest first."""
    items, total = desk.cache.pending(desk.svc, tool=tool, agent=agent, limit=limit, offset=offset)
    return ReviewPage(items=[ReviewPublic.of(r) for r in items], total=total, limit=limit, offset=offset)


@router.get("/reviews/{review_id}", response_model=ReviewDetail, responses={404: ERRORS[404]})
def get_review(desk: DeskDep, who: ApiReviewer, review_id: str) -> ReviewDetail:
    r = desk.svc.get(review_id)
    others = [ReviewPublic.of(x) for x in desk.svc.frontier(r.frontier).reviews if x.id != r.id]
    return ReviewDetail(
        **ReviewPublic.of(r).model_dump(), frontier_reviews=others, can_decide=desk.svc.can_decide(who.reviewer, r)
    )


@router.get("/reviews/{review_id}/history", response_model=list[EntryPublic], responses={404: ERRORS[404]})
def review_history(desk: DeskDep, who: ApiReviewer, review_id: str) -> list[EntryPublic]:
    desk.svc.get(review_id)
    return [EntryPublic.of(e) for e in desk.svc.history(review_id)]


DECIDE_ERRORS: dict[int | str, dict[str, Any]] = {k: ERRORS[k] for k in (403, 404, 409, 422)}


@router.post("/reviews/{review_id}/approve", response_model=ReviewPublic, responses=DECIDE_ERRORS)
def approve(desk: DeskDep, who: ApiReviewer, review_id: str, body: ApproveIn) -> ReviewPublic:
    """Approve the call as proposed, with an optional rationale and payload answer, signed by you (`sig`)."""
    return ReviewPublic.of(decide.approve(desk, who.reviewer, review_id, body.rationale, body.payload, sig_of(body)))


@router.post("/reviews/{review_id}/edit", response_model=ReviewPublic, responses=DECIDE_ERRORS)
def edit(desk: DeskDep, who: ApiReviewer, review_id: str, body: EditIn) -> ReviewPublic:
    """Approve with changed args, given as an RFC 6902 patch on the proposed args, signed by you (`sig`)."""
    return ReviewPublic.of(
        decide.edit(desk, who.reviewer, review_id, body.patch, body.rationale, body.payload, sig_of(body))
    )


@router.post("/reviews/{review_id}/reject", response_model=ReviewPublic, responses=DECIDE_ERRORS)
def reject(desk: DeskDep, who: ApiReviewer, review_id: str, body: RejectIn) -> ReviewPublic:
    """Stop the call; the reason is what the model sees. Signed by you (`sig`)."""
    return ReviewPublic.of(decide.reject(desk, who.reviewer, review_id, body.reason, sig_of(body)))


@router.get("/log", response_model=LogPage)
def log(
    desk: DeskDep,
    who: ApiReviewer,
    kind: str | None = None,
    actor: str | None = None,
    review: str | None = None,
    before: Annotated[int | None, Query(ge=0, description="only entries with seq < before")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> LogPage:
    """Log entries, newest first."""
    rows = list(
        desk.store.entries(stop=before, kind=kind, actor=actor, review=review, newest_first=True, limit=limit + 1)
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return LogPage(
        items=[EntryPublic.of(e) for e in rows],
        size=desk.store.size(),
        next_before=rows[-1].seq if more and rows else None,
    )


@router.get("/log/{seq}", response_model=EntryPublic, responses={404: {"description": "No such entry"}})
def log_entry(desk: DeskDep, who: ApiReviewer, seq: int) -> EntryPublic:
    if not 0 <= seq < desk.store.size():
        raise HTTPException(404, f"The log has no entry {seq}.")
    return EntryPublic.of(desk.store.entry(seq))


@router.get("/verification", response_model=Verification)
def verification(
    desk: DeskDep,
    who: ApiReviewer,
    wait: Annotated[float, Query(ge=0, le=30, description="seconds to wait for rules")] = 0,
) -> Verification:
    """Hash chain and Merkle roots verified incrementally by this desk, plus audit's rule check."""
    s = desk.verifier.status()
    r = desk.rules.status(wait=wait)
    return Verification(
        ok=s.ok and r.ok is not False,
        verified_upto=s.verified_upto,
        size=s.size,
        checkpoint_size=s.checkpoint_size,
        error=s.error or r.failure,
        rules=RulesCheck(
            ok=r.ok,
            verified_upto=(r.size - 1) if r.ok is not None and r.size else None,
            checked_from=r.checked_from,
            checkpoint_size=r.checkpoint_size,
            failure=r.failure,
            running=r.running,
        ),
    )


class CheckpointOut(BaseModel):
    log: str
    size: int
    root: str
    at: str
    sig: dict[str, str]
    public_key: str


def _cp_out(desk: Any, cp: Any) -> CheckpointOut:
    return CheckpointOut(**as_json(cp), public_key=desk.store.public_key)


@router.get("/checkpoints/latest", response_model=CheckpointOut, responses={404: {"description": "No checkpoint yet"}})
def latest_checkpoint(desk: DeskDep, who: ApiReviewer) -> CheckpointOut:
    """The latest signed tree head (RFC 9162 §4.10 shape: log, size, root, at, sig)."""
    cp = desk.store.latest_checkpoint()
    if cp is None:
        raise HTTPException(404, "The log has no signed checkpoint yet.")
    return _cp_out(desk, cp)


@router.get("/checkpoints", response_model=list[CheckpointOut])
def checkpoints(desk: DeskDep, who: ApiReviewer) -> list[CheckpointOut]:
    return [_cp_out(desk, cp) for cp in desk.store.checkpoints()]


@router.post(
    "/checkpoints",
    response_model=CheckpointOut,
    status_code=201,
    responses={409: {"description": "This desk has no log key"}},
)
def sign_checkpoint(desk: DeskDep, who: ApiReviewer) -> CheckpointOut:
    """Sign the current tree head with the log's key (only when the desk was given it)."""
    if desk.key_path is None:
        raise HTTPException(409, "This desk was started without the log's key; it cannot sign checkpoints.")
    return _cp_out(desk, desk.store.checkpoint(desk.key_path))


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode("ascii")


class InclusionOut(BaseModel):
    """The same bundle ``audit prove`` prints (RFC 9162 §2.1.3; proof hashes in base64)."""

    log: str
    seq: int
    size: int
    entry: str = Field(description="the entry's exact canonical bytes (RFC 8785)")
    leaf: str = Field(description="sha256:<hex> of 0x00 || entry")
    proof: list[str]
    root: str


def inclusion_body(desk: Any, seq: int, size: int | None) -> InclusionOut:
    current = desk.store.size()
    size = current if size is None else size
    if not 0 <= seq < size <= current:
        raise HTTPException(404, f"Expected 0 <= seq < size <= {current}, found seq {seq}, size {size}.")
    e = desk.store.entry(seq)
    return InclusionOut(
        log=desk.store.log_id,
        seq=seq,
        size=size,
        entry=bytes(e.raw).decode("utf-8"),
        leaf=e.hash,
        proof=[_b64(p) for p in desk.store.inclusion_proof(seq, size)],
        root=_hex(desk.store.root(size)),
    )


@router.get(
    "/proofs/inclusion/{seq}", response_model=InclusionOut, responses={404: {"description": "No such entry or size"}}
)
def inclusion(
    desk: DeskDep, who: ApiReviewer, seq: int, size: Annotated[int | None, Query(ge=1)] = None
) -> InclusionOut:
    """RFC 9162 §2.1.3 inclusion proof of entry ``seq`` in the tree of ``size`` (default: now)."""
    return inclusion_body(desk, seq, size)


class ConsistencyOut(BaseModel):
    """The same object ``audit consistency`` prints (RFC 9162 §2.1.4; proof hashes in base64)."""

    log: str
    old_size: int
    old_root: str
    new_size: int
    new_root: str
    proof: list[str]


@router.get(
    "/proofs/consistency", response_model=ConsistencyOut, responses={404: {"description": "Sizes out of range"}}
)
def consistency(
    desk: DeskDep,
    who: ApiReviewer,
    old: Annotated[int, Query(ge=1)],
    new: Annotated[int | None, Query(ge=1)] = None,
) -> ConsistencyOut:
    """RFC 9162 §2.1.4 consistency proof between two tree sizes."""
    current = desk.store.size()
    new = current if new is None else new
    if not 0 < old <= new <= current:
        raise HTTPException(404, f"Expected 0 < old <= new <= {current}, found {old}, {new}.")
    return ConsistencyOut(
        log=desk.store.log_id,
        old_size=old,
        old_root=_hex(desk.store.root(old)),
        new_size=new,
        new_root=_hex(desk.store.root(new)),
        proof=[_b64(p) for p in desk.store.consistency_proof(old, new)] if old < new else [],
    )
