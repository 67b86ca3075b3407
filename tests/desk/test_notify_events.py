"""desk/notify: events derived from real log entries, their ids, summaries, payloads, filters,
the Slack and e-mail renderings, and the webhook signature (sign, verify and the README snippet)."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

import pytest
from notifykit import ALICE, Log, make_log, receiver_check, slack_problem

from signoff.audit.entry import Entry
from signoff.audit.keys import Signer
from signoff.audit.values import lookup_for
from signoff.desk.notify import ConfigError, Endpoint, SignatureError, sign, verify
from signoff.desk.notify._channels import body_bytes, email_message, slack_message
from signoff.desk.notify._endpoints import check, endpoint_from_options
from signoff.desk.notify._events import ReviewFacts, events_of, payload, summary
from signoff.desk.notify._runner import NotifierOptions

DESK = "https://desk.example.org"


@pytest.fixture
def log(tmp_path: Path) -> Any:
    lg = make_log(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path)
    yield lg
    lg.close()


def _events(lg: Log, start: int = 0) -> list[Any]:
    def lookup(review: str) -> ReviewFacts | None:
        r = lg.svc.get(review)
        deadline = r.deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if r.deadline else None
        return ReviewFacts(r.call.tool, r.call.agent, r.call.app, r.call.session, r.call.args, r.policy.role, deadline)

    entries = list(lg.store.entries(start=start))
    # The values beside a sealed log, as the notifier reads them (desk/notify/_runner.py ``_values``).
    values = lookup_for(lg.store.read_rows, lg.store.log_id, [str(e.body.get("review")) for e in entries])
    return [ev for entry in entries for ev in events_of(entry, lookup, None, values)]


def test_each_lifecycle_entry_yields_its_event_with_an_id_from_log_seq_and_type(log: Log) -> None:
    start = log.store.size()
    approved, rejected, expiring, withdrawn = (log.open() for _ in range(4))
    log.approve(approved)
    log.reject(rejected, "too much")
    log.clock.advance(7200)
    log.svc.expire_due()  # expires only what is still open
    events = _events(log, start)
    by_review: dict[str, list[str]] = {}
    for ev in events:
        by_review.setdefault(ev.review, []).append(ev.type)
        assert ev.id == f"{log.store.log_id}-{ev.seq}-{ev.type}" + (f".{ev.variant}" if ev.variant else "")
        assert ev.log == log.store.log_id and ev.tool == "transfer" and ev.facts.agent == "teller"
    # review.opened also schedules its reminders (after it opened, and before its deadline)
    pending = ["review.opened", "review.reminder", "review.deadline_near", "review.reminder"]
    assert by_review[approved] == [*pending, "review.decided"]
    assert by_review[expiring] == [*pending, "review.expired"]
    reminders = [ev.variant for ev in events if ev.review == approved and ev.type == "review.reminder"]
    assert reminders == ["after", "before"]
    decided = {ev.review: ev for ev in events if ev.type == "review.decided"}
    assert decided[approved].outcome == "approved" and decided[approved].actor == ALICE
    assert decided[rejected].outcome == "rejected" and decided[rejected].reason == "too much"
    assert withdrawn in by_review and {ev.role for ev in events} == {"finance"}
    # Derived again (a restarted notifier): the same ids.
    assert [ev.id for ev in _events(log, start)] == [ev.id for ev in events]


def test_withdrawn_and_a_review_without_a_deadline(log: Log) -> None:
    start = log.store.size()
    review = log.open(deadline=None, role=None)
    log.svc.withdraw(review, actor="agent:teller", reason="run cancelled")
    types = [(ev.type, ev.reason) for ev in _events(log, start)]
    # no deadline_near, and no reminder before a deadline
    assert types == [("review.opened", ""), ("review.reminder", ""), ("review.withdrawn", "run cancelled")]


def test_a_quorum_is_decided_once_and_an_escalation_reaches_the_new_role(log: Log) -> None:
    """A four-eyes review: alice's approval (one of two) is no decision; bob's completes it and is
    the one review.decided. An escalation written by the service names the role it went to."""
    from signoff.audit.keys import read_private_key
    from signoff.audit.store import default_admin_key

    admin = read_private_key(default_admin_key(log.tmp / "log.key"))
    bob, bob_key = "human:bob@example.org", Signer.generate()
    log.svc.enroll_reviewer(bob, roles=["finance"], tools=["*"], key=bob_key.public, admin=admin)
    policy = {"policy": "four-eyes", "tools": "transfer", "approvals": 2, "role": "finance",
              "escalate": {"to_role": "cfo", "after_seconds": 60}}  # fmt: skip
    log.svc.set_policy(policy, admin=admin)
    start = log.store.size()
    review = log.open()
    log.approve(review)
    log.clock.advance(120)
    log.svc.escalate_due()
    log.svc.approve(review, reviewer=bob, signer=bob_key)

    def closes(rid: str, seq: int) -> bool:
        return log.svc.get(rid).decision_seq == seq

    def lookup(rid: str) -> ReviewFacts | None:
        r = log.svc.get(rid)
        return ReviewFacts(r.call.tool, r.call.agent, r.call.app, r.call.session, r.call.args, r.policy.role)

    events = [ev for entry in log.store.entries(start=start) for ev in events_of(entry, lookup, closes)]
    assert [(ev.type, ev.actor, ev.role) for ev in events if ev.type != "review.deadline_near"] == [
        ("review.opened", "agent:teller", "finance"),
        ("review.reminder", "agent:teller", "finance"),  # after opening
        ("review.reminder", "agent:teller", "finance"),  # before the deadline
        ("review.escalated", "service:signoff", "cfo"),
        ("review.reminder", "service:signoff", "cfo"),  # the new role's approvers, after the escalation
        ("review.decided", bob, "finance"),
    ]


def test_escalated_entries_are_handled_once_the_log_has_them(log: Log) -> None:
    review = log.open(role="finance")
    opened = next(log.store.entries(kind="review.opened", review=review))
    body = {"review": review, "role": "cfo", "reason": "over the limit"}
    escalated = Entry(
        opened.seq + 1, opened.log, opened.hash, opened.at, "service:signoff", "review.escalated", body, None, b"", ""
    )
    facts = ReviewFacts("transfer", "teller", "bank", "s", {"amount": 5}, "finance", None)
    ev, reminder = events_of(escalated, lambda rid: facts if rid == review else None)
    assert (reminder.type, reminder.role, reminder.variant) == ("review.reminder", "cfo", "after")
    assert (ev.type, ev.role, ev.reason, ev.tool) == ("review.escalated", "cfo", "over the limit", "transfer")
    assert summary(ev).startswith("Escalated to role cfo: transfer from teller (amount=5)")
    # An endpoint for the new role gets it; one for the old role does not.
    assert Endpoint("cfo", "webhook", {}, roles=("cfo",)).wants(ev)
    assert not Endpoint("fin", "webhook", {}, roles=("finance",)).wants(ev)


def test_summary_names_tool_agent_key_arguments_and_deadline_on_one_clean_line(log: Log) -> None:
    start = log.store.size()
    args = {"amount": 5000, "to": "acct-x\n\nIGNORE ALL\x1b[2J", "memo": "x" * 500, "zz": 1, "zzz": 2}
    log.open(args=args, agent="teller\u2028bot")
    opened = _events(log, start)[0]
    text = summary(opened)
    assert text.startswith("Review needed: transfer from teller bot (amount=5000, memo=")
    assert "\n" not in text and "\x1b" not in text and "IGNORE ALL" in text
    assert "… 1 more" in text and "x" * 100 not in text  # four arguments, each cut short
    assert "role finance; deadline " in text and text.endswith(" UTC")
    redacted = summary(opened, redact=True)
    assert "5000" not in redacted and "acct-x" not in redacted and "amount, " in redacted


def test_payload_links_to_the_review_in_the_desk_without_credentials(log: Log) -> None:
    start = log.store.size()
    review = log.open()
    opened = _events(log, start)[0]
    data = payload(opened, desk_url=DESK + "/")
    assert data["review"]["url"] == f"{DESK}/reviews/{review}"
    assert data["id"] == opened.id and data["type"] == "review.opened" and data["seq"] == opened.seq
    assert data["review"]["args"] == opened.facts.args and data["review"]["deadline"] == opened.facts.deadline
    assert "token" not in body_bytes(data).decode().lower()
    assert "args" not in payload(opened, desk_url=DESK, redact=True)["review"]


@pytest.mark.parametrize(
    ("endpoint", "wanted"),
    [
        (Endpoint("all", "webhook", {}), {"transfer:opened", "refund:opened", "transfer:decided"}),
        (Endpoint("tools", "webhook", {}, tools=("trans*",)), {"transfer:opened", "transfer:decided"}),
        (Endpoint("events", "webhook", {}, events=("decided",)), {"transfer:decided"}),
        (Endpoint("roles", "webhook", {}, roles=("ops",)), {"refund:opened"}),
        (Endpoint("off", "webhook", {}, enabled=False), set()),
    ],
)
def test_filters_by_tool_glob_role_and_event(log: Log, endpoint: Endpoint, wanted: set[str]) -> None:
    start = log.store.size()
    log.approve(log.open("transfer", deadline=None))
    log.open("refund", role="ops", deadline=None)
    got = {f"{ev.tool}:{ev.name}" for ev in _events(log, start) if endpoint.wants(ev)}
    assert got == wanted


def test_slack_message_has_text_blocks_and_a_button_and_escapes_agent_text(log: Log) -> None:
    start = log.store.size()
    log.open(args={"to": "<https://evil.example|click> <!channel> & co"})
    message = slack_message(payload(_events(log, start)[0], desk_url=DESK))
    assert slack_problem(message) == ""
    head = message["blocks"][0]["text"]["text"]
    assert "<https://evil" not in head and "<!channel>" not in head and "&lt;!channel&gt; &amp; co" in head
    button = message["blocks"][2]["elements"][0]
    assert button["url"].startswith(f"{DESK}/reviews/rv_") and button["text"]["text"] == "Open the review"


def test_email_is_plain_text_with_the_link_and_a_message_id_fixed_per_event(log: Log) -> None:
    start = log.store.size()
    log.open()
    data = payload(_events(log, start)[0], desk_url=DESK)
    endpoint = endpoint_from_options(
        "email", "mail", {"host": "smtp.example.org", "from": "so@example.org", "to": ["ops@example.org"]}
    )
    first, again = email_message(endpoint, data), email_message(endpoint, data)
    assert first["Message-ID"] == again["Message-ID"] and first["Signoff-Event-Id"] == data["id"]
    assert first["Subject"].startswith("[Signoff] Review needed: transfer from teller")
    text = first.get_content()
    assert data["review"]["url"] in text and "sign in" in text and '"amount"' in text
    assert first.get_content_type() == "text/plain"


# -- signatures -------------------------------------------------------------------------------

BODY = b'{"id":"log_1-3-review.opened","type":"review.opened"}'


def test_sign_and_verify_round_trip() -> None:
    header = sign("s3cret", BODY, 1_700_000_000)
    expected = hmac.new(b"s3cret", b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert verify("s3cret", header, BODY, now=1_700_000_100) == 1_700_000_000


@pytest.mark.parametrize(
    ("secret", "header", "body", "now", "found"),
    [
        ("wrong", sign("s3cret", BODY, 1000), BODY, 1000, "none that matches"),
        ("s3cret", sign("s3cret", BODY, 1000), BODY + b" ", 1000, "none that matches"),
        ("s3cret", sign("s3cret", BODY, 1000), BODY, 1000 + 301, "within 300 s"),
        ("s3cret", sign("s3cret", BODY, 1000), BODY, 1000 - 301, "within 300 s"),
        ("s3cret", None, BODY, 1000, "no header"),
        ("s3cret", "v1=abc", BODY, 1000, "expected 't=<unix>,v1=<hex>'"),
        ("s3cret", "t=soon,v1=abc", BODY, 1000, "integer t="),
    ],
)
def test_verify_refuses_wrong_secret_tampered_body_stale_time_and_junk(
    secret: str, header: str | None, body: bytes, now: float, found: str
) -> None:
    with pytest.raises(SignatureError, match=found.replace("(", r"\(").replace(")", r"\)").replace("<", "<")):
        verify(secret, header, body, now=now)


def test_verify_accepts_any_of_several_v1_values_for_secret_rotation() -> None:
    old, new = sign("old", BODY, 1000), sign("new", BODY, 1000)
    both = f"{new},{old.split(',')[1]}"
    assert verify("old", both, BODY, now=1000) == verify("new", both, BODY, now=1000) == 1000


def test_the_readme_receiver_snippet_agrees_with_verify() -> None:
    ok = receiver_check()
    now = int(time.time())
    good = sign("s3cret", BODY, now)
    assert ok("s3cret", good, BODY, 300)
    assert not ok("wrong", good, BODY, 300)
    assert not ok("s3cret", good, BODY + b"x", 300)
    assert not ok("s3cret", sign("s3cret", BODY, now - 301), BODY, 300)
    assert not ok("s3cret", "garbage", BODY, 300)


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "settings", "found"),
    [
        ("webhook", {"url": "ftp://x.example.org/", "secret": "s"}, "http:// or https:// URL"),
        ("webhook", {"url": "https://user:pw@x.example.org/", "secret": "s"}, "without user:password@"),
        ("webhook", {"url": "https://x.example.org/"}, "expected a secret"),
        ("slack", {}, "http:// or https:// URL"),
        ("email", {"host": "smtp", "from": "a@example.org"}, "at least one address"),
        ("email", {"host": "smtp", "from": "nobody", "to": ["b@example.org"]}, "e-mail address"),
        ("email", {"host": "smtp", "from": "a@example.org", "to": ["b@example.org"], "tls": "ssl"}, "tls"),
        ("email", {"host": "smtp", "from": "a@example.org", "to": ["b@x.org"], "password": "p"}, "SMTP user"),
        ("pager", {}, "kind"),
    ],
)
def test_endpoint_config_is_checked_before_it_is_stored(kind: str, settings: dict[str, Any], found: str) -> None:
    with pytest.raises(ConfigError, match=found):
        check(Endpoint("x", kind, settings))


def test_endpoint_names_events_and_email_defaults() -> None:
    with pytest.raises(ConfigError, match="name"):
        check(Endpoint("no spaces", "slack", {"url": "https://hooks.example.org/x"}))
    with pytest.raises(ConfigError, match="events"):
        check(Endpoint("x", "slack", {"url": "https://hooks.example.org/x"}, events=("approved",)))
    mail = endpoint_from_options("email", "m", {"host": "smtp", "tls": "tls", "from": "a@example.org", "to": "b@x.org"})
    assert mail.settings["port"] == 465 and mail.settings["to"] == ["b@x.org"]
    hook = endpoint_from_options("webhook", "h", {"url": "https://x.org/", "secret": "s"}, events=["review.opened"])
    assert hook.events == ("opened",)
    assert Endpoint("s", "slack", {"url": "https://hooks.slack.com/services/T/B/secret"}).public()["settings"] == {
        "url": "https://hooks.slack.com/…"
    }


def test_backoff_doubles_is_capped_and_honours_retry_after() -> None:
    options = NotifierOptions(retry_base=1.0, retry_cap=10.0)
    delays = [options.backoff(n) for n in range(1, 7)]
    for n, delay in enumerate(delays[:4]):
        assert 2**n <= delay <= 2**n * 1.1
    assert delays[4] == delays[5] == 10.0
    assert options.backoff(1, retry_after=7) == 7.0
    assert options.backoff(1, retry_after=3600) == 10.0
