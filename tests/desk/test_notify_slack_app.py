"""The Slack app endpoint (desk/notify/_slack_app.py) against a local server speaking Slack's Web API
(slackapi.py), on SQLite and PostgreSQL, through the real notifier: messages in the channel and as
direct messages, one thread per frontier, updates in place as the review goes, and requests from
Slack checked with the signing secret at the desk."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from notifykit import ALICE, Log, make_log, wait_until
from slackapi import TOKEN, SlackApi

from signoff.audit import CallSpec, Policy
from signoff.desk.notify import Endpoint, Endpoints, Engines, Notifier, NotifierOptions
from signoff.desk.notify._endpoints import endpoint_from_options
from signoff.desk.notify._slack_app import check_request, sign_request
from signoff.desk.notify._tables import NotifyJob

DESK = "https://desk.example.org"
FAST = NotifierOptions(desk_url=DESK, retry_base=0.05, retry_cap=0.5, max_attempts=8)
CHANNEL = "C0REVIEWS"
ALICE_SLACK = "U0ALICE"


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlackApi]:
    monkeypatch.setenv("TEST_SLACK_BOT_TOKEN", TOKEN)
    api = SlackApi(users={"alice@example.org": ALICE_SLACK})
    yield api
    api.close()


def app_endpoint(api: SlackApi, **settings: Any) -> Endpoint:
    base = {"bot_token_env": "TEST_SLACK_BOT_TOKEN", "channel": CHANNEL, "api_url": api.url}
    return endpoint_from_options("slack-app", "slack-app", {**base, **settings})


def add(lg: Log, endpoint: Endpoint) -> None:
    engines = Engines(lg.url)
    Endpoints(engines, lg.store.log_id).add(endpoint, head=lg.store.size())
    engines.dispose()


def run_tool(lg: Log, review: str, args: dict[str, Any]) -> None:
    frontier = lg.svc.get(review).frontier
    lg.svc.claim_resume(frontier, actor="agent:teller")
    lg.svc.record_execution(review, actor="agent:teller", args=args)


def test_a_review_is_posted_to_the_channel_and_its_reviewers_and_kept_current(log: Log, slack: SlackApi) -> None:
    add(log, app_endpoint(slack))
    with Notifier(log.url, FAST):
        review = log.open(args={"amount": 5000, "to": "<!here> acct-x"})
        wait_until(lambda: len(slack.posted()) == 2, what="the channel message and alice's DM")
        [in_channel] = slack.in_channel(CHANNEL)
        [dm] = slack.in_channel("D0ALICE")  # users.lookupByEmail found alice; her DM channel
        for message in (in_channel, dm):
            [button] = message.buttons
            assert (button["text"]["text"], button["url"]) == ("Review", f"{DESK}/reviews/{review}")
            assert "transfer" in message.all_text and "5000" in message.all_text and "role finance" in message.all_text
            assert "<!here>" not in message.all_text and "&lt;!here&gt;" in message.all_text  # no mention
        assert [call for call, _ in slack.calls].count("users.lookupByEmail") == 1

        log.approve(review)
        wait_until(lambda: in_channel.updates >= 1 and dm.updates >= 1, what="both messages updated")
        for message in (in_channel, dm):
            assert "Approved by alice@example.org" in message.all_text and message.buttons == []
        run_tool(log, review, {"amount": 5000, "to": "<!here> acct-x"})
        wait_until(lambda: "Ran with" in in_channel.all_text and "Ran with" in dm.all_text, what="what ran")
    assert len(slack.posted()) == 2  # every later event changed the two messages in place


def test_the_reviews_of_one_frontier_go_into_one_thread(log: Log, slack: SlackApi) -> None:
    add(log, app_endpoint(slack, dm=False))
    calls = [
        CallSpec(
            app="bank",
            user="u1",
            session="s-thread",
            invocation="inv-t",
            confirmation_id=f"ct{i}",
            call_id=f"t{i}",
            tool="transfer",
            args={"amount": 10 + i, "to": "acct-1"},
            agent="teller",
        )  # fmt: skip
        for i in range(3)
    ]
    with Notifier(log.url, FAST):
        front = log.svc.open_frontier(calls, actor="agent:teller", policies=[Policy(role="finance")] * 3)
        wait_until(lambda: len(slack.in_channel(CHANNEL)) == 3, what="three messages")
    first, *rest = slack.in_channel(CHANNEL)
    assert first.thread_ts == "" and [m.thread_ts for m in rest] == [first.ts, first.ts]
    assert f"review `{front.reviews[0].id}`" in first.all_text
    assert slack.in_channel("D0ALICE") == []  # --no-dm


def test_an_edit_says_what_changed_and_a_rejection_why(log: Log, slack: SlackApi) -> None:
    add(log, app_endpoint(slack, dm=False))
    with Notifier(log.url, FAST):
        edited = log.open(args={"amount": 5000, "to": "acct-x"})
        rejected = log.open(args={"amount": 7, "to": "acct-y"})
        wait_until(lambda: len(slack.in_channel(CHANNEL)) == 2, what="two messages")
        log.svc.edit(
            edited, reviewer=ALICE, signer=log.alice, patch=[{"op": "replace", "path": "/amount", "value": 50}]
        )
        log.reject(rejected, "not this vendor")
        by_review = {r: m for m in slack.in_channel(CHANNEL) for r in (edited, rejected) if r in m.all_text}
        wait_until(lambda: all(m.updates for m in by_review.values()), what="both updated")
    assert "Approved with changes by alice@example.org: amount: 5000 → 50" in by_review[edited].all_text
    assert "Rejected by alice@example.org: not this vendor" in by_review[rejected].all_text


def test_a_reviewer_not_in_the_workspace_gets_no_dm_and_the_channel_still_does(log: Log, slack: SlackApi) -> None:
    slack.users.clear()
    add(log, app_endpoint(slack))
    with Notifier(log.url, FAST) as notifier:
        log.open()
        wait_until(lambda: notifier.counts["delivered"] >= 1, what="the delivery")
    assert len(slack.in_channel(CHANNEL)) == 1 and len(slack.posted()) == 1


def test_a_wrong_bot_token_fails_at_once_and_a_rate_limit_is_retried(
    log: Log, slack: SlackApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SLACK_BOT_TOKEN", "xoxb-wrong")
    add(log, app_endpoint(slack, dm=False))
    with Notifier(log.url, FAST) as notifier:
        log.open(deadline=None)
        wait_until(lambda: notifier.counts["failed"] >= 1, what="the failure")
    [job] = _jobs(log)
    assert (job.state, job.attempts) == ("failed", 1) and "chat.postMessage: invalid_auth" in job.last_error

    monkeypatch.setenv("TEST_SLACK_BOT_TOKEN", TOKEN)
    slack.rate_limit_first = 2
    with Notifier(log.url, FAST) as notifier:
        log.open()
        wait_until(lambda: notifier.counts["delivered"] >= 1, what="the delivery after the rate limit")
    assert len(slack.in_channel(CHANNEL)) == 1


def test_webhooks_made_before_get_no_ran_or_refused_events(log: Log, slack: SlackApi) -> None:
    """``ran`` and ``refused`` go to a Slack app, and to other endpoints only when they list them."""
    from notifykit import Receiver

    receiver = Receiver()
    try:
        engines = Engines(log.url)
        endpoints = Endpoints(engines, log.store.log_id)
        endpoints.add(endpoint_from_options("webhook", "all", {"url": receiver.url, "secret": receiver.secret}), head=0)
        endpoints.add(
            endpoint_from_options("webhook", "ran", {"url": receiver.url, "secret": receiver.secret}, events=["ran"]),
            head=0,
        )
        engines.dispose()
        with Notifier(log.url, FAST):
            review = log.open(deadline=None)
            log.approve(review)
            run_tool(log, review, {"amount": log.svc.get(review).call.args["amount"], "to": "acct-1"})
            got = receiver.wait_for(3)
            time.sleep(0.5)
        assert sorted(r.json["type"] for r in receiver.ok()) == ["review.decided", "review.opened", "review.ran"]
        [ran] = [r for r in got if r.json["type"] == "review.ran"]
        assert ran.json["summary"].startswith("Ran: transfer from teller")
    finally:
        receiver.close()


def _jobs(log: Log) -> list[Any]:
    from sqlalchemy import select
    from sqlmodel import col

    engines = Engines(log.url)
    try:
        with engines.read.connect() as conn:
            return list(conn.execute(select(NotifyJob).where(col(NotifyJob.log) == log.store.log_id)).all())
    finally:
        engines.dispose()


# -- requests from Slack -------------------------------------------------------------------------

SIGNING = "8f742231b10e8888abcd99yyyzzz85a5"


def test_the_signature_check_follows_slacks_own_example() -> None:
    """Slack API, "Verifying requests from Slack": its worked example's secret, body, timestamp and signature."""
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&"
        b"channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&"
        b"response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&"
        b"trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )
    headers = {
        "X-Slack-Request-Timestamp": "1531420618",
        "X-Slack-Signature": "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
    }
    assert check_request(SIGNING, headers, body, now=1531420618 + 10) == ""
    assert sign_request(SIGNING, body, 1531420618) == headers["X-Slack-Signature"]
    assert "does not match" in check_request(SIGNING, headers, body + b"x", now=1531420618)
    assert "360 s off" in check_request(SIGNING, headers, body, now=1531420618 + 360)
    assert "expected v0=" in check_request(SIGNING, {**headers, "X-Slack-Signature": "v1=00"}, body, now=1531420618)
    assert "Timestamp" in check_request(SIGNING, {"X-Slack-Signature": headers["X-Slack-Signature"]}, body)


def test_the_desk_takes_only_signed_fresh_requests_from_slack_and_acts_on_none(
    env: Any, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps({"type": "block_actions", "actions": [{"action_id": "signoff_review"}]}).encode()
    form = b"payload=" + body
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    assert client.post("/slack/interactions", content=form, headers=headers).status_code == 401  # none configured
    monkeypatch.setenv("TEST_SLACK_SIGNING", SIGNING)
    monkeypatch.setenv("TEST_SLACK_BOT_TOKEN", TOKEN)
    engines = Engines(env.url)
    endpoint = endpoint_from_options(
        "slack-app",
        "slack",
        {"bot_token_env": "TEST_SLACK_BOT_TOKEN", "signing_secret_env": "TEST_SLACK_SIGNING", "channel": CHANNEL},
    )
    Endpoints(engines, env.desk.store.log_id).add(endpoint, head=env.desk.store.size())
    engines.dispose()
    size = env.desk.store.size()
    now = int(time.time())

    def send(stamp: int, signature: str) -> Any:
        signed = {**headers, "X-Slack-Request-Timestamp": str(stamp), "X-Slack-Signature": signature}
        return client.post("/slack/interactions", content=form, headers=signed)

    assert send(now, sign_request(SIGNING, form, now)).status_code == 200
    forged = send(now, sign_request("another-secret", form, now))
    assert forged.status_code == 401 and "does not match" in forged.json()["error"]
    stale = send(now - 360, sign_request(SIGNING, form, now - 360))  # 6 minutes old: a replay
    assert stale.status_code == 401 and "off (a replay?)" in stale.json()["error"]
    assert env.desk.store.size() == size  # nothing in Slack decides


def test_desk_notify_add_slack_app_and_test_it(
    tmp_path: Path, slack: SlackApi, capsys: pytest.CaptureFixture[str]
) -> None:
    """``desk notify add slack-app``: stored, listed with its channel and DMs, refused without a place to
    post, and ``desk notify test`` posts to the channel."""
    from signoff.desk.cli import main

    lg = make_log(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path)
    try:
        base = ["notify", "add", "slack-app", "--store", lg.url]
        refused = main([*base, "nowhere", "--bot-token-env", "TEST_SLACK_BOT_TOKEN", "--no-dm"])
        assert refused == 2
        assert "expected a --channel, direct messages, or both" in capsys.readouterr().err
        added = [*base, "reviews", "--bot-token-env", "TEST_SLACK_BOT_TOKEN", "--channel", CHANNEL]
        assert main([*added, "--signing-secret-env", "TEST_SLACK_SIGNING", "--api-url", slack.url]) == 0
        capsys.readouterr()
        assert main(["notify", "list", "--store", lg.url]) == 0
        [line] = [row for row in capsys.readouterr().out.splitlines() if row.startswith("reviews")]
        assert line.split("\t")[1:4] == ["slack-app", "enabled", f"{CHANNEL}, DMs"]
        assert main(["notify", "test", "reviews", "--store", lg.url]) == 0
        [posted] = slack.in_channel(CHANNEL)
        assert posted.text.startswith("Test notification for endpoint reviews")
    finally:
        lg.close()
