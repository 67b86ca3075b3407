"""The rules' review state stays pure while :func:`rules.evolve` makes its copies cheaply (issue 24).

``evolve`` takes the place of ``dataclasses.replace`` on the rules' hot path; these tests hold it to
``replace``'s behaviour: a new object, the old one untouched, the same fields, and an unknown field refused.
"""

from __future__ import annotations

import dataclasses

import pytest

from signoff.audit import rules
from signoff.audit.errors import AlreadyApproved, ReviewClosed, SelfApproval

AT = "2026-01-01T00:00:00.000000Z"
APPROVE = {"args_digest": "sha256:aa", "round": 0}


def _state(**changes: object) -> rules.ReviewState:
    base = rules.ReviewState("rv_1", "fr_1", "transfer", "pending", {"amount": 5}, "sha256:aa", None, None)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _alice() -> rules.ReviewerState:
    return rules.ReviewerState("human:alice", ("ops",), ())


def test_evolve_is_replace_without_touching_the_old_state() -> None:
    state = _state(approvers=("human:bob",), approvals_needed=2)
    new = rules.evolve(state, status="approved", args=None, approvers=("human:bob", "human:carol"))
    assert new == dataclasses.replace(state, status="approved", args=None, approvers=("human:bob", "human:carol"))
    assert new is not state and type(new) is rules.ReviewState
    assert state.status == "pending" and state.args == {"amount": 5} and state.approvers == ("human:bob",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.status = "pending"  # type: ignore[misc]


def test_evolve_refuses_a_field_the_state_does_not_have() -> None:
    with pytest.raises(TypeError, match="no field 'stauts'"):
        rules.evolve(_state(), stauts="approved")


def test_a_decision_leaves_the_state_it_was_given_as_it_was() -> None:
    state = _state(approvals_needed=2)
    first, ran = rules.decide(state, "rv_1", "review.approved", "human:alice", APPROVE, AT, _alice())
    assert ran is None and first.approvers == ("human:alice",) and first.status == "pending"
    assert state.approvers == () and state.status == "pending"
    with pytest.raises(AlreadyApproved, match="human:alice approving round 0 twice"):
        rules.decide(first, "rv_1", "review.approved", "human:alice", APPROVE, AT, _alice())
    done = rules.execute(rules.evolve(first, status="approved", final_digest="sha256:aa"), "rv_1", "sha256:aa")
    assert done.executed and not first.executed
    with pytest.raises(ReviewClosed):
        rules.expire(rules.evolve(state, status="rejected"), "rv_1", AT)


def test_the_messages_stay_the_same() -> None:
    state = _state(requested_by="human:alice")
    with pytest.raises(SelfApproval) as refused:
        rules.decide(state, "rv_1", "review.approved", "human:alice", APPROVE, AT, _alice())
    assert str(refused.value).endswith(
        "review rv_1: expected an approver other than the person who asked for the call, found human:alice "
        "approving their own request (they may reject it; a log policy with self_approval lets them)"
    )
