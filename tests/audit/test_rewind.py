"""``run.rewound`` and ``run.cancelled`` (SPEC.md §7, rule 5a): a run that went back before its pause, or
was cancelled, withdraws the pause's open reviews, and nothing of it resumes or runs; ``audit verify``
holds a log to the same rules.

The attacker's tests append entries straight into the database (``forge_append``) and check that
``audit verify`` names the entry: a resume of a rewound frontier, a tool run from it, a rewind that
leaves a review open.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from auditkit import AGENT, ALICE, Db, Keys, call, forge_append, run_cli, snapshot

from signoff.audit import (
    AlreadyResumed,
    ExecutionMismatch,
    MissingReason,
    NotAllowed,
    ReviewClosed,
    ReviewService,
    Store,
    UnknownFrontier,
)
from signoff.audit.verify import verify_store


def _two(svc: ReviewService) -> tuple[str, str, str]:
    front = svc.open_frontier([call("rw1"), call("rw2")], actor=AGENT)
    first, second = front.reviews
    return front.id, first.id, second.id


def test_a_rewind_withdraws_the_open_reviews_and_closes_the_frontier(
    svc: ReviewService, keys: Keys, store: Store
) -> None:
    frontier, approved, waiting = _two(svc)
    svc.approve(approved, reviewer=ALICE, signer=keys.alice)
    size = store.size()
    entry = svc.record_rewind(frontier, actor=AGENT, before="inv-1")
    kinds = [e.kind for e in store.entries(size)]
    assert kinds == ["review.withdrawn", "run.rewound"], kinds
    assert entry.body == {
        "frontier": frontier,
        "reviews": [approved, waiting],
        "invocation": "inv-1",
        "session": "sess-1",
        "before": "inv-1",
        "withdrawn": [waiting],
        "reason": "rewound: the run went back before invocation inv-1",
    }
    withdrawn = svc.get(waiting)
    assert (withdrawn.status, withdrawn.reason) == ("withdrawn", "rewound")
    # the approved call never runs: the log says why, the resumer finds nothing ready
    assert svc.get(approved).resume_failed == entry.body["reason"]
    assert frontier not in svc.ready_frontier_ids()
    assert verify_store(store).ok


def test_after_a_rewind_nothing_resumes_runs_or_is_decided(svc: ReviewService, keys: Keys, store: Store) -> None:
    frontier, approved, waiting = _two(svc)
    svc.approve(approved, reviewer=ALICE, signer=keys.alice)
    rewound = svc.record_rewind(frontier, actor=AGENT, before="inv-1")
    size = store.size()
    with pytest.raises(ReviewClosed, match="already withdrawn"):
        svc.approve(waiting, reviewer=ALICE, signer=keys.alice)
    with pytest.raises(AlreadyResumed, match=f"found run.rewound at seq {rewound.seq}"):
        svc.claim_resume(frontier, actor=AGENT)
    with pytest.raises(AlreadyResumed, match="neither resumed, rewound nor cancelled"):
        svc.record_rewind(frontier, actor=AGENT, before="inv-1")
    with pytest.raises(ExecutionMismatch):
        svc.record_execution(approved, actor=AGENT, args={"amount": 100, "to": "bob"})
    with pytest.raises(UnknownFrontier):
        svc.record_rewind("fr_unknown", actor=AGENT, before="inv-1")
    assert store.size() == size
    assert verify_store(store).ok


def test_a_resumed_frontier_is_not_rewound(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    frontier, first, second = _two(svc)
    svc.approve(first, reviewer=ALICE, signer=keys.alice)
    svc.reject(second, reviewer=ALICE, signer=keys.alice, reason="no")
    svc.claim_resume(frontier, actor=AGENT)
    before = snapshot(store_url)
    with pytest.raises(AlreadyResumed, match="recorded as run.resume_failed"):
        svc.record_rewind(frontier, actor=AGENT, before="inv-1")
    assert snapshot(store_url) == before
    failed = svc.record_resume_failure(frontier, actor=AGENT, reviews=[first], reason="rewound after the resume")
    assert failed.kind == "run.resume_failed" and verify_store(store).ok


def test_verify_names_a_resume_forged_after_a_rewind(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    frontier, approved, _waiting = _two(svc)
    svc.approve(approved, reviewer=ALICE, signer=keys.alice)
    rewound = svc.record_rewind(frontier, actor=AGENT, before="inv-1")
    body = {"frontier": frontier, "reviews": rewound.body["reviews"], "invocation": "inv-1", "session": "sess-1"}
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "run.resumed", body)
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert report.failure.seq == forged.seq and "run.rewound" in str(report.failure), str(report.failure)


def test_verify_names_a_tool_run_forged_after_a_rewind(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    frontier, approved, _waiting = _two(svc)
    svc.approve(approved, reviewer=ALICE, signer=keys.alice)
    svc.record_rewind(frontier, actor=AGENT, before="inv-1")
    args_digest = svc.get(approved).args_digest
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "tool.executed", {"review": approved, "args_digest": args_digest})
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert report.failure.seq == forged.seq and "run.rewound" in str(report.failure), str(report.failure)


def test_verify_names_a_rewind_that_leaves_a_review_open(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    frontier, approved, waiting = _two(svc)
    svc.approve(approved, reviewer=ALICE, signer=keys.alice)
    body = {
        "frontier": frontier,
        "reviews": [approved, waiting],
        "invocation": "inv-1",
        "session": "sess-1",
        "before": "inv-1",
        "withdrawn": [],
        "reason": "rewound",
    }
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "run.rewound", body)
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert report.failure.seq == forged.seq and "still pending" in str(report.failure), str(report.failure)


def test_incremental_verify_keeps_a_rewound_frontier_closed(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """``audit verify --incremental`` starts from a kept checkpoint: a rewind before it still bars a
    ``tool.executed`` after it."""
    frontier, approved, _waiting = _two(svc)
    svc.approve(approved, reviewer=ALICE, signer=keys.alice)
    svc.record_rewind(frontier, actor=AGENT, before="inv-1")
    assert verify_store(store).ok
    store.checkpoint(keys.log)
    args_digest = svc.get(approved).args_digest
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "tool.executed", {"review": approved, "args_digest": args_digest})
    report = verify_store(store, incremental=True)
    assert not report.ok and report.failure is not None and report.failure.seq == forged.seq, str(report.failure)


def test_audit_log_says_what_was_rewound(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, key_path: Path
) -> None:
    frontier, approved, _waiting = _two(svc)
    svc.approve(approved, reviewer=ALICE, signer=keys.alice)
    svc.record_rewind(frontier, actor=AGENT, before="inv-0")
    listed = run_cli(store_url, key_path, "log", "--json")
    assert listed.returncode == 0, listed.stderr
    kinds = [json.loads(line)["kind"] for line in listed.stdout.splitlines()]
    assert kinds[-2:] == ["review.withdrawn", "run.rewound"], kinds
    text = run_cli(store_url, key_path, "log").stdout
    assert "went back before inv-0; nothing of it runs" in text and "reason: rewound" in text, text


def test_a_cancel_withdraws_with_its_reason_and_bars_the_resume(
    svc: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    """``run.cancelled`` (the run's pause sealed by ADK's abort) follows rule 5a as ``run.rewound`` does."""
    frontier, approved, waiting = _two(svc)
    svc.approve(approved, reviewer=ALICE, signer=keys.alice)
    why = "cancelled: Invocation was aborted by client."
    entry = svc.record_cancel(frontier, actor=AGENT, reason=why)
    assert (entry.kind, entry.body["withdrawn"], entry.body["reason"]) == ("run.cancelled", [waiting], why)
    assert (svc.get(waiting).status, svc.get(waiting).reason) == ("withdrawn", why)
    assert svc.get(approved).resume_failed == why
    with pytest.raises(AlreadyResumed, match=f"found run.cancelled at seq {entry.seq}.*the run was cancelled"):
        svc.claim_resume(frontier, actor=AGENT)
    with pytest.raises(AlreadyResumed):
        svc.record_rewind(frontier, actor=AGENT, before="inv-1")
    assert verify_store(store).ok
    body = {"frontier": frontier, "reviews": entry.body["reviews"], "invocation": "inv-1", "session": "sess-1"}
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "run.resumed", body)
    report = verify_store(store)
    assert report.failure is not None and report.failure.seq == forged.seq
    assert "run.cancelled" in str(report.failure), str(report.failure)


def test_a_cancel_needs_a_reason_and_an_agent(svc: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    frontier, _first, _second = _two(svc)
    before = snapshot(store_url)
    with pytest.raises(MissingReason, match="reason"):
        svc.record_cancel(frontier, actor=AGENT, reason=" ")
    with pytest.raises(NotAllowed, match="agent: or service:"):
        svc.record_cancel(frontier, actor=ALICE, reason="cancelled")
    assert snapshot(store_url) == before
