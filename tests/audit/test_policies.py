"""Teams and policies on the log (issue 13), on both backends: ``policy.set`` by an admin only; a
quorum of distinct people (four eyes), where one rejection rejects and an edit starts a new round;
calls a policy's CEL rule lets through (``review.auto_approved``), which ``audit verify`` and the
gate evaluate again; escalation to another role at a set time; claims that lapse. Each guarantee
also gets the attack: a forged entry written straight into the database."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from auditkit import AGENT, ALICE, BOB, MALLORY, Db, FakeClock, Keys, call, forge_append, refused, snapshot

from signoff.audit import ExecutionMismatch, InvalidEntry, NotAllowed, Policy, ReviewService, Store, digest
from signoff.audit import policies as pol
from signoff.audit.decided import DecisionNotProven, TrustCache, prove_decision
from signoff.audit.errors import DeadlinePassed, ReviewClosed, VerificationFailed
from signoff.audit.keys import Signer
from signoff.audit.verify import verify_store

DAVE = "human:dave@example.org"  # teller, every tool: alice's second pair of eyes
ERIN = "human:erin@example.org"  # supervisor: where reviews escalate
FOUR_EYES = {"policy": "four-eyes", "tools": "transfer", "approvals": 2, "role": "teller"}


@pytest.fixture
def team(svc: ReviewService, keys: Keys) -> dict[str, Signer]:
    """alice (from ``svc``), dave (teller) and erin (supervisor), each with their own key."""
    people = {ALICE: keys.alice, DAVE: Signer.generate(), ERIN: Signer.generate()}
    svc.enroll_reviewer(DAVE, roles=["teller"], tools=["*"], key=people[DAVE].public, admin=keys.admin)
    svc.enroll_reviewer(ERIN, roles=["supervisor"], tools=["*"], key=people[ERIN].public, admin=keys.admin)
    return people


def _ok(store: Store) -> None:
    report = verify_store(store)
    assert report.ok, str(report.failure)


def _failure(store: Store) -> VerificationFailed:
    report = verify_store(store)
    assert not report.ok, "the attack went unnoticed by audit verify"
    assert report.failure is not None
    return report.failure


_refused = refused


def _proof(store: Store, review_id: str) -> Any:
    return prove_decision(store, review_id, cache=TrustCache(log_key=store.public_key))


# -- the policy itself ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"approvals": 0}, "policy.approvals"),
        ({"approvals": 11}, "policy.approvals"),
        ({"approvals": True}, "policy.approvals"),
        ({"policy": "a:b"}, "policy: expected a policy name"),
        ({"tools": ""}, "policy.tools"),
        ({"review_when": "args.amount >"}, "policy.review_when"),
        ({"escalate": {"to_role": "boss"}}, "exactly one of after_seconds or at_fraction"),
        ({"escalate": {"to_role": "boss", "at_fraction": 0.5}}, "deadline_seconds"),
        ({"escalate": {"to_role": "boss", "at_fraction": 1.5}, "deadline_seconds": 60}, "between 0 and 1"),
        ({"claim_seconds": -1}, "policy.claim_seconds"),
        ({"deadline_seconds": 0}, "policy.deadline_seconds"),
        ({"colour": "red"}, "expected only the fields"),
    ],
)
def test_a_bad_policy_is_refused_by_name_and_writes_nothing(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, change: dict[str, Any], words: str
) -> None:
    body = {**FOUR_EYES, **change}
    _refused(store, store_url, InvalidEntry, lambda: svc.set_policy(body, admin=keys.admin), words)


def test_only_an_admin_sets_a_policy(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """A reviewer's or an agent's key is no admin key; a forged policy.set is named by verify."""
    _refused(store, store_url, NotAllowed, lambda: svc.set_policy(FOUR_EYES, admin=keys.alice), "admin")
    _refused(store, store_url, NotAllowed, lambda: svc.set_policy(FOUR_EYES, admin=keys.alice, actor=ALICE), "admin:")
    entry = svc.set_policy(FOUR_EYES, admin=keys.admin)
    assert (entry.kind, entry.actor, entry.body["approvals"]) == ("policy.set", "admin:root", 2)
    assert [p.name for p in svc.policies()] == ["four-eyes"]
    _ok(store)
    lax = {**FOUR_EYES, "policy": "lax", "approvals": 1}
    with Db(store_url) as db:
        forge_append(db, "admin:root", "policy.set", lax, signer=Signer.generate())  # a key nobody enrolled
    found = _failure(store)
    assert (found.seq, found.rule) == (entry.seq + 1, "signature"), str(found)


def test_the_newest_policy_for_a_tool_governs_and_a_retired_one_ends(svc: ReviewService, keys: Keys) -> None:
    svc.set_policy({"policy": "all", "tools": "*", "role": "teller"}, admin=keys.admin)
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    assert svc.policy_for("transfer").name == "four-eyes"  # type: ignore[union-attr]
    assert svc.policy_for("lookup").name == "all"  # type: ignore[union-attr]
    svc.set_policy({**FOUR_EYES, "retired": True}, admin=keys.admin)
    assert svc.policy_for("transfer").name == "all"  # type: ignore[union-attr]


# -- quorum: four eyes -------------------------------------------------------------------------


def test_two_people_must_approve_and_the_same_one_twice_is_not_two(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    review = svc.open_frontier([call("q1")], actor=AGENT, policies=Policy(role="intern")).reviews[0]
    # The log's policy governs: its role and quorum, whatever the app asked for.
    assert (review.policy.name, review.policy.approvals, review.policy.role) == ("four-eyes", 2, "teller")
    first = svc.approve(review.id, reviewer=ALICE, signer=team[ALICE], rationale="payee known")
    assert first.status == "pending" and first.approvals == ((ALICE, first.approvals[0][1]),)
    assert svc.get(review.id).approvals == first.approvals
    _refused(store, store_url, NotAllowed, lambda: svc.approve(review.id, reviewer=ALICE, signer=team[ALICE]), "twice")
    done = svc.approve(review.id, reviewer=DAVE, signer=team[DAVE])
    assert (done.status, done.final_args) == ("approved", {"amount": 100, "to": "bob"})
    got = svc.get(review.id)
    assert (got.status, [who for who, _seq in got.approvals]) == ("approved", [ALICE, DAVE])
    proof = _proof(store, review.id)
    assert proof.review.final_args == {"amount": 100, "to": "bob"} and proof.signed_by == team[DAVE].fingerprint
    _ok(store)


def test_one_rejection_rejects(svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store) -> None:
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    review = svc.open_frontier([call("q2")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=team[ALICE])
    rejected = svc.reject(review.id, reviewer=DAVE, signer=team[DAVE], reason="not this payee")
    assert (rejected.status, rejected.reason) == ("rejected", "not this payee")
    assert _proof(store, review.id).review.final_args is None
    _ok(store)


def test_an_edit_starts_a_new_round_and_a_stale_approval_is_refused(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    """alice approves 100; dave edits to 50 (his approval opens round 1); alice's approval of round 0
    does not count for round 1: she approves 50 herself (the forged case is the next test)."""
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    review = svc.open_frontier([call("q3")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=team[ALICE])
    patch = [{"op": "replace", "path": "/amount", "value": 50}]
    edited = svc.edit(review.id, reviewer=DAVE, signer=team[DAVE], patch=patch, rationale="halve it")
    assert (edited.status, edited.round, edited.round_args) == ("pending", 1, {"amount": 50, "to": "bob"})
    assert [who for who, _ in edited.approvals] == [DAVE]
    # Through the service, an approval is always made for the current round (what the person sees).
    done = svc.approve(review.id, reviewer=ALICE, signer=team[ALICE])
    assert (done.status, done.final_args, done.patch) == ("edited", {"amount": 50, "to": "bob"}, patch)
    assert _proof(store, review.id).review.final_args == {"amount": 50, "to": "bob"}
    _ok(store)


def test_a_stale_round_approval_forged_into_the_log_runs_nothing(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    """alice's signed approval of round 0 appended after dave's edit (round 1): it names old args, so
    the gate proves nothing and verify names the entry."""
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    review = svc.open_frontier([call("q4")], actor=AGENT).reviews[0]
    svc.edit(review.id, reviewer=DAVE, signer=team[DAVE], patch=[{"op": "replace", "path": "/to", "value": "eve"}])
    stale = {"review": review.id, "args_digest": review.args_digest, "rationale": "", "round": 0}
    with Db(store_url) as db:
        forged = forge_append(db, ALICE, "review.approved", stale, signer=team[ALICE])
    with pytest.raises(DecisionNotProven, match="round"):
        _proof(store, review.id)
    found = _failure(store)
    assert found.seq == forged.seq and "round" in str(found), str(found)


def test_a_second_approval_must_give_the_same_answer(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    review = svc.open_frontier([call("q5")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=team[ALICE], payload={"speed": "normal"})
    _refused(
        store,
        store_url,
        ExecutionMismatch,
        lambda: svc.approve(review.id, reviewer=DAVE, signer=team[DAVE], payload={"speed": "urgent"}),
        "same answer",
    )


def test_a_quorum_faked_with_one_person_twice_is_named(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    """alice signs two approvals of round 0 and the second is written behind the service's back: the
    gate refuses, and verify names the entry."""
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    review = svc.open_frontier([call("q6")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=team[ALICE])
    again = {"review": review.id, "args_digest": review.args_digest, "rationale": "again", "round": 0}
    with Db(store_url) as db:
        forged = forge_append(db, ALICE, "review.approved", again, signer=team[ALICE])
    with pytest.raises(DecisionNotProven, match="twice"):
        _proof(store, review.id)
    assert _failure(store).seq == forged.seq


def test_an_app_may_ask_for_more_approvals_never_fewer(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    three = svc.open_frontier([call("q7")], actor=AGENT, policies=Policy(approvals=3)).reviews[0]
    one = svc.open_frontier([call("q8")], actor=AGENT, policies=Policy(approvals=1)).reviews[0]
    assert (three.policy.approvals, one.policy.approvals) == (3, 2)
    _refused(
        store,
        store_url,
        InvalidEntry,
        lambda: svc.open_frontier([call("q9")], actor=AGENT, policies=Policy(approvals=0)),
        "policies[0].approvals",
    )
    _ok(store)


def test_a_review_opened_under_a_weaker_policy_is_named(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """An agent that writes its own review.opened claiming one approval, where the admin's policy asks
    two: verify names it."""
    entry = svc.set_policy(FOUR_EYES, admin=keys.admin)
    ref = {"name": "four-eyes", "seq": entry.seq, "digest": pol.policy_digest(FOUR_EYES)}
    spec = call("weak").to_json()
    body = {
        "review": "rv_00000000000000aa",
        "frontier": "fr_00000000000000aa",
        "call": spec,
        "policy": {"role": "teller", "deadline_seconds": None, **ref},
        "deadline": None,
    }
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "review.opened", body)
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "review policy") and "approvals" in str(found), str(found)


# -- calls no person needs to see ---------------------------------------------------------------

SMALL = {
    "policy": "small-transfers",
    "tools": "transfer",
    "review_when": "args.amount > vars.limit || !(args.to in vars.known)",
    "vars": {"limit": 1000, "known": ["bob", "ann"]},
}


def test_a_call_the_rule_lets_through_is_recorded_and_runs(svc: ReviewService, keys: Keys, store: Store) -> None:
    entry = svc.set_policy(SMALL, admin=keys.admin)
    review, why = svc.auto_approve(call("a1", args={"amount": 50, "to": "bob"}), actor=AGENT)
    assert review is not None and review.status == "auto_approved", why
    assert review.final_args == {"amount": 50, "to": "bob"} and review.policy.seq == entry.seq
    proof = _proof(store, review.id)
    assert proof.status == "auto_approved" and proof.signed_by == keys.admin.fingerprint
    svc.record_execution(review.id, actor=AGENT, args={"amount": 50, "to": "bob"}, result={"ok": True})
    assert svc.get(review.id).executed
    _ok(store)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({"amount": 5000, "to": "bob"}, "a person must review"),
        ({"amount": 50, "to": "mallory"}, "a person must review"),
        ({"to": "bob"}, "could not be evaluated"),  # no amount: fails closed
        ({"amount": "lots", "to": "bob"}, "could not be evaluated"),
    ],
)
def test_a_call_the_rule_holds_or_cannot_judge_needs_a_person(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, args: dict[str, Any], why: str
) -> None:
    svc.set_policy(SMALL, admin=keys.admin)
    size, before = store.size(), snapshot(store_url)
    review, reason = svc.auto_approve(call("a2", args=args), actor=AGENT)
    assert review is None and why in reason, reason
    assert store.size() == size and snapshot(store_url) == before


def test_without_a_rule_every_call_needs_a_person(svc: ReviewService, keys: Keys) -> None:
    assert svc.auto_approve(call("a3"), actor=AGENT)[0] is None
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    assert svc.auto_approve(call("a4"), actor=AGENT)[0] is None


@pytest.mark.in_entries  # the sealed forgery: test_values.py
def test_a_forged_auto_approval_runs_nothing(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """An auto-approval of 5000 (the rule says a person must look) written into the database: the gate
    evaluates the rule again and refuses; verify names the entry."""
    entry = svc.set_policy(SMALL, admin=keys.admin)
    spec = call("a5", args={"amount": 5000, "to": "bob"}).to_json()
    inputs = {"args": spec["args"], "tool": "transfer", "agent": "", "app": "bank", "user": "user-1",
              "vars": SMALL["vars"]}  # fmt: skip
    body = {"review": "rv_00000000000000bb", "call": spec,
            "policy": {"name": SMALL["policy"], "seq": entry.seq, "digest": pol.policy_digest(SMALL)},
            "inputs": inputs}  # fmt: skip
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "review.auto_approved", body)
    with pytest.raises(DecisionNotProven, match="rule"):
        _proof(store, "rv_00000000000000bb")
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "review rule 2") and "a person must review" in str(found)


def test_an_auto_approval_under_a_forged_policy_runs_nothing(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """A lax policy.set signed by a key no admin holds, then an auto-approval under it: both named."""
    lax = {"policy": "lax", "tools": "transfer", "review_when": "false"}
    with Db(store_url) as db:
        bad = forge_append(db, "admin:root", "policy.set", lax, signer=Signer.generate())
        spec = call("a6", args={"amount": 5000, "to": "eve"}).to_json()
        inputs = {"args": spec["args"], "tool": "transfer", "agent": "", "app": "bank", "user": "user-1", "vars": {}}
        ref = {"name": "lax", "seq": bad.seq, "digest": pol.policy_digest(lax)}
        body = {"review": "rv_00000000000000cc", "call": spec, "policy": ref, "inputs": inputs}
        forge_append(db, AGENT, "review.auto_approved", body)
    with pytest.raises(DecisionNotProven, match="policy lax"):
        _proof(store, "rv_00000000000000cc")
    assert _failure(store).seq == bad.seq


@pytest.mark.parametrize("forger", ["reviewer", "no_admin_key"])
def test_the_write_path_refuses_an_auto_approval_under_a_policy_nobody_could_sign(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, forger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 34 item 7: a lax ``policy.set`` written into the database, signed by a reviewer (alice, with
    her own key) or by a key no admin holds, led to a ``review.auto_approved`` entry. The write path now
    proves each policy before it relies on it and leaves out one that does not prove: no auto-approval,
    and the call's review opens under the policies an admin did sign (a person decides it)."""
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    lax = {"policy": "lax", "tools": "transfer", "review_when": "false", "approvals": 1}
    actor, signer = (ALICE, keys.alice) if forger == "reviewer" else ("admin:root", Signer.generate())
    with Db(store_url) as db:
        bad = forge_append(db, actor, "policy.set", lax, signer=signer)
    spec = call("a-forged", args={"amount": 5000, "to": "eve"})
    review, why = svc.auto_approve(spec, actor=AGENT)
    assert review is None and "a person reviews it" in why
    assert not list(store.entries(kind="review.auto_approved"))
    opened = svc.open_frontier([spec], actor=AGENT).reviews[0]
    assert (opened.policy.name, opened.approvals_needed) == ("four-eyes", 2)  # not the forged lax one
    assert [p.name for p in svc.policies()] == ["four-eyes"] and svc.policy_for("transfer").name == "four-eyes"
    assert _failure(store).seq == bad.seq
    # Proven not to hold once: said once in the log output, and not proven again on every read.
    assert svc.trust_cache.refused[bad.seq][0] == bad.hash
    said = [r.getMessage() for r in caplog.records if "is not proven, left out" in r.getMessage()]
    assert len(said) == 1 and f"seq {bad.seq}: policy.set is not proven" in said[0], said


def test_auto_approval_inputs_must_be_the_calls_own(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """Recorded inputs that say 50 for a call of 5000: verify evaluates the call's own args."""
    entry = svc.set_policy(SMALL, admin=keys.admin)
    spec = call("a7", args={"amount": 5000, "to": "bob"}).to_json()
    inputs = {"args": {"amount": 50, "to": "bob"}, "tool": "transfer", "agent": "", "app": "bank", "user": "user-1",
              "vars": SMALL["vars"]}  # fmt: skip
    body = {"review": "rv_00000000000000dd", "call": spec,
            "policy": {"name": SMALL["policy"], "seq": entry.seq, "digest": pol.policy_digest(SMALL)},
            "inputs": inputs}  # fmt: skip
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "review.auto_approved", body)
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "auto-approval inputs"), str(found)


# -- escalation -------------------------------------------------------------------------------------

ESCALATING = {
    "policy": "escalating",
    "tools": "transfer",
    "role": "teller",
    "deadline_seconds": 600,
    "escalate": {"to_role": "supervisor", "at_fraction": 0.5},
}


def test_a_review_escalates_at_its_time_to_another_role(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str, clock: FakeClock
) -> None:
    svc.set_policy(ESCALATING, admin=keys.admin)
    review = svc.open_frontier([call("e1")], actor=AGENT).reviews[0]
    assert review.deadline is not None and (review.deadline - review.opened_at) == timedelta(seconds=600)
    due = svc.next_escalation()
    assert due is not None and due - review.opened_at == timedelta(seconds=300)
    assert not svc.can_decide(ERIN, review)
    assert svc.escalate_due() == []
    clock.advance(301)
    assert svc.escalate_due() == [review.id]
    assert svc.escalate_due() == [] and svc.next_escalation() is None  # once
    escalated = svc.get(review.id)
    assert escalated.escalated_role == "supervisor" and svc.can_decide(ERIN, escalated)
    done = svc.approve(review.id, reviewer=ERIN, signer=team[ERIN], rationale="supervisor ok")
    assert done.status == "approved"
    assert _proof(store, review.id).signed_by == team[ERIN].fingerprint
    _ok(store)


def test_an_escalation_before_its_time_is_named(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    """A review.escalated written early, so that a supervisor could decide at once: verify names it, and
    the gate proves no decision made under it."""
    svc.set_policy(ESCALATING, admin=keys.admin)
    review = svc.open_frontier([call("e2")], actor=AGENT).reviews[0]
    with Db(store_url) as db:
        forged = forge_append(db, "service:signoff", "review.escalated", {"review": review.id, "role": "supervisor"})
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "review rule 4"), str(found)
    # A supervisor's signed approval on it is a person's decision, but under an escalation its policy did
    # not make: the gate proves nothing.
    body = {"review": review.id, "args_digest": review.args_digest, "rationale": ""}
    with Db(store_url) as db:
        forge_append(db, ERIN, "review.approved", body, signer=team[ERIN])
    with pytest.raises(DecisionNotProven, match="escalation"):
        _proof(store, review.id)


def test_an_escalation_to_a_role_the_policy_does_not_name_is_named(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, clock: FakeClock
) -> None:
    svc.set_policy(ESCALATING, admin=keys.admin)
    review = svc.open_frontier([call("e3")], actor=AGENT).reviews[0]
    clock.advance(400)
    with Db(store_url) as db:
        forged = forge_append(db, "service:signoff", "review.escalated", {"review": review.id, "role": "intern"})
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "review rule 2"), str(found)


def test_a_review_past_its_deadline_does_not_escalate(
    svc: ReviewService, keys: Keys, store: Store, clock: FakeClock
) -> None:
    svc.set_policy(ESCALATING, admin=keys.admin)
    review = svc.open_frontier([call("e4")], actor=AGENT).reviews[0]
    clock.advance(700)
    svc.expire_due()
    assert svc.escalate_due() == [] and svc.get(review.id).status == "expired"
    _ok(store)


# -- claims ---------------------------------------------------------------------------------------------


def test_a_claim_shows_who_is_on_it_and_lapses(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str, clock: FakeClock
) -> None:
    svc.set_policy({**FOUR_EYES, "approvals": 1, "claim_seconds": 120}, admin=keys.admin)
    review = svc.open_frontier([call("c1")], actor=AGENT).reviews[0]
    until = svc.claim(review.id, reviewer=ALICE)
    assert svc.get(review.id).claim == (ALICE, until)
    _refused(store, store_url, ReviewClosed, lambda: svc.claim(review.id, reviewer=DAVE), "claimed by", ALICE)
    _refused(store, store_url, NotAllowed, lambda: svc.claim(review.id, reviewer=BOB), "decider")
    _refused(store, store_url, NotAllowed, lambda: svc.claim(review.id, reviewer=MALLORY), "not enrolled")
    svc.claim(review.id, reviewer=ALICE)  # renewing one's own claim is fine
    clock.advance(121)
    assert svc.claim(review.id, reviewer=DAVE) > until
    svc.approve(review.id, reviewer=DAVE, signer=team[DAVE])
    _refused(store, store_url, ReviewClosed, lambda: svc.claim(review.id, reviewer=ALICE))
    _ok(store)


def test_a_claim_never_stops_another_reviewer_deciding(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store
) -> None:
    """A claim is advice ("I'm on it"), not a lock: a reviewer who must act now still can."""
    review = svc.open_frontier([call("c2")], actor=AGENT).reviews[0]
    svc.claim(review.id, reviewer=ALICE, seconds=600)
    assert svc.approve(review.id, reviewer=DAVE, signer=team[DAVE]).status == "approved"
    _ok(store)


# -- incremental verify across a quorum in progress ---------------------------------------------


def test_incremental_verify_picks_up_a_quorum_in_progress(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, key_path: Any, clock: FakeClock
) -> None:
    svc.set_policy({**FOUR_EYES, "escalate": {"to_role": "supervisor", "after_seconds": 30}}, admin=keys.admin)
    review = svc.open_frontier([call("i1")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=team[ALICE])
    clock.advance(31)
    svc.escalate_due()
    svc.claim(review.id, reviewer=ERIN)
    point = store.checkpoint(key_path)
    svc.approve(review.id, reviewer=ERIN, signer=team[ERIN])
    report = verify_store(store, against=point, incremental=True)
    assert report.ok, str(report.failure)
    assert verify_store(store).ok


def test_projection_rows_of_a_quorum_are_checked(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    """A pending review's row rewritten to show a second approval nobody gave: verify names the row."""
    svc.set_policy(FOUR_EYES, admin=keys.admin)
    review = svc.open_frontier([call("p1")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=team[ALICE])
    with Db(store_url) as db:
        data = json.loads(db.one("SELECT data FROM signoff_review WHERE id = ?", (review.id,))[0])
        data["progress"]["approvals"].append({"by": DAVE, "seq": 999})
        db.run(("UPDATE signoff_review SET data = ? WHERE id = ?", (json.dumps(data), review.id)))
    assert not verify_store(store).ok
    assert svc.get(review.id).approvals == ((ALICE, svc.get(review.id).approvals[0][1]),)  # the log's, not the row's
    assert digest(data["call"]["args"]) == review.args_digest


def test_policy_checks_are_pure_functions() -> None:
    """The CEL rule over plain data, no store: what verify and the gate both call."""
    policy = pol.parse(SMALL, 7)
    inputs = pol.rule_inputs(policy, args={"amount": 10, "to": "ann"}, tool="transfer", agent="a", app="b", user="c")
    assert pol.needs_person(policy, inputs) == (False, "the rule lets it through")
    assert pol.needs_person(policy, {**inputs, "args": {"amount": 10**6, "to": "ann"}})[0] is True
    assert (
        pol.escalation_due({"after_seconds": 5}, None, "2026-01-01T00:00:00.000000Z") == "2026-01-01T00:00:05.000000Z"
    )
    with pytest.raises(DeadlinePassed):
        from signoff.audit import rules

        state = rules.ReviewState("rv", "fr", "transfer", "pending", {}, "d", None, None)
        rules.escalate(state, "rv", "boss", "2026-01-01T00:00:01.000000Z", "2026-01-01T00:00:05.000000Z")


def test_two_approvals_are_two_people_with_their_own_keys(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """dave cannot be enrolled with alice's key (so alice cannot approve twice under two names); written
    into the log behind the service's back, verify names the enrolment."""
    _refused(
        store,
        store_url,
        NotAllowed,
        lambda: svc.enroll_reviewer(DAVE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin),
        "alice", "already",
    )  # fmt: skip
    _refused(store, store_url, NotAllowed, lambda: svc.enroll_key(DAVE, keys.alice.public, admin=keys.admin), "own")
    svc.enroll_reviewer(DAVE, roles=["teller"], tools=["*"], admin=keys.admin)
    body = {"actor": DAVE, "key": keys.alice.public, "alg": "Ed25519"}
    with Db(store_url) as db:
        forged = forge_append(db, "admin:root", "key.enrolled", body, signer=keys.admin)
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "key enrolment") and ALICE in str(found), str(found)


def test_an_observer_decides_nothing_even_with_a_key(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """The desk's observer role reads everything; the log itself refuses its decisions, signed or not."""
    olga, olga_key = "human:olga@example.org", Signer.generate()
    svc.enroll_reviewer(olga, roles=["observer"], tools=["*"], key=olga_key.public, admin=keys.admin)
    review = svc.open_frontier([call("o1")], actor=AGENT).reviews[0]
    _refused(store, store_url, NotAllowed, lambda: svc.approve(review.id, reviewer=olga, signer=olga_key), "observer")


def test_the_same_call_is_auto_approved_once(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """A re-driven invocation asks again for the same call: it gets its one auto-approval back (and,
    once it ran, the gate sees it executed); bad input is refused by field, with nothing written."""
    svc.set_policy(SMALL, admin=keys.admin)
    first, _ = svc.auto_approve(call("r1", args={"amount": 5, "to": "bob"}), actor=AGENT)
    size = store.size()
    again, _ = svc.auto_approve(call("r1", args={"amount": 5, "to": "bob"}), actor=AGENT)
    assert first is not None and again is not None and again.id == first.id and store.size() == size
    svc.record_execution(first.id, actor=AGENT, args={"amount": 5, "to": "bob"})
    third, _ = svc.auto_approve(call("r1", args={"amount": 5, "to": "bob"}), actor=AGENT)
    assert third is not None and third.executed
    _refused(
        store, store_url, InvalidEntry, lambda: svc.auto_approve(call("", args={}), actor=AGENT), "confirmation_id"
    )
    _refused(store, store_url, NotAllowed, lambda: svc.auto_approve(call("r2"), actor=ALICE), "agent:")
    _ok(store)


def test_a_decision_names_the_round_the_person_saw(
    svc: ReviewService, team: dict[str, Signer], keys: Keys, store: Store, store_url: str
) -> None:
    """``round=``: an approval made on what the page showed before someone's edit is refused in the write
    transaction (on a log that allows unsigned decisions nothing else would catch it)."""
    from signoff.audit import StaleRound

    svc.set_policy(FOUR_EYES, admin=keys.admin)
    review = svc.open_frontier([call("s1")], actor=AGENT).reviews[0]
    svc.edit(review.id, reviewer=DAVE, signer=team[DAVE], patch=[{"op": "replace", "path": "/amount", "value": 9}],
             round=0)  # fmt: skip
    _refused(
        store, store_url, StaleRound, lambda: svc.approve(review.id, reviewer=ALICE, signer=team[ALICE], round=0),
        "round 1", "found round 0",
    )  # fmt: skip
    assert svc.approve(review.id, reviewer=ALICE, signer=team[ALICE], round=1).final_args == {"amount": 9, "to": "bob"}
    _ok(store)


def test_reviews_opened_in_the_same_commit_as_a_policy_are_under_it(
    svc: ReviewService, keys: Keys, store: Store
) -> None:
    """Group commit puts concurrent writers' work in one transaction: a review opened right after a
    policy.set in the same batch must already be under that policy (verify checks each opening
    against the policy in force at its seq)."""
    import threading

    stop = threading.Event()
    errors: list[BaseException] = []

    def set_policies() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                svc.set_policy({**FOUR_EYES, "approvals": 1 + n % 2}, admin=keys.admin)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    def open_reviews(tag: int) -> None:
        for i in range(25):
            try:
                svc.open_frontier([call(f"g{tag}-{i}")], actor=AGENT)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

    setter = threading.Thread(target=set_policies)
    openers = [threading.Thread(target=open_reviews, args=(t,)) for t in range(6)]
    setter.start()
    for t in openers:
        t.start()
    for t in openers:
        t.join()
    stop.set()
    setter.join()
    assert not errors, errors
    assert store._group.batched > store._group.batches, "no two writers shared a commit: nothing was tested"
    _ok(store)
