"""The JSON API under ``/api``: everything the pages offer, for scripts and other UIs.

Authentication is a per-reviewer bearer token. Domain errors become HTTP statuses in
``desk.errors`` (409 stale or duplicate decision, 422 bad patch or schema break, 403 role).
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field

from signoff.audit.entry import parse_time
from signoff.audit.errors import UnknownReview
from signoff.desk import queries, reveal
from signoff.desk.deps import ApiReviewer, DeskDep
from signoff.desk.models import (
    ApproveIn,
    ClaimedOut,
    DecidedPage,
    EditIn,
    EntryPublic,
    KeyPublic,
    LogPage,
    Me,
    OutcomePublic,
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
from signoff.desk.scope import visible_entries

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing or unknown API token"},
    403: {
        "description": "The reviewer's role does not cover this tool, the reviewer is disabled, the reviewer already "
        "approved this round of a review that needs several people, or the decision's signature is missing or "
        "does not verify over what the server would record (nothing recorded)"
    },
    404: {"description": "No such review, or one outside your roles and tools"},
    409: {
        "description": "Stale or duplicate decision: already decided, expired or withdrawn, or (with `round`) made "
        "on a round the review has left, or an answer other than the round's first approval gave; nothing recorded"
    },
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


def visible(desk: Any, who: Any, review_id: str) -> Any:
    """The review, or the same 404 as for an unknown id when it is outside the reviewer's roles and tools;
    on a sealed log, none of its values when they do not check (desk/reveal.py)."""
    review = desk.svc.get(review_id)
    if not desk.scope(who).sees_review(review):
        raise UnknownReview(review_id)
    return reveal.shown(review)


@router.get("/reviews", response_model=ReviewPage)
def list_reviews(
    desk: DeskDep,
    who: ApiReviewer,
    tool: str | None = None,
    agent: str | None = None,
    sort: Annotated[Literal["oldest", "deadline"], Query(description="oldest first, or soonest deadline first")] = (
        "oldest"
    ),
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> ReviewPage:
    """Pending reviews you may see (your roles and tools; everything for an observer), oldest first. Each is
    read from its own log entries; `row_disagrees` says when the review's projection row said otherwise."""
    scope = desk.scope(who)
    items, total = desk.cache.read(
        ("api-pending", scope, tool, agent, sort, limit, offset),
        lambda: queries.pending(
            desk.store, desk.visible(scope), tool=tool, agent=agent, sort=sort, limit=limit, offset=offset
        ),
    )
    return ReviewPage(
        # Each as the log tells it (queries.from_log); a row naming a review the log does not have is left out.
        items=[ReviewPublic.of(i.review, i.summary, i.disagrees) for i in items if not i.unlogged],
        total=total,
        limit=limit,
        offset=offset,
    )


@router.get("/reviews/{review_id}", response_model=ReviewDetail, responses={404: ERRORS[404]})
def get_review(desk: DeskDep, who: ApiReviewer, review_id: str) -> ReviewDetail:
    """One review, its frontier's other calls (those you may see) and what happened after the decision."""
    r = visible(desk, who, review_id)
    scope = desk.scope(who)
    siblings = [x for x in desk.svc.frontier(r.frontier).reviews if x.id != r.id and scope.sees_review(x)]
    others = [ReviewPublic.of(reveal.shown(x)) for x in reveal.revealed(desk.store, siblings)]
    outcome = queries.outcome_of(queries.timeline(desk.store, r), r, desk.store)
    return ReviewDetail(
        **ReviewPublic.of(r).model_dump(),
        frontier_reviews=others,
        can_decide=scope.may_decide(r),
        acting_for=scope.acting_for(r) if scope.may_decide(r) else None,
        outcome=OutcomePublic(**outcome.to_json()),
    )


@router.get("/reviews/{review_id}/history", response_model=list[EntryPublic], responses={404: ERRORS[404]})
def review_history(desk: DeskDep, who: ApiReviewer, review_id: str) -> list[EntryPublic]:
    """Every log entry about the review and its frontier (opened, decided, resumed, executed, replied)."""
    r = visible(desk, who, review_id)
    return [EntryPublic.of(e) for e in queries.timeline(desk.store, r)]


@router.get("/decided", response_model=DecidedPage)
def decided_reviews(
    desk: DeskDep,
    who: ApiReviewer,
    mine: bool = False,
    tool: str = "",
    agent: str = "",
    outcome: Annotated[str, Query(description="approved, edited, rejected, expired or withdrawn")] = "",
    since: Annotated[str, Query(description="YYYY-MM-DD, decided on or after")] = "",
    until: Annotated[str, Query(description="YYYY-MM-DD, decided on or before")] = "",
    q: Annotated[str, Query(description="a review id (or its start), a session id or a frontier id")] = "",
    before: Annotated[int | None, Query(ge=0, description="decisions before this seq (the next older page)")] = None,
    after: Annotated[int | None, Query(ge=0, description="decisions after this seq (the next newer page)")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DecidedPage:
    """Decided reviews you may see, newest decision first (the desk's Decided view)."""
    scope = desk.scope(who)
    f = queries.HistoryQuery(
        mine=who.reviewer if mine else "", tool=tool, agent=agent, outcome=outcome, since=since, until=until, q=q
    )
    page = queries.decided(desk.store, desk.visible(scope), f, before=before, after=after, limit=limit)
    return DecidedPage(
        items=[ReviewPublic.of(i.review, i.summary) for i in page.items],
        total=page.total,
        older=page.older,
        newer=page.newer,
    )


@router.get("/stalled", response_model=list[ReviewPublic])
def stalled(desk: DeskDep, who: ApiReviewer) -> list[ReviewPublic]:
    """Approved, not yet run: approved calls whose run was resumed but whose tool has not run."""
    scope = desk.scope(who)
    found = desk.svc.stalled(desk.stalled_after)
    return [ReviewPublic.of(reveal.shown(s.review)) for s in found if scope.sees_review(s.review)]


DECIDE_ERRORS: dict[int | str, dict[str, Any]] = {k: ERRORS[k] for k in (403, 404, 409, 422)}


@router.post("/reviews/{review_id}/approve", response_model=ReviewPublic, responses=DECIDE_ERRORS)
def approve(desk: DeskDep, who: ApiReviewer, review_id: str, body: ApproveIn) -> ReviewPublic:
    """Approve the call as proposed (on a review that needs several people: the current round's args), with an
    optional rationale and payload answer, signed by you (`sig`). Until the quorum is reached the review stays
    `pending`, with your approval in `approvals`."""
    return ReviewPublic.of(
        decide.approve(
            desk,
            who,
            review_id,
            body.rationale,
            body.payload,
            sig_of(body),
            shown_round=body.round,
            payload_salt=body.payload_salt,
            acting_for=body.acting_for,
        )
    )


@router.post("/reviews/{review_id}/edit", response_model=ReviewPublic, responses=DECIDE_ERRORS)
def edit(desk: DeskDep, who: ApiReviewer, review_id: str, body: EditIn) -> ReviewPublic:
    """Approve with changed args, given as an RFC 6902 patch on the proposed args, signed by you (`sig`)."""
    return ReviewPublic.of(
        decide.edit(
            desk,
            who,
            review_id,
            body.patch,
            body.rationale,
            body.payload,
            sig_of(body),
            shown_round=body.round,
            salts=body.salts,
            payload_salt=body.payload_salt,
            acting_for=body.acting_for,
        )
    )


@router.post("/reviews/{review_id}/reject", response_model=ReviewPublic, responses=DECIDE_ERRORS)
def reject(desk: DeskDep, who: ApiReviewer, review_id: str, body: RejectIn) -> ReviewPublic:
    """Stop the call; the reason is what the model sees. Signed by you (`sig`)."""
    return ReviewPublic.of(decide.reject(desk, who, review_id, body.reason, sig_of(body), acting_for=body.acting_for))


CLAIM_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {"description": "Your role does not cover this tool, or you are disabled or only an observer"},
    404: ERRORS[404],
    409: {
        "description": "Someone else's claim still holds (`status` names them and until when), or the review "
        "is decided already; nothing recorded"
    },
}


@router.post("/reviews/{review_id}/claim", response_model=ClaimedOut, responses=CLAIM_ERRORS)
def claim(desk: DeskDep, who: ApiReviewer, review_id: str) -> ClaimedOut:
    """Say "I'm on it" (`review.claimed`): others see who is on the review until the claim lapses by itself
    (the policy's `claim_seconds`). Advice, not a lock: anyone who may decide still can. Claiming again
    renews your own claim; while someone else's holds, 409."""
    until = decide.claim(desk, who, review_id)  # a delegate claims for whom they would decide for
    return ClaimedOut(review=review_id, reviewer=who.reviewer, until=parse_time(until))


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
    """Log entries, newest first; entries about reviews outside your roles and tools are left out."""
    rows = list(
        desk.store.entries(stop=before, kind=kind, actor=actor, review=review, newest_first=True, limit=limit + 1)
    )
    more = len(rows) > limit
    rows = rows[:limit]
    shown = visible_entries(desk.scope(who), desk.tool_roles, rows)
    return LogPage(
        items=[EntryPublic.of(e) for e in shown],
        size=desk.store.size(),
        next_before=rows[-1].seq if more and rows else None,
    )


@router.get("/log/{seq}", response_model=EntryPublic, responses={404: {"description": "No such entry"}})
def log_entry(desk: DeskDep, who: ApiReviewer, seq: int) -> EntryPublic:
    return EntryPublic.of(readable_entry(desk, who, seq))


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
    """A signed tree head: a c2sp.org/tlog-checkpoint signed note (``note``: the origin, size and base64
    root lines, the log key's Ed25519 note signature and any witnesses' cosignatures), or, for one
    recorded before notes, the JSON ``{"log", "size", "root", "at"}`` signed by the log key (``sig``)."""

    log: str
    size: int
    root: str
    at: str
    note: str | None = None
    sig: dict[str, str] | None = None
    public_key: str
    vkey: str = Field(description="the log's verifier key (c2sp.org/signed-note), which checks the note")


def _cp_out(desk: Any, cp: Any) -> CheckpointOut:
    from signoff.audit.c2sp import log_vkey

    store = desk.store
    return CheckpointOut(
        **as_json(cp), public_key=store.public_key, vkey=log_vkey(store.rules.origin, store.public_key)
    )


@router.get("/checkpoints/latest", response_model=CheckpointOut, responses={404: {"description": "No checkpoint yet"}})
def latest_checkpoint(desk: DeskDep, who: ApiReviewer) -> CheckpointOut:
    """The latest signed tree head: a C2SP checkpoint note (RFC 9162 §2.1 tree head: size and root)."""
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


def readable_entry(desk: Any, who: Any, seq: int) -> Any:
    """Entry ``seq``, unless it is about a review outside the reader's roles and tools (then 404, as for none)."""
    if not 0 <= seq < desk.store.size():
        raise HTTPException(404, f"The log has no entry {seq}.")
    entry = desk.store.entry(seq)
    if not visible_entries(desk.scope(who), desk.tool_roles, [entry]):
        raise HTTPException(404, f"The log has no entry {seq} that you may read.")
    return entry


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
    readable_entry(desk, who, seq)
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
