"""Reminders to the approvers a review still needs (issue 22 §6), through the real notifier, against a local
server speaking Slack's Web API (slackapi.py) and an aiosmtpd SMTP server, on SQLite and PostgreSQL.

While a four-eyes review waits, the people it still needs (not who approved, not who asked for the call,
not who may not decide it) get a Slack DM and an e-mail after ``remind_after``; once it is decided nobody
gets the reminder before its deadline. Then ``kill -9`` of a real ``desk notify serve`` again and again
while reminders go out: none is lost, no Slack DM is sent twice, and an e-mail is sent again only after a
send the kill cut off, with the same Message-ID.
"""

from __future__ import annotations

import email
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from notifykit import ALICE, Log, Smtp, wait_until
from slackapi import TOKEN, SlackApi
from sqlalchemy import select
from sqlmodel import col

from signoff.audit import Policy, Signer
from signoff.audit.keys import read_private_key
from signoff.audit.store import default_admin_key
from signoff.desk.notify import Endpoints, Engines, Notifier, NotifierOptions
from signoff.desk.notify._endpoints import endpoint_from_options
from signoff.desk.notify._reminders import FOUND, METADATA_TYPE
from signoff.desk.notify._tables import NotifyJob, NotifySent

ROOT = Path(__file__).resolve().parents[2]
DESK = "https://desk.example.org"
FAST = NotifierOptions(desk_url=DESK, retry_base=0.05, retry_cap=0.5, max_attempts=20)
BOB, CAROL, DAVE, ERIN = (f"human:{n}@example.org" for n in ("bob", "carol", "dave", "erin"))
SLACK_USERS = {f"{n}@example.org": f"U0{n.upper()}" for n in ("alice", "bob", "carol", "dave", "erin")}


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlackApi]:
    monkeypatch.setenv("TEST_SLACK_BOT_TOKEN", TOKEN)
    api = SlackApi(users=dict(SLACK_USERS))
    yield api
    api.close()


@pytest.fixture
def smtp(tmp_path: Path) -> Iterator[Smtp]:
    server = Smtp(tmp_path)
    yield server
    server.close()


def _team(log: Log) -> dict[str, Signer]:
    """Bob and Carol decide transfers like Alice (finance); Dave is ops; Erin is finance and asks for calls.
    A four-eyes policy on transfers."""
    admin = read_private_key(default_admin_key(log.tmp / "log.key"))
    keys = {}
    for who, role in ((BOB, "finance"), (CAROL, "finance"), (DAVE, "ops"), (ERIN, "finance")):
        keys[who] = Signer.generate()
        log.svc.enroll_reviewer(who, roles=[role], tools=["*"], key=keys[who].public, admin=admin)
    log.svc.set_policy({"policy": "four-eyes", "tools": "transfer", "role": "finance", "approvals": 2}, admin=admin)
    return keys


def _endpoints(log: Log, slack: SlackApi, smtp: Smtp, **reminders: Any) -> None:
    engines = Engines(log.url)
    try:
        endpoints = Endpoints(engines, log.store.log_id)
        base = {"bot_token_env": "TEST_SLACK_BOT_TOKEN", "api_url": slack.url, **reminders}
        endpoints.add(endpoint_from_options("slack-app", "team", base, events=["reminder"]), head=log.store.size())
        mail = {"host": "127.0.0.1", "port": smtp.port, "tls": "none", "from": "signoff@bank.test", **reminders}
        mail["to"] = ["ops@bank.test"]
        endpoints.add(endpoint_from_options("email", "mail", mail, events=["reminder"]), head=log.store.size())
    finally:
        engines.dispose()


def _ask(log: Log, erin_asks: bool = True, deadline: float = 3600) -> str:
    from signoff.audit import CallSpec

    n = random.randrange(10**9)
    spec = CallSpec(
        app="bank", user="erin", session=f"rs{n}", invocation=f"ri{n}", confirmation_id=f"rc{n}", call_id=f"rk{n}",
        tool="transfer", args={"amount": 900, "to": "acct-9"}, agent="teller",
        requested_by=ERIN if erin_asks else "",
    )  # fmt: skip
    front = log.svc.open_frontier([spec], actor="agent:teller", policies=[Policy(deadline_seconds=deadline)])
    return front.reviews[0].id


def _reminder_dms(slack: SlackApi) -> list[tuple[str, str]]:
    """(DM channel, reminder key) of every reminder Slack holds."""
    with slack._lock:
        return [
            (m.channel, str(m.metadata["event_payload"]["reminder"]))
            for m in slack.messages.values()
            if m.metadata and m.metadata.get("event_type") == METADATA_TYPE
        ]


def _mails(smtp: Smtp) -> list[tuple[str, str, str]]:
    """(to, Message-ID, subject) of every e-mail the server took."""
    out = []
    for envelope in list(smtp.messages):
        msg = email.message_from_bytes(envelope.content)
        out.append((str(msg["To"]), str(msg["Message-ID"]), str(msg["Subject"])))
    return out


def test_a_quorum_reminds_the_people_it_still_needs_and_nobody_once_decided(
    log: Log, slack: SlackApi, smtp: Smtp
) -> None:
    keys = _team(log)
    _endpoints(log, slack, smtp, remind_after=0.6, remind_before=2.5)
    with Notifier(log.url, FAST):
        review = _ask(log, deadline=4)  # the reminder before the deadline falls due 1.5 s after opening
        log.approve(review)  # alice: 1 of 2
        wait_until(lambda: len(_reminder_dms(slack)) == 2 and len(_mails(smtp)) == 2, what="two reminders each way")
        channels = sorted(channel for channel, _key in _reminder_dms(slack))
        assert channels == ["D0BOB", "D0CAROL"]  # not alice (approved), erin (asked for it), dave (ops)
        assert sorted(to for to, _mid, _subject in _mails(smtp)) == ["bob@example.org", "carol@example.org"]
        [dm] = [m for m in slack.in_channel("D0BOB") if m.metadata]
        assert "Reminder" in dm.all_text and "It needs 1 more approval" in dm.all_text
        assert [b["url"] for b in dm.buttons] == [f"{DESK}/reviews/{review}"]
        assert all(subject.startswith("[Signoff] Reminder: transfer") for _to, _mid, subject in _mails(smtp))
        log.svc.approve(review, reviewer=BOB, signer=keys[BOB], round=0)  # decided: nobody is reminded again

        def before_done() -> bool:
            with Engines(log.url).read.connect() as conn:
                rows = conn.execute(
                    select(NotifyJob.state).where(col(NotifyJob.event_id).endswith("review.reminder.before"))
                ).all()
            return len(rows) == 2 and {r[0] for r in rows} == {"skipped"}

        wait_until(before_done, timeout=10, what="the reminders before the deadline skipped")
    assert len(_reminder_dms(slack)) == 2 and len(_mails(smtp)) == 2


def test_no_reminder_without_the_setting_or_once_everybody_approved(log: Log, slack: SlackApi, smtp: Smtp) -> None:
    _team(log)
    engines = Engines(log.url)
    Endpoints(engines, log.store.log_id).add(  # a Slack app with no reminder setting
        endpoint_from_options("slack-app", "quiet", {"bot_token_env": "TEST_SLACK_BOT_TOKEN", "api_url": slack.url}),
        head=log.store.size(),
    )
    engines.dispose()
    with Notifier(log.url, FAST):
        review = _ask(log)
        wait_until(lambda: len(slack.posted()) >= 2, what="the review's DMs")
        time.sleep(0.8)
    assert _reminder_dms(slack) == [] and review


def serve(url: str, tmp: Path, n: int) -> subprocess.Popen[bytes]:
    errors = open(tmp / f"notifier-{n}.log", "wb")  # noqa: SIM115 - the child writes it
    return subprocess.Popen(
        [sys.executable, "-m", "signoff.desk", "notify", "serve", "--store", url, "--desk-url", DESK,
         "--retry-base", "0.05", "--retry-cap", "0.3", "--max-attempts", "50"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TEST_SLACK_BOT_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=errors,
    )  # fmt: skip


@pytest.mark.slow
def test_kill_9_while_reminding_loses_none_and_sends_no_slack_dm_twice(log: Log, tmp_path: Path) -> None:
    """Reminders of 12 reviews to bob and carol fall due over a few seconds, while the notifier is killed
    with SIGKILL every 0.3–0.9 s and restarted. Slack and the SMTP server are slow to answer (the message
    is taken, the answer late), so kills land between a send and its record."""
    _team(log)
    slack = SlackApi(users=dict(SLACK_USERS), post_delay=0.25)
    smtp = Smtp(tmp_path, delay=0.25)
    _endpoints(log, slack, smtp, remind_after=0.5)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(serve(log.url, tmp_path, 0))
        reviews = []
        for _ in range(12):
            reviews.append(_ask(log, erin_asks=False))
            time.sleep(0.15)
        people = (ALICE, BOB, CAROL, ERIN)  # finance: every one of them may decide (dave is ops)
        expected = {(r, who) for r in reviews for who in people}
        kills = 0
        end = time.monotonic() + 8
        while time.monotonic() < end:
            time.sleep(random.uniform(0.3, 0.9))
            procs[-1].kill()  # SIGKILL: no cleanup, mid-send
            procs[-1].wait(timeout=10)
            kills += 1
            procs.append(serve(log.url, tmp_path, kills))

        def done() -> bool:
            query = select(NotifyJob.state).where(col(NotifyJob.event) == "review.reminder")
            with Engines(log.url).read.connect() as conn:
                return {state for (state,) in conn.execute(query)} == {"delivered"}

        wait_until(done, timeout=90, what="every reminder job delivered")
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        slack.close()
        smtp.close()
    # Slack: every reminder, each exactly once.
    seqs = {log.svc.get(r).opened_seq: r for r in reviews}
    counts = Counter(key for _channel, key in _reminder_dms(slack))
    assert all(n == 1 for n in counts.values()), [k for k, n in counts.items() if n > 1]
    got = set()
    for key in counts:
        event_id, person = key.split("/", 1)
        got.add((seqs[int(event_id.split("-")[1])], person))
    assert got == expected, expected ^ got
    # E-mail: every reminder; a second copy only after a cut-off send, with the same Message-ID.
    mails = Counter((to, mid) for to, mid, _subject in _mails(smtp))
    assert len(mails) == len(expected)  # one Message-ID per (review, person): none lost
    with Engines(log.url).read.connect() as conn:
        rows = conn.execute(select(NotifySent).where(col(NotifySent.log) == log.store.log_id)).all()
    resent = sum(r.resent for r in rows if r.endpoint == "mail")
    assert sum(mails.values()) - len(mails) <= resent
    recovered = sum(1 for r in rows if r.endpoint == "team" and r.ref == FOUND)
    print({"kills": kills, "slack_dms": len(counts), "slack_found_after_a_kill": recovered,
           "mails": sum(mails.values()), "mails_resent": resent})  # fmt: skip
    assert kills >= 5
