"""No self-approval (issue 22, 4; SPEC.md §7 rule 2a): the person on whose behalf the agent asked for a
call (``call.requested_by``) may reject it, never approve or edit it, unless the log's policy for the
tool (``policy.set``, signed by the admin) says ``self_approval``. The refusal happens in the write
transaction, and ``audit verify`` holds a log to the same rule: the attacker's tests append entries
straight into the database.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from auditkit import AGENT, ALICE, Db, Keys, call, forge_append, run_cli, snapshot

from signoff.audit import InvalidEntry, Policy, ReviewService, SelfApproval, Store
from signoff.audit.store import default_admin_key
from signoff.audit.verify import verify_store

ZOE = "human:zoe@example.org"  # a customer the agent acts for; not a reviewer
EDIT = [{"op": "replace", "path": "/amount", "value": 1}]


def _for(svc: ReviewService, who: str, cid: str = "sa-1", **kw: Any) -> Any:
    front = svc.open_frontier([call(cid, requested_by=who)], actor=AGENT, **kw)
    return front.reviews[0]


def test_the_requester_is_recorded_and_may_reject_but_not_approve_or_edit(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    review = _for(svc, ALICE)
    opened = store.entry(review.opened_seq)
    assert opened.body["call"]["requested_by"] == ALICE
    before, size = snapshot(store_url), store.size()
    with pytest.raises(SelfApproval, match=f"found {ALICE} approving their own request"):
        svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
    with pytest.raises(SelfApproval, match="their own request"):
        svc.edit(review.id, reviewer=ALICE, signer=keys.alice, patch=EDIT)
    assert snapshot(store_url) == before and store.size() == size  # nothing written
    rejected = svc.reject(review.id, reviewer=ALICE, signer=keys.alice, reason="not me after all")
    assert rejected.status == "rejected"
    assert verify_store(store).ok


def test_someone_else_approves_a_request_made_for_a_customer(svc: ReviewService, keys: Keys, store: Store) -> None:
    review = _for(svc, ZOE)
    assert svc.approve(review.id, reviewer=ALICE, signer=keys.alice).status == "approved"
    assert verify_store(store).ok


def test_a_call_without_a_requester_is_recorded_as_before(svc: ReviewService, store: Store) -> None:
    review = svc.open_frontier([call("sa-plain")], actor=AGENT).reviews[0]
    assert "requested_by" not in store.entry(review.opened_seq).body["call"]


def test_only_an_admin_policy_allows_self_approval(svc: ReviewService, keys: Keys, store: Store) -> None:
    # the app asking for it on its own (a policy it passes in) changes nothing
    asked = _for(svc, ALICE, "sa-app", policies=Policy(self_approval=True))
    assert "self_approval" not in store.entry(asked.opened_seq).body["policy"]
    with pytest.raises(SelfApproval):
        svc.approve(asked.id, reviewer=ALICE, signer=keys.alice)
    svc.set_policy({"policy": "own-transfers", "tools": "transfer", "self_approval": True}, admin=keys.admin)
    allowed = _for(svc, ALICE, "sa-admin")
    assert store.entry(allowed.opened_seq).body["policy"]["self_approval"] is True
    assert svc.approve(allowed.id, reviewer=ALICE, signer=keys.alice).status == "approved"
    assert verify_store(store).ok


def test_a_policy_field_that_is_not_a_boolean_is_refused(svc: ReviewService, keys: Keys) -> None:
    with pytest.raises(InvalidEntry, match="policy.self_approval: expected true or false"):
        svc.set_policy({"policy": "odd", "tools": "transfer", "self_approval": "yes"}, admin=keys.admin)


def test_a_requester_that_is_not_a_person_is_refused(svc: ReviewService, store: Store) -> None:
    size = store.size()
    with pytest.raises(InvalidEntry, match=r"calls\[0\].requested_by: expected the human: actor"):
        svc.open_frontier([call("sa-bad", requested_by="agent:teller")], actor=AGENT)
    assert store.size() == size


def test_verify_names_a_self_approval_written_behind_the_service(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """Alice's own key, her own request, written straight into the database: the chain and the
    signature hold, and ``audit verify`` still names the entry."""
    review = _for(svc, ALICE)
    body = {"review": review.id, "args_digest": review.args_digest, "rationale": ""}
    with Db(store_url) as db:
        forged = forge_append(db, ALICE, "review.approved", body, signer=keys.alice)
    report = verify_store(store)
    assert not report.ok and report.failure is not None and report.failure.seq == forged.seq
    assert "approving their own request" in str(report.failure), str(report.failure)


def test_verify_names_self_approval_granted_without_an_admin_policy(
    svc: ReviewService, store: Store, store_url: str
) -> None:
    review = _for(svc, ZOE)
    opened = store.entry(review.opened_seq).body
    body = {
        **opened,
        "review": "rv_00000000000000cc",
        "frontier": "fr_00000000000000cc",
        "policy": {**opened["policy"], "self_approval": True},
        "call": {**opened["call"], "confirmation_id": "sa-forged"},
    }
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "review.opened", body)
    report = verify_store(store)
    assert not report.ok and report.failure is not None and report.failure.seq == forged.seq
    assert "self_approval" in str(report.failure), str(report.failure)


def test_audit_policy_set_self_approval(store_url: str, key_path: Path, svc: ReviewService) -> None:
    admin = str(default_admin_key(key_path))
    made = run_cli(
        store_url, None, "policy", "set", "own", "--tools", "expense_*", "--self-approval", "--admin-key", admin
    )
    assert made.returncode == 0, made.stderr
    listed = run_cli(store_url, None, "policy", "list", "--json")
    [policy] = [p for p in json.loads(listed.stdout) if p["policy"] == "own"]
    assert policy["self_approval"] is True, policy
