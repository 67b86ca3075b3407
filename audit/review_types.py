"""The values the review service returns, and how a review projection row becomes one.

Frozen dataclasses (DESIGN.md "The review lifecycle"): a :class:`CallSpec` is one paused
tool call, a :class:`Review` its review, a :class:`Frontier` the reviews of one pause.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from signoff.audit import rules
from signoff.audit.canonical import digest
from signoff.audit.entry import parse_time
from signoff.audit.sealing import any_sealed


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
    requested_by: str = ""  # the human: on whose behalf the agent acted (the app's mapping of the ADK user)

    def to_json(self) -> dict[str, Any]:
        """The call as ``review.opened`` records it; objects and arrays are copies (``asdict`` costs 4x more).
        ``requested_by`` only when known (so a call without one is recorded as before)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if not self.requested_by:
            del data["requested_by"]
        for name, value in data.items():
            if isinstance(value, dict | list):
                data[name] = copy.deepcopy(value)
        data["args_digest"] = digest(self.args)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallSpec:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Policy:
    """The rules one review was opened under: the role that decides, the deadline, how many people must
    approve, and (when a ``policy.set`` on the log governs the tool) which policy, and its escalation."""

    role: str | None = None
    deadline_seconds: float | None = None
    approvals: int = 1
    name: str | None = None  # the log policy (policy.set) in force, named by name, seq and digest
    seq: int | None = None
    digest: str | None = None
    escalate: dict[str, Any] | None = None
    claim_seconds: float | None = None
    private: tuple[str, ...] | None = None  # sealed logs: the args members kept beside the log (None: all)
    retain_seconds: float | None = None  # sealed logs: how long its values are kept once it is done
    self_approval: bool = False  # the log's policy (an admin's) lets the requester approve their own call

    def to_json(self) -> dict[str, Any]:
        """As ``review.opened`` records it: the two original fields always, the others when set."""
        out: dict[str, Any] = {"role": self.role, "deadline_seconds": self.deadline_seconds}
        if self.self_approval:
            out["self_approval"] = True
        if self.approvals != 1:
            out["approvals"] = self.approvals
        for key in ("name", "seq", "digest", "escalate", "claim_seconds", "retain_seconds"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.private is not None:
            out["private"] = list(self.private)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Policy:
        names = set(cls.__dataclass_fields__)
        found = {k: v for k, v in (data or {}).items() if k in names}
        if isinstance(found.get("private"), list):
            found["private"] = tuple(found["private"])
        return cls(**found)


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
    approvals: tuple[tuple[str, int], ...] = ()  # (reviewer, seq) of this round's approvals (quorum)
    round: int = 0  # edits so far (each starts a round of approvals)
    round_args: dict[str, Any] | None = None  # the args the current round approves
    escalated_role: str | None = None
    claim: tuple[str, str] | None = None  # (reviewer, until): "I'm on it"
    round_payload: Any = None  # the answer the round's first approval gave (its later ones must give it too)
    resume_failed: str = ""  # why its call will not run (a run.resume_failed names it), if one does
    # Sealed logs (SPEC.md "Values beside the log"): the values above are revealed from beside the log.
    sealed: bool = False  # its entries hold commitments in place of its values
    sealed_round_args: dict[str, Any] | None = None  # the round's args as the entries hold them (sealed)
    round_payload_salt: str | None = None  # hex salt of the round's answer (a later approval reuses it)
    erasures: tuple[tuple[str, str, str], ...] = ()  # (at, by, reason) of each data.erased naming it
    erased: frozenset[str] = frozenset()  # the commitments erased (their values are gone)
    delegated: tuple[tuple[int, str], ...] = ()  # (seq, delegator) of each decision a delegate made for them

    @property
    def approvals_needed(self) -> int:
        return self.policy.approvals

    def acting_for(self, seq: int | None) -> str | None:
        """The delegator the decision at ``seq`` was made for (rule 2b), if a delegate made it."""
        return next((who for at, who in self.delegated if at == seq), None)

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
    claim: Any = None  # its run.resumed entry (an audit.entry.Entry), when read from the log
    replied: bool = False  # a run.replied follows the resume

    @property
    def decided(self) -> bool:
        return all(review.final for review in self.reviews)


def review_from_row(row: Any, resumed: bool) -> Review:
    data = json.loads(row.data)
    call = CallSpec.from_json(data["call"])
    progress = data.get("progress") or {}
    approvals = progress.get("approvals") if row.status == "pending" else data.get("approvals")
    claim = data.get("claim")
    return Review(
        id=row.id,
        frontier=row.frontier,
        status=row.status,
        call=call,
        args_digest=row.args_digest,
        policy=Policy.from_json(data.get("policy")),
        deadline=parse_time(row.deadline) if row.deadline else None,
        opened_at=parse_time(row.opened_at),
        opened_seq=row.opened_seq,
        decided_at=parse_time(row.decided_at) if row.decided_at else None,
        decided_by=row.decided_by,
        decision_seq=row.decided_seq,
        final_args=data.get("final_args"),
        patch=data.get("patch") if row.status != "pending" else progress.get("patch"),
        rationale=data.get("rationale", ""),
        reason=data.get("reason", ""),
        answer_payload=data.get("answer_payload"),
        executed=row.executed_seq is not None,
        resumed=resumed,
        approvals=_approvals(row, approvals),
        round=int(progress.get("round", 0)),
        round_args=progress.get("args") or (call.args if row.status == "pending" else None),
        escalated_role=data.get("escalated_role"),
        claim=(claim["reviewer"], claim["until"]) if isinstance(claim, dict) else None,
        round_payload=progress.get("payload") if row.status == "pending" else None,
        sealed=any_sealed(data["call"]),
        sealed_round_args=(progress.get("args") or call.args) if row.status == "pending" else None,
        delegated=_delegated(row, data, approvals),
    )


def _delegated(row: Any, data: dict[str, Any], listed: Any) -> tuple[tuple[int, str], ...]:
    """(seq, delegator) of the decisions a delegate made for someone (rule 2b), as the row lists them."""
    found = {int(a["seq"]): str(a["for"]) for a in listed or [] if isinstance(a.get("for"), str)}
    if isinstance(data.get("acting_for"), str) and row.decided_seq is not None:
        found[int(row.decided_seq)] = data["acting_for"]
    return tuple(sorted(found.items()))


def _approvals(row: Any, listed: Any) -> tuple[tuple[str, int], ...]:
    """The current round's approvals (a quorum's are listed; a one-person decision is its decider's),
    the same as the log replay gives (:func:`signoff.audit.decided.review_from_entries`)."""
    if listed:
        return tuple((a["by"], int(a["seq"])) for a in listed)
    if row.status in ("approved", "edited") and row.decided_by is not None:
        return ((str(row.decided_by), int(row.decided_seq)),)
    return ()


def closed_review(row: Any, closed: dict[str, Any]) -> Review:
    """The review as the closing transaction left it, without reading it back. A review that
    was open cannot belong to a resumed frontier (rule 5)."""
    return review_from_row(SimpleNamespace(**{**row._asdict(), **closed}), resumed=False)


def state_from_row(row: Any) -> rules.ReviewState:
    data = json.loads(row.data)
    call = data["call"]
    policy = Policy.from_json(data.get("policy"))
    progress = data.get("progress") or {}
    round_ = int(progress.get("round", 0))
    pending = row.status == "pending"
    args = (progress["args"] if round_ else call["args"]) if pending else None
    claim = data.get("claim")
    return rules.ReviewState(
        id=row.id,
        frontier=row.frontier,
        tool=row.tool,
        status=row.status,
        args=args,
        args_digest=digest(progress["args"]) if pending and round_ else row.args_digest,
        role=policy.role,
        deadline=row.deadline,
        schema=call.get("tool_schema"),
        final_digest=row.final_digest,
        executed=row.executed_seq is not None,
        approvals_needed=policy.approvals,
        round=round_,
        approvers=tuple(a["by"] for a in progress.get("approvals") or []),
        seats=tuple(str(a["for"]) for a in progress.get("approvals") or [] if isinstance(a.get("for"), str)),
        round_payload=progress.get("payload"),
        escalated_role=data.get("escalated_role"),
        claim=(claim["reviewer"], claim["until"]) if isinstance(claim, dict) else None,
        requested_by=call.get("requested_by") or None,
        self_approval=policy.self_approval is True,
    )


def reviewer_info(row: Any) -> ReviewerInfo:
    return ReviewerInfo(row.id, tuple(json.loads(row.roles)), tuple(json.loads(row.tools)), bool(row.enabled))
