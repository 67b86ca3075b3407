"""The values the review service returns, and how a review projection row becomes one.

Frozen dataclasses (DESIGN.md "The review lifecycle"): a :class:`CallSpec` is one paused
tool call, a :class:`Review` its review, a :class:`Frontier` the reviews of one pause.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from signoff.audit import rules
from signoff.audit.canonical import digest
from signoff.audit.entry import parse_time


@dataclass(frozen=True)
class CallSpec:
    """One paused tool call, as the bridge saw it."""

    app: str
    user: str
    session: str
    invocation: str
    confirmation_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    hint: str = ""
    payload: Any = None
    agent: str = ""
    node_path: str = ""
    context: dict[str, str] = field(default_factory=dict)
    tool_description: str = ""
    tool_schema: dict[str, Any] | None = None
    kind: str = "confirmation"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["args_digest"] = digest(self.args)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallSpec:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Policy:
    role: str | None = None
    deadline_seconds: float | None = None


@dataclass(frozen=True)
class ReviewerInfo:
    id: str
    roles: tuple[str, ...]
    tools: tuple[str, ...]
    enabled: bool

    def state(self) -> rules.ReviewerState:
        return rules.ReviewerState(self.id, self.roles, self.tools, self.enabled)


@dataclass(frozen=True)
class Review:
    id: str
    frontier: str
    status: str
    call: CallSpec
    args_digest: str
    policy: Policy
    deadline: datetime | None
    opened_at: datetime
    opened_seq: int
    decided_at: datetime | None
    decided_by: str | None
    decision_seq: int | None
    final_args: dict[str, Any] | None
    patch: list[Any] | None
    rationale: str
    reason: str
    answer_payload: Any
    executed: bool
    resumed: bool
    problem: str = ""  # what is wrong with the decision on the log (tampered); it then runs nothing

    @property
    def final(self) -> bool:
        return self.status in rules.FINAL

    @property
    def tool(self) -> str:
        return self.call.tool


@dataclass(frozen=True)
class Frontier:
    id: str
    reviews: tuple[Review, ...]
    resumed: bool

    @property
    def decided(self) -> bool:
        return all(review.final for review in self.reviews)


def review_from_row(row: Any, resumed: bool) -> Review:
    data = json.loads(row.data)
    policy = Policy(**data.get("policy", {}))
    return Review(
        id=row.id,
        frontier=row.frontier,
        status=row.status,
        call=CallSpec.from_json(data["call"]),
        args_digest=row.args_digest,
        policy=policy,
        deadline=parse_time(row.deadline) if row.deadline else None,
        opened_at=parse_time(row.opened_at),
        opened_seq=row.opened_seq,
        decided_at=parse_time(row.decided_at) if row.decided_at else None,
        decided_by=row.decided_by,
        decision_seq=row.decided_seq,
        final_args=data.get("final_args"),
        patch=data.get("patch"),
        rationale=data.get("rationale", ""),
        reason=data.get("reason", ""),
        answer_payload=data.get("answer_payload"),
        executed=row.executed_seq is not None,
        resumed=resumed,
    )


def closed_review(row: Any, closed: dict[str, Any]) -> Review:
    """The review as the closing transaction left it, without reading it back. A review that
    was open cannot belong to a resumed frontier (rule 5)."""
    return review_from_row(SimpleNamespace(**{**row._asdict(), **closed}), resumed=False)


def state_from_row(row: Any) -> rules.ReviewState:
    data = json.loads(row.data)
    call = data["call"]
    return rules.ReviewState(
        id=row.id,
        frontier=row.frontier,
        tool=row.tool,
        status=row.status,
        args=call["args"] if row.status == "pending" else None,
        args_digest=row.args_digest,
        role=data.get("policy", {}).get("role"),
        deadline=row.deadline,
        schema=call.get("tool_schema"),
        final_digest=row.final_digest,
        executed=row.executed_seq is not None,
    )


def reviewer_info(row: Any) -> ReviewerInfo:
    return ReviewerInfo(row.id, tuple(json.loads(row.roles)), tuple(json.loads(row.tools)), bool(row.enabled))
