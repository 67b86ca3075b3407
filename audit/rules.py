"""The review lifecycle rules (DESIGN.md "The review lifecycle", rules 1–6), as pure functions.

The review service calls these inside the transaction that writes each entry, against
state read after the head lock; ``audit verify`` calls the very same functions while it
streams the log. Plain data in, a new state or a specific :class:`ReviewError` out.

Over ~400 lines on purpose: every rule of SPEC.md §7 in one place, so that the write path and the
verifier cannot drift apart.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, fields
from typing import Any

import jsonpatch

from signoff.audit.canonical import check, digest
from signoff.audit.entry import OUTCOMES
from signoff.audit.errors import (
    AlreadyApproved,
    AlreadyResumed,
    Claimed,
    DeadlinePassed,
    ExecutionMismatch,
    FrontierNotReady,
    MissingReason,
    NotAllowed,
    OtherAnswer,
    PatchFailed,
    ReviewClosed,
    SelfApproval,
    StaleRound,
    UnknownReview,
)
from signoff.audit.schema import check_args
from signoff.audit.sealing import is_commitment

FINAL = frozenset(OUTCOMES.values()) | {"closed", "auto_approved"}  # "closed": folded away by the verifier
RUNNABLE = frozenset({"approved", "edited", "auto_approved"})


@dataclass(frozen=True)
class ReviewerState:
    id: str
    roles: tuple[str, ...]
    tools: tuple[str, ...]
    enabled: bool = True


@dataclass(frozen=True)
class ReviewState:
    """What the rules need to know of one review."""

    id: str
    frontier: str
    tool: str
    status: str
    args: dict[str, Any] | None  # the opened args; dropped once the review is final
    args_digest: str
    role: str | None
    deadline: str | None
    schema: dict[str, Any] | None = None
    final_digest: str | None = None
    executed: bool = False
    failed: bool = False  # a run.resume_failed names it: its call is never run (or run again)
    # Quorum (a policy's ``approvals``): the round's args and digest are ``args``/``args_digest``; an
    # edit starts a new round, and the round's approvers (the editor first) count toward the quorum.
    approvals_needed: int = 1
    round: int = 0
    approvers: tuple[str, ...] = ()
    round_payload: Any = None
    escalated_role: str | None = None
    claim: tuple[str, str] | None = None  # (reviewer, until)
    requested_by: str | None = None  # on whose behalf the agent acted (a human:), when the app said
    self_approval: bool = False  # the log's policy in force lets that person approve it anyway
    seats: tuple[str, ...] = ()  # the delegators the round's delegated approvals sat for (rule 2b)

    def roles_that_decide(self) -> tuple[str | None, ...]:
        """The review's role, and the role it was escalated to (either may decide)."""
        return (self.role,) if self.escalated_role is None else (self.role, self.escalated_role)


_FIELDS = frozenset(f.name for f in fields(ReviewState))


def evolve(state: ReviewState, **changes: Any) -> ReviewState:
    """A copy of ``state`` with ``changes``, as ``dataclasses.replace`` makes it, at a fifth of its cost.

    ``replace`` runs the frozen ``__init__``, one ``object.__setattr__`` per field (22 of them), for
    every decision and execution ``audit verify`` replays (issue 24: 11% of verify). The copy is a new
    object; ``state`` is untouched, so the rules stay pure. A name that is not a field raises
    ``TypeError``, as ``replace`` does."""
    unknown = changes.keys() - _FIELDS
    if unknown:
        raise TypeError(f"ReviewState has no field {sorted(unknown)[0]!r}")
    new = object.__new__(ReviewState)
    new.__dict__.update(state.__dict__, **changes)
    return new


OBSERVER = "observer"  # a role that reads every review in the desk and decides none


def covers(reviewer: ReviewerState, tool: str, role: str | None) -> bool:
    """Rule 2: an enabled reviewer whose roles include the review's role and whose globs match the tool.
    The ``observer`` role grants no decision: a reviewer with no other role decides nothing."""
    if not reviewer.enabled:
        return False
    deciding = [r for r in reviewer.roles if r != OBSERVER]
    if not deciding:
        return False
    if role is not None and role not in deciding and "admin" not in deciding:
        return False
    return not reviewer.tools or any(fnmatch.fnmatchcase(tool, glob) for glob in reviewer.tools)


def check_decider(actor: str, reviewer: ReviewerState | None, state: ReviewState) -> None:
    """Rule 2: decisions come from an enrolled, enabled ``human:`` whose role covers the tool."""
    if not actor.startswith("human:"):
        raise NotAllowed(f"decider: expected a human: actor, found {actor!r} (agents and services never decide)")
    if reviewer is None:
        raise NotAllowed(f"decider: expected an enrolled reviewer, found {actor!r} not enrolled")
    if not reviewer.enabled:
        raise NotAllowed(f"decider: expected an enabled reviewer, found {actor!r} disabled")
    if not any(covers(reviewer, state.tool, role) for role in state.roles_that_decide()):
        need = " or ".join(f"role {role!r}" for role in state.roles_that_decide() if role) or "any role"
        raise NotAllowed(
            f"decider: expected a reviewer covering tool {state.tool!r} with {need}, "
            f"found {actor!r} with roles {list(reviewer.roles)} and tools {list(reviewer.tools) or ['*']}"
        )


def check_open(state: ReviewState | None, review_id: str) -> ReviewState:
    """Rule 1: a decision names an open review."""
    if state is None:
        raise UnknownReview(review_id)
    if state.status != "pending":
        raise ReviewClosed(review_id, state.status)
    return state


def check_deadline(state: ReviewState, at: str) -> None:
    """Rule 4: no decision at or after the deadline (timestamps share one fixed UTC format)."""
    if state.deadline is not None and at >= state.deadline:
        raise DeadlinePassed(state.id, state.deadline, at)


def patched_args(args: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Apply an RFC 6902 patch (via ``jsonpatch``) to a copy of ``args``; rule 3."""
    if not isinstance(patch, list) or not patch:
        raise PatchFailed(f"patch: expected a non-empty RFC 6902 list of operations, found {patch!r:.80}")
    for index, op in enumerate(patch):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchFailed(f"patch[{index}]: expected an object with 'op' and 'path', found {op!r:.80}")
    try:
        result = jsonpatch.JsonPatch(patch).apply(args, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, ValueError) as exc:
        raise PatchFailed(f"patch: expected operations that apply to the opened args, found: {exc}") from None
    if not isinstance(result, dict):
        raise PatchFailed(f"patch: expected the patched args to stay an object, found {type(result).__name__}")
    check(result, "$.args")
    return result


def decide(
    state: ReviewState | None,
    review_id: str,
    kind: str,
    actor: str,
    body: dict[str, Any],
    at: str,
    reviewer: ReviewerState | None,
) -> tuple[ReviewState, dict[str, Any] | None]:
    """Rules 1–4 for ``review.approved`` / ``review.edited`` / ``review.rejected``.

    Returns the new state and the args the tool is to run with (``None`` for a rejection).
    """
    current = check_open(state, review_id)
    check_decider(actor, reviewer, current)
    acting_for = body.get("acting_for")  # rule 2b: the caller checked the delegation into ``reviewer``
    if kind != "review.rejected" and current.requested_by and not current.self_approval:
        if actor == current.requested_by:
            raise SelfApproval(
                f"review {review_id}: expected an approver other than the person who asked for the call, found "
                f"{actor} approving their own request (they may reject it; a log policy with self_approval lets them)"
            )
        if acting_for == current.requested_by:
            raise SelfApproval(
                f"review {review_id}: expected an approver other than the person who asked for the call, found "
                f"{actor} approving for {acting_for}, their own request (a delegate may reject it)"
            )
    check_deadline(current, at)
    quorum = current.approvals_needed > 1
    if quorum and kind != "review.rejected" and body.get("round") != current.round:
        raise StaleRound(
            f"review {review_id}: expected a decision on round {current.round} (it needs "
            f"{current.approvals_needed} approvals), found round {body.get('round')!r}"
        )
    if kind == "review.approved":
        if body.get("args_digest") != current.args_digest:
            raise ExecutionMismatch(
                f"review {review_id}: expected the approval of args {current.args_digest}, "
                f"found {body.get('args_digest')}"
            )
        if actor in current.approvers:
            raise AlreadyApproved(
                f"review {review_id}: expected approvals by {current.approvals_needed} different people, "
                f"found {actor} approving round {current.round} twice"
            )
        _check_seat(current, review_id, actor, acting_for)
        if current.approvers and body.get("payload") != current.round_payload:
            raise OtherAnswer(
                f"review {review_id}: expected the same answer as the round's earlier approval "
                f"({current.round_payload!r}), found {body.get('payload')!r}; edit to change it"
            )
        return _approved_by(current, actor, body.get("payload"), seat=acting_for)
    if kind == "review.edited":
        if current.args is None:
            raise PatchFailed(f"review {review_id}: expected opened args to patch, found none")
        result = patched_args(current.args, body.get("patch"))
        if not any(is_commitment(v) for v in result.values()):  # sealed args: checked on the values, at write
            check_args(current.schema, result)
        found = digest(result)
        if body.get("args_digest") != found:
            raise PatchFailed(
                f"review {review_id}: expected args_digest {found} of the patched args, found {body.get('args_digest')}"
            )
        # A new round on the edited args; the editor's own approval counts as its first.
        fresh = evolve(current, args=result, args_digest=found, round=current.round + 1, approvers=(), seats=())
        return _approved_by(fresh, actor, body.get("payload"), edited=True, seat=acting_for)
    if kind == "review.rejected":
        reason = body.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"review {review_id}: expected a reason for the rejection, found {reason!r}")
        return evolve(current, status="rejected", args=None), None
    raise ValueError(f"kind: expected a decision kind, found {kind!r}")


def _check_seat(state: ReviewState, review_id: str, actor: str, acting_for: Any) -> None:
    """Rule 2b in a quorum: a delegate sits in their delegator's seat, so a round counts each person once,
    whether they approve themselves or someone approves for them."""
    if actor in state.seats:
        raise AlreadyApproved(
            f"review {review_id}: expected approvals by {state.approvals_needed} different people, found {actor} "
            f"approving round {state.round}, in which a delegate approved for them already"
        )
    if isinstance(acting_for, str) and acting_for in set(state.approvers) | set(state.seats):
        raise AlreadyApproved(
            f"review {review_id}: expected approvals by {state.approvals_needed} different people, found {actor} "
            f"approving for {acting_for}, who counted in round {state.round} already"
        )


def _approved_by(
    state: ReviewState, actor: str, payload: Any, *, edited: bool = False, seat: Any = None
) -> tuple[ReviewState, dict[str, Any] | None]:
    """One more approval of the round; the review is decided when the round has its quorum. ``seat``: the
    delegator the approver acted for (rule 2b), who counts as having approved."""
    approvers = (*state.approvers, actor)
    if isinstance(seat, str):
        state = evolve(state, seats=(*state.seats, seat))
    if len(approvers) < state.approvals_needed:
        return evolve(state, approvers=approvers, round_payload=payload), None
    status = "edited" if edited or state.round > 0 else "approved"
    decided = evolve(state, status=status, final_digest=state.args_digest, approvers=approvers, args=None)
    return evolve(decided, round_payload=payload), state.args


def auto_approve(policy_found: Any, policy_named: Any, needs_person: bool, why: str) -> None:
    """``review.auto_approved``: the policy in force for the tool lets the call through without a person.
    ``policy_found`` is the policy in force when the entry was written, ``policy_named`` the one it names."""
    if policy_found is None or policy_named is None:
        raise NotAllowed(f"policy: expected a policy in force with a review_when rule, found {policy_named!r}")
    if (policy_found.name, policy_found.seq, policy_found.digest) != (
        policy_named.get("name"), policy_named.get("seq"), policy_named.get("digest"),
    ):  # fmt: skip
        raise NotAllowed(
            f"policy: expected the policy in force, {policy_found.name} at seq {policy_found.seq}, "
            f"found {policy_named!r}"
        )
    if needs_person:
        raise NotAllowed(f"policy {policy_found.name}: expected its rule to let the call through, found: {why}")


def escalate(state: ReviewState | None, review_id: str, to_role: Any, at: str, due: str) -> ReviewState:
    """``review.escalated``: a review still open at its policy's escalation time goes to another role, once."""
    current = check_open(state, review_id)
    if current.escalated_role is not None:
        raise ReviewClosed(review_id, f"escalated already to {current.escalated_role}")
    if not isinstance(to_role, str) or not to_role:
        raise NotAllowed(f"review {review_id}: expected the role its policy escalates to, found {to_role!r}")
    if at < due:
        raise DeadlinePassed(review_id, due, f"{at} (escalation before its time)")
    return evolve(current, escalated_role=to_role)


def claim(
    state: ReviewState | None, review_id: str, reviewer: str, who: ReviewerState | None, at: str, until: Any
) -> ReviewState:
    """``review.claimed`` ("I'm on it"): by a reviewer who may decide it, while nobody else's claim holds."""
    current = check_open(state, review_id)
    check_decider(reviewer, who, current)
    if not isinstance(until, str) or until <= at:
        raise NotAllowed(f"review {review_id}: expected a claim that lasts past {at}, found until {until!r}")
    if current.claim is not None and current.claim[0] != reviewer and current.claim[1] > at:
        raise Claimed(review_id, current.claim[0], current.claim[1])
    return evolve(current, claim=(reviewer, until))


def expire(state: ReviewState | None, review_id: str, at: str) -> ReviewState:
    """Rules 1 and 4: only an open review whose deadline has passed expires."""
    current = check_open(state, review_id)
    if current.deadline is None or at < current.deadline:
        raise DeadlinePassed(review_id, str(current.deadline), f"{at} (expiry before the deadline)")
    return evolve(current, status="expired", args=None)


def withdraw(state: ReviewState | None, review_id: str, actor: str, reason: Any) -> ReviewState:
    """Rule 1: an agent or service withdraws an open review, with a reason."""
    current = check_open(state, review_id)
    if not (actor.startswith("agent:") or actor.startswith("service:")):
        raise NotAllowed(f"withdrawer: expected an agent: or service: actor, found {actor!r}")
    if not isinstance(reason, str) or not reason.strip():
        raise MissingReason(f"review {review_id}: expected a reason for the withdrawal, found {reason!r}")
    return evolve(current, status="withdrawn", args=None)


def resume(
    frontier: str, statuses: dict[str, str], resumed_at: int | None, abandoned: tuple[str, int] | None = None
) -> None:
    """Rule 5: ``run.resumed`` follows only a fully decided frontier, at most once, and never one whose
    run is gone (``abandoned``: the kind and seq of its ``run.rewound`` or ``run.cancelled``)."""
    if abandoned is not None:
        kind, seq = abandoned
        raise AlreadyResumed(
            f"frontier {frontier}: expected a run that still holds its pause, found {kind} at seq {seq} "
            f"({_GONE.get(kind, 'the run is gone')}; nothing of it is resumed)"
        )
    if resumed_at is not None:
        raise AlreadyResumed(f"frontier {frontier}: expected no earlier resume, found run.resumed at seq {resumed_at}")
    if not statuses:
        raise FrontierNotReady(f"frontier {frontier}: expected reviews, found none")
    waiting = sorted(rid for rid, status in statuses.items() if status not in FINAL)
    if waiting:
        raise FrontierNotReady(f"frontier {frontier}: expected every review final, found {waiting} still pending")


def execute(state: ReviewState | None, review_id: str, args_digest: Any) -> ReviewState:
    """Rule 6: ``tool.executed`` follows only an approval or edit, once, with the approved digest."""
    if state is None:
        raise UnknownReview(review_id)
    if state.status not in RUNNABLE:
        raise ExecutionMismatch(
            f"review {review_id}: expected an approved, edited or auto-approved review, found it {state.status}"
        )
    if state.executed:
        raise ExecutionMismatch(f"review {review_id}: expected one execution, found it already executed")
    if state.failed:
        raise ExecutionMismatch(
            f"review {review_id}: expected no execution after run.resume_failed, run.rewound or run.cancelled "
            "named it, found tool.executed"
        )
    if args_digest != state.final_digest:
        raise ExecutionMismatch(
            f"review {review_id}: expected the tool to run with args {state.final_digest}, found {args_digest}"
        )
    return evolve(state, executed=True)


def resume_failed(frontier: str, actor: str, resumed_seq: int | None, named: Any, open_calls: dict[str, bool]) -> None:
    """``run.resume_failed``: an agent or service says that the calls of a resumed frontier named in
    ``reviews`` will not run (sending the answer failed, or the record of a call that ran was refused).
    ``open_calls``: the frontier's approved reviews, each mapped to whether it may still run (not
    executed, not named by an earlier ``run.resume_failed``). Once named, a call never runs (rule 6)."""
    if not actor.startswith(("agent:", "service:")):
        raise NotAllowed(f"actor: expected an agent: or service: actor, found {actor!r}")
    if resumed_seq is None:
        raise FrontierNotReady(f"frontier {frontier}: expected run.resumed before run.resume_failed, found no resume")
    if not isinstance(named, list) or not named or not all(isinstance(r, str) for r in named):
        raise ExecutionMismatch(f"frontier {frontier}: expected the reviews whose calls failed, found {named!r}")
    for review_id in named:
        if not open_calls.get(review_id, False):
            raise ExecutionMismatch(
                f"frontier {frontier}: expected {review_id} an approved call of it that has neither run nor failed"
            )


_GONE = {"run.rewound": "the run went back before it", "run.cancelled": "the run was cancelled"}


def abandon(kind: str, frontier: str, actor: str, statuses: dict[str, str], closed_at: int | None, named: Any) -> None:
    """``run.rewound`` / ``run.cancelled`` (rule 5a): an agent or service says that the run of a frontier
    not yet resumed is gone: it went back before its pause (ADK's ``Runner.rewind_async``), or it was
    cancelled and ADK sealed the pause (``INVOCATION_ABORTED``). Once per frontier; it names exactly the
    frontier's reviews, and each is final by then (the open ones withdrawn in the same transaction). Its
    approved calls never run: no ``run.resumed`` and no ``tool.executed`` follows for them."""
    if not actor.startswith(("agent:", "service:")):
        raise NotAllowed(f"actor: expected an agent: or service: actor, found {actor!r}")
    if closed_at is not None:
        raise AlreadyResumed(
            f"frontier {frontier}: expected a frontier neither resumed, rewound nor cancelled, found one at seq "
            f"{closed_at} (after the resume, the run's end is recorded as run.resume_failed)"
        )
    if not isinstance(named, list) or sorted(map(str, named)) != sorted(statuses) or len(named) != len(statuses):
        raise FrontierNotReady(f"frontier {frontier}: expected its reviews {sorted(statuses)}, found {named!r}")
    waiting = sorted(rid for rid, status in statuses.items() if status not in FINAL)
    if waiting:
        raise FrontierNotReady(
            f"frontier {frontier}: expected every review final before {kind} (open ones withdrawn), "
            f"found {waiting} still pending"
        )


def executed_after_resume(review_id: str, resumed_seq: int | None) -> None:
    """Rule 6 (rules version 2): a tool runs only in a run that was resumed with the decision, so its
    ``tool.executed`` follows its frontier's ``run.resumed``."""
    if resumed_seq is None:
        raise ExecutionMismatch(
            f"review {review_id}: expected its run resumed (run.resumed) before the tool ran, found no resume"
        )


def reply(frontier: str, resumed_seq: int | None, *, replied: bool) -> None:
    """``run.replied`` (rules version 2) follows its frontier's ``run.resumed``, once."""
    if resumed_seq is None:
        raise FrontierNotReady(f"frontier {frontier}: expected run.resumed before run.replied, found no resume")
    if replied:
        raise AlreadyResumed(f"frontier {frontier}: expected one run.replied, found one already")


def opened_data(body: dict[str, Any]) -> dict[str, Any]:
    """The review projection's ``data`` for a ``review.opened`` body: the call and its policy."""
    return {"call": body["call"], "policy": body.get("policy") or {}}


def auto_data(body: dict[str, Any]) -> dict[str, Any]:
    """The projection's ``data`` of an auto-approved call: the call, the policy, and why no person was asked."""
    call = body["call"]
    return {"call": call, "policy": body["policy"], "inputs": body["inputs"], "final_args": call["args"]}


def _approval(by: str, seq: int, acting_for: Any) -> dict[str, Any]:
    """One approval as the projection lists it: who, at which seq, and for whom (a delegate's, rule 2b)."""
    return {"by": by, "seq": seq, "for": acting_for} if isinstance(acting_for, str) else {"by": by, "seq": seq}


def progress_data(
    data: dict[str, Any], state: ReviewState, by: str, seq: int, patch: Any = None, acting_for: Any = None
) -> dict[str, Any]:
    """The projection's ``data`` after an approval or edit that did not reach the quorum yet; ``patch``
    is the edit that started this round; ``acting_for`` the delegator of a delegate's approval."""
    out = dict(data)
    before = data.get("progress") or {}
    same_round = state.round == int(before.get("round", 0))
    earlier = list(before.get("approvals") or []) if same_round else []
    progress: dict[str, Any] = {"round": state.round, "approvals": [*earlier, _approval(by, seq, acting_for)]}
    if state.round:
        progress["args"] = state.args
        progress["patch"] = patch if patch is not None else before.get("patch")
    if state.round_payload is not None:
        progress["payload"] = state.round_payload
    out["progress"] = progress
    return out


def closed_data(
    data: dict[str, Any], kind: str, body: dict[str, Any], final_args: dict[str, Any] | None, by: str = "", seq: int = 0
) -> dict[str, Any]:
    """The projection's ``data`` once a closing entry lands: what the opened call was, and what was decided."""
    out = {"call": data["call"], "policy": data["policy"]}
    if data.get("escalated_role"):
        out["escalated_role"] = data["escalated_role"]
    if isinstance(body.get("acting_for"), str):  # a delegate decided (rule 2b)
        out["acting_for"] = body["acting_for"]
    if kind in ("review.approved", "review.edited"):
        out["final_args"] = final_args
        out["rationale"] = body.get("rationale", "")
        out["answer_payload"] = body.get("payload")
        progress = data.get("progress") or {}
        if kind == "review.edited":
            out["patch"] = body.get("patch")
        elif progress.get("round"):  # the quorum's last approval of an edited round: its edit made it
            out["patch"] = progress.get("patch")
        if int((data.get("policy") or {}).get("approvals", 1)) > 1:
            same_round = kind == "review.approved" and int(body.get("round", 0)) == int(progress.get("round", 0))
            earlier = list(progress.get("approvals") or []) if same_round else []
            out["approvals"] = [*earlier, _approval(by, seq, body.get("acting_for"))]
    elif kind == "review.expired":
        out["reason"] = "deadline passed"
    else:
        out["reason"] = body.get("reason")
    return out
