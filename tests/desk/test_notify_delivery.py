"""desk/notify: a running notifier against real receivers on 127.0.0.1 (webhook with HMAC checks,
fake Slack, aiosmtpd), on SQLite and PostgreSQL: delivery, refusals, retries with backoff, filters,
deadlines, restarts from the stored cursor, and one deliverer among several notifiers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from notifykit import ALICE, SECRET, Log, Receiver, Smtp, free_port, make_log, wait_until
from sqlalchemy import select
from sqlmodel import col

from signoff.desk.notify import Endpoint, Endpoints, Engines, Notifier, NotifierOptions
from signoff.desk.notify._endpoints import endpoint_from_options
from signoff.desk.notify._tables import NotifyAttempt, NotifyJob

ROOT = Path(__file__).resolve().parents[2]
DESK = "https://desk.example.org"
FAST = NotifierOptions(desk_url=DESK, retry_base=0.05, retry_cap=1.0, max_attempts=5)


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[Log]:
    lg = make_log(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path)
    yield lg
    lg.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def add(lg: Log, *endpoints: Endpoint) -> Endpoints:
    engines = Engines(lg.url)
    store = Endpoints(engines, lg.store.log_id)
    for endpoint in endpoints:
        store.add(endpoint, head=lg.store.size())
    return store


def hook(r: Receiver, name: str = "hook", secret: str = SECRET, **filters: Any) -> Endpoint:
    return endpoint_from_options("webhook", name, {"url": r.url, "secret": secret}, **filters)


def rows(lg: Log, table: Any, **where: Any) -> list[Any]:
    engines = Engines(lg.url)
    try:
        query = select(table).where(col(table.log) == lg.store.log_id)
        for key, value in where.items():
            query = query.where(getattr(table, key) == value)
        with engines.read.connect() as conn:
            return list(conn.execute(query.order_by(col(table.id))).all())
    finally:
        engines.dispose()


def test_webhook_gets_signed_events_with_a_summary_and_a_link(log: Log, receiver: Receiver) -> None:
    add(log, hook(receiver))
    with Notifier(log.url, FAST) as notifier:
        review = log.open(args={"amount": 5000, "to": "acct-x"})
        log.approve(review)
        got = receiver.wait_for(2)
        wait_until(lambda: notifier.counts["delivered"] >= 2, what="delivered jobs recorded")
    opened, decided = sorted((r.json for r in got), key=lambda d: d["seq"])
    assert opened["type"] == "review.opened" and decided["type"] == "review.decided"
    assert opened["summary"].startswith('Review needed: transfer from teller (amount=5000, to="acct-x")')
    assert opened["review"]["url"] == f"{DESK}/reviews/{review}" and opened["review"]["deadline"]
    assert decided["outcome"] == "approved" and decided["actor"] == ALICE
    for request in got:
        assert request.headers["signoff-event-id"] == request.json["id"]
        assert request.headers["signoff-event"] == request.json["type"]
        assert request.headers["content-type"] == "application/json"
        assert request.headers["signoff-signature"].startswith("t=")
    jobs = rows(log, NotifyJob)
    assert {(j.event, j.state, j.attempts) for j in jobs} == {
        ("review.opened", "delivered", 1),
        ("review.decided", "delivered", 1),
        ("review.deadline_near", "pending", 0),  # due ten minutes before the deadline, an hour away
    }
    attempts = rows(log, NotifyAttempt)
    assert [(a.outcome, a.status, a.attempt) for a in attempts] == [("delivered", 200, 1)] * 2


def test_a_wrong_secret_is_refused_by_the_receiver_and_not_retried(sqlite_log: Log, receiver: Receiver) -> None:
    add(sqlite_log, hook(receiver, secret="not-the-receivers-secret", events=["opened"]))
    with Notifier(sqlite_log.url, FAST):
        sqlite_log.open()
        wait_until(lambda: rows(sqlite_log, NotifyJob, state="failed"), what="the job to fail")
    assert [r.status for r in receiver.requests] == [401]
    [attempt] = rows(sqlite_log, NotifyAttempt)
    assert (attempt.outcome, attempt.status, attempt.error) == ("failed", 401, "HTTP 401: bad signature")


def test_a_replayed_request_with_a_stale_timestamp_is_refused(sqlite_log: Log) -> None:
    import httpx

    receiver = Receiver(tolerance=2)  # t= is whole seconds: allow for the truncation
    add(sqlite_log, hook(receiver, events=["opened"]))
    with Notifier(sqlite_log.url, FAST):
        sqlite_log.open()
        [first] = receiver.wait_for(1)
    time.sleep(3.1)  # the signature's timestamp is now more than two seconds old
    headers = {k: v for k, v in first.headers.items() if k.startswith("signoff-") or k == "content-type"}
    replay = httpx.post(receiver.url, content=first.body, headers=headers)
    assert replay.status_code == 401
    receiver.close()


def test_retries_back_off_exponentially_with_the_same_event_id_and_body(log: Log) -> None:
    receiver = Receiver(fail_first=3, fail=503)
    add(log, hook(receiver, events=["opened"]))
    with Notifier(log.url, FAST):
        log.open()
        receiver.wait_for(1)
        wait_until(lambda: rows(log, NotifyJob, state="delivered"), what="the job to be delivered")
    sent = receiver.requests
    assert [r.status for r in sent] == [503, 503, 503, 200]
    assert len({r.event_id for r in sent}) == 1 and len({r.body for r in sent}) == 1
    assert [r.headers["signoff-attempt"] for r in sent] == ["1", "2", "3", "4"]
    gaps = [b.at - a.at for a, b in zip(sent, sent[1:], strict=False)]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2  # 0.05 s, doubling each time (+ jitter)
    attempts = rows(log, NotifyAttempt)
    assert [(a.attempt, a.outcome, a.status) for a in attempts] == [
        (1, "retry", 503),
        (2, "retry", 503),
        (3, "retry", 503),
        (4, "delivered", 200),
    ]
    receiver.close()


def test_a_receiver_that_keeps_failing_is_given_up_after_max_attempts(sqlite_log: Log) -> None:
    receiver = Receiver(fail_first=100, fail=500)
    add(sqlite_log, hook(receiver, events=["opened"]))
    with Notifier(sqlite_log.url, FAST):
        sqlite_log.open()
        wait_until(lambda: rows(sqlite_log, NotifyJob, state="failed"), what="the job to fail")
    assert len(receiver.requests) == FAST.max_attempts
    [job] = rows(sqlite_log, NotifyJob)
    assert job.attempts == FAST.max_attempts and job.last_error.startswith("HTTP 500")
    receiver.close()


def test_retry_after_is_honoured(sqlite_log: Log) -> None:
    receiver = Receiver(fail_first=1, fail=429, retry_after="1")
    add(sqlite_log, hook(receiver, events=["opened"]))
    with Notifier(sqlite_log.url, FAST):
        sqlite_log.open()
        receiver.wait_for(1)
    first, second = receiver.requests
    assert first.status == 429 and second.at - first.at >= 0.95
    receiver.close()


def test_each_endpoint_gets_only_what_its_filters_let_through(log: Log) -> None:
    finance, refunds, decisions = Receiver(), Receiver(), Receiver()
    add(
        log,
        hook(finance, "finance", roles=["finance"], events=["opened"]),
        hook(refunds, "refunds", tools=["refund*"]),
        hook(decisions, "decisions", events=["decided", "expired"]),
    )
    with Notifier(log.url, FAST):
        transfer = log.open("transfer", deadline=None)
        refund = log.open("refund_card", role="ops", deadline=None)
        log.approve(transfer)
        log.reject(refund, "duplicate")
        decisions.wait_for(2)
        refunds.wait_for(2)
        finance.wait_for(1)
        time.sleep(0.3)
    assert sorted((r.json["type"], r.json["review"]["id"]) for r in finance.ok()) == [("review.opened", transfer)]
    assert sorted(r.json["type"] for r in refunds.ok()) == ["review.decided", "review.opened"]
    assert {r.json["review"]["id"] for r in refunds.ok()} == {refund}
    assert sorted(r.json["outcome"] for r in decisions.ok()) == ["approved", "rejected"]
    for r in (finance, refunds, decisions):
        r.close()


def test_deadline_near_is_sent_only_for_reviews_still_pending(sqlite_log: Log, receiver: Receiver) -> None:
    add(sqlite_log, hook(receiver, events=["deadline_near"], deadline_lead=2.0))
    with Notifier(sqlite_log.url, FAST):
        waiting = sqlite_log.open(deadline=3)
        decided = sqlite_log.open(deadline=3)
        short = sqlite_log.open(deadline=1)  # the whole window is shorter than the lead: nothing
        opened_at = time.monotonic()
        sqlite_log.approve(decided)
        [near] = receiver.wait_for(1, timeout=5)
        wait_until(lambda: rows(sqlite_log, NotifyJob, state="skipped"), what="the decided review's job skipped")
        time.sleep(0.3)
    assert len(receiver.ok()) == 1
    assert near.json["review"]["id"] == waiting and near.json["type"] == "review.deadline_near"
    assert near.json["lead_seconds"] == 2.0 and near.json["summary"].startswith("Deadline in 2 s: transfer")
    assert 0.8 <= near.at - opened_at <= 2.5  # about one second after opening: three minus two
    assert {j.review for j in rows(sqlite_log, NotifyJob)} == {waiting, decided}
    assert short not in {r.json["review"]["id"] for r in receiver.ok()}


def test_expired_reviews_are_told_with_a_store_on_a_controlled_clock(tmp_path: Path, receiver: Receiver) -> None:
    now = [datetime.now(UTC)]
    lg = make_log(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path, clock=lambda: now[0])
    add(lg, hook(receiver, events=["expired"]))
    with Notifier(lg.url, FAST):
        review = lg.open(deadline=60)
        now[0] += timedelta(minutes=2)
        [expired] = lg.svc.expire_due()
        [got] = receiver.wait_for(1)
    assert expired.id == review and got.json["type"] == "review.expired" and got.json["review"]["id"] == review
    assert got.json["summary"].startswith("Expired without a decision: transfer from teller")
    lg.close()


def test_slack_gets_block_kit_with_a_button_to_the_review(log: Log) -> None:
    slack = Receiver(secret=None, slack=True)
    add(log, endpoint_from_options("slack", "slack", {"url": slack.url}, events=["opened", "decided"]))
    with Notifier(log.url, FAST):
        review = log.open(args={"to": "<!here> & <https://evil.example|x>"})
        log.reject(review, "no")
        got = slack.wait_for(2)
    assert all(r.status == 200 for r in slack.requests)  # the fake Slack checked each message's shape
    for request in got:
        message = request.json
        assert message["blocks"][2]["elements"][0]["url"] == f"{DESK}/reviews/{review}"
        assert "<!here>" not in message["blocks"][0]["text"]["text"]
    assert any(m.json["text"].startswith("Rejected by human:alice@example.org") for m in got)
    slack.close()


@pytest.mark.parametrize("tls", ["none", "starttls", "tls"])
def test_email_over_smtp_with_each_tls_mode(sqlite_log: Log, tmp_path: Path, tls: str) -> None:
    smtp = Smtp(tmp_path, tls)
    settings: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": smtp.port,
        "tls": tls,
        "from": "Signoff <signoff@example.org>",
        "to": ["finance@example.org", "cfo@example.org"],
    }
    if tls != "none":
        os.environ["SIGNOFF_TEST_SMTP_PASSWORD"] = "mail-pw"
        settings.update(user="notifier", password_env="SIGNOFF_TEST_SMTP_PASSWORD", ca_file=str(smtp.cafile))
    add(sqlite_log, endpoint_from_options("email", "mail", settings, events=["opened"]))
    try:
        with Notifier(sqlite_log.url, FAST):
            review = sqlite_log.open(args={"amount": 42, "to": "acct-9"})
            [envelope] = smtp.wait_for(1)
    finally:
        smtp.close()
        os.environ.pop("SIGNOFF_TEST_SMTP_PASSWORD", None)
    assert envelope.mail_from == "signoff@example.org"
    assert envelope.rcpt_tos == ["finance@example.org", "cfo@example.org"]
    text = envelope.content.decode()
    assert "Subject: [Signoff] Review needed: transfer from teller (amount=42" in text
    assert f"{DESK}/reviews/{review}" in text and "Signoff-Event-Id: " in text
    assert smtp.logins == ([] if tls == "none" else ["notifier"])


def test_a_wrong_smtp_password_fails_without_retrying(sqlite_log: Log, tmp_path: Path) -> None:
    smtp = Smtp(tmp_path, "starttls")
    settings = {
        "host": "127.0.0.1",
        "port": smtp.port,
        "tls": "starttls",
        "user": "notifier",
        "password": "wrong",
        "ca_file": str(smtp.cafile),
        "from": "s@example.org",
        "to": ["f@example.org"],
    }
    add(sqlite_log, endpoint_from_options("email", "mail", settings, events=["opened"]))
    try:
        with Notifier(sqlite_log.url, FAST):
            sqlite_log.open()
            wait_until(lambda: rows(sqlite_log, NotifyJob, state="failed"), what="the job to fail")
    finally:
        smtp.close()
    [attempt] = rows(sqlite_log, NotifyAttempt)
    assert attempt.status == 535 and smtp.messages == []


def test_a_restart_resumes_from_the_cursor_neither_losing_nor_repeating(log: Log, receiver: Receiver) -> None:
    before = log.open(deadline=None)  # before the endpoint existed: never told
    add(log, hook(receiver, events=["opened"]))
    between = log.open(deadline=None)  # after `add`, before the notifier first ran: told
    with Notifier(log.url, FAST):
        during = log.open(deadline=None)
        receiver.wait_for(2)
    while_down = [log.open(deadline=None) for _ in range(3)]
    with Notifier(log.url, FAST):
        receiver.wait_for(5)
        time.sleep(0.3)
    told = [r.json["review"]["id"] for r in receiver.ok()]
    assert sorted(told) == sorted([between, during, *while_down]) and before not in told
    assert len(told) == len(set(told))  # a clean stop and start repeats nothing


def test_only_one_of_several_notifiers_delivers(log: Log, receiver: Receiver) -> None:
    add(log, hook(receiver, events=["opened"]))
    first = Notifier(log.url, FAST).start()
    second = Notifier(log.url, FAST).start()
    try:
        wait_until(lambda: first.leading.is_set() or second.leading.is_set(), what="a leader")
        reviews = [log.open(deadline=None) for _ in range(10)]
        receiver.wait_for(10)
        time.sleep(0.3)
        assert first.leading.is_set() != second.leading.is_set()
        leader, standby = (first, second) if first.leading.is_set() else (second, first)
        leader.stop()  # the standby takes over
        wait_until(standby.leading.is_set, what="the standby to take over")
        more = [log.open(deadline=None) for _ in range(5)]
        receiver.wait_for(15)
        time.sleep(0.3)
    finally:
        first.stop()
        second.stop()
    told = [r.json["review"]["id"] for r in receiver.ok()]
    assert sorted(told) == sorted(reviews + more)


def test_removing_an_endpoint_drops_its_undelivered_jobs(sqlite_log: Log, receiver: Receiver) -> None:
    endpoints = add(sqlite_log, hook(receiver, events=["deadline_near"], deadline_lead=60))
    with Notifier(sqlite_log.url, FAST):
        sqlite_log.open(deadline=3600)
        wait_until(lambda: rows(sqlite_log, NotifyJob), what="a job due in 59 minutes")
        assert endpoints.remove("hook") == 1
    assert rows(sqlite_log, NotifyJob) == [] and receiver.requests == []


def test_desk_serve_notify_runs_the_notifier_in_the_desk(sqlite_log: Log, receiver: Receiver) -> None:
    add(sqlite_log, hook(receiver, events=["opened"]))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "signoff.desk",
            "serve",
            "--store",
            sqlite_log.url,
            "--port",
            str(port),
            "--quiet",
            "--notify",
            "--origin",
            f"http://desk.test:{port}",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        wait_until(lambda: "notifier on" in proc.stderr.readline(), timeout=20, what="desk serve --notify")
        time.sleep(0.5)
        review = sqlite_log.open()
        [got] = receiver.wait_for(1, timeout=10)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    assert got.json["review"]["url"] == f"http://desk.test:{port}/reviews/{review}"


def test_a_quorum_is_told_once_decided_and_an_escalation_once(sqlite_log: Log, receiver: Receiver) -> None:
    """A running notifier on a four-eyes review that escalates: opened, escalated (to the cfo role),
    and one decided when the second person approves; the first approval tells nobody it was decided."""
    from signoff.audit.keys import Signer, read_private_key
    from signoff.audit.store import default_admin_key

    lg = sqlite_log
    admin = read_private_key(default_admin_key(lg.tmp / "log.key"))
    bob, bob_key = "human:bob@example.org", Signer.generate()
    lg.svc.enroll_reviewer(bob, roles=["finance"], tools=["*"], key=bob_key.public, admin=admin)
    lg.svc.set_policy(
        {
            "policy": "four-eyes",
            "tools": "transfer",
            "approvals": 2,
            "escalate": {"to_role": "cfo", "after_seconds": 60},
        },
        admin=admin,
    )
    add(lg, hook(receiver, events=["opened", "escalated", "decided"]))
    with Notifier(lg.url, FAST):
        review = lg.open(deadline=None)
        lg.approve(review)
        lg.clock.advance(120)
        lg.svc.escalate_due()
        lg.svc.approve(review, reviewer=bob, signer=bob_key)
        got = receiver.wait_for(3)
        time.sleep(0.3)  # anything more would have arrived by now
    sent = sorted((r.json for r in receiver.ok()), key=lambda d: d["seq"])
    assert [(d["type"], d.get("outcome"), d["actor"]) for d in sent] == [
        ("review.opened", None, "agent:teller"),
        ("review.escalated", None, "service:signoff"),
        ("review.decided", "approved", bob),
    ], [d["type"] for d in sent]
    assert sent[1]["review"]["role"] == "cfo" and len(got) == 3
