"""``desk notify``: add, list, remove, test and deliveries, through desk/cli.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from notifykit import Log, Receiver, make_log, wait_until

from signoff.desk.cli import main
from signoff.desk.notify import Notifier, NotifierOptions


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    lg = make_log(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path)
    yield lg
    lg.close()


def test_add_webhook_prints_a_new_secret_once_and_list_never_shows_it(
    log: Log, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "https://hooks.example.org/signoff"
    assert (
        main(
            [
                "notify",
                "add",
                "webhook",
                "ops",
                "--url",
                url,
                "--tool",
                "transfer*",
                "--role",
                "finance",
                "--event",
                "opened",
                "--event",
                "deadline_near",
                "--deadline-lead",
                "900",
                "--store",
                log.url,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    secret = re.search(r"webhook secret .*: (\S+)$", out, re.M).group(1)  # type: ignore[union-attr]
    assert len(secret) >= 40
    assert "ops\twebhook\tenabled\thttps://hooks.example.org/signoff\t" in out
    assert "tools=transfer* roles=finance events=opened,deadline_near\tlead=900s" in out

    assert main(["notify", "list", "--store", log.url]) == 0
    listed = capsys.readouterr().out
    assert "ops\twebhook" in listed and secret not in listed
    assert main(["notify", "list", "--json", "--store", log.url]) == 0
    [shown] = json.loads(capsys.readouterr().out)
    assert shown["settings"]["secret"] == "(set)" and shown["events"] == ["opened", "deadline_near"]


def test_add_refuses_a_duplicate_name_and_bad_settings_with_exit_code_2(
    log: Log, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["notify", "add", "webhook", "ops", "--secret", "s", "--store", log.url]
    assert main([*base, "--url", "https://a.example.org/"]) == 0
    capsys.readouterr()
    assert main([*base, "--url", "https://b.example.org/"]) == 2
    assert "found 'ops' already (use --replace)" in capsys.readouterr().err
    assert main([*base, "--url", "https://b.example.org/", "--replace"]) == 0
    assert "https://b.example.org/" in capsys.readouterr().out
    assert main(["notify", "add", "webhook", "x", "--url", "file:///etc/passwd", "--store", log.url]) == 2
    assert "expected an http:// or https:// URL" in capsys.readouterr().err
    assert main(["notify", "remove", "nope", "--store", log.url]) == 2
    assert "expected one named 'nope'" in capsys.readouterr().err


def test_slack_and_email_endpoints_and_remove(log: Log, capsys: pytest.CaptureFixture[str]) -> None:
    slack = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"
    assert main(["notify", "add", "slack", "chat", "--url", slack, "--event", "decided", "--store", log.url]) == 0
    assert (
        main(
            [
                "notify",
                "add",
                "email",
                "mail",
                "--smtp-host",
                "smtp.example.org",
                "--smtp-user",
                "u",
                "--smtp-password-env",
                "SMTP_PW",
                "--from",
                "signoff@example.org",
                "--to",
                "a@example.org",
                "--to",
                "b@example.org",
                "--redact-args",
                "--store",
                log.url,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["notify", "list", "--store", log.url]) == 0
    listed = capsys.readouterr().out
    assert "XXXXSECRET" not in listed and "chat\tslack\tenabled\thttps://hooks.slack.com/…\tevents=decided" in listed
    assert "mail\temail\tenabled\tsmtp.example.org:587 starttls -> a@example.org, b@example.org" in listed
    assert "redact-args" in listed
    assert main(["notify", "remove", "chat", "--store", log.url]) == 0
    assert "removed chat" in capsys.readouterr().out
    assert main(["notify", "list", "--store", log.url]) == 0
    assert "chat" not in capsys.readouterr().out


def test_test_sends_a_signed_notification_and_deliveries_shows_attempts(
    log: Log, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver = Receiver()
    assert (
        main(
            [
                "notify",
                "add",
                "webhook",
                "hook",
                "--url",
                receiver.url,
                "--secret",
                receiver.secret or "",
                "--store",
                log.url,
            ]
        )
        == 0
    )
    assert main(["notify", "test", "hook", "--desk-url", "https://desk.test", "--store", log.url]) == 0
    assert "delivered to hook (200)" in capsys.readouterr().out
    [request] = receiver.ok()
    assert request.json["type"] == "notify.test" and request.json["review"]["url"] == "https://desk.test/"

    with Notifier(log.url, NotifierOptions(desk_url="https://desk.test")) as notifier:
        log.open(deadline=None)
        receiver.wait_for(2)
        wait_until(lambda: notifier.counts["delivered"] >= 1, what="the delivery recorded")
    assert main(["notify", "deliveries", "--store", log.url]) == 0
    line = capsys.readouterr().out.strip()
    assert "\thook\t" in line and "-review.opened\t1\tdelivered\t200\t" in line

    receiver.secret = "rotated-on-the-receiver"
    assert main(["notify", "test", "hook", "--store", log.url]) == 1
    assert "not delivered to hook: HTTP 401" in capsys.readouterr().err
    receiver.close()
