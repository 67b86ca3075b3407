"""Concurrency on both backends: 4 processes x 8 threads append at once (single and group
commits), then race to decide one review and to claim one resume. The chain never forks,
never has a gap, and every append that returned is in the log with the hash it returned."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from auditkit import ADMIN, AGENT, ALICE, FIXTURES, FakeClock, Keys, call, python_env

from signoff.audit import Policy, ReviewClosed, ReviewService, Store, open_store
from signoff.audit.verify import verify_store

PROCESSES, THREADS, SINGLES, BATCHES = 4, 8, 3, 1  # per thread: 3 single appends and 1 batch of 3


@pytest.fixture(scope="module")
def appenders() -> Iterator[list[subprocess.Popen[str]]]:
    """Four appender processes, started once for both backends (an interpreter start-up is ~1 s)."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(FIXTURES / "appender.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=python_env(),
        )
        for _ in range(PROCESSES)
    ]
    yield procs
    for proc in procs:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _read(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"appender died: {proc.stderr.read() if proc.stderr else ''}")
    return line


@pytest.mark.slow
def test_processes_and_threads_appending_at_once(
    appenders: list[subprocess.Popen[str]], svc: ReviewService, keys: Keys, store: Store, store_url: str, tmp_path: Path
) -> None:
    race = svc.open_frontier([call("race")], actor=AGENT).reviews[0]
    decided = svc.open_frontier([call("resume-race")], actor=AGENT)
    svc.approve(decided.reviews[0].id, reviewer=ALICE, signer=keys.alice)
    admin_key, alice_key = keys.write(ADMIN, tmp_path / "admin.pem"), keys.write(ALICE, tmp_path / "alice.pem")
    size_before = store.size()
    for index, proc in enumerate(appenders):
        command = {
            "url": store_url, "index": index, "threads": THREADS, "singles": SINGLES, "batches": BATCHES,
            "race_review": race.id, "race_frontier": decided.id, "admin_key": str(admin_key),
            "reviewer_key": str(alice_key),
        }  # fmt: skip
        _send(proc, json.dumps(command))
    for proc in appenders:
        assert _read(proc).strip() == "ready"
    for proc in appenders:  # all four are connected and waiting: start them together
        _send(proc, "go")
    outputs: list[dict[str, Any]] = [json.loads(_read(proc)) for proc in appenders]
    errors = [e for out in outputs for e in out["errors"]]
    assert not errors, "\n".join(errors)

    appended = [(int(seq), str(digest)) for out in outputs for seq, digest in out["appended"]]
    per_thread = SINGLES + BATCHES * 3
    assert len(appended) == PROCESSES * THREADS * per_thread
    assert len({seq for seq, _h in appended}) == len(appended), "two appends returned the same seq: a fork"
    stored = {seq: digest for seq, digest, _raw in store.iter_raw()}
    for seq, digest in appended:
        assert stored.get(seq) == digest, f"append at seq {seq} returned {digest} but the log holds {stored.get(seq)}"
    # every entry is accounted for: the appends, one decision and one resume; no gap
    assert store.size() == size_before + len(appended) + 2
    assert sorted(stored) == list(range(store.size()))
    decisions = [d for out in outputs for d in out["decisions"]]
    resumes = [r for out in outputs for r in out["resumes"]]
    assert decisions.count("won") == 1 and decisions.count("closed") == PROCESSES * THREADS - 1
    assert resumes.count("won") == 1 and resumes.count("already") == PROCESSES * THREADS - 1
    assert len([e for e in store.entries(review=race.id)]) == 2  # opened + exactly one outcome
    assert len([e for e in store.entries(kind="run.resumed") if e.body["frontier"] == decided.id]) == 1
    report = verify_store(store)
    assert report.ok, report.failure


@pytest.mark.slow
def test_expiry_and_a_late_decision_cannot_both_happen(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, clock: FakeClock
) -> None:
    """A reviewer (whose clock reads just before the deadline) and the expiry service (just
    after) race; whichever commits first wins and the other is refused (rule 4)."""
    reviews = [
        svc.open_frontier([call(f"dl{n}")], actor=AGENT, policies=Policy(deadline_seconds=60)).reviews[0]
        for n in range(6)
    ]
    deadline = reviews[-1].deadline
    assert deadline is not None and all(r.deadline is not None for r in reviews)
    before = FakeClock(deadline - timedelta(seconds=1))
    after = FakeClock(deadline + timedelta(seconds=1))
    reviewer_store, expiry_store = open_store(store_url, clock=before), open_store(store_url, clock=after)
    try:
        reviewer_svc, expiry_svc = ReviewService(reviewer_store), ReviewService(expiry_store)
        # the earlier reviews are also due for the expirer; only the last is a fair race
        target = reviews[-1]
        barrier = threading.Barrier(2)
        outcome: dict[str, Any] = {}

        def approve() -> None:
            barrier.wait()
            try:
                reviewer_svc.approve(target.id, reviewer=ALICE, signer=keys.alice)
                outcome["approve"] = "won"
            except ReviewClosed as exc:
                outcome["approve"] = exc.status

        def expire() -> None:
            barrier.wait()
            outcome["expired"] = [r.id for r in expiry_svc.expire_due()]

        threads = [threading.Thread(target=approve), threading.Thread(target=expire)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        reviewer_store.close()
        expiry_store.close()
    final = svc.get(target.id)
    if outcome["approve"] == "won":
        assert final.status == "approved" and target.id not in outcome["expired"]
    else:
        assert outcome["approve"] == "expired" and final.status == "expired" and target.id in outcome["expired"]
    outcomes = [e.kind for e in store.entries(review=target.id)]
    assert len(outcomes) == 2, outcomes
    report = verify_store(store)
    assert report.ok, report.failure
