"""Delegation (issue 22, 3; SPEC.md §7 rule 2b): a reviewer lends their roles, or some of them, to another
enrolled reviewer until a time, with their own signature (or an admin does it for them). The delegate
decides "for" the delegator; the decision names them (``acting_for``) and is signed by the delegate.

Each case is refused or accepted in the write transaction, and again by ``audit verify`` and the gate
(``prove_decision``) after the log is edited behind the service's back: the attacker's tests append
entries straight into the database, signed with the very keys a colluding delegate holds.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from auditkit import AGENT, ALICE, BOB, Db, FakeClock, Keys, call, forge_append, relink, run_cli, snapshot

from signoff.audit import ReviewService, Store
from signoff.audit.decided import DecisionNotProven, prove_decision
from signoff.audit.delegation import DelegationRefused, grant_body
from signoff.audit.entry import format_time
from signoff.audit.errors import AlreadyApproved, InvalidEntry, NotAllowed, SelfApproval
from signoff.audit.keys import Signer, write_private_key
from signoff.audit.store import default_admin_key
from signoff.audit.trust import LogRules
from signoff.audit.trust import statement as trust_statement
from signoff.audit.verify import verify_store

DAVE = "human:dave@example.org"  # a teller and an auditor, who goes on holiday
ERIN = "human:erin@example.org"  # an observer: decides nothing of her own
DAY = timedelta(days=1)


@pytest.fixture
def people(svc: ReviewService, keys: Keys) -> dict[str, Signer]:
    """Dave (teller, auditor) and Erin (observer only), with their own keys; a policy that makes a teller
    decide transfers and one that makes an auditor decide audits."""
    made = {DAVE: Signer.generate(), ERIN: Signer.generate()}
    svc.enroll_reviewer(DAVE, roles=["auditor", "teller"], tools=["*"], key=made[DAVE].public, admin=keys.admin)
    svc.enroll_reviewer(ERIN, roles=["observer"], tools=["*"], key=made[ERIN].public, admin=keys.admin)
    svc.set_policy({"policy": "tellers", "tools": "transfer", "role": "teller"}, admin=keys.admin)
    svc.set_policy({"policy": "auditors", "tools": "audit_*", "role": "auditor"}, admin=keys.admin)
    return made


def _lend(svc: ReviewService, people: dict[str, Signer], clock: FakeClock, roles: list[str] | None = None) -> Any:
    return svc.delegate(DAVE, ERIN, until=clock.peek() + DAY, roles=roles or ["teller"], signer=people[DAVE])


def _open(svc: ReviewService, cid: str, tool: str = "transfer", **extra: Any) -> Any:
    return svc.open_frontier([call(cid, tool=tool, **extra)], actor=AGENT).reviews[0]


def _refused(store: Store, store_url: str, attempt: Any, error: type[Exception], match: str) -> None:
    before, size = snapshot(store_url), store.size()
    with pytest.raises(error, match=match):
        attempt()
    assert snapshot(store_url) == before and store.size() == size  # nothing written


# -- in the transaction ---------------------------------------------------------------------


def test_a_delegate_decides_inside_the_window_for_the_delegator(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    review = _open(svc, "d-in")
    _refused(  # Erin decides nothing of her own
        store, store_url, lambda: svc.approve(review.id, reviewer=ERIN, signer=people[ERIN]), NotAllowed, "role"
    )
    granted = _lend(svc, people, clock)
    assert (granted.delegator, granted.delegate, granted.roles) == (DAVE, ERIN, ("teller",))
    entry = store.entry(granted.seq)
    assert (entry.kind, entry.actor, entry.sig is not None) == ("delegation.granted", DAVE, True)
    clock.advance(3600)
    done = svc.approve(review.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE, rationale="for Dave")
    assert done.status == "approved"
    decision = store.entry(done.decision_seq)
    assert (decision.actor, decision.body["acting_for"]) == (ERIN, DAVE)
    assert svc.get(review.id).acting_for(done.decision_seq) == DAVE
    proven = prove_decision(store, review.id)
    assert proven.review.final_args == review.call.args
    assert verify_store(store).ok


def test_after_the_window_the_delegate_is_refused(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    granted = _lend(svc, people, clock)
    review = _open(svc, "d-late")
    clock.advance(DAY.total_seconds())  # exactly at until: it has ended
    _refused(
        store,
        store_url,
        lambda: svc.approve(review.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE),
        DelegationRefused,
        f"found {granted.id} ended at {granted.until}",
    )
    assert svc.lent(ERIN) == []
    assert verify_store(store).ok


def test_a_revoked_delegation_lends_nothing(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock, keys: Keys
) -> None:
    for revoker, signing in ((DAVE, {"signer": people[DAVE]}), (ERIN, {"signer": people[ERIN]}), (None, {})):
        granted = _lend(svc, people, clock)
        if revoker is None:
            entry = svc.revoke_delegation(granted.id, reason="back early", admin=keys.admin)
        else:
            entry = svc.revoke_delegation(granted.id, actor=revoker, reason="back early", **signing)
        review = _open(svc, f"d-rev-{entry.seq}")
        _refused(
            store,
            store_url,
            lambda rid=review.id: svc.approve(rid, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE),
            DelegationRefused,
            f"revoked at seq {entry.seq}",
        )
    granted = _lend(svc, people, clock)  # someone else ends nobody's delegation; nor twice
    _refused(
        store,
        store_url,
        lambda: svc.revoke_delegation(granted.id, actor=ALICE, reason="x", signer=Signer.generate()),
        DelegationRefused,
        "expected human:dave@example.org, human:erin@example.org or an admin",
    )
    svc.revoke_delegation(granted.id, actor=DAVE, reason="done", signer=people[DAVE])
    _refused(
        store,
        store_url,
        lambda: svc.revoke_delegation(granted.id, actor=DAVE, reason="again", signer=people[DAVE]),
        DelegationRefused,
        "found it revoked",
    )
    assert verify_store(store).ok


def test_roles_beyond_the_delegation_are_refused(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    _lend(svc, people, clock, roles=["auditor"])
    transfer, audit = _open(svc, "d-role"), _open(svc, "d-audit", tool="audit_books")
    _refused(
        store,
        store_url,
        lambda: svc.approve(transfer.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE),
        NotAllowed,
        "expected a reviewer covering tool 'transfer' with role 'teller'",
    )
    assert svc.approve(audit.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE).status == "approved"
    assert verify_store(store).ok


def test_a_delegator_lends_only_roles_they_hold(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    _refused(
        store,
        store_url,
        lambda: _lend(svc, people, clock, roles=["finance"]),
        DelegationRefused,
        r"expected only roles human:dave@example.org holds themselves .*found \['finance'\]",
    )
    _refused(
        store,
        store_url,
        lambda: svc.delegate(DAVE, DAVE, until=clock.peek() + DAY, signer=people[DAVE]),
        DelegationRefused,
        "someone other than the delegator",
    )
    _refused(
        store,
        store_url,
        lambda: svc.delegate(DAVE, ERIN, until=clock.peek(), signer=people[DAVE]),
        DelegationRefused,
        "expected a time after the grant",
    )
    _refused(
        store,
        store_url,
        lambda: svc.delegate(DAVE, "human:nobody@example.org", until=clock.peek() + DAY, signer=people[DAVE]),
        DelegationRefused,
        "nobody@example.org not enrolled",
    )
    every = svc.delegate(DAVE, ERIN, until=clock.peek() + DAY, signer=people[DAVE])  # default: all Dave's roles
    assert every.roles == ("auditor", "teller")


def test_delegations_do_not_chain(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock, keys: Keys
) -> None:
    _lend(svc, people, clock)  # Dave lends teller to Erin
    _refused(  # Erin holds teller only by delegation: not hers to lend on
        store,
        store_url,
        lambda: svc.delegate(ERIN, BOB, until=clock.peek() + DAY, roles=["teller"], signer=people[ERIN]),
        DelegationRefused,
        r"a role held by delegation is not theirs to delegate\), found \['teller'\]",
    )
    review = _open(svc, "d-chain")
    _refused(
        store,
        store_url,
        lambda: svc.approve(review.id, reviewer=BOB, signer=keys.bob, acting_for=ERIN),
        DelegationRefused,
        "expected a delegation from human:erin@example.org to human:bob@example.org in force",
    )
    _refused(  # nor does Bob act for Dave through Erin
        store,
        store_url,
        lambda: svc.approve(review.id, reviewer=BOB, signer=keys.bob, acting_for=DAVE),
        DelegationRefused,
        "found none granted",
    )


def test_an_admin_delegates_for_anyone_and_nobody_else_does(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock, keys: Keys
) -> None:
    made = svc.delegate(DAVE, ERIN, until=clock.peek() + DAY, roles=["teller"], admin=keys.admin)
    assert store.entry(made.seq).actor == "admin:root" and made.by == "admin:root"
    review = _open(svc, "d-admin")
    assert svc.approve(review.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE).status == "approved"
    # Alice signs a grant of Dave's roles straight into the database: not hers to give
    body = grant_body("dg_00000000000000aa", DAVE, ERIN, ["teller"], format_time(clock.peek() + DAY))
    with Db(store_url) as db:
        forged = forge_append(db, ALICE, "delegation.granted", body, signer=keys.alice)
    _named(store, forged.seq, "review rule 2b", "expected the delegator human:dave@example.org (or an admin)")


def test_what_is_lent_shrinks_with_the_delegator(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock, keys: Keys
) -> None:
    _lend(svc, people, clock, roles=["auditor", "teller"])
    svc.enroll_reviewer(DAVE, roles=["auditor"], tools=["*"], replace=True, admin=keys.admin)  # no longer a teller
    transfer, audit = _open(svc, "d-shrink"), _open(svc, "d-shrink-2", tool="audit_x")
    _refused(
        store,
        store_url,
        lambda: svc.approve(transfer.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE),
        NotAllowed,
        "with role 'teller'",
    )
    svc.approve(audit.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE)
    svc.disable_reviewer(DAVE, reason="left", admin=keys.admin)
    late = _open(svc, "d-shrink-3", tool="audit_y")
    _refused(
        store,
        store_url,
        lambda: svc.approve(late.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE),
        DelegationRefused,
        "dave@example.org disabled",
    )
    assert verify_store(store).ok


def test_a_delegate_may_not_approve_the_delegators_own_request(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    _lend(svc, people, clock)
    dave_asked = _open(svc, "d-self", requested_by=DAVE)
    _refused(
        store,
        store_url,
        lambda: svc.approve(dave_asked.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE),
        SelfApproval,
        "approving for human:dave@example.org, their own request",
    )
    erin_asked = _open(svc, "d-self-2", requested_by=ERIN)
    _refused(
        store,
        store_url,
        lambda: svc.approve(erin_asked.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE),
        SelfApproval,
        "approving their own request",
    )
    rejected = svc.reject(dave_asked.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE, reason="Dave is away")
    assert rejected.status == "rejected"
    assert verify_store(store).ok


def test_a_delegate_sits_in_the_delegators_seat_in_a_quorum(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock, keys: Keys
) -> None:
    svc.set_policy({"policy": "tellers", "tools": "transfer", "role": "teller", "approvals": 2}, admin=keys.admin)
    svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], replace=True, admin=keys.admin)
    _lend(svc, people, clock)
    first, second = _open(svc, "d-q1"), _open(svc, "d-q2")
    svc.approve(first.id, reviewer=DAVE, signer=people[DAVE], round=0)
    _refused(
        store,
        store_url,
        lambda: svc.approve(first.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE, round=0),
        AlreadyApproved,
        "approving for human:dave@example.org, who counted in round 0 already",
    )
    svc.approve(second.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE, round=0)
    _refused(
        store,
        store_url,
        lambda: svc.approve(second.id, reviewer=DAVE, signer=people[DAVE], round=0),
        AlreadyApproved,
        "in which a delegate approved for them already",
    )
    assert svc.approve(second.id, reviewer=ALICE, signer=keys.alice, round=0).status == "approved"
    assert svc.approve(first.id, reviewer=ALICE, signer=keys.alice, round=0).status == "approved"
    assert verify_store(store).ok
    assert prove_decision(store, second.id).review.status == "approved"


def test_a_grant_must_carry_the_delegators_own_signature(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    until = clock.peek() + DAY
    _refused(
        store,
        store_url,
        lambda: svc.delegate(DAVE, ERIN, until=until, roles=["teller"]),
        NotAllowed,
        "expected a signature by one of human:dave@example.org's enrolled keys",
    )
    _refused(
        store,
        store_url,
        lambda: svc.delegate(DAVE, ERIN, until=until, roles=["teller"], signer=people[ERIN]),
        NotAllowed,
        "expected a signature by one of",
    )
    # Dave's signature over the same grant on another log is worth nothing here (the statement names the log)
    body = grant_body("dg_00000000000000ab", DAVE, ERIN, ["teller"], format_time(until))
    elsewhere = people[DAVE].sign(
        trust_statement(LogRules("log_0000000000000000", 2), "delegation.granted", DAVE, body)
    )
    _refused(
        store,
        store_url,
        lambda: svc.delegate(
            DAVE, ERIN, until=format_time(until), roles=["teller"], sig=elsewhere, delegation_id="dg_00000000000000ab"
        ),
        NotAllowed,
        "expected a valid Ed25519 signature",
    )


def test_bad_grants_name_the_field(svc: ReviewService, people: dict[str, Signer], clock: FakeClock) -> None:
    with pytest.raises(InvalidEntry, match="body.delegation: expected 'dg_' and 16 hex digits"):
        svc.delegate(DAVE, ERIN, until=clock.peek() + DAY, signer=people[DAVE], delegation_id="dg_x")
    with pytest.raises(InvalidEntry, match="body.until: expected a time"):
        svc.delegate(DAVE, ERIN, until="tomorrow", signer=people[DAVE])
    with pytest.raises(InvalidEntry, match="reason: expected why"):
        svc.revoke_delegation("dg_0000000000000000", actor=DAVE, reason=" ", signer=people[DAVE])


def test_a_delegate_claims_for_the_delegator(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    review = _open(svc, "d-claim")
    _refused(store, store_url, lambda: svc.claim(review.id, reviewer=ERIN), NotAllowed, "role")
    _lend(svc, people, clock)
    svc.claim(review.id, reviewer=ERIN, acting_for=DAVE)
    assert svc.get(review.id).claim is not None
    assert verify_store(store).ok


def test_lent_and_acting_for_say_whom_a_delegate_decides_for(
    svc: ReviewService, people: dict[str, Signer], clock: FakeClock, keys: Keys
) -> None:
    assert svc.acting_for(ERIN, "transfer", ("teller",)) is None  # nobody: the decision is refused as usual
    granted = _lend(svc, people, clock)
    [lent] = svc.lent(ERIN)
    assert (lent.delegator, lent.state.roles, lent.until) == (DAVE, ("teller",), granted.until)
    assert svc.acting_for(ERIN, "transfer", ("teller",)) == DAVE
    assert svc.acting_for(ERIN, "audit_x", ("auditor",)) is None
    assert svc.acting_for(DAVE, "transfer", ("teller",)) is None  # his own roles cover it
    assert [d.id for d in svc.delegations(reviewer=ERIN)] == [d.id for d in svc.delegations()]


# -- behind the service's back: audit verify and the gate -----------------------------------


def _forged_approval(store_url: str, review: Any, signer: Signer, actor: str = ERIN, **extra: Any) -> Any:
    body = {"review": review.id, "args_digest": review.args_digest, "rationale": "", "acting_for": DAVE, **extra}
    with Db(store_url) as db:
        return forge_append(db, actor, "review.approved", body, signer=signer)


def _named(store: Store, seq: int, rule: str, text: str) -> None:
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert (report.failure.seq, report.failure.rule) == (seq, rule), str(report.failure)
    assert text in str(report.failure), str(report.failure)


def test_verify_and_the_gate_name_a_decision_after_the_window(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    granted = _lend(svc, people, clock)
    review = _open(svc, "d-forged-late")
    late = format_time(clock.peek() + 2 * DAY)
    body = {"review": review.id, "args_digest": review.args_digest, "rationale": "", "acting_for": DAVE}
    with Db(store_url) as db:
        forged = forge_append(db, ERIN, "review.approved", body, signer=people[ERIN], at=late)
    _named(store, forged.seq, "review rule 2b", f"{granted.id} ended at")
    with pytest.raises(DecisionNotProven, match="ended at"):
        prove_decision(store, review.id)


def test_verify_and_the_gate_name_a_decision_with_no_delegation(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer]
) -> None:
    review = _open(svc, "d-forged-none")
    forged = _forged_approval(store_url, review, people[ERIN])
    _named(store, forged.seq, "review rule 2b", "found none granted")
    with pytest.raises(DecisionNotProven, match="found none granted"):
        prove_decision(store, review.id)


def test_verify_and_the_gate_name_a_decision_beyond_the_roles_lent(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    _lend(svc, people, clock, roles=["auditor"])
    review = _open(svc, "d-forged-role")
    forged = _forged_approval(store_url, review, people[ERIN])
    _named(store, forged.seq, "review rule 2", "with role 'teller'")
    with pytest.raises(DecisionNotProven, match="covering transfer"):
        prove_decision(store, review.id)


def test_verify_and_the_gate_name_a_chained_delegation(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock, keys: Keys
) -> None:
    """Erin, lent teller by Dave, signs a grant of it to Bob straight into the database; Bob approves
    for Erin with his own key. The chain and both signatures hold; verify names the grant, and the gate
    refuses Bob's decision (Erin holds no teller role of her own)."""
    _lend(svc, people, clock)
    review = _open(svc, "d-forged-chain")
    body = grant_body("dg_00000000000000c1", ERIN, BOB, ["teller"], format_time(clock.peek() + DAY))
    with Db(store_url) as db:
        grant = forge_append(db, ERIN, "delegation.granted", body, signer=people[ERIN])
        approval = {"review": review.id, "args_digest": review.args_digest, "rationale": "", "acting_for": ERIN}
        forge_append(db, BOB, "review.approved", approval, signer=keys.bob)
    _named(store, grant.seq, "review rule 2b", "a role held by delegation is not theirs to delegate")
    with pytest.raises(DecisionNotProven, match="human:erin@example.org still holds"):
        prove_decision(store, review.id)


def test_verify_and_the_gate_name_a_grant_nobody_signed(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    """A database writer adds a grant in Dave's name without his key (unsigned, or signed by Erin), then
    Erin's signed approval for Dave: verify names the grant, and the gate refuses the decision."""
    review = _open(svc, "d-forged-grant")
    body = grant_body("dg_00000000000000c2", DAVE, ERIN, ["teller"], format_time(clock.peek() + DAY))
    with Db(store_url) as db:
        grant = forge_append(db, DAVE, "delegation.granted", body, signer=people[ERIN])
    _forged_approval(store_url, review, people[ERIN])
    _named(store, grant.seq, "signature", "expected a key enrolled for human:dave@example.org")
    with pytest.raises(DecisionNotProven, match=f"the delegation at seq {grant.seq} is not proven"):
        prove_decision(store, review.id)


def test_the_write_path_refuses_a_decision_that_rests_on_a_grant_nobody_signed(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    """Issue 34 item 7: a well-linked grant "by Dave" written into the database, signed with Erin's key.
    It was listed as in force and Erin's approval for Dave under it was recorded (only the gate and
    verify refused). The write path now proves the grant before relying on it: the approval is refused,
    naming the seq, nothing is written, and the listings leave the grant out."""
    review = _open(svc, "d-forged-write")
    body = grant_body("dg_00000000000000c3", DAVE, ERIN, ["teller"], format_time(clock.peek() + DAY))
    with Db(store_url) as db:
        grant = forge_append(db, DAVE, "delegation.granted", body, signer=people[ERIN])
    _refused(
        store,
        store_url,
        lambda: svc.approve(review.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE),
        NotAllowed,
        rf"seq {grant.seq}: expected a delegation.granted its writer signed, found one that is not proven",
    )
    assert svc.delegations() == [] and svc.delegations_to(ERIN) == [] and svc.lent(ERIN) == []
    listed = run_cli(store_url, None, "delegations", "--json")
    assert listed.returncode == 0 and "dg_00000000000000c3" not in listed.stdout, listed.stdout
    _named(store, grant.seq, "signature", "expected a key enrolled for human:dave@example.org")


def test_a_grant_signed_by_its_delegator_is_proven_once_and_relied_on(
    svc: ReviewService, store: Store, people: dict[str, Signer], clock: FakeClock
) -> None:
    """The proof is made the first time the write path relies on a grant, and kept by seq."""
    granted = _lend(svc, people, clock)
    first, second = _open(svc, "d-proven-1"), _open(svc, "d-proven-2")
    svc.approve(first.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE)
    assert svc.trust_cache.checked.get(granted.seq) == store.entry(granted.seq).hash
    svc.approve(second.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE)
    assert verify_store(store).ok


def test_verify_names_a_widened_grant(
    svc: ReviewService, store: Store, store_url: str, people: dict[str, Signer], clock: FakeClock
) -> None:
    """The grant's ``until`` moved a year on, behind the service's back: Dave's signature no longer holds."""
    granted = _lend(svc, people, clock)
    with Db(store_url) as db:
        relink(db, granted.seq, lambda data: data["body"].update(until=format_time(clock.peek() + 365 * DAY)))
    _named(store, granted.seq, "signature", "expected a valid Ed25519 signature")


def test_incremental_verify_carries_delegations_across_a_checkpoint(
    svc: ReviewService, store: Store, people: dict[str, Signer], clock: FakeClock, key_path: Path
) -> None:
    _lend(svc, people, clock)
    kept = store.checkpoint(key_path)
    review = _open(svc, "d-incr")
    svc.approve(review.id, reviewer=ERIN, signer=people[ERIN], acting_for=DAVE)
    report = verify_store(store, against=kept, incremental=True)
    assert report.ok and report.checked_from == kept.size, report.failure


# -- the command line -----------------------------------------------------------------------


def test_audit_delegate_approve_for_and_revoke_from_the_command_line(
    svc: ReviewService, store_url: str, people: dict[str, Signer], tmp_path: Path
) -> None:
    dave_key, erin_key = tmp_path / "dave.pem", tmp_path / "erin.pem"
    write_private_key(people[DAVE], dave_key)
    write_private_key(people[ERIN], erin_key)
    made = run_cli(
        store_url, None, "delegate", "--to", "erin@example.org", "--roles", "teller", "--until", "2d",
        "--as", "dave@example.org", "--reviewer-key", str(dave_key), "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    granted = json.loads(made.stdout)
    assert (granted["delegator"], granted["delegate"], granted["roles"]) == (DAVE, ERIN, ["teller"])
    listed = run_cli(store_url, None, "delegations")
    assert granted["delegation"] in listed.stdout and "in force" in listed.stdout
    review = _open(svc, "d-cli")
    approved = run_cli(
        store_url, None, "approve", review.id, "--as", "erin@example.org", "--reviewer-key", str(erin_key)
    )
    assert approved.returncode == 0, approved.stderr
    assert f"approved by {ERIN}, for {DAVE}" in approved.stdout
    wrong = run_cli(  # someone else's key file is named as such
        store_url, None, "revoke-delegation", granted["delegation"], "--reason", "x",
        "--as", "erin@example.org", "--reviewer-key", str(dave_key),
    )  # fmt: skip
    assert wrong.returncode == 2 and "--reviewer-key: expected a key enrolled for human:erin" in wrong.stderr
    ended = run_cli(
        store_url, None, "revoke-delegation", granted["delegation"], "--reason", "back",
        "--as", "erin@example.org", "--reviewer-key", str(erin_key),
    )  # fmt: skip
    assert ended.returncode == 0, ended.stderr
    assert "no delegation in force" in run_cli(store_url, None, "delegations").stdout
    bad = run_cli(
        store_url, None, "delegate", "--to", "erin@example.org", "--until", "soon", "--as", "dave@example.org",
        "--reviewer-key", str(dave_key),
    )  # fmt: skip
    assert bad.returncode == 2 and "--until: expected a date" in bad.stderr


def test_audit_delegate_by_an_admin(
    svc: ReviewService, store_url: str, key_path: Path, people: dict[str, Signer]
) -> None:
    admin = str(default_admin_key(key_path))
    made = run_cli(
        store_url, None, "delegate", "--from", "dave@example.org", "--to", "erin@example.org",
        "--until", "2030-01-03", "--admin-key", admin, "--json",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    granted = json.loads(made.stdout)
    assert (granted["by"], granted["until"], granted["roles"]) == (
        "admin:root", "2030-01-03T00:00:00.000000Z", ["auditor", "teller"],
    )  # fmt: skip
    alone = run_cli(store_url, None, "delegate", "--to", "erin@example.org", "--until", "1d", "--admin-key", admin)
    assert alone.returncode == 2 and "--from: expected whose roles" in alone.stderr
