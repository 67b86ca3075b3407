"""A key row added behind the service's back (issue 19): the write path checks the key a decision was signed
with against its admin-signed enrolment on the log, as the gate does, so a forged ``signoff_key`` row never
makes a decision count. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from auditkit import AGENT, ALICE, Db, Keys, call, snapshot

from signoff.audit import NotAllowed, ReviewService, Signer, Store
from signoff.audit.decided import DecisionNotProven, TrustCache, prove_decision
from signoff.audit.verify import verify_store


def _forge_key_row(store_url: str, store: Store, actor: str, key: Signer) -> None:
    """INSERT a signoff_key row for ``actor`` with ``key``, as a database writer would."""
    with Db(store_url) as db:
        db.run(
            (
                "INSERT INTO signoff_key (log, fingerprint, actor, public_key, enrolled_seq) VALUES (?, ?, ?, ?, ?)",
                (store.log_id, key.fingerprint, actor, key.public, 2),
            )
        )


def test_a_decision_signed_with_a_key_row_added_behind_the_logs_back_is_refused(
    svc: ReviewService, store: Store, store_url: str, keys: Keys
) -> None:
    mallory_key = Signer.generate()
    _forge_key_row(store_url, store, ALICE, mallory_key)
    review = svc.open_frontier([call("k1")], actor=AGENT).reviews[0]
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(NotAllowed, match=f"key {mallory_key.fingerprint} of {ALICE}: expected it enrolled"):
        svc.approve(review.id, reviewer=ALICE, signer=mallory_key)
    assert store.size() == size and snapshot(store_url) == before  # nothing written
    assert svc.get(review.id).status == "pending"
    # Her own key still works (proven once, then from the process's cache until her entries change).
    assert svc.approve(review.id, reviewer=ALICE, signer=keys.alice).status == "approved"
    assert prove_decision(store, review.id, cache=TrustCache()).signed_by == keys.alice.fingerprint
    report = verify_store(store)
    assert not report.ok and report.failure is not None and "signoff_key" in report.failure.rule


def test_a_revoked_key_restored_behind_the_logs_back_is_refused(
    svc: ReviewService, store: Store, store_url: str, keys: Keys
) -> None:
    first = svc.open_frontier([call("k2")], actor=AGENT).reviews[0]
    svc.approve(first.id, reviewer=ALICE, signer=keys.alice)  # proven and cached
    svc.revoke_key(ALICE, keys.alice.fingerprint, reason="laptop lost", admin=keys.admin)
    with Db(store_url) as db:  # the writer puts the revoked key's row back
        db.run(
            (
                "INSERT INTO signoff_key (log, fingerprint, actor, public_key, enrolled_seq) VALUES (?, ?, ?, ?, ?)",
                (store.log_id, keys.alice.fingerprint, ALICE, keys.alice.public, first.opened_seq - 1),
            )
        )
    second = svc.open_frontier([call("k3")], actor=AGENT).reviews[0]
    with pytest.raises(NotAllowed, match="expected it enrolled on the log"):
        svc.approve(second.id, reviewer=ALICE, signer=keys.alice)


def test_the_gate_refuses_a_decision_signed_with_a_key_row_added_behind_the_logs_back(
    svc: ReviewService, store: Store, store_url: str, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state the outside suite reached before this check (the write path trusted the row): the
    decision is on the log, well linked, signed with the forged key. The gate still refuses it."""
    from signoff.audit.tx import Tx

    mallory_key = Signer.generate()
    _forge_key_row(store_url, store, ALICE, mallory_key)
    review = svc.open_frontier([call("k4")], actor=AGENT).reviews[0]
    with monkeypatch.context() as patched:
        patched.setattr(Tx, "prove_key", lambda self, actor, key: None)  # the write path as it was
        svc.approve(review.id, reviewer=ALICE, signer=mallory_key)
    assert svc.get(review.id).status == "approved"  # what a reader of the log's entries alone would say
    with pytest.raises(DecisionNotProven, match="is not proven"):
        prove_decision(store, review.id, cache=TrustCache())
