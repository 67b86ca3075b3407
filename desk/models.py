"""Wire models for the JSON API. Internal values (``audit.Review``, ``audit.Entry``) are
frozen dataclasses; these pydantic models are what leaves the process. Routes never return
a dataclass or a table row directly."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class CallPublic(BaseModel):
    app: str
    user: str
    session: str
    invocation: str
    confirmation_id: str
    call_id: str
    tool: str
    tool_description: str = ""
    tool_schema: dict[str, Any] | None = None
    args: dict[str, Any]
    hint: str = ""
    payload: Any = None
    agent: str = ""
    node_path: str = ""
    context: dict[str, str] = {}
    kind: str = "confirmation"


class ReviewPublic(BaseModel):
    id: str
    frontier: str
    status: str
    tool: str
    agent: str
    call: CallPublic
    args_digest: str
    role: str | None = None
    deadline: datetime | None = None
    opened_at: datetime
    opened_seq: int
    decided_at: datetime | None = None
    decided_by: str | None = None
    decision_seq: int | None = None
    final_args: dict[str, Any] | None = None
    patch: list[Any] | None = None
    rationale: str = ""
    reason: str = ""
    answer_payload: Any = None
    executed: bool = False
    resumed: bool = False

    @classmethod
    def of(cls, r: Any) -> ReviewPublic:
        c = r.call
        return cls(
            id=r.id,
            frontier=r.frontier,
            status=r.status,
            tool=c.tool,
            agent=c.agent,
            call=CallPublic(
                app=c.app,
                user=c.user,
                session=c.session,
                invocation=c.invocation,
                confirmation_id=c.confirmation_id,
                call_id=c.call_id,
                tool=c.tool,
                tool_description=c.tool_description,
                tool_schema=c.tool_schema,
                args=c.args,
                hint=c.hint,
                payload=c.payload,
                agent=c.agent,
                node_path=c.node_path,
                context=dict(c.context or {}),
                kind=c.kind,
            ),
            args_digest=r.args_digest,
            role=getattr(r.policy, "role", None),
            deadline=r.deadline,
            opened_at=r.opened_at,
            opened_seq=r.opened_seq,
            decided_at=r.decided_at,
            decided_by=r.decided_by,
            decision_seq=r.decision_seq,
            final_args=r.final_args,
            patch=r.patch,
            rationale=r.rationale or "",
            reason=r.reason or "",
            answer_payload=r.answer_payload,
            executed=r.executed,
            resumed=r.resumed,
        )


class ReviewDetail(ReviewPublic):
    frontier_reviews: list[ReviewPublic] = []
    can_decide: bool = False


class ReviewPage(BaseModel):
    items: list[ReviewPublic]
    total: int
    limit: int
    offset: int


class ApproveIn(BaseModel):
    rationale: str = Field("", max_length=10_000)
    payload: Any = None


class EditIn(BaseModel):
    patch: list[dict[str, Any]] = Field(description="RFC 6902 JSON Patch on the call's args")
    rationale: str = Field("", max_length=10_000)
    payload: Any = None


class RejectIn(BaseModel):
    reason: str = Field(min_length=1, max_length=10_000)


class EntryPublic(BaseModel):
    seq: int
    log: str
    prev: str
    at: str
    actor: str
    kind: str
    body: dict[str, Any]
    sig: dict[str, Any] | None = None
    hash: str

    @classmethod
    def of(cls, e: Any) -> EntryPublic:
        return cls(
            seq=e.seq,
            log=e.log,
            prev=e.prev,
            at=e.at,
            actor=e.actor,
            kind=e.kind,
            body=e.body,
            sig=e.sig,
            hash=e.hash,
        )


class LogPage(BaseModel):
    items: list[EntryPublic]
    size: int
    next_before: int | None = None


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return "sha256:" + v.hex() if len(v) == 32 else base64.b64encode(v).decode()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, datetime):
        return v.isoformat()
    return v


def as_json(obj: Any) -> dict[str, Any]:
    """A JSON object for an audit value (Checkpoint, InclusionProof): prefer its own
    ``to_json``, else its dataclass fields."""
    if obj is None:
        return {}
    if hasattr(obj, "to_json"):
        return _jsonable(obj.to_json())
    import dataclasses

    if dataclasses.is_dataclass(obj):
        return _jsonable(dataclasses.asdict(obj))  # type: ignore[arg-type]
    return _jsonable(dict(obj))


class RulesCheck(BaseModel):
    ok: bool | None = Field(description="None until the first run finishes")
    verified_upto: int | None
    checked_from: int
    checkpoint_size: int | None
    failure: str | None
    running: bool


class Verification(BaseModel):
    """Hash chain and Merkle roots (checked by the desk on every request, incrementally), and
    ``rules``: audit's full verifier run incrementally from the latest signed checkpoint."""

    ok: bool
    verified_upto: int | None = Field(None, description="highest seq verified; None when the log is empty")
    size: int
    checkpoint_size: int | None = None
    error: str | None = None
    rules: RulesCheck | None = None


class Me(BaseModel):
    reviewer: str
    roles: list[str]
    tools: list[str]
    enabled: bool


class Health(BaseModel):
    ok: bool
    log: str
    size: int
