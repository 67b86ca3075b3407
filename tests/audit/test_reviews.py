"""The review lifecycle on both backends: every operation, every refusal (which must write
nothing: the log's size and every projection row unchanged), expiry, and waiting."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from auditkit import (
    AGENT,
    ALICE,
    BOB,
    CAROL,
    FIXTURES,
    MALLORY,
    TRANSFER_SCHEMA,
    FakeClock,
    Keys,
    call,
    python_env,
    snapshot,
)

from signoff.audit import (
    AlreadyResumed,
    CanonicalFormError,
    DeadlinePassed,
    DuplicateReview,
    ExecutionMismatch,
    FrontierNotReady,
    InvalidEntry,
    MissingReason,
    NotAllowed,
    PatchFailed,
    Policy,
    Review,
    ReviewClosed,
    ReviewError,
    ReviewService,
    SchemaViolation,
    Store,
    UnknownFrontier,
    UnknownReview,
    digest,
    open_store,
)
from signoff.audit.keys import Signer, read_private_key
from signoff.audit.verify import verify_store


def _open(svc: ReviewService, cid: str = "c1", policy: Policy | None = None, **kw: Any) -> Any:
    return svc.open_frontier([call(cid, **kw)], actor=AGENT, policies=policy).reviews[0]


# -- every operation ----------------------------------------------------------------------


@pytest.mark.in_entries  # the entry format of a log that keeps values in it (sealed: test_values.py)
def test_open_frontier_records_every_call_field(svc: ReviewService, store: Store, clock: FakeClock) -> None:
    calls = [
        call(
            "o1",
            tool_schema=TRANSFER_SCHEMA,
            hint="Send 100 to bob?",
            payload={"currency": "EUR"},
            agent="teller",
            node_path="root/pay",
        ),
        call("o2", tool="lookup_account", args={"account": "A-1"}),
    ]
    front = svc.open_frontier(calls, actor=AGENT, policies=[Policy(role="teller", deadline_seconds=30), Policy()])
    assert len(front.reviews) == 2 and not front.decided and not front.resumed
    first, second = front.reviews
    assert (first.status, first.tool, first.policy.role) == ("pending", "transfer", "teller")
    assert first.args_digest == digest({"amount": 100, "to": "bob"})
    assert first.deadline is not None and 29 < (first.deadline - first.opened_at).total_seconds() <= 30.01
    assert second.deadline is None
    opened = [e for e in store.entries(kind="review.opened")]
    assert [e.seq for e in opened] == [first.opened_seq, second.opened_seq] == [first.opened_seq, first.opened_seq + 1]
    body = opened[0].body
    assert body["review"] == first.id and body["frontier"] == front.id
    assert body["policy"] == {"role": "teller", "deadline_seconds": 30}
    assert body["deadline"] == first.deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for name in (
        "app",
        "user",
        "session",
        "invocation",
        "confirmation_id",
        "call_id",
        "tool",
        "args",
        "args_digest",
        "hint",
        "payload",
        "agent",
        "node_path",
    ):
        assert name in body["call"], name
    assert body["call"]["hint"] == "Send 100 to bob?" and body["call"]["payload"] == {"currency": "EUR"}
    assert opened[0].actor == AGENT
    # the store's clock is the only time source: entries and deadlines follow it
    assert opened[0].at.startswith("2026-11-30T12:00:00.")
    assert first.opened_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") == opened[0].at
    assert [r.id for r in svc.pending()] == [first.id, second.id]
    assert [r.id for r in svc.pending(tool="lookup_account")] == [second.id]
    assert svc.count_pending() == 2 and svc.count_pending(agent="teller") == 1
    assert svc.frontier(front.id) == front
    assert svc.get(first.id) == first


@pytest.mark.in_entries  # the entry format of a log that keeps values in it (sealed: test_values.py)
def test_approve_edit_reject_record_what_was_decided(svc: ReviewService, keys: Keys, store: Store) -> None:
    front = svc.open_frontier([call("d1"), call("d2", tool_schema=TRANSFER_SCHEMA), call("d3")], actor=AGENT)
    a, b, c = front.reviews
    approved = svc.approve(a.id, reviewer=ALICE, signer=keys.alice, rationale="known payee")
    assert (approved.status, approved.decided_by, approved.final_args) == (
        "approved",
        ALICE,
        {"amount": 100, "to": "bob"},
    )
    assert approved.decision_seq is not None
    entry = store.entry(approved.decision_seq)
    assert (entry.kind, entry.actor) == ("review.approved", ALICE)
    assert entry.body == {"review": a.id, "args_digest": a.args_digest, "rationale": "known payee"}

    patch: list[dict[str, Any]] = [
        {"op": "replace", "path": "/amount", "value": 40},
        {"op": "add", "path": "/memo", "value": "rent"},
    ]
    edited = svc.edit(b.id, reviewer=ALICE, signer=keys.alice, patch=patch, rationale="too much")
    assert edited.status == "edited" and edited.final_args == {"amount": 40, "to": "bob", "memo": "rent"}
    assert edited.patch == patch
    assert edited.decision_seq is not None
    entry = store.entry(edited.decision_seq)
    assert entry.body["patch"] == patch  # stored exactly as given
    assert entry.body["args_digest"] == digest({"amount": 40, "to": "bob", "memo": "rent"})

    rejected = svc.reject(c.id, reviewer=ALICE, signer=keys.alice, reason="not today")
    assert (rejected.status, rejected.reason) == ("rejected", "not today")
    assert rejected.decision_seq is not None
    assert store.entry(rejected.decision_seq).body == {"review": c.id, "reason": "not today"}
    assert svc.frontier(front.id).decided and svc.pending() == []
    assert verify_store(store).ok


def test_resume_and_execution(svc: ReviewService, keys: Keys, store: Store) -> None:
    front = svc.open_frontier([call("r1"), call("r2"), call("r3")], actor=AGENT)
    a, b, c = front.reviews
    svc.approve(a.id, reviewer=ALICE, signer=keys.alice)
    svc.edit(b.id, reviewer=ALICE, signer=keys.alice, patch=[{"op": "replace", "path": "/to", "value": "ann"}])
    assert svc.ready_frontiers() == []
    svc.reject(c.id, reviewer=ALICE, signer=keys.alice, reason="no")
    assert [f.id for f in svc.ready_frontiers()] == [front.id]
    resumed = svc.claim_resume(front.id, actor=AGENT)
    assert resumed.kind == "run.resumed"
    assert resumed.body == {
        "frontier": front.id,
        "reviews": [a.id, b.id, c.id],
        "invocation": "inv-1",
        "session": "sess-1",
    }
    assert svc.frontier(front.id).resumed and svc.ready_frontiers() == []
    ran = svc.record_execution(a.id, actor=AGENT, args={"amount": 100, "to": "bob"})
    assert ran.body == {"review": a.id, "args_digest": a.args_digest}
    ran_b = svc.record_execution(b.id, actor=AGENT, args={"amount": 100, "to": "ann"})
    edited = store.entry(svc.get(b.id).decision_seq or 0)  # the digest the person signed: of the sealed args
    assert ran_b.body["args_digest"] == edited.body["args_digest"]
    assert svc.get(a.id).executed and svc.get(b.id).executed
    history = [e.kind for e in svc.history(a.id)]
    assert history == ["review.opened", "review.approved", "run.resumed", "tool.executed"]
    assert verify_store(store).ok


def test_withdraw_and_expire(svc: ReviewService, store: Store, clock: FakeClock) -> None:
    short = _open(svc, "x1", Policy(deadline_seconds=60))
    long = _open(svc, "x2", Policy(deadline_seconds=3600))
    none = _open(svc, "x3")
    gone = _open(svc, "x4")
    withdrawn = svc.withdraw(gone.id, actor=AGENT, reason="run cancelled")
    assert withdrawn.status == "withdrawn" and withdrawn.reason == "run cancelled"
    assert svc.expire_due() == []  # nothing is due yet
    clock.advance(61)
    expired = svc.expire_due()
    assert [r.id for r in expired] == [short.id] and expired[0].status == "expired"
    assert {r.id for r in svc.pending()} == {long.id, none.id}
    assert expired[0].decision_seq is not None
    entry = store.entry(expired[0].decision_seq)
    assert (entry.kind, entry.actor, entry.body) == ("review.expired", "service:signoff", {"review": short.id})
    clock.advance(3600)
    assert [r.id for r in svc.expire_due()] == [long.id]
    kinds = [e.kind for e in store.entries()]
    assert "review.rejected" not in kinds  # an expiry is never recorded as a rejection
    assert kinds.count("review.expired") == 2
    assert svc.expire_due() == []
    assert verify_store(store).ok


def test_reviewers_enrol_disable_and_cover(svc: ReviewService, keys: Keys) -> None:
    assert {r.id for r in svc.reviewers()} == {ALICE, BOB, CAROL}
    carol = svc.reviewer(CAROL)
    assert carol is not None and not carol.enabled
    bob = svc.reviewer(BOB)
    assert bob is not None and bob.roles == ("intern",) and bob.tools == ("lookup*",)
    lookup = _open(svc, "cv1", tool="lookup_account", args={"account": "A"})
    transfer = _open(svc, "cv2")
    assert svc.can_decide(BOB, lookup) and not svc.can_decide(BOB, transfer)
    assert svc.can_decide(ALICE, transfer) and not svc.can_decide(CAROL, transfer)
    svc.enroll_reviewer(CAROL, roles=["teller"], tools=["*"], admin=keys.admin)  # re-enrolled: enabled again
    assert svc.can_decide(CAROL, transfer)
    assert svc.reviewer(MALLORY) is None
    assert [k.fingerprint for k in svc.keys(CAROL)] == [keys.carol.fingerprint]  # her key stays hers
    assert svc.approve(transfer.id, reviewer=CAROL, signer=keys.carol).status == "approved"
    # other roles or tools only when said so
    with pytest.raises(InvalidEntry, match="replace=True"):
        svc.enroll_reviewer(BOB, roles=["teller"], tools=["*"], admin=keys.admin)
    svc.enroll_reviewer(BOB, roles=["teller"], tools=["*"], replace=True, admin=keys.admin)
    assert svc.can_decide(BOB, _open(svc, "cv3"))


# -- refusals: each one raises a specific error and writes nothing -----------------------


def _refused(store: Store, store_url: str, error: type[Exception], action: Callable[[], Any], *words: str) -> Exception:
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(error) as caught:
        action()
    assert store.size() == size, "a refused operation wrote an entry"
    assert snapshot(store_url) == before, "a refused operation changed a table"
    message = str(caught.value)
    for word in words:
        assert word in message, message
    return caught.value


def test_decision_refusals(svc: ReviewService, keys: Keys, store: Store, store_url: str, clock: FakeClock) -> None:
    r = _open(svc, "z1")
    _refused(
        store,
        store_url,
        UnknownReview,
        lambda: svc.approve("rv_0000000000000000", reviewer=ALICE, signer=keys.alice),
        "expected an open review",
        "found no such review",
    )
    _refused(
        store, store_url, UnknownReview, lambda: svc.reject("rv_nope", reviewer=ALICE, signer=keys.alice, reason="x")
    )
    _refused(
        store,
        store_url,
        UnknownReview,
        lambda: svc.edit("rv_nope", reviewer=ALICE, signer=keys.alice, patch=[{"op": "remove", "path": "/to"}]),
    )
    for actor in (AGENT, "service:signoff", "log:x"):
        _refused(store, store_url, NotAllowed, partial(svc.approve, r.id, reviewer=actor), "expected a human: actor")
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.approve(r.id, reviewer=MALLORY),
        "expected an enrolled reviewer",
        MALLORY,
    )
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.approve(r.id, reviewer=CAROL, signer=keys.carol),
        "expected an enabled reviewer",
    )
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.approve(r.id, reviewer=BOB, signer=keys.bob),
        "covering tool 'transfer'",
        "lookup*",
    )
    _refused(store, store_url, NotAllowed, lambda: svc.reject(r.id, reviewer=BOB, signer=keys.bob, reason="no"))
    for reason in ("", "   ", "\n"):
        _refused(
            store,
            store_url,
            MissingReason,
            partial(svc.reject, r.id, reviewer=ALICE, signer=keys.alice, reason=reason),
            "expected",
        )
    _refused(store, store_url, NotAllowed, lambda: svc.approve(r.id, reviewer="alice"), "expected a human: actor")
    # the log requires signed decisions: alice's own signature, not none and not someone else's
    _refused(store, store_url, NotAllowed, lambda: svc.approve(r.id, reviewer=ALICE), "sig: expected", "found none")
    _refused(store, store_url, NotAllowed, lambda: svc.approve(r.id, reviewer=ALICE, signer=keys.bob), "sig")
    _refused(store, store_url, NotAllowed, lambda: svc.reject(r.id, reviewer=ALICE, reason="no"), "sig: expected")
    assert svc.get(r.id).status == "pending"
    svc.approve(r.id, reviewer=ALICE, signer=keys.alice)
    err = _refused(
        store,
        store_url,
        ReviewClosed,
        lambda: svc.approve(r.id, reviewer=ALICE, signer=keys.alice),
        "found it already approved",
    )
    assert isinstance(err, ReviewError) and err.rule == 1
    _refused(
        store,
        store_url,
        ReviewClosed,
        lambda: svc.reject(r.id, reviewer=ALICE, signer=keys.alice, reason="changed my mind"),
    )
    _refused(store, store_url, ReviewClosed, lambda: svc.withdraw(r.id, actor=AGENT, reason="late"))
    assert verify_store(store).ok


def test_role_from_the_policy_must_be_covered(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    r = _open(svc, "role", Policy(role="manager"))
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.approve(r.id, reviewer=ALICE, signer=keys.alice),
        "role 'manager'",
        "teller",
    )
    mia, root = Signer.generate(), Signer.generate()
    svc.enroll_reviewer("human:mia@example.org", roles=["manager"], tools=["trans*"], key=mia.public, admin=keys.admin)
    assert svc.approve(r.id, reviewer="human:mia@example.org", signer=mia).status == "approved"
    svc.enroll_reviewer("human:root@example.org", roles=["admin"], tools=["*"], key=root.public, admin=keys.admin)
    review = _open(svc, "adm", Policy(role="manager"))
    assert svc.approve(review.id, reviewer="human:root@example.org", signer=root).status == "approved"
    # the admin role covers every role when deciding; it enrolls nobody (only an admin: actor does)
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.enroll_reviewer(
            "human:dana@example.org", roles=["manager"], tools=["*"], actor="human:root@example.org", admin=root
        ),
        "expected an admin: actor",
    )
    assert verify_store(store).ok


def test_deadline_refusals(svc: ReviewService, keys: Keys, store: Store, store_url: str, clock: FakeClock) -> None:
    late = _open(svc, "late", Policy(deadline_seconds=10))
    clock.advance(11)  # past the deadline, but nobody has run expire_due yet
    err = _refused(
        store,
        store_url,
        DeadlinePassed,
        lambda: svc.approve(late.id, reviewer=ALICE, signer=keys.alice),
        "before the deadline",
    )
    assert isinstance(err, ReviewError) and err.rule == 4
    _refused(
        store,
        store_url,
        DeadlinePassed,
        lambda: svc.reject(late.id, reviewer=ALICE, signer=keys.alice, reason="too late"),
    )
    _refused(
        store,
        store_url,
        DeadlinePassed,
        lambda: svc.edit(
            late.id, reviewer=ALICE, signer=keys.alice, patch=[{"op": "replace", "path": "/amount", "value": 1}]
        ),
    )
    svc.expire_due()
    _refused(
        store,
        store_url,
        ReviewClosed,
        lambda: svc.approve(late.id, reviewer=ALICE, signer=keys.alice),
        "found it already expired",
    )
    # exactly at the deadline is too late as well
    edge = _open(svc, "edge", Policy(deadline_seconds=5))
    assert edge.deadline is not None
    edge_clock_now = clock.peek()
    clock.advance((edge.deadline - edge_clock_now).total_seconds() - 0.001)  # the next reading is the deadline itself
    _refused(store, store_url, DeadlinePassed, lambda: svc.approve(edge.id, reviewer=ALICE, signer=keys.alice))
    assert verify_store(store).ok


EDIT_REFUSALS: list[tuple[Any, type[Exception], str]] = [
    ([{"op": "replace", "path": "/nope", "value": 1}], PatchFailed, "apply"),
    ([{"op": "remove", "path": "/missing"}], PatchFailed, "apply"),
    ([{"op": "test", "path": "/amount", "value": 5}], PatchFailed, "apply"),
    ([{"op": "move", "from": "/ghost", "path": "/to"}], PatchFailed, "apply"),
    ([{"op": "replace", "value": 1}], PatchFailed, "'op' and 'path'"),
    ([], PatchFailed, "non-empty"),
    ([{"op": "replace", "path": "", "value": [1]}], PatchFailed, "object"),
    ([{"op": "remove", "path": "/to"}], SchemaViolation, "'to'"),
    ([{"op": "add", "path": "/colour", "value": "red"}], SchemaViolation, "'colour'"),
    ([{"op": "replace", "path": "/amount", "value": "ten"}], SchemaViolation, "expected type integer"),
    ([{"op": "replace", "path": "/amount", "value": 1.5}], SchemaViolation, "expected type integer"),
    ([{"op": "replace", "path": "/to", "value": None}], SchemaViolation, "'to'"),
    ([{"op": "replace", "path": "/amount", "value": True}], SchemaViolation, "found boolean"),
    ([{"op": "replace", "path": "/amount", "value": float("nan")}], CanonicalFormError, "$.patch[0].value"),
    ([{"op": "replace", "path": "/amount", "value": 2**53}], CanonicalFormError, "$.patch[0].value"),
]
EDIT_REFUSAL_NAMES = [
    "missing-path",
    "remove-missing",
    "test-fails",
    "move-from-missing",
    "no-path",
    "empty",
    "not-an-object",
    "schema-missing-required",
    "schema-unknown-parameter",
    "schema-wrong-type",
    "schema-float-for-int",
    "schema-null",
    "schema-bool-for-int",
    "nan",
    "big-int",
]


def test_edit_refusals(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """Patches that do not apply, break the tool's schema, or carry numbers outside I-JSON."""
    r = _open(svc, "ed", tool_schema=TRANSFER_SCHEMA)
    for name, (patch, error, words) in zip(EDIT_REFUSAL_NAMES, EDIT_REFUSALS, strict=True):
        try:
            _refused(
                store,
                store_url,
                error,
                partial(svc.edit, r.id, reviewer=ALICE, signer=keys.alice, patch=patch),
                words,
                "expected",
                "found",
            )
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    assert svc.get(r.id).status == "pending"
    # without a declared schema any patch that applies is fine
    r = _open(svc, "free")
    done = svc.edit(r.id, reviewer=ALICE, signer=keys.alice, patch=[{"op": "add", "path": "/colour", "value": "red"}])
    assert done.final_args == {"amount": 100, "to": "bob", "colour": "red"}


def test_refused_numbers_in_args_name_the_path(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    cases = [
        ({"amount": float("nan")}, "amount"),
        ({"amount": float("inf"), "to": "x"}, "amount"),
        ({"amount": -float("inf")}, "amount"),
        ({"amount": 2**53}, "amount"),
        ({"amount": -(2**53)}, "amount"),
        ({"legs": [{"amount": 1}, {"amount": 10**30}]}, "legs[1].amount"),
    ]
    for args, path_end in cases:
        err = _refused(store, store_url, CanonicalFormError, partial(_open, svc, "num", args=args), "expected", "found")
        assert isinstance(err, CanonicalFormError) and err.path.endswith(path_end), str(err)
    # and in a decision's payload or rationale
    r = _open(svc, "pl")
    err = _refused(
        store,
        store_url,
        CanonicalFormError,
        lambda: svc.approve(r.id, reviewer=ALICE, signer=keys.alice, payload={"tip": float("nan")}),
    )
    assert isinstance(err, CanonicalFormError) and err.path == "$.payload.tip"
    _refused(
        store,
        store_url,
        CanonicalFormError,
        lambda: svc.approve(r.id, reviewer=ALICE, signer=keys.alice, rationale="bad \ud800"),
    )


def test_refused_number_in_args_is_named_from_the_call(svc: ReviewService) -> None:
    with pytest.raises(CanonicalFormError) as in_payload:
        svc.open_frontier([call("p", payload={"x": float("nan")})], actor=AGENT)
    assert in_payload.value.path == "$.calls[0].payload.x"
    with pytest.raises(CanonicalFormError) as in_args:
        svc.open_frontier([call("a", args={"amount": float("nan")})], actor=AGENT)
    assert in_args.value.path == "$.calls[0].args.amount"


def test_args_the_service_accepts_verify(svc: ReviewService, store: Store) -> None:
    _open(svc, "huge", args={"amount": 1e16, "to": "bob"})
    report = verify_store(store)
    assert report.ok, report.failure


def test_open_refusals(svc: ReviewService, store: Store, store_url: str) -> None:
    _open(svc, "dup")
    _refused(store, store_url, DuplicateReview, lambda: _open(svc, "dup"), "expected a new paused call", "'dup'")
    # the same confirmation id in another session is another call
    assert _open(svc, "dup", session="sess-2").status == "pending"
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.open_frontier([call("h")], actor=ALICE),
        "expected an agent: or service: actor",
    )
    _refused(
        store, store_url, InvalidEntry, lambda: svc.open_frontier([], actor=AGENT), "expected at least one paused call"
    )
    _refused(
        store,
        store_url,
        InvalidEntry,
        lambda: svc.open_frontier([call("")], actor=AGENT),
        "confirmation_id",
        "non-empty",
    )
    _refused(
        store,
        store_url,
        InvalidEntry,
        lambda: svc.open_frontier([call("np", args=["x"])], actor=AGENT),  # type: ignore[arg-type]
        "args",
        "JSON object",
    )
    _refused(
        store,
        store_url,
        InvalidEntry,
        lambda: svc.open_frontier([call("dl")], actor=AGENT, policies=Policy(deadline_seconds=0)),
        "deadline_seconds",
    )
    _refused(
        store,
        store_url,
        InvalidEntry,
        lambda: svc.open_frontier([call("p1"), call("p2")], actor=AGENT, policies=[Policy()]),
        "one per call",
    )
    assert verify_store(store).ok


def test_duplicate_confirmation_ids_within_one_frontier(svc: ReviewService, store: Store, store_url: str) -> None:
    _refused(store, store_url, DuplicateReview, lambda: svc.open_frontier([call("twin"), call("twin")], actor=AGENT))


def test_resume_refusals(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    front = svc.open_frontier([call("f1"), call("f2")], actor=AGENT)
    a, b = front.reviews
    _refused(
        store,
        store_url,
        FrontierNotReady,
        lambda: svc.claim_resume(front.id, actor=AGENT),
        "expected every review final",
        b.id,
    )
    svc.approve(a.id, reviewer=ALICE, signer=keys.alice)
    err = _refused(store, store_url, FrontierNotReady, lambda: svc.claim_resume(front.id, actor=AGENT), b.id)
    assert isinstance(err, ReviewError) and err.rule == 5
    _refused(
        store,
        store_url,
        UnknownFrontier,
        lambda: svc.claim_resume("fr_0000000000000000", actor=AGENT),
        "expected a known frontier",
    )
    svc.withdraw(b.id, actor=AGENT, reason="cancelled")
    first = svc.claim_resume(front.id, actor=AGENT)
    _refused(store, store_url, AlreadyResumed, lambda: svc.claim_resume(front.id, actor=AGENT), f"seq {first.seq}")
    _refused(store, store_url, AlreadyResumed, lambda: svc.claim_resume(front.id, actor="service:resumer"))
    assert verify_store(store).ok


def test_execution_refusals(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    front = svc.open_frontier([call("e1"), call("e2"), call("e3"), call("e4")], actor=AGENT)
    ok, edited, rejected, pending = front.reviews
    _refused(
        store,
        store_url,
        ExecutionMismatch,
        lambda: svc.record_execution(pending.id, actor=AGENT, args={"amount": 100, "to": "bob"}),
        "found it pending",
    )
    svc.approve(ok.id, reviewer=ALICE, signer=keys.alice)
    svc.edit(edited.id, reviewer=ALICE, signer=keys.alice, patch=[{"op": "replace", "path": "/amount", "value": 1}])
    svc.reject(rejected.id, reviewer=ALICE, signer=keys.alice, reason="no")
    # a tool runs only in the run resumed with the decision: not before its frontier's run.resumed
    _refused(
        store,
        store_url,
        ExecutionMismatch,
        lambda: svc.record_execution(ok.id, actor=AGENT, args={"amount": 100, "to": "bob"}),
        "expected its run resumed (run.resumed) before the tool ran",
    )
    svc.withdraw(pending.id, actor=AGENT, reason="the run moved on")
    svc.claim_resume(front.id, actor=AGENT)
    # an edited review runs with the edited args, not the opened ones: a tool that ran with other args
    # than the decided ones is recorded as run.resume_failed (in the same transaction), and never again
    size = store.size()
    failed = svc.record_execution(edited.id, actor=AGENT, args={"amount": 100, "to": "bob"})
    assert (failed.kind, failed.seq, failed.body["reviews"]) == ("run.resume_failed", size, [edited.id])
    assert "tool.executed refused" in failed.body["reason"] and "expected the tool to run with" in failed.body["reason"]
    assert svc.get(edited.id).resume_failed == failed.body["reason"]
    err = _refused(
        store,
        store_url,
        ExecutionMismatch,
        lambda: svc.record_execution(edited.id, actor=AGENT, args={"amount": 1, "to": "bob"}),
        "after run.resume_failed",
    )
    assert isinstance(err, ReviewError) and err.rule == 6
    assert [s.review.id for s in svc.stalled(0)] == [ok.id]  # a failed call is not "waiting to run"
    _refused(
        store,
        store_url,
        ExecutionMismatch,
        lambda: svc.record_execution(rejected.id, actor=AGENT, args={"amount": 100, "to": "bob"}),
        "found it rejected",
    )
    _refused(store, store_url, UnknownReview, lambda: svc.record_execution("rv_nope", actor=AGENT, args={}))
    svc.record_execution(ok.id, actor=AGENT, args={"amount": 100, "to": "bob"})
    _refused(
        store,
        store_url,
        ExecutionMismatch,
        lambda: svc.record_execution(ok.id, actor=AGENT, args={"amount": 100, "to": "bob"}),
        "already executed",
    )
    assert verify_store(store).ok


def test_withdraw_and_enrolment_refusals(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, key_path: Path
) -> None:
    r = _open(svc, "w1")
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.withdraw(r.id, actor=ALICE, reason="x"),
        "expected an agent: or service: actor",
    )
    _refused(store, store_url, MissingReason, lambda: svc.withdraw(r.id, actor=AGENT, reason=" "))
    _refused(store, store_url, UnknownReview, lambda: svc.withdraw("rv_nope", actor=AGENT, reason="x"))
    admin = keys.admin
    eve = "human:eve@example.org"
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.enroll_reviewer(AGENT, roles=["teller"], tools=["*"], admin=admin),
        "expected a human: actor",
    )
    _refused(
        store,
        store_url,
        InvalidEntry,
        lambda: svc.enroll_reviewer(eve, roles=[], tools=["*"], admin=admin),
        "at least one role",
    )
    _refused(
        store,
        store_url,
        InvalidEntry,
        lambda: svc.enroll_reviewer(eve, roles=["teller"], tools=[], admin=admin),
        "tools: expected the tool globs",
        "'*'",
    )
    # nobody but an admin: actor with the admin key enrolls or disables: not a reviewer (even with her
    # own key), not the service, not whoever holds the log key
    for writer, signer in ((ALICE, keys.alice), (None, None), ("service:signoff", None)):
        _refused(
            store,
            store_url,
            NotAllowed,
            partial(svc.enroll_reviewer, eve, roles=["admin"], tools=["*"], actor=writer, admin=signer),
            "expected an admin: actor signing with an enrolled admin key",
        )
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.enroll_reviewer(eve, roles=["admin"], tools=["*"], admin=read_private_key(key_path)),
        "admin key: expected a key enrolled on this log for an admin: actor",
    )
    _refused(
        store, store_url, NotAllowed, lambda: svc.disable_reviewer(MALLORY, reason="x", admin=admin), "not enrolled"
    )
    _refused(store, store_url, MissingReason, lambda: svc.disable_reviewer(BOB, reason="", admin=admin))
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.disable_reviewer(ALICE, reason="coup", actor=BOB, admin=keys.bob),
        "expected an admin: actor",
    )
    _refused(
        store, store_url, NotAllowed, lambda: svc.disable_reviewer(ALICE, reason="coup"), "expected an admin: actor"
    )


def test_expire_due_never_expires_early_and_never_decides(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, clock: FakeClock
) -> None:
    r = _open(svc, "t", Policy(deadline_seconds=100))
    clock.advance(50)
    size, before = store.size(), snapshot(store_url)
    assert svc.expire_due() == []
    assert store.size() == size and snapshot(store_url) == before
    svc.approve(r.id, reviewer=ALICE, signer=keys.alice)
    clock.advance(500)
    assert svc.expire_due() == []  # decided in time: it stays approved
    assert svc.get(r.id).status == "approved"


# -- waiting -------------------------------------------------------------------------------


def test_wait_returns_at_once_for_a_final_review_and_times_out_otherwise(svc: ReviewService, keys: Keys) -> None:
    done = _open(svc, "wd")
    svc.approve(done.id, reviewer=ALICE, signer=keys.alice)
    started = time.monotonic()
    assert svc.wait_for_decision(done.id, timeout=5).status == "approved"  # type: ignore[union-attr]
    assert time.monotonic() - started < 0.5
    waiting = _open(svc, "wt")
    started = time.monotonic()
    assert svc.wait_for_decision(waiting.id, timeout=0.4) is None
    assert 0.35 <= time.monotonic() - started < 2.0
    with pytest.raises(ValueError):
        svc.wait_for_decision()


def _wake_latency(
    waiter: ReviewService, decide: Callable[[], Any], review_id: str | None = None, frontier_id: str | None = None
) -> tuple[Any, float]:
    """Wait in this thread while ``decide`` runs in another; return the result and an upper bound
    on the wake latency: the time from the start of the deciding call to the waiter's return
    (the commit happens inside that call, so the true latency is no larger)."""
    started: list[float] = []

    def later() -> None:
        time.sleep(0.3)
        started.append(time.time())
        decide()

    helper = threading.Thread(target=later)
    helper.start()
    result = waiter.wait_for_decision(review_id, frontier_id, timeout=20)
    woke = time.time()
    helper.join()
    assert woke >= started[0], "woke before the decision was even started"
    return result, woke - started[0]


def test_wait_wakes_at_once_when_a_decision_lands(svc: ReviewService, keys: Keys, store_url: str) -> None:
    """From another thread on the same store (in-memory signal), from another connection to the
    same database (what another process has: SQLite data_version / PostgreSQL NOTIFY), and for
    a whole frontier; the latency bound includes the deciding call itself."""
    same = _open(svc, "th")
    result, latency = _wake_latency(
        svc, lambda: svc.approve(same.id, reviewer=ALICE, signer=keys.alice), review_id=same.id
    )
    assert result is not None and result.status == "approved"
    assert latency < 0.5, latency

    across = _open(svc, "cx")
    other = open_store(store_url)
    try:
        other_svc = ReviewService(other)
        result, latency = _wake_latency(
            svc, lambda: other_svc.approve(across.id, reviewer=ALICE, signer=keys.alice), review_id=across.id
        )
    finally:
        other.close()
    assert result is not None and result.status == "approved"
    assert latency < 0.5, latency

    front = svc.open_frontier([call("fa"), call("fb")], actor=AGENT)
    a, b = front.reviews
    svc.approve(a.id, reviewer=ALICE, signer=keys.alice)
    assert svc.wait_for_decision(frontier_id=front.id, timeout=0.3) is None  # one of two is not a frontier
    result, latency = _wake_latency(
        svc, lambda: svc.reject(b.id, reviewer=ALICE, signer=keys.alice, reason="no"), frontier_id=front.id
    )
    assert result is not None and result.decided and latency < 0.5


async def test_wait_async(svc: ReviewService, keys: Keys) -> None:
    r = _open(svc, "as")
    timer = threading.Timer(0.2, lambda: svc.approve(r.id, reviewer=ALICE, signer=keys.alice))
    timer.start()
    result = await svc.wait_for_decision_async(r.id, timeout=10)
    timer.join()
    assert isinstance(result, Review) and result.status == "approved"


@pytest.mark.slow
def test_wait_wakes_when_another_process_decides(
    svc: ReviewService, keys: Keys, store_url: str, tmp_path: Path
) -> None:
    r = _open(svc, "proc")
    alice_key = keys.write(ALICE, tmp_path / "alice.pem")  # the other process signs as alice
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURES / "approver.py"), store_url, r.id, ALICE, str(alice_key)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        results: list[Any] = []
        woke: list[float] = []

        def wait() -> None:
            results.append(svc.wait_for_decision(r.id, timeout=20))
            woke.append(time.time())

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)  # the waiter is asleep on its change feed by now
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        waiter.join(timeout=25)
        times = json.loads(line)
    finally:
        proc.kill()
        proc.wait()
    assert results and results[0] is not None and results[0].status == "approved"
    # the commit happened between "started" and "committed" in the other process: the waiter
    # must not wake before the decision began, and must wake well under a second after it
    assert woke[0] >= times["started"] - 0.01, (woke[0], times)
    latency = woke[0] - times["started"]
    assert latency < 0.5, (latency, times["committed"] - times["started"])


def test_projection_rows_follow_the_log_in_the_same_transaction(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """After every operation the projection is exactly what verify rebuilds from the log."""
    front = svc.open_frontier([call("p1"), call("p2")], actor=AGENT)
    a, b = front.reviews
    steps: list[Callable[[], Any]] = [
        lambda: svc.approve(a.id, reviewer=ALICE, signer=keys.alice),
        lambda: svc.reject(b.id, reviewer=ALICE, signer=keys.alice, reason="no"),
        lambda: svc.claim_resume(front.id, actor=AGENT),
        lambda: svc.record_execution(a.id, actor=AGENT, args={"amount": 100, "to": "bob"}),
        lambda: svc.disable_reviewer(BOB, reason="left", admin=keys.admin),
    ]
    for step in steps:
        step()
        report = verify_store(store)
        assert report.ok, report.failure
    from auditkit import Db

    with Db(store_url) as db:
        rows = dict(db.rows("SELECT id, status FROM signoff_review"))
        assert rows == {a.id: "approved", b.id: "rejected"}
        assert db.one("SELECT open_count, resumed_seq FROM signoff_frontier WHERE id = ?", (front.id,))[0] == 0
