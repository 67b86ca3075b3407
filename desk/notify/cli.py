"""``desk notify``: add, list and remove endpoints; show deliveries; send a test; run the notifier.

Also ``desk serve --notify`` (the flags come from :func:`add_serve_flags`). The argument parsing is
light; the notifier's modules are imported only when a verb runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import sys
from typing import Any

from signoff.audit.cli_common import STORE_HELP, add_log_option, existing_store_url, group, verb
from signoff.audit.errors import UnusableInput
from signoff.desk.notify._events import EVENT_NAMES

DESK_URL_ENV = "SIGNOFF_DESK_URL"


def _default_desk_url() -> str:
    return os.environ.get(DESK_URL_ENV) or os.environ.get("SIGNOFF_ORIGIN") or "http://127.0.0.1:8080"


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="a name for this endpoint (letters, digits, '.', '_', '-')")
    p.add_argument("--tool", action="append", default=[], metavar="GLOB", help="only these tools (repeatable)")
    p.add_argument("--role", action="append", default=[], help="only reviews for this role (repeatable)")
    p.add_argument(
        "--event",
        action="append",
        default=[],
        choices=EVENT_NAMES,
        help="only these events (repeatable; default: all)",
    )
    p.add_argument(
        "--deadline-lead",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="send deadline_near this long before a pending review's deadline (default 600)",
    )
    p.add_argument(
        "--remind-after",
        metavar="TIME",
        help="remind the approvers a review still needs this long after it opened (or escalated): 30m, 4h, 1d "
        "(a Slack app's DMs and e-mail go to each of them; a webhook or Slack also needs --event reminder)",
    )
    p.add_argument("--remind-before", metavar="TIME", help="and again this long before its deadline, e.g. 15m")
    p.add_argument(
        "--sign-in-links",
        action="store_true",
        help="a Slack app's DMs and reminder e-mails carry a one-time link that signs the person in and opens "
        "the review (never in a channel)",
    )
    p.add_argument("--link-ttl", metavar="TIME", help="how long a sign-in link works (default 12h)")
    p.add_argument("--redact-args", action="store_true", help="send argument names only, never their values")
    p.add_argument("--disabled", action="store_true", help="store it, but send nothing yet")
    p.add_argument("--replace", action="store_true", help="replace the endpoint of this name")


def add_parser(sub: Any, default_store: str, summary: str, exit_codes: str) -> None:
    """Add ``notify`` and its verbs to the ``desk`` command's subparsers."""
    ns = group(
        sub,
        "notify",
        summary,
        [
            "desk notify add slack ops --url-env SLACK_URL --tool 'transfer_*' --event opened",
            "desk notify serve --desk-url https://desk.example.org",
        ],
        "ncmd",
        exit_codes,
    )

    def add_verb(parent: Any, name: str, text: str, example: str) -> argparse.ArgumentParser:
        parser = verb(parent, name, text, example, run, exit_codes)
        parser.add_argument("--store", default=default_store, help=STORE_HELP)
        add_log_option(parser)  # (one notifier per log)
        return parser

    kinds = group(
        ns,
        "add",
        "add an endpoint (stored in the store's database)",
        ["desk notify add webhook ops --url https://hooks.example.org/signoff --tool 'transfer_*'"],
        "kind",
        exit_codes,
    )
    hook = add_verb(
        kinds,
        "webhook",
        "an HTTP endpoint that gets signed JSON",
        "desk notify add webhook ops --url https://hooks.example.org/signoff --role finance",
    )
    _filters(hook)
    hook.add_argument("--url", required=True)
    secret = hook.add_mutually_exclusive_group()
    secret.add_argument("--secret", help="the HMAC secret (default: a new one, printed once)")
    secret.add_argument("--secret-env", metavar="VAR", help="read the secret from this environment variable")
    slack = add_verb(
        kinds,
        "slack",
        "a Slack incoming webhook",
        "desk notify add slack ops --url-env SLACK_WEBHOOK_URL --event opened --event escalated",
    )
    _filters(slack)
    url = slack.add_mutually_exclusive_group(required=True)
    url.add_argument("--url", help="the incoming webhook's URL (stored; it is a secret)")
    url.add_argument("--url-env", metavar="VAR", help="read the URL from this environment variable")
    app = add_verb(
        kinds,
        "slack-app",
        "a Slack app: a message per review (channel and direct messages), updated in place as it goes",
        "desk notify add slack-app reviews --bot-token-env SLACK_BOT_TOKEN "
        "--signing-secret-env SLACK_SIGNING_SECRET --channel C0123456789",
    )
    _filters(app)
    app.add_argument("--bot-token-env", metavar="VAR", required=True, help="the variable with the xoxb- bot token")
    app.add_argument(
        "--signing-secret-env",
        metavar="VAR",
        help="the variable with the app's signing secret: the desk checks requests from Slack with it",
    )
    app.add_argument("--channel", help="post every review here too (a channel id; the app must be in it)")
    app.add_argument(
        "--no-dm", dest="dm", action="store_false", help="no direct messages to the reviewers who may decide"
    )
    app.add_argument("--api-url", help="the Web API's base URL (default https://slack.com/api)")
    mail = add_verb(
        kinds,
        "email",
        "e-mail over SMTP",
        "desk notify add email finance --smtp-host smtp.example.org --smtp-user signoff "
        "--smtp-password-env SMTP_PASSWORD --from signoff@example.org --to finance@example.org",
    )
    _filters(mail)
    mail.add_argument("--smtp-host", required=True)
    mail.add_argument("--smtp-port", type=int, help="default: 25, 587 (starttls) or 465 (tls)")
    mail.add_argument("--tls", choices=["none", "starttls", "tls"], default="starttls")
    mail.add_argument("--smtp-user")
    password = mail.add_mutually_exclusive_group()
    password.add_argument("--smtp-password-env", metavar="VAR", help="read the password from this variable")
    password.add_argument("--smtp-password", help="the password (stored in the database; prefer --smtp-password-env)")
    mail.add_argument("--ca-file", help="trust this CA bundle for the SMTP server's certificate")
    mail.add_argument("--from", dest="sender", required=True, metavar="ADDRESS")
    mail.add_argument("--to", action="append", required=True, metavar="ADDRESS", help="a recipient (repeatable)")

    ls = add_verb(ns, "list", "list endpoints (secrets left out)", "desk notify list --json")
    ls.add_argument("--json", action="store_true")

    rm = add_verb(ns, "remove", "remove an endpoint and its undelivered notifications", "desk notify remove ops")
    rm.add_argument("name")

    dl = add_verb(ns, "deliveries", "recent delivery attempts", "desk notify deliveries --endpoint ops --limit 5")
    dl.add_argument("--endpoint")
    dl.add_argument("--limit", type=int, default=20)
    dl.add_argument("--json", action="store_true")

    test = add_verb(
        ns, "test", "send a test notification to one endpoint now (exit 1: not delivered)", "desk notify test ops"
    )
    test.add_argument("name")
    test.add_argument("--desk-url", default=_default_desk_url())

    serve = add_verb(
        ns,
        "serve",
        "run the notifier: follow the log and deliver",
        "desk notify serve --store sqlite:///signoff.db --desk-url https://desk.example.org",
    )
    serve.add_argument(
        "--desk-url",
        default=_default_desk_url(),
        help=f"the desk's address in links (env {DESK_URL_ENV}; default http://127.0.0.1:8080)",
    )
    _tuning(serve)
    serve.add_argument("--quiet", action="store_true", help="report only failures")


def _tuning(p: argparse.ArgumentParser) -> None:
    p.add_argument("--retry-base", type=float, default=2.0, metavar="SECONDS", help="first retry delay (doubles)")
    p.add_argument("--retry-cap", type=float, default=600.0, metavar="SECONDS", help="longest retry delay")
    p.add_argument("--max-attempts", type=int, default=10)
    p.add_argument(
        "--start-at",
        type=int,
        default=None,
        metavar="SEQ",
        help="on the very first start only: follow from this seq (default: the log's head)",
    )


def add_serve_flags(p: argparse.ArgumentParser) -> None:
    """``desk serve --notify``: run the notifier inside the desk's process."""
    p.add_argument("--notify", action="store_true", help="also run the notifier (see `desk notify`)")
    p.add_argument(
        "--desk-url",
        default=os.environ.get(DESK_URL_ENV),
        help=f"the desk's address in notification links (env {DESK_URL_ENV}; default: --origin, or http://HOST:PORT)",
    )


def _options(a: argparse.Namespace, desk_url: str) -> Any:
    from signoff.desk.notify._runner import NotifierOptions

    return NotifierOptions(
        desk_url=desk_url.rstrip("/"),
        retry_base=getattr(a, "retry_base", 2.0),
        retry_cap=getattr(a, "retry_cap", 600.0),
        max_attempts=getattr(a, "max_attempts", 10),
        start_at=getattr(a, "start_at", None),
    )


def _quiet_http_client() -> None:
    """httpx logs every request's full URL at INFO, and a Slack webhook's URL is its secret."""
    logging.getLogger("httpx").setLevel(logging.WARNING)


def start_in_desk(a: argparse.Namespace, desk: Any) -> Any:
    """Start a notifier that shares the desk's store (wake-ups in memory); the caller stops it."""
    from signoff.desk.notify._runner import Notifier

    _quiet_http_client()
    desk_url = a.desk_url or a.origin or f"http://{a.host}:{a.port}"
    notifier = Notifier(a.store, _options(a, desk_url), store=desk.store, svc=desk.svc).start()
    print(f"desk: notifier on; links point at {desk_url}/reviews/…", file=sys.stderr, flush=True)
    return notifier


def _settings(a: argparse.Namespace) -> dict[str, Any]:
    reminders = {"remind_after": a.remind_after, "remind_before": a.remind_before}
    links = {"sign_in_links": a.sign_in_links, "link_ttl": a.link_ttl}
    return {**_channel_settings(a), **reminders, **links}


def _channel_settings(a: argparse.Namespace) -> dict[str, Any]:
    if a.kind == "webhook":
        generated = None if (a.secret or a.secret_env) else secrets.token_urlsafe(32)
        return {"url": a.url, "secret": a.secret or generated, "secret_env": a.secret_env}
    if a.kind == "slack":
        return {"url": a.url, "url_env": a.url_env}
    if a.kind == "slack-app":
        return {
            "bot_token_env": a.bot_token_env,
            "signing_secret_env": a.signing_secret_env,
            "channel": a.channel,
            "dm": a.dm,
            "api_url": a.api_url,
        }
    return {
        "host": a.smtp_host,
        "port": a.smtp_port,
        "tls": a.tls,
        "user": a.smtp_user,
        "password": a.smtp_password,
        "password_env": a.smtp_password_env,
        "ca_file": a.ca_file,
        "from": a.sender,
        "to": a.to,
    }


def _show(endpoint: Any) -> str:
    shown = endpoint.public()
    s = shown["settings"]
    where = s.get("url") or (f"{s.get('url_env')} (env)" if s.get("url_env") else "")
    if endpoint.kind == "email":
        where = f"{s['host']}:{s['port']} {s['tls']} -> {', '.join(s['to'])}"
    if endpoint.kind == "slack-app":
        where = ", ".join([*([s["channel"]] if s.get("channel") else []), *(["DMs"] if s.get("dm") else [])])
    filters = [f"{key}={','.join(shown[key])}" for key in ("tools", "roles", "events") if shown[key]]
    state = "enabled" if endpoint.enabled else "disabled"
    extra = " redact-args" if endpoint.redact_args else ""
    for key, label in (("remind_after", "remind-after"), ("remind_before", "remind-before")):
        if s.get(key):
            extra += f" {label}={float(s[key]):g}s"
    if s.get("sign_in_links"):
        extra += " sign-in-links"
    return (
        f"{endpoint.name}\t{endpoint.kind}\t{state}\t{where}\t{' '.join(filters) or 'all'}"
        f"\tlead={endpoint.deadline_lead:g}s{extra}"
    )


def run(a: argparse.Namespace) -> int:
    """Run one ``desk notify`` verb; its errors are unusable input (exit code 2, at the desk's edge)."""
    from signoff.desk.notify._errors import NotifyError

    a.store = existing_store_url(a.store)
    try:
        return _run(a)
    except NotifyError as exc:
        raise UnusableInput(str(exc)) from None


def _run(a: argparse.Namespace) -> int:
    from signoff.audit import open_store
    from signoff.desk.notify._endpoints import Endpoints, endpoint_from_options
    from signoff.desk.notify._tables import Engines

    if a.ncmd == "serve":
        return _serve(a)
    store = open_store(a.store, create=False, log=a.log_id)
    engines = Engines(a.store)
    try:
        endpoints = Endpoints(engines, store.log_id)
        if a.ncmd == "add":
            settings = _settings(a)
            endpoint = endpoint_from_options(
                a.kind,
                a.name,
                settings,
                tools=a.tool,
                roles=a.role,
                events=a.event,
                deadline_lead=a.deadline_lead,
                redact_args=a.redact_args,
                enabled=not a.disabled,
            )
            saved = endpoints.add(endpoint, replace=a.replace, head=store.size())
            print(f"added {_show(saved)}")
            if a.kind == "webhook" and not (a.secret or a.secret_env):
                print(
                    f"webhook secret (shown once; the receiver checks Signoff-Signature with it): {settings['secret']}"
                )
        elif a.ncmd == "list":
            found = endpoints.all()
            if a.json:
                print(json.dumps([e.public() for e in found], indent=2))
            else:
                for endpoint in found:
                    print(_show(endpoint))
        elif a.ncmd == "remove":
            dropped = endpoints.remove(a.name)
            print(f"removed {a.name} ({dropped} undelivered notifications dropped)")
        elif a.ncmd == "deliveries":
            return _deliveries(a, engines, store.log_id)
        elif a.ncmd == "test":
            return _test(a, endpoints.get(a.name), store.log_id)
    finally:
        engines.dispose()
        store.close()
    return 0


def _deliveries(a: argparse.Namespace, engines: Any, log_id: str) -> int:
    if a.limit < 0:
        raise UnusableInput(f"--limit: expected 0 or more delivery attempts, found {a.limit}")
    from sqlalchemy import select
    from sqlmodel import col

    from signoff.desk.notify._tables import NotifyAttempt

    query = select(NotifyAttempt).where(col(NotifyAttempt.log) == log_id)
    if a.endpoint:
        query = query.where(col(NotifyAttempt.endpoint) == a.endpoint)
    with engines.read.connect() as conn:
        rows = conn.execute(query.order_by(col(NotifyAttempt.id).desc()).limit(a.limit)).all()
    fields = ("at", "endpoint", "event_id", "attempt", "outcome", "status", "duration_ms", "error")
    if a.json:
        print(json.dumps([{f: getattr(row, f) for f in fields} for row in rows], indent=2))
    else:
        for row in rows:
            print("\t".join("" if getattr(row, f) is None else str(getattr(row, f)) for f in fields))
    return 0


def _test(a: argparse.Namespace, endpoint: Any, log_id: str) -> int:
    import time

    import httpx

    from signoff.desk.notify._send import send

    payload = {
        "id": f"{log_id}-test-{secrets.token_hex(4)}",
        "type": "notify.test",
        "log": log_id,
        "seq": None,
        "at": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
        "actor": "service:signoff-notify",
        "summary": f"Test notification for endpoint {endpoint.name}: Signoff can reach you.",
        "review": {"id": "rv_test", "url": f"{a.desk_url.rstrip('/')}/", "tool": "", "agent": ""},
    }
    with httpx.Client(timeout=10.0, follow_redirects=False) as client:
        outcome = send(endpoint, payload, client, timeout=10.0, attempt=1)
    if outcome.delivered:
        print(f"delivered to {endpoint.name} ({outcome.status})")
        return 0
    print(f"error: not delivered to {endpoint.name}: {outcome.error}", file=sys.stderr)
    return 1


def _serve(a: argparse.Namespace) -> int:
    from signoff.desk.notify._runner import Notifier

    logging.basicConfig(
        level=logging.WARNING if a.quiet else logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr
    )
    _quiet_http_client()
    notifier = Notifier(a.store, _options(a, a.desk_url), log=a.log_id)
    print(
        f"desk notify: following log {notifier.log_id} from {a.store.split('://', 1)[0]}; "
        f"links point at {a.desk_url.rstrip('/')}/reviews/…",
        file=sys.stderr,
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: notifier.request_stop())
    try:
        notifier.run()
    except KeyboardInterrupt:
        return 130
    return 0
