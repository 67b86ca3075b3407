"""Many logs in one store (issue 23 §3): three logs in one SQLite file and in one PostgreSQL schema,
each with its own keys, admin, reviewers, reviews and verification, and nothing that crosses: a
statement signed for one log is refused by another, even when one person or one admin key serves both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from auditkit import ADMIN, AGENT, ALICE, BOB, Db, FakeClock, Keys, call, run_cli, sign_entry

from signoff.audit import ManyLogs, ReviewService, Store, open_store
from signoff.audit.decision import prepare_approve
from signoff.audit.delegation import grant_body
from signoff.audit.entry import format_time
from signoff.audit.errors import LogExists, LogNotFound, NotAllowed
from signoff.audit.keys import Signer
from signoff.audit.verify import verify_store

NAMES = ("payments", "support", "ops")


@dataclass
class Log:
    name: str
    store: Store
    svc: ReviewService
    keys: Keys
    key_path: Path


@pytest.fixture
def logs(store_url: str, tmp_path: Path, clock: FakeClock) -> Iterator[list[Log]]:
    """Three logs in one store. Alice (one key) is enrolled on payments and support, by each log's admin;
    Bob only on ops."""
    alice = Signer.generate()
    made = []
    for n, name in enumerate(NAMES):
        key_path = tmp_path / f"{name}.pem"
        store = open_store(store_url, clock=clock)
        store.init_log(key_path, origin=f"example.org/{name}", new_log=n > 0)
        keys = Keys.for_log(key_path)
        keys.people[ALICE] = alice
        svc = ReviewService(store)
        if name != "ops":
            svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=alice.public, admin=keys.admin)
        else:
            svc.enroll_reviewer(BOB, roles=["teller"], tools=["*"], key=keys.bob.public, admin=keys.admin)
        made.append(Log(name, store, svc, keys, key_path))
    yield made
    for one in made:
        one.store.close()


def _size(store_url: str, log_id: str) -> int:
    store = open_store(store_url, create=False, log=log_id)
    try:
        return store.size()
    finally:
        store.close()


def test_a_store_holds_three_logs_each_its_own(logs: list[Log], store_url: str) -> None:
    ids = [one.store.log_id for one in logs]
    assert len(set(ids)) == 3
    for n, one in enumerate(logs):
        one.svc.open_frontier([call(f"c-{one.name}", tool=f"{one.name}_tool")], actor=AGENT)
        one.svc.open_frontier([call(f"d-{one.name}", tool=f"{one.name}_tool")], actor=AGENT)
        assert [r.tool for r in one.svc.pending()] == [f"{one.name}_tool"] * 2  # its own reviews, no other's
        assert one.svc.count_pending() == 2
        assert one.store.rules.origin == f"example.org/{NAMES[n]}"
    # Each log verifies on its own, with its own key and origin; the others' rows change nothing.
    for one in logs:
        report = verify_store(open_store(store_url, create=False, log=one.store.log_id))
        assert report.ok, report.to_json()
        assert report.to_json()["log"] == one.store.log_id
    listed = logs[0].store.logs()
    assert [(s.id, s.origin, s.size) for s in listed] == [
        (one.store.log_id, f"example.org/{one.name}", _size(store_url, one.store.log_id)) for one in logs
    ]


def test_which_log_must_be_said_when_there_are_several(logs: list[Log], store_url: str) -> None:
    with pytest.raises(ManyLogs, match=r"expected one log, found 3 .*name one with --log ID"):
        open_store(store_url, create=False).log_id  # noqa: B018 - the read that fails
    with pytest.raises(LogNotFound, match=r"expected log log_0000000000000000, found no such log \(it holds: log_"):
        open_store(store_url, create=False, log="log_0000000000000000").log_id  # noqa: B018
    with pytest.raises(LogExists, match="found log .* and more; to add another log to it, init with --new-log"):
        open_store(store_url).init_log(logs[0].key_path.with_name("fourth.pem"))
    assert not logs[0].key_path.with_name("fourth.pem").exists()  # refused before any key was written


def test_a_decision_signed_for_one_log_is_refused_by_another(logs: list[Log]) -> None:
    """Alice holds one key, enrolled on payments and support. Her signature on a decision for support's
    review, made for payments (the statement names the log), approves nothing on support."""
    payments, support = logs[0], logs[1]
    review = support.svc.open_frontier([call("c-1")], actor=AGENT).reviews[0]
    prepared = prepare_approve(review)
    for_payments = prepared.sign(payments.keys.alice, payments.store.log_id, ALICE)
    size = support.store.size()
    with pytest.raises(NotAllowed, match="expected a valid Ed25519 signature"):
        support.svc.approve(review.id, reviewer=ALICE, sig=for_payments)
    assert support.store.size() == size and support.svc.get(review.id).status == "pending"
    for_support = prepared.sign(support.keys.alice, support.store.log_id, ALICE)
    assert support.svc.approve(review.id, reviewer=ALICE, sig=for_support).status == "approved"
    # And payments knows no such review at all.
    with pytest.raises(Exception, match="review"):
        payments.svc.approve(review.id, reviewer=ALICE, sig=for_payments)


def test_a_grant_signed_for_one_log_is_refused_by_another(logs: list[Log], clock: FakeClock) -> None:
    payments, support = logs[0], logs[1]
    support.svc.enroll_reviewer(
        BOB, roles=["teller"], tools=["*"], key=support.keys.bob.public, admin=support.keys.admin
    )
    until = format_time(clock.peek() + timedelta(days=1))
    body = grant_body("dg_00000000000000d1", ALICE, BOB, ["teller"], until)
    for_payments = sign_entry(payments.store, payments.keys.alice, "delegation.granted", ALICE, body)
    size = support.store.size()
    with pytest.raises(NotAllowed, match="expected a valid Ed25519 signature"):
        support.svc.delegate(
            ALICE, BOB, until=until, roles=["teller"], sig=for_payments, delegation_id="dg_00000000000000d1"
        )
    assert support.store.size() == size and support.svc.delegations() == []


def test_one_admin_key_on_two_logs_signs_for_one_at_a_time(logs: list[Log], store_url: str) -> None:
    """An admin enrolled on payments and on support with the same key: what they signed for payments
    (a key enrolment) is refused by support, and a row copied across by a database writer is named."""
    payments, support = logs[0], logs[1]
    ops_admin = Signer.generate()
    for one in (payments, support):
        one.store.append(
            ADMIN,
            "key.enrolled",
            body := {"actor": "admin:ops", "key": ops_admin.public, "alg": "Ed25519"},
            sign_entry(one.store, one.keys.admin, "key.enrolled", ADMIN, body),
        )
    body = {"actor": "agent:k1", "key": Signer.generate().public, "alg": "Ed25519"}
    for_payments = sign_entry(payments.store, ops_admin, "key.enrolled", "admin:ops", body)
    size = support.store.size()
    with pytest.raises(NotAllowed, match="expected a valid Ed25519 signature"):
        support.store.append("admin:ops", "key.enrolled", body, for_payments)
    assert support.store.size() == size
    entry = payments.store.append("admin:ops", "key.enrolled", body, for_payments)
    # The entry itself, copied into support's rows behind the service's back: support's verify names it.
    with Db(store_url) as db:
        raw, leaf, nodes = db.one(
            "SELECT raw, hash, nodes FROM signoff_entry WHERE log = ? AND seq = ?", (payments.store.log_id, entry.seq)
        )
        db.run(
            (
                "INSERT INTO signoff_entry (log, seq, hash, kind, actor, subject, raw, nodes) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (support.store.log_id, size, leaf, "key.enrolled", "admin:ops", "agent:k1", raw, nodes),
            )
        )
    report = verify_store(open_store(store_url, create=False, log=support.store.log_id))
    assert not report.ok and report.failure is not None and report.failure.seq == size, report.to_json()
    assert verify_store(open_store(store_url, create=False, log=payments.store.log_id)).ok


def test_audit_logs_and_log_on_the_command_line(logs: list[Log], store_url: str, tmp_path: Path) -> None:
    done = run_cli(store_url, None, "logs", "--json")
    assert done.returncode == 0, done.stderr
    assert [one["log"] for one in json.loads(done.stdout)["logs"]] == [one.store.log_id for one in logs]
    done = run_cli(store_url, None, "verify")
    assert done.returncode == 2 and "expected one log, found 3" in done.stderr and "--log ID" in done.stderr
    for one in logs:
        done = run_cli(store_url, None, "--log", one.store.log_id, "verify")
        assert done.returncode == 0, done.stderr
        assert f"log {one.store.log_id} intact" in done.stdout
    # After the verb too, as `audit evidence --from … --log ID` reads; given there, it wins.
    done = run_cli(store_url, None, "--log", logs[0].store.log_id, "verify", "--log", logs[1].store.log_id)
    assert done.returncode == 0 and f"log {logs[1].store.log_id} intact" in done.stdout, done.stderr
    one = logs[2]
    one.svc.open_frontier([call("c-ops", tool="restart")], actor=AGENT)
    done = run_cli(store_url, None, "--log", one.store.log_id, "pending", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["tool"] for r in json.loads(done.stdout)] == ["restart"]
    done = run_cli(store_url, None, "--log", logs[0].store.log_id, "pending", "--json")
    assert json.loads(done.stdout) == []
    done = run_cli(store_url, tmp_path / "fourth.pem", "init", "--new-log", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["log"] not in [one.store.log_id for one in logs]
