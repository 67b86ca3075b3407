"""The ``desk`` command: serve, manage reviewers, run the offline demo, send notifications.

Errors become one line and an exit code at the edge ``audit`` and ``signoff`` share
(:func:`signoff.audit.cli_common.run_at_edge`), never a traceback: 0 done; 1 a check failed
(``desk notify test``: the endpoint did not take the test notification); 2 unusable input or a
refused request (a missing store, a key file it cannot use, someone not enrolled, a port in use,
an enrolment the log refuses).

Enrolment is the administrator's act, signed with the admin key that ``audit init`` made
(DESIGN.md "Who holds which key"): ``desk reviewer add|reset|disable`` need ``--admin-key`` and
run where that key lives; ``desk serve`` never needs it.

The parser is light: each verb imports the desk (FastAPI, SQLAlchemy) when it runs, and
``desk notify``'s parser is wired in only when the command line names it, so ``desk --help``
starts fast (tests/test_startup.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from signoff.audit.cli_common import (
    STORE_HELP,
    add_log_option,
    command,
    existing_store_url,
    free_port,
    group,
    run_at_edge,
    verb,
)
from signoff.audit.errors import NotAllowed, UnusableInput

DEFAULT_STORE = os.environ.get("SIGNOFF_STORE", "sqlite:///signoff.db")
EXIT_CODES = """exit codes: 0 done; 1 a check failed (desk notify test: the endpoint did not take it);
2 unusable input or a refused request (a missing store or key file, someone not enrolled, a port in use)"""
NOTIFY_HELP = "tell people when a review needs them: webhooks, Slack, e-mail"
EXAMPLES = [
    "desk serve --store sqlite:///signoff.db --key signoff-log-key.pem",
    "desk reviewer add dana@example.org --role finance --tools 'transfer_*' --admin-key signoff-log-key.admin.pem",
    "desk demo",
]


def _reviewer_id(email: str) -> str:
    email = email.strip().lower()
    return email if email.startswith("human:") else "human:" + email


def _admin_key_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--admin-key",
        default=os.environ.get("SIGNOFF_ADMIN_KEY"),
        help="the administrator's key file (made by `audit init`; env SIGNOFF_ADMIN_KEY); it signs the "
        "enrolment on the log, so run this where the admin key lives, not on the desk host",
    )


def _store_arg(p: argparse.ArgumentParser, *, logs: bool = False) -> None:
    p.add_argument("--store", default=DEFAULT_STORE, help=STORE_HELP)
    if logs:  # desk serve: any number
        p.add_argument(
            "--log",
            dest="log_ids",
            metavar="ID",
            action="append",
            default=None,
            help="serve this log of the store (repeat for several; `audit logs` lists them); default: every "
            "log it holds, in one queue",
        )
    else:
        add_log_option(p)


def _parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``desk`` parser; given ``argv``, ``desk notify`` is wired in full only if it can be named."""
    notify = argv is None or "notify" in argv or "serve" in argv
    if notify:
        from signoff.desk.notify import cli as notify_cli
    p, sub = command("desk", "Signoff desk: people decide paused agent tool calls.", EXAMPLES, EXIT_CODES)

    s = verb(
        sub,
        "serve",
        "serve the desk over HTTP (on a log made by `audit init`)",
        "desk serve --store sqlite:///signoff.db --key signoff-log-key.pem --origin https://desk.example.org",
        cmd_serve,
        EXIT_CODES,
    )
    _store_arg(s, logs=True)
    s.add_argument(
        "--key",
        default=os.environ.get("SIGNOFF_KEY"),
        help="the log's own key file (optional; lets the desk sign checkpoints; env SIGNOFF_KEY)",
    )
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument(
        "--origin",
        default=os.environ.get("SIGNOFF_ORIGIN"),
        help="the desk's origin as browsers see it, e.g. https://desk.example.org (behind a proxy; "
        "default: each request's own; env SIGNOFF_ORIGIN)",
    )
    s.add_argument(
        "--rp-id",
        default=os.environ.get("SIGNOFF_RP_ID"),
        help="the WebAuthn relying party ID passkeys belong to, a domain such as example.org "
        "(default: the origin's host name; env SIGNOFF_RP_ID)",
    )
    s.add_argument(
        "--allow-origin",
        action="append",
        default=[o for o in os.environ.get("SIGNOFF_ALLOWED_ORIGINS", "").split(",") if o.strip()],
        metavar="ORIGIN",
        help="another origin whose state-changing requests the desk takes, e.g. https://desk.internal "
        "(repeatable; env SIGNOFF_ALLOWED_ORIGINS, comma-separated); every POST must come from the desk's "
        "own origin (--origin, else the request's) or one of these",
    )
    s.add_argument(
        "--max-body",
        type=int,
        default=int(os.environ.get("SIGNOFF_MAX_BODY", str(1024 * 1024))),
        metavar="BYTES",
        help="largest request body taken, in bytes; larger ones get 413 (default 1 MB; env SIGNOFF_MAX_BODY)",
    )
    s.add_argument(
        "--stalled-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds after a run resumed before an approved call whose tool has not run shows as "
        "'approved, not yet run' (default 60)",
    )
    s.add_argument("--secure-cookies", action="store_true", help="always mark cookies Secure (behind a TLS proxy)")
    s.add_argument("--quiet", action="store_true", help="no per-request log lines")
    s.add_argument(
        "--checkpoint-every",
        type=float,
        metavar="SECONDS",
        help="with --key: make a checkpoint when the log grew and push it to the log's witnesses, this often",
    )
    s.add_argument(
        "--tlog", action="store_true", help="serve the log as c2sp.org/tlog-tiles under /tlog/ (no sign-in: see README)"
    )
    s.add_argument(
        "--witness",
        action="append",
        default=[],
        metavar="VKEY",
        help="a witness the review page's receipt check trusts (repeatable; default: those named on the log)",
    )
    s.add_argument("--witness-quorum", type=int, default=1, metavar="K", help="how many of --witness (default 1)")
    s.add_argument(
        "--retention-every",
        type=float,
        metavar="SECONDS",
        help="on a log with sealed values: erase the values whose policy's retention has passed, this often "
        "(one data.erased entry each, reason 'retention'; a JSON line on stderr says what each pass did)",
    )
    sso = s.add_argument_group("single sign-on (OpenID Connect): people sign in through the company's IdP")
    sso.add_argument("--oidc-issuer", metavar="URL", help="the OpenID Provider's issuer, e.g. https://idp.example.org")
    sso.add_argument("--oidc-client-id", metavar="ID", help="the desk's client id at the provider")
    sso.add_argument(
        "--oidc-client-secret-env",
        metavar="VAR",
        help="the environment variable that holds the desk's client secret (never on the command line)",
    )
    sso.add_argument("--oidc-claim", default="email", help="the ID token claim that names the reviewer (default email)")
    sso.add_argument("--oidc-groups-claim", default="groups", help="the claim that lists the person's groups")
    sso.add_argument("--oidc-scope", default="openid email groups", help="the scopes asked for")
    sso.add_argument(
        "--no-passwords",
        action="store_true",
        help="sign-in through the provider only: the desk's passwords and sign-in links are refused",
    )
    if notify:
        notify_cli.add_serve_flags(s)

    rs = group(
        sub,
        "reviewer",
        "enroll, list, reset and disable reviewers",
        [
            "desk reviewer add dana@example.org --role finance --tools 'transfer_*' --admin-key admin.pem",
            "desk reviewer list",
        ],
        "rcmd",
        EXIT_CODES,
    )
    add = verb(
        rs,
        "add",
        "enroll a reviewer on the log (signed by the admin key) and print their one-time enrolment code, "
        "which is also their initial desk password",
        "desk reviewer add dana@example.org --role finance --tools 'transfer_*' refund --admin-key admin.pem",
        _on_store(cmd_reviewer_add),
        EXIT_CODES,
    )
    add.add_argument("email")
    add.add_argument(
        "--role",
        action="append",
        required=True,
        help="role (repeatable); the role 'observer' reads every review and decides none",
    )
    tools = add.add_mutually_exclusive_group(required=True)
    tools.add_argument("--tools", nargs="+", metavar="GLOB", help="tool name globs this reviewer may decide")
    tools.add_argument("--any-tool", action="store_true", help="this reviewer may decide any tool")
    add.add_argument("--replace", action="store_true", help="change the roles or tools of an enrolled reviewer")
    _store_arg(add)
    _admin_key_arg(add)
    reset = verb(
        rs,
        "reset",
        "give a reviewer a new enrolment code (same roles and tools) to register a new passkey; "
        "it is also their new one-time desk password",
        "desk reviewer reset dana@example.org --admin-key admin.pem",
        _on_store(cmd_reviewer_reset),
        EXIT_CODES,
    )
    reset.add_argument("email")
    _store_arg(reset)
    _admin_key_arg(reset)
    ls = verb(
        rs,
        "list",
        "list enrolled reviewers",
        "desk reviewer list --store sqlite:///signoff.db",
        _on_store(cmd_reviewer_list),
        EXIT_CODES,
    )
    _store_arg(ls)
    dis = verb(
        rs,
        "disable",
        "disable a reviewer (on the log) and end their sessions and tokens",
        "desk reviewer disable dana@example.org --reason 'left the team' --admin-key admin.pem",
        _on_store(cmd_reviewer_disable),
        EXIT_CODES,
    )
    dis.add_argument("email")
    dis.add_argument("--reason", default="disabled by an administrator")
    _store_arg(dis)
    _admin_key_arg(dis)
    tok = verb(
        rs,
        "token",
        "print a new API token for a reviewer",
        "desk reviewer token dana@example.org --label ci",
        _on_store(cmd_reviewer_token),
        EXIT_CODES,
    )
    tok.add_argument("email")
    tok.add_argument("--label", default="cli")
    _store_arg(tok)
    pw = verb(
        rs,
        "password",
        "reset a reviewer's desk password only (prints a new one-time password; no new code)",
        "desk reviewer password dana@example.org",
        _on_store(cmd_reviewer_password),
        EXIT_CODES,
    )
    pw.add_argument("email")
    _store_arg(pw)

    d = verb(
        sub,
        "demo",
        "local SQLite desk with a scripted agent that keeps proposing calls (its log accepts unsigned decisions)",
        "desk demo --port 8081 --dir demo   # keeps its store in ./demo (default: a temp dir, removed on Ctrl-C)",
        cmd_demo,
        EXIT_CODES,
    )
    d.add_argument(
        "--dir", default=None, help="directory for the demo store, kept (default: a new temp dir, removed on a stop)"
    )
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument(
        "--port",
        type=int,
        default=None,
        help="port (default 8080, or the next free one after it; a --port in use is refused)",
    )
    d.add_argument("--interval", type=float, default=20.0, help="seconds between the agent's new proposals")
    d.add_argument("--max-open", type=int, default=8, help="pause proposing while this many runs wait")
    d.add_argument(
        "--sessions",
        choices=["sqlite", "memory"],
        default="sqlite",
        help="ADK session service: sqlite (paused runs survive a restart) or memory (faster)",
    )
    values = d.add_mutually_exclusive_group()
    values.add_argument(
        "--sealed-values",
        dest="sealed_values",
        action="store_const",
        const=True,
        help="a new demo log keeps the calls' values beside it, under salted commitments, so that `audit erase` "
        "can erase them (the default of `audit init`); an existing demo store stays as it was made",
    )
    values.add_argument(
        "--values-in-entries",
        dest="sealed_values",
        action="store_const",
        const=False,
        help="a new demo log writes the calls' values into its entries (as `audit init --values-in-entries`)",
    )
    d.add_argument("--quiet", action="store_true")

    if notify:
        notify_cli.add_parser(sub, DEFAULT_STORE, NOTIFY_HELP, EXIT_CODES)
    else:  # a placeholder for `desk --help`; any command line that names `notify` gets the real one
        sub.add_parser("notify", help=NOTIFY_HELP)
    return p


def _accounts(store_url: str, log: str | None = None):  # type: ignore[no-untyped-def]
    from signoff.audit import ReviewService, open_store
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    url = existing_store_url(store_url)
    store = open_store(url, create=False, log=log)
    return store, ReviewService(store), Accounts(make_engine(url), store.log_id)


def _admin(a: argparse.Namespace) -> Any:
    from signoff.audit.keys import read_private_key

    if not a.admin_key:
        raise UnusableInput(
            "--admin-key: expected the administrator's key file (or SIGNOFF_ADMIN_KEY), found none; "
            "only the admin key enrolls, resets or disables reviewers"
        )
    return read_private_key(a.admin_key)


def _enrolled(svc: Any, email: str) -> tuple[str, Any]:
    """The reviewer ``email`` names, who must be enrolled on the log."""
    rid = _reviewer_id(email)
    info = svc.reviewer(rid)
    if info is None:
        raise UnusableInput(
            f"{email}: expected an enrolled reviewer, found {rid} not enrolled (see `desk reviewer list`; "
            "enroll them with `desk reviewer add`)"
        )
    return rid, info


def _sso_settings(a: argparse.Namespace) -> Any:
    """The provider ``--oidc-*`` names, or None; refuses a half-given one, naming the missing option."""
    given = [a.oidc_issuer, a.oidc_client_id, a.oidc_client_secret_env]
    if not any(given):
        if a.no_passwords:
            raise UnusableInput(
                "--no-passwords: expected single sign-on (--oidc-issuer …) to sign people in, found none"
            )
        return None
    for option, value in zip(("--oidc-issuer", "--oidc-client-id", "--oidc-client-secret-env"), given, strict=True):
        if not value:
            raise UnusableInput(f"{option}: expected it with the other --oidc-* options, found none")
    secret = os.environ.get(a.oidc_client_secret_env)
    if not secret:
        raise UnusableInput(
            f"--oidc-client-secret-env: expected ${a.oidc_client_secret_env} to hold the secret, found none"
        )
    from signoff.desk.sso import Settings

    return Settings(
        issuer=a.oidc_issuer,
        client_id=a.oidc_client_id,
        client_secret=secret,
        claim=a.oidc_claim,
        groups_claim=a.oidc_groups_claim,
        scope=a.oidc_scope,
        passwords=not a.no_passwords,
    )


def cmd_serve(a: argparse.Namespace) -> int:
    url = existing_store_url(a.store)
    if not free_port(a.host, a.port):
        raise UnusableInput(f"--port: expected a free port on {a.host}, found {a.port} in use (another desk?)")
    import uvicorn

    from signoff.desk.app import create_app
    from signoff.desk.notify import cli as notify_cli
    from signoff.desk.reqlog import setup_logging

    if not a.quiet:
        setup_logging()
    app = create_app(
        url,
        a.key,
        secure_cookies=True if a.secure_cookies else None,
        access_log=not a.quiet,
        rp_id=a.rp_id,
        origin=a.origin,
        allowed_origins=a.allow_origin,
        max_body=a.max_body,
        stalled_after=a.stalled_after,
        checkpoint_every=a.checkpoint_every,
        serve_tlog=a.tlog,
        witnesses=a.witness,
        witness_quorum=a.witness_quorum,
        retention_every=a.retention_every,
        logs=a.log_ids,
        sso=_sso_settings(a),
    )
    for desk in app.state.desks:
        mode = "signed decisions required" if desk.signed_decisions else "UNSIGNED decisions allowed"
        print(
            f"desk: serving log {desk.store.log_id} ({desk.store.rules.origin}; {mode}) on http://{a.host}:{a.port}/",
            file=sys.stderr,
            flush=True,
        )
    a.store = url
    notifiers = [notify_cli.start_in_desk(a, desk) for desk in app.state.desks] if a.notify else []
    try:
        uvicorn.run(app, host=a.host, port=a.port, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    finally:
        for notifier in notifiers:
            notifier.stop()
    return 0


def _enroll_with_code(
    svc: Any, accounts: Any, reviewer: str, *, roles: Any, tools: Any, replace: bool, admin: Any
) -> Any:
    """One new enrolment code: committed on the log (signed by the admin), and the desk password."""
    from signoff.desk.auth import new_password

    code = new_password()
    entry = svc.enroll_reviewer(reviewer, roles=roles, tools=tools, code=code, replace=replace, admin=admin)
    accounts.set_password(reviewer, code, must_change=True)
    accounts.close_all_sessions(reviewer)
    return entry, code


CODE_NOTE = (
    "enrolment code (works once; it is also the initial desk password: sign in with it, choose a new "
    "password, then register a passkey on the Account page): {code}"
)


def _on_store(run: Callable[[argparse.Namespace, Any, Any], None]) -> Callable[[argparse.Namespace], int]:
    """A ``desk reviewer`` verb: ``run(args, review service, desk accounts)`` on the store ``--store`` names."""

    def verb_run(a: argparse.Namespace) -> int:
        store, svc, accounts = _accounts(a.store, a.log_id)
        try:
            run(a, svc, accounts)
        finally:
            store.close()
        return 0

    return verb_run


def cmd_reviewer_add(a: argparse.Namespace, svc: Any, accounts: Any) -> None:
    rid = _reviewer_id(a.email)
    tools = ["*"] if a.any_tool else list(a.tools)
    entry, code = _enroll_with_code(svc, accounts, rid, roles=a.role, tools=tools, replace=a.replace, admin=_admin(a))
    print(f"enrolled {rid} (roles: {', '.join(a.role)}; tools: {', '.join(tools)}) at seq {entry.seq}")
    print(CODE_NOTE.format(code=code))


def cmd_reviewer_reset(a: argparse.Namespace, svc: Any, accounts: Any) -> None:
    rid, info = _enrolled(svc, a.email)
    if not info.enabled:
        raise NotAllowed(
            f"{a.email}: expected an enabled reviewer, found {rid} disabled; enroll them again with `desk reviewer add`"
        )
    entry, code = _enroll_with_code(
        svc, accounts, rid, roles=list(info.roles), tools=list(info.tools), replace=False, admin=_admin(a)
    )
    print(f"re-enrolled {rid} with a new enrolment code at seq {entry.seq}; their sessions are ended")
    print(CODE_NOTE.format(code=code))


def cmd_reviewer_list(a: argparse.Namespace, svc: Any, accounts: Any) -> None:
    for info in svc.reviewers():
        state = "enabled" if info.enabled else "disabled"
        kinds = [k.passkey.algorithm if k.passkey else "key file" for k in svc.keys(info.id)]
        keys = ",".join(kinds) or "none"
        print(f"{info.id}\t{state}\troles={','.join(info.roles)}\ttools={','.join(info.tools) or '*'}\tkeys={keys}")


def cmd_reviewer_disable(a: argparse.Namespace, svc: Any, accounts: Any) -> None:
    rid = _reviewer_id(a.email)
    entry = svc.disable_reviewer(rid, reason=a.reason, admin=_admin(a))
    accounts.close_all_sessions(rid)
    accounts.revoke_all(rid)
    print(f"disabled {rid} at seq {entry.seq}; sessions ended, API tokens revoked")


def cmd_reviewer_token(a: argparse.Namespace, svc: Any, accounts: Any) -> None:
    rid, _info = _enrolled(svc, a.email)
    print(accounts.new_token(rid, a.label))


def cmd_reviewer_password(a: argparse.Namespace, svc: Any, accounts: Any) -> None:
    from signoff.desk.auth import new_password

    rid, _info = _enrolled(svc, a.email)
    password = new_password()
    accounts.set_password(rid, password, must_change=True)
    accounts.close_all_sessions(rid)
    print(f"initial password (works once; not an enrolment code): {password}")


def cmd_demo(a: argparse.Namespace) -> int:
    from signoff.desk.demo import run_demo

    return run_demo(
        Path(a.dir) if a.dir else None,
        host=a.host,
        port=a.port,
        interval=a.interval,
        max_open=a.max_open,
        quiet=a.quiet,
        sessions=a.sessions,
        sealed_values=a.sealed_values,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = _parser(argv).parse_args(argv)
    return run_at_edge(lambda: int(a.run(a)), getattr(a, "store", None))


if __name__ == "__main__":
    raise SystemExit(main())
