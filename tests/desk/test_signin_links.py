"""One-time sign-in links (issue 22 §1, §2), on SQLite and PostgreSQL: a Slack app endpoint with
``--sign-in-links`` puts a link that signs the person in into each direct message (never into the channel);
at the desk it asks once, signs in, lands on the review, and never works again, nor for a disabled reviewer,
nor after it expired."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from deskkit import ALICE, BrowserClient, Env, csrf_of
from notifykit import wait_until
from slackapi import TOKEN, SlackApi
from sqlalchemy import select

from signoff.desk import signin_links
from signoff.desk.notify import Endpoints, Engines, Notifier, NotifierOptions
from signoff.desk.notify._endpoints import endpoint_from_options
from signoff.desk.notify._errors import ConfigError

DESK = "http://testserver"
CHANNEL = "C0REVIEWS"


@pytest.fixture
def slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlackApi]:
    monkeypatch.setenv("TEST_SLACK_BOT_TOKEN", TOKEN)
    api = SlackApi(users={"alice@example.org": "U0ALICE", "carol@example.org": "U0CAROL"})
    yield api
    api.close()


def _links_from_slack(env: Env, slack: SlackApi) -> tuple[Any, Any, Any]:
    engines = Engines(env.url)
    settings = {
        "bot_token_env": "TEST_SLACK_BOT_TOKEN",
        "channel": CHANNEL,
        "api_url": slack.url,
        "sign_in_links": True,
    }
    Endpoints(engines, env.desk.store.log_id).add(
        endpoint_from_options("slack-app", "team", settings), head=env.desk.store.size()
    )
    engines.dispose()
    with Notifier(env.url, NotifierOptions(desk_url=DESK, retry_base=0.05, retry_cap=0.3)):
        review = env.open()[0]  # a transfer: alice and carol may decide it
        wait_until(lambda: len(slack.posted()) == 3, what="the channel message and two DMs")
    [in_channel] = slack.in_channel(CHANNEL)
    [alice_dm] = slack.in_channel("D0ALICE")
    return review, in_channel, alice_dm


def test_a_dm_carries_a_link_that_signs_in_once_and_lands_on_the_review(env: Env, slack: SlackApi) -> None:
    review, in_channel, alice_dm = _links_from_slack(env, slack)
    [plain] = [b["url"] for b in in_channel.buttons]
    assert plain == f"{DESK}/reviews/{review.id}"  # a channel is read by others: no link that signs in
    [link] = [b["url"] for b in alice_dm.buttons]
    assert re.fullmatch(rf"{DESK}/signin/link/[A-Za-z0-9_-]{{43}}", link), link
    path = link.removeprefix(DESK)
    with BrowserClient(env.app) as browser:
        asked = browser.get(path)  # a link scanner fetching it signs nobody in
        assert asked.status_code == 200 and "alice@example.org" in asked.text and "transfer" in asked.text
        assert browser.get("/queue").url.path == "/signin"
        r = browser.post(path, data={"csrf": csrf_of(asked.text)})
        assert r.status_code == 200 and r.url.path == f"/reviews/{review.id}", r.text[:300]
        assert "alice@example.org" in r.text and 'id="need-passkey"' in r.text  # hers to decide, with a passkey
    with BrowserClient(env.app) as other:  # the same link again: used up
        again = other.get(path)
        assert again.status_code == 410 and "no longer works" in again.text
        page = other.get("/signin")
        reused = other.post(path, data={"csrf": csrf_of(page.text)})
        assert reused.status_code == 410 and other.get("/queue").url.path == "/signin"


def test_an_expired_link_or_a_disabled_reviewer_signs_nobody_in(env: Env, slack: SlackApi) -> None:
    review, _channel, alice_dm = _links_from_slack(env, slack)
    engine = env.desk.accounts.engine
    with engine.begin() as conn:
        carol_token = signin_links.mint(conn, env.desk.store.log_id, "human:carol@example.org", review.id, ttl=0.2)
    time.sleep(0.3)
    with BrowserClient(env.app) as browser:
        assert browser.get(f"/signin/link/{carol_token}").status_code == 410  # expired
        path = alice_dm.buttons[0]["url"].removeprefix(DESK)
        asked = browser.get(path)
        env.svc.disable_reviewer(ALICE, reason="left", admin=env.admin)
        r = browser.post(path, data={"csrf": csrf_of(asked.text)})
        assert r.status_code == 403 and browser.get("/queue").url.path == "/signin"
    with engine.connect() as conn:  # what the desk stores is no token: a database reader signs nobody in
        stored = [row[0] for row in conn.execute(select(signin_links.SignInLink.token_hash))]
    with BrowserClient(env.app) as reader:
        assert stored and all(reader.get(f"/signin/link/{h}").status_code == 410 for h in stored)


def test_sign_in_links_only_where_a_message_goes_to_one_person() -> None:
    with pytest.raises(ConfigError, match="sign_in_links: expected a Slack app or e-mail endpoint"):
        endpoint_from_options("webhook", "hook", {"url": "https://x.test/h", "secret": "s", "sign_in_links": True})
