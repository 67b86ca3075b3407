"""Group commit on both backends: concurrent writers share one transaction and one durable commit, and
each is answered only once the commit that holds its work has returned.

* many threads opening and deciding reviews at once: no fork, no gap, every returned entry is in the
  log as returned, and the writers really did share commits;
* a writer whose own work raises gets its own error; the others in its batch still commit, and
  nothing of the failing writer's work (entries or projection rows) is written;
* a batch whose transaction fails fails every writer in it, with the reason, and writes nothing;
* a process of writer threads killed with SIGKILL mid-batch loses nothing it had answered.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from auditkit import ADMIN, AGENT, ALICE, FIXTURES, Db, Keys, call, key_body, python_env, sign_entry, snapshot

from signoff.audit import ReviewService, Store
from signoff.audit.decision import approve_body, sign_decision
from signoff.audit.store import Tx
from signoff.audit.verify import verify_store

THREADS = 16


def _hold_the_writer(store: Store) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """A writer whose work blocks inside its transaction until released, so that the writers that come
    meanwhile queue up and form the next batch together."""
    inside, release = threading.Event(), threading.Event()

    def work(tx: Tx) -> None:
        inside.set()
        assert release.wait(30)

    holder = threading.Thread(target=store.transact, args=(work,))
    holder.start()
    assert inside.wait(30)
    return inside, release, holder


def _queued(store: Store, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(store._group._queue) < count:
        assert time.monotonic() < deadline, "the writers never queued"
        time.sleep(0.005)


@pytest.mark.slow
def test_many_writers_share_commits_without_fork_or_gap(svc: ReviewService, keys: Keys, store: Store) -> None:
    log = store.log_id
    returned: list[tuple[int, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = store.size()
    batches_before = store._group.batches

    def writer(index: int) -> None:
        try:
            for n in range(6):
                front = svc.open_frontier([call(f"c-{index}-{n}", session=f"s-{index}")], actor=AGENT)
                review = front.reviews[0]
                body = approve_body(review.id, review.args_digest)
                sig = sign_decision(keys.alice, log, "review.approved", ALICE, body)
                decided = svc.approve(review.id, reviewer=ALICE, sig=sig)
                claim = svc.claim_resume(front.id, actor=AGENT)
                with lock:
                    returned.extend([(review.opened_seq, review.id), (decided.decision_seq or -1, review.id)])
                    returned.append((claim.seq, claim.hash))
        except BaseException as exc:  # the test fails on any writer's error
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
    expected = start + THREADS * 6 * 3
    assert store.size() == expected
    seqs = sorted(seq for seq, _ in returned)
    assert seqs == list(range(start, expected)), "every entry answered once, densely, no fork"
    with Db(store.url) as db:
        stored = {seq: (digest, json.loads(raw)) for seq, digest, raw in db.entries(start)}
    for seq, value in returned:
        digest, data = stored[seq]
        assert value in (digest, data["body"].get("review"), data["body"].get("frontier")), seq
    commits = store._group.batches - batches_before
    assert commits < THREADS * 6 * 3, "the writers never shared a commit"
    report = verify_store(store)
    assert report.ok, report.failure


def test_a_writer_whose_work_raises_gets_its_own_error_and_the_others_commit(store: Store, keys: Keys) -> None:
    before = store.size()
    _inside, release, holder = _hold_the_writer(store)
    outcomes: dict[str, Any] = {}

    def writer(name: str, fail: bool) -> None:
        def work(tx: Tx) -> int:
            body = key_body(name)
            entry = tx.enroll_key(
                ADMIN, body["actor"], body, sign_entry(store, keys.admin, "key.enrolled", ADMIN, body)
            )
            if fail:
                raise ValueError(f"{name} refuses after writing its entry and key row")
            return entry.seq

        try:
            outcomes[name] = store.transact(work)
        except ValueError as exc:
            outcomes[name] = exc

    writers = [threading.Thread(target=writer, args=(name, name == "bad")) for name in ("first", "bad", "last")]
    for thread in writers:
        thread.start()
        _queued(store, writers.index(thread) + 1)  # in this order, in one batch
    release.set()
    holder.join()
    for thread in writers:
        thread.join()
    assert isinstance(outcomes["bad"], ValueError) and "bad refuses" in str(outcomes["bad"])
    assert outcomes["first"] == before and outcomes["last"] == before + 1, "the others commit, densely"
    assert store.size() == before + 2
    with Db(store.url) as db:
        owners = {row[0] for row in db.rows("SELECT actor FROM signoff_key")}
        bodies = [json.loads(raw)["body"] for _s, _h, raw in db.entries(before)]
    assert "agent:kbad" not in owners, "the failing writer's projection row was rolled back"
    assert [b["actor"] for b in bodies] == ["agent:kfirst", "agent:klast"]
    assert verify_store(store).ok


def test_a_failed_transaction_fails_every_writer_in_it_and_writes_nothing(store: Store, keys: Keys) -> None:
    before = snapshot(store.url)
    _inside, release, holder = _hold_the_writer(store)
    outcomes: dict[str, Any] = {}

    def writer(name: str) -> None:
        body = key_body(name)
        try:
            outcomes[name] = store.append(
                ADMIN, "key.enrolled", body, sign_entry(store, keys.admin, "key.enrolled", ADMIN, body)
            )
        except Exception as exc:  # the reason reaches every writer
            outcomes[name] = exc

    writers = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
    for index, thread in enumerate(writers):
        thread.start()
        _queued(store, index + 1)
    good_insert = store._sql["insert"]
    store._sql = {**store._sql, "insert": good_insert.replace("signoff_entry", "signoff_no_such_table")}
    try:
        release.set()
        holder.join()
        for thread in writers:
            thread.join()
    finally:
        store._sql = {**store._sql, "insert": good_insert}
    for name in ("w0", "w1", "w2", "w3"):
        assert isinstance(outcomes[name], Exception), f"{name} was told all is well: {outcomes[name]}"
        assert "signoff_no_such_table" in str(outcomes[name]), outcomes[name]
    assert snapshot(store.url) == before, "a failed batch wrote nothing, not even the holder's transaction"
    entry = store.append(*_admin(store, keys, "after"))  # the store goes on
    assert entry.seq == store.size() - 1
    assert verify_store(store).ok


def _admin(store: Store, keys: Keys, tag: str) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    body = key_body(tag)
    return (ADMIN, "key.enrolled", body, sign_entry(store, keys.admin, "key.enrolled", ADMIN, body))


def test_a_transaction_inside_a_writers_work_is_refused(store: Store) -> None:
    with pytest.raises(RuntimeError, match="nested"):
        store.transact(lambda tx: store.transact(lambda inner: None))
    assert verify_store(store).ok


@pytest.mark.slow
def test_sigkill_mid_batch_loses_nothing_answered(
    svc: ReviewService, store: Store, store_url: str, keys: Keys, tmp_path: Path
) -> None:
    """A process of writer threads (group commits of several writers) is killed at random moments; every
    write it answered is in the log as answered, and the log verifies."""
    admin_key, alice_key = keys.write(ADMIN, tmp_path / "admin.pem"), keys.write(ALICE, tmp_path / "alice.pem")
    answered = 0
    for run, delay in enumerate((0.4, 0.9, 1.5)):
        out = tmp_path / f"run-{run}.out"
        with out.open("w") as sink:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(FIXTURES / "group_writer.py"),
                    store_url,
                    str(admin_key),
                    str(alice_key),
                    str(run),
                ],
                stdout=sink,
                stderr=subprocess.PIPE,
                env=python_env(),
            )
            deadline = time.monotonic() + 60
            while "ready" not in out.read_text():
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the writer never got ready"
                time.sleep(0.02)
            time.sleep(delay)
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
        lines = [line.split() for line in out.read_text().splitlines() if line and line != "ready"]
        with Db(store_url) as db:
            stored = {seq: digest for seq, digest, _raw in db.entries()}
        for _tag, seq, digest in (line for line in lines if len(line) == 3):
            assert stored.get(int(seq)) == digest, f"run {run}: answered seq {seq} is missing or changed"
        answered += len(lines)
        report = verify_store(store)
        assert report.ok, f"run {run}: {report.failure}"
    assert answered > 20, "the writers hardly wrote anything before being killed"


def test_rules_that_read_the_log_see_the_work_earlier_in_their_batch(
    svc: ReviewService, keys: Keys, store: Store
) -> None:
    """A batch inserts its entries only at its commit, so a rule that reads the log (a frontier's one
    reply, the policy in force for a review being opened) must also see the entries appended earlier
    in the same batch: two replies queued together make one reply and one refusal; a review opened
    right after a policy.set in the same batch is under that policy. verify agrees with both."""
    review = svc.open_frontier([call("batch-reply")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
    svc.claim_resume(review.frontier, actor=AGENT)
    outcomes: list[Any] = []

    def attempt(action: Any) -> None:
        try:
            outcomes.append(action())
        except Exception as exc:  # noqa: BLE001 - the refusal is the point
            outcomes.append(exc)

    policy = {"policy": "four-eyes", "tools": "transfer", "approvals": 2}
    actions = [
        lambda: svc.record_reply(review.frontier, actor=AGENT, text="done"),
        lambda: svc.record_reply(review.frontier, actor=AGENT, text="done again"),
        lambda: svc.set_policy(policy, admin=keys.admin),
        lambda: svc.open_frontier([call("batch-open")], actor=AGENT).reviews[0],
    ]
    _inside, release, holder = _hold_the_writer(store)
    batches = store._group.batches
    threads = []
    for index, action in enumerate(actions):  # queued in this order, then run as one batch
        threads.append(threading.Thread(target=attempt, args=(action,)))
        threads[-1].start()
        _queued(store, index + 1)
    release.set()
    holder.join()
    for thread in threads:
        thread.join()
    assert store._group.batches == batches + 2, "the four writers did not share one commit"
    refused = [o for o in outcomes if isinstance(o, Exception)]
    assert len(refused) == 1 and "run.replied" in str(refused[0]), outcomes
    opened = next(o for o in outcomes if getattr(o, "policy", None) is not None)
    assert (opened.policy.name, opened.policy.approvals) == ("four-eyes", 2)
    report = verify_store(store)
    assert report.ok, report.failure
