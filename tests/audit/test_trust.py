"""Attacks on the trust model (DESIGN.md "Who holds which key"), each named after what it tries.

The attacker has write access to the database (every table), runs the agent (its process holds
no admin key and no reviewer key), or replays what it has seen. For each attack: what the
service refuses in the transaction (writing nothing), what the gate's check
(:func:`signoff.audit.decided.prove_decision`) and ``ReviewService.get`` report, and what
``audit verify`` names. Storage attacks run on SQLite and PostgreSQL (the ``store`` fixture).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from auditkit import (
    ADMIN,
    AGENT,
    ALICE,
    BOB,
    SERVICE,
    Db,
    FakeClock,
    Keys,
    call,
    forge_append,
    leaf,
    rebuild_tree,
    relink,
    sign_entry,
    snapshot,
)
from passkeys import ORIGIN, UP, SoftPasskey

from signoff.audit import (
    CanonicalFormError,
    NotAllowed,
    ReviewClosed,
    ReviewService,
    Signer,
    Store,
    canonical,
    decision,
    digest,
    open_store,
)
from signoff.audit.decided import DecisionNotProven, SignedDecision, TrustCache, prove_decision
from signoff.audit.errors import VerificationFailed
from signoff.audit.keys import read_private_key
from signoff.audit.limits import MAX_VALUE_DEPTH
from signoff.audit.store import Checkpoint
from signoff.audit.trust import statement
from signoff.audit.verify import verify_store

DAVE = "human:dave@example.org"  # enrolls his own passkey with a one-time code
EVE = "human:eve@example.org"  # never enrolled by an admin
INTRUDER = "agent:intruder"  # an agent whose key the admin enrolled


def _failure(store: Store, **kw: Any) -> VerificationFailed:
    report = verify_store(store, **kw)
    assert not report.ok, "the attack went unnoticed by audit verify"
    assert report.failure is not None
    return report.failure


def _proof(store: Store, review_id: str) -> SignedDecision:
    """The gate's check, with the log key pinned as the bridge pins it."""
    return prove_decision(store, review_id, cache=TrustCache(log_key=store.public_key))


def _refused(store: Store, store_url: str, error: type[Exception], action: Callable[[], Any], *words: str) -> str:
    """``action`` raises ``error`` (naming ``words``) and writes nothing at all."""
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(error) as caught:
        action()
    assert store.size() == size, "a refused operation wrote an entry"
    assert snapshot(store_url) == before, "a refused operation changed a table"
    for word in words:
        assert word in str(caught.value), str(caught.value)
    return str(caught.value)


def _row(store_url: str, review_id: str) -> dict[str, Any]:
    with Db(store_url) as db:
        names = db.columns("signoff_review")
        values = db.one("SELECT * FROM signoff_review WHERE id = ?", (review_id,))
    return dict(zip(names, values, strict=True))


def _set_row(store_url: str, review_id: str, **values: Any) -> None:
    sets = ", ".join(f"{name} = ?" for name in values)
    with Db(store_url) as db:
        db.run((f"UPDATE signoff_review SET {sets} WHERE id = ?", (*values.values(), review_id)))


# -- the projection is not the truth -------------------------------------------------------


@pytest.mark.parametrize("a_state", ["pending", "rejected"])
def test_redirected_decision_row(svc: ReviewService, keys: Keys, store: Store, store_url: str, a_state: str) -> None:
    """A database writer points review A's row at review B's approval of other args (decided_seq,
    final_digest, data). A's own entries still say what A is; the gate and ``get`` read those."""
    a = svc.open_frontier([call("a", args={"amount": 100, "to": "bob"})], actor=AGENT).reviews[0]
    b = svc.open_frontier([call("b", args={"amount": 5000, "to": "mallory"})], actor=AGENT).reviews[0]
    approved_b = svc.approve(b.id, reviewer=ALICE, rationale="big but known", signer=keys.alice)
    if a_state == "rejected":
        svc.reject(a.id, reviewer=ALICE, reason="not this one", signer=keys.alice)
    truth = svc.get(a.id)
    row_b = _row(store_url, b.id)
    _set_row(
        store_url,
        a.id,
        status="approved",
        decided_seq=row_b["decided_seq"],
        decided_by=row_b["decided_by"],
        decided_at=row_b["decided_at"],
        final_digest=row_b["final_digest"],
        data=row_b["data"],
    )
    served = svc.get(a.id)
    assert served == truth and served.status == a_state
    assert served.call.args == {"amount": 100, "to": "bob"} and served.final_args is None
    assert served.decision_seq != approved_b.decision_seq
    proof = _proof(store, a.id)
    signed_by = keys.alice.fingerprint if a_state == "rejected" else None
    assert (proof.status, proof.review.final_args, proof.signed_by) == (a_state, None, signed_by)
    assert _proof(store, b.id).review.final_args == {"amount": 5000, "to": "mallory"}  # B is still B
    found = _failure(store)
    assert f"projection of review {a.id}" in found.rule
    assert found.seq == (truth.decision_seq if a_state == "rejected" else a.opened_seq)


def test_forged_approval_row(svc: ReviewService, store: Store, store_url: str) -> None:
    """A pending review's row set to approved, with args of 5000 to run with, and no decision on the
    log: nothing that reads the review believes it."""
    review = svc.open_frontier([call("forged")], actor=AGENT).reviews[0]
    data = json.loads(_row(store_url, review.id)["data"])
    data["call"]["args"] = {"amount": 5000, "to": "bob"}
    data.update(final_args={"amount": 5000, "to": "bob"}, rationale="", answer_payload=None)
    _set_row(
        store_url,
        review.id,
        status="approved",
        decided_by=ALICE,
        decided_at=review.opened_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        final_digest=digest({"amount": 5000, "to": "bob"}),
        data=json.dumps(data),
    )
    served = svc.get(review.id)
    assert (served.status, served.final_args, served.decided_by) == ("pending", None, None)
    assert served.call.args == {"amount": 100, "to": "bob"}
    proof = _proof(store, review.id)
    assert (proof.status, proof.review.final_args, proof.signed_by) == ("pending", None, None)
    found = _failure(store)
    assert (found.seq, found.rule) == (review.opened_seq, f"projection of review {review.id}")


# -- nobody but an admin enrolls ---------------------------------------------------------------


def test_agent_self_enrollment(store: Store, store_url: str, keys: Keys, key_path: Path) -> None:
    """The agent's process holds no admin key. Without one (as the service), with the log key in its
    place, or with its own enrolled key, it cannot enroll a reviewer or a key, disable or revoke."""
    agent_key = Signer.generate()
    ReviewService(store).enroll_key(AGENT, agent_key.public, admin=keys.admin)
    plain, keyed = ReviewService(store), ReviewService(store, signer=agent_key)
    log_key = read_private_key(key_path)
    mallory_key = Signer.generate().public
    attempts: dict[str, Callable[[], Any]] = {
        "service-enrolls-reviewer": lambda: plain.enroll_reviewer(BOB, roles=["teller"], tools=["*"]),
        "service-enrolls-key": lambda: plain.enroll_key(AGENT, mallory_key),
        "agent-enrolls-reviewer": lambda: keyed.enroll_reviewer(BOB, roles=["teller"], tools=["*"], actor=AGENT),
        "agent-enrolls-own-key": lambda: keyed.enroll_key(AGENT, mallory_key, actor=AGENT),
        "agent-enrolls-reviewer-key": lambda: keyed.enroll_key(ALICE, mallory_key, actor=AGENT),
        "agent-revokes": lambda: keyed.revoke_key(AGENT, agent_key.fingerprint, reason="x", actor=AGENT),
        "log-key-as-admin": lambda: plain.enroll_reviewer(BOB, roles=["teller"], tools=["*"], admin=log_key),
        "log-key-as-admin-key": lambda: plain.enroll_key(AGENT, mallory_key, admin=log_key),
        "log-key-for-the-admin": lambda: plain.enroll_key(AGENT, mallory_key, actor=ADMIN, admin=log_key),
        "log-actor": lambda: plain.enroll_key(AGENT, mallory_key, actor=f"log:{store.log_id}", admin=log_key),
        "agent-key-for-the-admin": lambda: keyed.enroll_key(AGENT, mallory_key, actor=ADMIN, admin=agent_key),
        "unenrolled-admin": lambda: plain.enroll_key(AGENT, mallory_key, actor="admin:evil", admin=Signer.generate()),
    }
    for name, attempt in attempts.items():
        try:
            _refused(store, store_url, NotAllowed, attempt, "expected")
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    assert verify_store(store).ok


FORGED_ENROLMENTS = {
    # (actor, kind, body, signed with) -> all named "enrolment authority"
    "service-enrolls-reviewer": (SERVICE, "reviewer.enrolled", {"reviewer": EVE, "roles": ["teller"], "tools": ["*"]}),
    "agent-enrolls-reviewer": (INTRUDER, "reviewer.enrolled", {"reviewer": EVE, "roles": ["teller"], "tools": ["*"]}),
    "agent-enrolls-a-key": (
        INTRUDER,
        "key.enrolled",
        {"actor": ALICE, "key": Signer.generate().public, "alg": "Ed25519"},
    ),
    "agent-disables": (INTRUDER, "reviewer.disabled", {"reviewer": ALICE, "reason": "coup"}),
    "unenrolled-admin": (
        "admin:evil",
        "reviewer.enrolled",
        {"reviewer": EVE, "roles": ["admin"], "tools": ["*"]},
    ),
}


@pytest.mark.parametrize("name", list(FORGED_ENROLMENTS))
def test_agent_self_enrollment_forged_into_the_log(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, name: str
) -> None:
    """The same enrolments written straight into the database with a valid chain link (and signed
    with the agent's own enrolled key, where it has one) are named by verify, and the gate refuses a
    decision that leans on one."""
    agent_key = Signer.generate()
    svc.enroll_key(INTRUDER, agent_key.public, admin=keys.admin)
    actor, kind, body = FORGED_ENROLMENTS[name]
    signer = agent_key if actor == INTRUDER else (Signer.generate() if actor.startswith("admin:") else None)
    with Db(store_url) as db:
        forged = forge_append(db, actor, kind, body, signer=signer)
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "enrolment authority"), str(found)
    if kind == "reviewer.enrolled":
        # the forged reviewer's decision: signed by a key of eve's own, enrolled behind the log's back too
        eve = Signer.generate()
        review = svc.open_frontier([call("f")], actor=AGENT).reviews[0]
        with Db(store_url) as db:
            forge_append(db, actor, "key.enrolled", {"actor": EVE, "key": eve.public, "alg": "Ed25519"}, signer=signer)
            body = {"review": review.id, "args_digest": review.args_digest, "rationale": ""}
            forge_append(db, EVE, "review.approved", body, signer=eve)
        with pytest.raises(DecisionNotProven):
            _proof(store, review.id)


# -- decisions are the person's signature ------------------------------------------------------


def test_unsigned_decision_on_a_signed_log(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    review = svc.open_frontier([call("u1")], actor=AGENT).reviews[0]
    patch = [{"op": "replace", "path": "/amount", "value": 1}]
    for action in (
        lambda: svc.approve(review.id, reviewer=ALICE),
        lambda: svc.edit(review.id, reviewer=ALICE, patch=patch),
        lambda: svc.reject(review.id, reviewer=ALICE, reason="no"),
    ):
        _refused(store, store_url, NotAllowed, action, "sig: expected", "found none")
    assert svc.get(review.id).status == "pending"
    # written behind the service's back: no signature, or another person's
    body = {"review": review.id, "args_digest": review.args_digest, "rationale": ""}
    for signer in (None, keys.bob):
        with Db(store_url) as db, db.saved():
            forged = forge_append(db, ALICE, "review.approved", body, signer=signer)
            found = _failure(store)
            assert (found.seq, found.rule) == (forged.seq, "signature"), str(found)
            with pytest.raises(DecisionNotProven, match="not proven"):
                _proof(store, review.id)
    assert verify_store(store).ok


def test_deleted_key_row_on_a_signed_log(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """Deleting alice's key row does not let anyone decide as alice without her signature: with no
    key on the write path, no decision of hers is accepted at all."""
    review = svc.open_frontier([call("k1")], actor=AGENT).reviews[0]
    enrolled = svc.keys(ALICE)[0]
    with Db(store_url) as db:
        db.run(("DELETE FROM signoff_key WHERE actor = ?", (ALICE,)))
    found = _failure(store)
    assert found.seq == enrolled.seq and "signoff_key" in found.rule and ALICE in found.rule
    body = {"review": review.id, "args_digest": review.args_digest, "rationale": ""}
    for action in (
        lambda: svc.approve(review.id, reviewer=ALICE),
        lambda: svc.approve(review.id, reviewer=ALICE, signer=keys.alice),
        lambda: svc.approve(
            review.id, reviewer=ALICE, sig=sign_entry(store, keys.alice, "review.approved", ALICE, body)
        ),
    ):
        _refused(store, store_url, NotAllowed, action, "sig")
    assert svc.get(review.id).status == "pending"


def test_deleted_key_row_on_a_log_that_allows_unsigned_decisions(
    store_url: str, tmp_path: Path, clock: FakeClock
) -> None:
    """On a log made with ``signed_decisions=False``, alice (who has a key) must still sign. Once her
    key row is deleted the service accepts an unsigned decision of hers, but her key is on the log:
    the gate refuses it, and verify names the row, then the decision."""
    store = open_store(store_url, clock=clock)
    try:
        store.init_log(tmp_path / "log.pem", signed_decisions=False)
        assert store.rules.signed_decisions is False
        keys = Keys.for_log(tmp_path / "log.pem")
        svc = ReviewService(store)
        svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
        svc.enroll_reviewer(BOB, roles=["teller"], tools=["*"], admin=keys.admin)  # bob has no key
        first, second, third = svc.open_frontier([call("a1"), call("a2"), call("a3")], actor=AGENT).reviews
        # bob, keyless, may decide unsigned on this log, and it proves; alice may not while her key is listed
        svc.approve(first.id, reviewer=BOB)
        assert _proof(store, first.id).signed_by is None
        _refused(store, store_url, NotAllowed, lambda: svc.approve(second.id, reviewer=ALICE), "sig: expected")
        with Db(store_url) as db:
            columns = ", ".join(db.columns("signoff_key"))
            key_row = db.one("SELECT * FROM signoff_key WHERE actor = ?", (ALICE,))
            db.run(("DELETE FROM signoff_key WHERE actor = ?", (ALICE,)))
        found = _failure(store)
        assert "signoff_key" in found.rule and ALICE in found.rule
        done = svc.approve(second.id, reviewer=ALICE)  # the write path saw no key of hers
        assert done.status == "approved"
        with pytest.raises(DecisionNotProven, match="not proven"):
            _proof(store, second.id)
        found = _failure(store)
        assert (found.seq, found.rule) == (done.decision_seq, "signature")
        # with the row back, her signed decision proves: the gate checks each decision on its own
        with Db(store_url) as db:
            marks = ", ".join("?" for _ in key_row)
            db.run((f"INSERT INTO signoff_key ({columns}) VALUES ({marks})", key_row))
        assert svc.approve(third.id, reviewer=ALICE, signer=keys.alice).status == "approved"
        assert _proof(store, third.id).signed_by == keys.alice.fingerprint
    finally:
        store.close()


def test_inserted_key_row(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """The reverse: a key row of the attacker's, listed as the admin's. Whatever the write path makes
    of it, a reviewer enrolled with that key decides nothing the gate accepts, and verify names the
    enrolment (and, without it, the row)."""
    attacker = Signer.generate()
    with Db(store_url) as db:
        db.run(
            (
                "INSERT INTO signoff_key (log, fingerprint, actor, public_key, enrolled_seq) VALUES (?, ?, ?, ?, ?)",
                (store.log_id, attacker.fingerprint, ADMIN, attacker.public, 1),
            )
        )
    found = _failure(store)
    assert (found.seq, found.rule) == (1, f"projection of key {attacker.fingerprint} of {ADMIN} (signoff_key)")
    eve = Signer.generate()
    try:
        enrolled = svc.enroll_reviewer(EVE, roles=["teller"], tools=["*"], key=eve.public, admin=attacker)
    except NotAllowed:
        return  # the write path refused the key row outright
    review = svc.open_frontier([call("i1")], actor=AGENT).reviews[0]
    assert svc.approve(review.id, reviewer=EVE, signer=eve).status == "approved"
    with pytest.raises(DecisionNotProven, match="not proven"):
        _proof(store, review.id)
    found = _failure(store)
    assert (found.seq, found.rule) == (enrolled.seq, "signature")


# -- checkpoints -------------------------------------------------------------------------------


def test_deleted_checkpoint_rows(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    review = svc.open_frontier([call("c1")], actor=AGENT).reviews[0]
    first = store.checkpoint(keys.log)
    svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
    second = store.checkpoint(keys.log)
    assert verify_store(store).ok
    with Db(store_url) as db:
        for doomed in ((first.size,), (second.size,), (first.size, second.size)):
            with db.saved():
                for size in doomed:
                    db.run(("DELETE FROM signoff_checkpoint WHERE size = ?", (size,)))
                found = _failure(store)
                assert found.seq == doomed[0], (doomed, str(found))
                assert found.rule == f"stored checkpoint of size {doomed[0]}" and "no row" in found.found


def test_fake_checkpoint_rows(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """A checkpoint row the log never recorded: a forged one, and one properly signed by whoever holds
    the log key but kept off the log (an operator handing out tree heads it cannot later deny)."""
    svc.open_frontier([call("c1"), call("c2")], actor=AGENT)
    store.checkpoint(keys.log)
    size = 3
    body = {
        "log": store.log_id,
        "size": size,
        "root": "sha256:" + store.root(size).hex(),
        "at": "2026-11-30T12:00:00.000000Z",
    }
    signed = Checkpoint.from_json({**body, "sig": keys.log.sign(canonical(body))})
    forged = Checkpoint.from_json({**body, "sig": Signer.generate().sign(canonical(body))})
    with Db(store_url) as db:
        for point, rule in ((forged, "stored checkpoint signature (size 3)"), (signed, "stored checkpoint of size 3")):
            with db.saved():
                db.run(
                    (
                        "INSERT INTO signoff_checkpoint (log, size, root, at, signed) VALUES (?, ?, ?, ?, ?)",
                        (point.log, point.size, point.root, point.at, json.dumps(point.to_json())),
                    )
                )
                found = _failure(store)
                assert found.rule == rule, str(found)
                if point is signed:
                    assert (found.seq, found.found) == (size, "none on the log")


# -- passkeys (WebAuthn assertions over the decision statement) ---------------------------------


def _enroll_dave(svc: ReviewService, keys: Keys, alg: str, code: str = "dave-first-login") -> SoftPasskey:
    svc.enroll_reviewer(DAVE, roles=["teller"], tools=["*"], code=code, admin=keys.admin)
    passkey = SoftPasskey(alg)
    svc.enroll_passkey(DAVE, passkey.passkey, code=code)
    return passkey


def _approval(review: Any, rationale: str = "") -> dict[str, Any]:
    return {"review": review.id, "args_digest": review.args_digest, "rationale": rationale}


@pytest.mark.parametrize("alg", ["ES256", "Ed25519"])
def test_passkey_decision_verifies_and_proves(svc: ReviewService, keys: Keys, store: Store, alg: str) -> None:
    passkey = _enroll_dave(svc, keys, alg)
    assert [k.fingerprint for k in svc.keys(DAVE)] == [passkey.fingerprint]
    approve, edit, reject = svc.open_frontier([call("p1"), call("p2"), call("p3")], actor=AGENT).reviews
    done = svc.approve(
        approve.id,
        reviewer=DAVE,
        rationale="ok",
        sig=sign_entry(store, passkey, "review.approved", DAVE, _approval(approve, "ok")),
    )
    patch = [{"op": "replace", "path": "/amount", "value": 1}]
    prepared = decision.prepare_edit(svc.get(edit.id), patch)  # the body the service records (sealed values)
    svc.edit(
        edit.id,
        reviewer=DAVE,
        patch=patch,
        sig=sign_entry(store, passkey, "review.edited", DAVE, prepared.body),
        salts=prepared.salts,
    )
    reject_body = {"review": reject.id, "reason": "no"}
    svc.reject(
        reject.id, reviewer=DAVE, reason="no", sig=sign_entry(store, passkey, "review.rejected", DAVE, reject_body)
    )
    report = verify_store(store)
    assert report.ok, report.failure
    proof = _proof(store, approve.id)
    assert (proof.status, proof.signed_by, proof.review.final_args) == (
        "approved",
        passkey.fingerprint,
        {"amount": 100, "to": "bob"},
    )
    assert _proof(store, edit.id).review.final_args == {"amount": 1, "to": "bob"}
    assert _proof(store, reject.id).status == "rejected"
    assert done.decision_seq is not None
    entry = store.entry(done.decision_seq)
    assert entry.sig is not None and entry.sig["alg"] == "WebAuthn" and entry.sig["key"] == passkey.fingerprint


def test_passkey_enrolment_code_is_single_use(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    _enroll_dave(svc, keys, "ES256", code="once")
    second = SoftPasskey("ES256")
    _refused(store, store_url, NotAllowed, lambda: svc.enroll_passkey(DAVE, second.passkey, code="once"), "code")
    # a wrong code, a code of someone else's, a reviewer who has no code
    svc.enroll_reviewer("human:erin@example.org", roles=["teller"], tools=["*"], code="erins", admin=keys.admin)
    for who, code in (("human:erin@example.org", "once"), ("human:erin@example.org", "guess"), (ALICE, "erins")):
        _refused(store, store_url, NotAllowed, partial(svc.enroll_passkey, who, second.passkey, code=code), "code")
    # only an admin resets it (a lost passkey): revoke it, and a new enrolment with a new code
    lost = svc.keys(DAVE)[0].fingerprint
    svc.revoke_key(DAVE, lost, reason="passkey lost", admin=keys.admin)
    svc.enroll_reviewer(DAVE, roles=["teller"], tools=["*"], code="again", admin=keys.admin)
    svc.enroll_passkey(DAVE, second.passkey, code="again")
    assert [k.fingerprint for k in svc.keys(DAVE)] == [second.fingerprint]
    assert verify_store(store).ok


def test_passkey_enrolment_code_replayed_into_the_log(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """The code's proof is public once used: a second key.enrolled that repeats it is refused by verify."""
    _enroll_dave(svc, keys, "ES256", code="once")
    used = next(e for e in store.entries(kind="key.enrolled") if e.actor == DAVE)
    other = SoftPasskey("ES256")
    with Db(store_url) as db:
        forged = forge_append(db, DAVE, "key.enrolled", {**used.body, **other.passkey.to_body()})
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "enrolment authority"), str(found)


BAD_ASSERTIONS: dict[str, tuple[dict[str, Any], str]] = {
    # name: (what the authenticator or the client did, the check that refuses it)
    "other-origin": ({"origin": "https://evil.example"}, "sig.client_data.origin"),
    "other-rp-id": ({"rp_id": "evil.example"}, "RP ID hash"),
    "user-not-verified": ({"flags": UP}, "user-verified flag"),
    "registration-not-assertion": ({"client_type": "webauthn.create"}, "sig.client_data.type"),
    "cross-origin": ({"cross_origin": True}, "sig.client_data.crossOrigin"),
    "client-data-tampered": (
        {"edit_client_data": lambda data: data.replace(ORIGIN.encode(), b"http://localhost:8001")},
        "sig.value",
    ),
    "client-data-reformatted": (
        {"edit_client_data": lambda data: json.dumps(json.loads(data), indent=1).encode()},
        "sig.value",
    ),
}


@pytest.mark.parametrize("alg", ["ES256", "Ed25519"])
def test_passkey_assertion_over_anything_else_is_refused(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, alg: str
) -> None:
    """Assertions by dave's own passkey over another statement (other args, review, rationale or
    kind), by another passkey, or made or carried wrongly: each refused by the check named."""
    passkey = _enroll_dave(svc, keys, alg)
    review, other = svc.open_frontier(
        [call("q1"), call("q2", args={"amount": 5000, "to": "mallory"})], actor=AGENT
    ).reviews

    def good(body: dict[str, Any], **knobs: Any) -> dict[str, str]:
        return passkey.assertion(statement(store.rules, "review.approved", DAVE, body), **knobs)

    attempts: dict[str, tuple[dict[str, str], str]] = {
        "other-args": (good({**_approval(review), "args_digest": other.args_digest}), "sig.client_data.challenge"),
        "other-review": (good(_approval(other)), "sig.client_data.challenge"),
        "other-rationale": (good(_approval(review, "something else")), "sig.client_data.challenge"),
        "other-kind": (
            passkey.assertion(statement(store.rules, "review.rejected", DAVE, {"review": review.id, "reason": "x"})),
            "sig.client_data.challenge",
        ),
        "another-passkey": (
            SoftPasskey(alg).assertion(statement(store.rules, "review.approved", DAVE, _approval(review))),
            "sig.key: expected a key enrolled for",
        ),
    }
    attempts.update({name: (good(_approval(review), **knobs), word) for name, (knobs, word) in BAD_ASSERTIONS.items()})
    for name, (sig, word) in attempts.items():
        try:
            _refused(
                store, store_url, NotAllowed, partial(svc.approve, review.id, reviewer=DAVE, sig=sig), word, "found"
            )
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    assert svc.get(review.id).status == "pending"
    assert svc.approve(review.id, reviewer=DAVE, sig=good(_approval(review))).status == "approved"
    assert verify_store(store).ok


# -- revoked keys and replays ---------------------------------------------------------------------


def test_revoked_key(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    before, after, later = svc.open_frontier([call("r1"), call("r2"), call("r3")], actor=AGENT).reviews
    svc.approve(before.id, reviewer=ALICE, signer=keys.alice)
    svc.revoke_key(ALICE, keys.alice.fingerprint, reason="laptop stolen", admin=keys.admin)
    assert svc.keys(ALICE) == []
    stolen = sign_entry(store, keys.alice, "review.approved", ALICE, _approval(after))
    _refused(store, store_url, NotAllowed, lambda: svc.approve(after.id, reviewer=ALICE, sig=stolen), "sig")
    _refused(store, store_url, NotAllowed, lambda: svc.approve(after.id, reviewer=ALICE, signer=keys.alice), "sig")
    # the decision made while the key was hers still verifies and proves
    assert verify_store(store).ok
    assert _proof(store, before.id).signed_by == keys.alice.fingerprint
    # a new key, enrolled by the admin, works
    fresh = Signer.generate()
    svc.enroll_key(ALICE, fresh.public, admin=keys.admin)
    assert svc.approve(later.id, reviewer=ALICE, signer=fresh).status == "approved"
    assert verify_store(store).ok
    with Db(store_url) as db:
        with db.saved():  # written behind the service's back with the revoked key
            forged = forge_append(db, ALICE, "review.approved", _approval(after), sig=stolen)
            found = _failure(store)
            assert (found.seq, found.rule) == (forged.seq, "signature")
            with pytest.raises(DecisionNotProven):
                _proof(store, after.id)
        with db.saved():  # a revocation only the service wrote
            body = {"actor": ALICE, "key": fresh.fingerprint, "reason": "x"}
            revoked = forge_append(db, SERVICE, "key.revoked", body)
            found = _failure(store)
            assert (found.seq, found.rule) == (revoked.seq, "enrolment authority")


@pytest.mark.in_entries  # same args, same digest: on a sealed log salted digests differ (test_values.py)
def test_replayed_signature(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """Alice's valid approval of A, replayed as the signature for B (same args, same reviewer), is
    refused in the transaction and named by verify when written behind the service's back."""
    a, b = svc.open_frontier([call("ra"), call("rb")], actor=AGENT).reviews
    assert a.args_digest == b.args_digest
    sig_a = sign_entry(store, keys.alice, "review.approved", ALICE, _approval(a))
    _refused(store, store_url, NotAllowed, lambda: svc.approve(b.id, reviewer=ALICE, sig=sig_a), "sig.value")
    done = svc.approve(a.id, reviewer=ALICE, sig=sig_a)
    _refused(store, store_url, ReviewClosed, lambda: svc.approve(a.id, reviewer=ALICE, sig=sig_a))
    with Db(store_url) as db:
        forged = forge_append(db, ALICE, "review.approved", _approval(b), sig=sig_a)
    found = _failure(store)
    assert (found.seq, found.rule) == (forged.seq, "signature")
    with pytest.raises(DecisionNotProven):
        _proof(store, b.id)
    assert _proof(store, a.id).signed_by == keys.alice.fingerprint
    assert done.decision_seq is not None


# -- hostile nesting ---------------------------------------------------------------------------------


def _deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_deeply_nested_args_payload_and_patch(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """5,000 levels of nesting: a clear error naming the JSON path, never a RecursionError, nothing written."""
    deep = _deep(5_000)
    review = svc.open_frontier([call("d0")], actor=AGENT).reviews[0]
    cases: dict[str, tuple[Callable[[], Any], str]] = {
        "args": (lambda: svc.open_frontier([call("d1", args={"x": deep})], actor=AGENT), "$.calls[0].args.x"),
        "tool-payload": (
            lambda: svc.open_frontier([call("d2", payload={"x": deep})], actor=AGENT),
            "$.calls[0].payload.x",
        ),
        "answer-payload": (
            lambda: svc.approve(review.id, reviewer=ALICE, payload={"x": deep}, signer=keys.alice),
            "$.payload.x",
        ),
        "patch": (
            lambda: svc.edit(
                review.id, reviewer=ALICE, patch=[{"op": "add", "path": "/x", "value": deep}], signer=keys.alice
            ),
            "$.patch[0].value",
        ),
        "edit-payload": (
            lambda: svc.edit(
                review.id,
                reviewer=ALICE,
                patch=[{"op": "replace", "path": "/amount", "value": 1}],
                payload=deep,
                signer=keys.alice,
            ),
            "$.payload",
        ),
    }
    for name, (action, path) in cases.items():
        message = _refused(store, store_url, CanonicalFormError, action, "levels of nesting")
        assert message.startswith(path + "[0]"), (name, message[:120])
    # within the bound, nesting is fine
    nested = svc.open_frontier([call("d3", args={"x": _deep(MAX_VALUE_DEPTH - 1)})], actor=AGENT).reviews[0]
    assert svc.get(nested.id).call.args == {"x": _deep(MAX_VALUE_DEPTH - 1)}
    assert svc.get(review.id).status == "pending"
    assert verify_store(store).ok


def test_deeply_nested_entry_planted_in_the_database(store: Store, store_url: str) -> None:
    """A row whose bytes nest 5,000 levels deep, its hash and the Merkle nodes recomputed: verify names
    it (not canonical), and reading it is a clear error, not a RecursionError."""
    from signoff.audit.errors import AuditError

    with Db(store_url) as db:
        rows = db.entries()
        last = json.loads(rows[-1][2])
        shell = canonical({**last, "seq": len(rows), "prev": rows[-1][1], "body": {}})
        raw = shell.replace(b'"body":{}', b'"body":{"x":' + b"[" * 5_000 + b"]" * 5_000 + b"}", 1)
        values = (db.log_id(), len(rows), leaf(raw), last["kind"], last["actor"], None, raw, b"")
        db.run(
            (
                "INSERT INTO signoff_entry (log, seq, hash, kind, actor, subject, raw, nodes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
        )
        rebuild_tree(db, [h for _s, h, _r in rows] + [leaf(raw)])
    found = _failure(store)
    assert (found.seq, found.rule) == (len(rows), "canonical form (RFC 8785)"), str(found)
    with pytest.raises(AuditError, match="levels of nesting"):
        store.entry(len(rows))


# -- the log's own entries: its rules and its key ---------------------------------------------------


def test_forged_log_rules(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    """Entry 1 rewritten to allow unsigned decisions (every later entry re-linked). The forger cannot
    re-sign it with the log key: verify names it, and the gate proves no decision on such a log."""
    review = svc.open_frontier([call("l1")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
    with Db(store_url) as db:
        relink(db, 1, lambda data: data["body"].update(decisions="unsigned-allowed"))
    found = _failure(store)
    assert (found.seq, found.rule) == (1, "signature"), str(found)
    fresh = open_store(store_url)
    try:
        with pytest.raises(DecisionNotProven, match="seq 1"):
            _proof(fresh, review.id)
    finally:
        fresh.close()


def test_pinned_log_key(svc: ReviewService, keys: Keys, store: Store) -> None:
    review = svc.open_frontier([call("l2")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
    assert verify_store(store, pinned_key=store.public_key).ok
    for wrong in (Signer.generate().public, keys.admin.public):
        found = _failure(store, pinned_key=wrong)
        assert (found.seq, found.rule) == (0, "log key")
        with pytest.raises(DecisionNotProven, match="pinned log key"):
            prove_decision(store, review.id, cache=TrustCache(log_key=wrong))
    assert _proof(store, review.id).signed_by == keys.alice.fingerprint
