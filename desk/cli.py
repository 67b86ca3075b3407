"""The ``desk`` command: serve, manage reviewers, run the offline demo.

Errors become a one-line message and an exit code here, in one place: 1 for a refusal from
``audit``, 2 for input the desk cannot use (a missing or unreadable key file).

Enrolment is the administrator's act, signed with the admin key that ``audit init`` made
(DESIGN.md "Who holds which key"): ``desk reviewer add|reset|disable`` need ``--admin-key`` and
run where that key lives; ``desk serve`` never needs it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from signoff.desk.notify import cli as notify_cli

DEFAULT_STORE = os.environ.get("SIGNOFF_STORE", "sqlite:///signoff.db")


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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="desk", description="Signoff desk: people decide paused agent tool calls.")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="serve the desk over HTTP (on a log made by `audit init`)")
    s.add_argument("--store", default=DEFAULT_STORE, help="store URL (sqlite:///path.db or postgresql://…)")
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
    notify_cli.add_serve_flags(s)

    r = sub.add_parser("reviewer", help="enroll, list, reset and disable reviewers")
    rs = r.add_subparsers(dest="rcmd", required=True)
    add = rs.add_parser(
        "add",
        help="enroll a reviewer on the log (signed by the admin key) and print their one-time enrolment code, "
        "which is also their initial desk password",
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
    add.add_argument("--store", default=DEFAULT_STORE)
    _admin_key_arg(add)
    reset = rs.add_parser(
        "reset",
        help="give a reviewer a new enrolment code (same roles and tools) to register a new passkey; "
        "it is also their new one-time desk password",
    )
    reset.add_argument("email")
    reset.add_argument("--store", default=DEFAULT_STORE)
    _admin_key_arg(reset)
    ls = rs.add_parser("list", help="list enrolled reviewers")
    ls.add_argument("--store", default=DEFAULT_STORE)
    dis = rs.add_parser("disable", help="disable a reviewer (on the log) and end their sessions and tokens")
    dis.add_argument("email")
    dis.add_argument("--reason", default="disabled by an administrator")
    dis.add_argument("--store", default=DEFAULT_STORE)
    _admin_key_arg(dis)
    tok = rs.add_parser("token", help="print a new API token for a reviewer")
    tok.add_argument("email")
    tok.add_argument("--label", default="cli")
    tok.add_argument("--store", default=DEFAULT_STORE)
    pw = rs.add_parser(
        "password", help="reset a reviewer's desk password only (prints a new one-time password; no new code)"
    )
    pw.add_argument("email")
    pw.add_argument("--store", default=DEFAULT_STORE)

    d = sub.add_parser(
        "demo",
        help="local SQLite desk with a scripted agent that keeps proposing calls (its log accepts unsigned decisions)",
    )
    d.add_argument("--dir", default=None, help="directory for the demo store (default: a new temp dir)")
    d.add_argument("--host", default="127.0.0.1")
    d.add_argument("--port", type=int, default=8080)
    d.add_argument("--interval", type=float, default=20.0, help="seconds between the agent's new proposals")
    d.add_argument("--max-open", type=int, default=8, help="pause proposing while this many runs wait")
    d.add_argument(
        "--sessions",
        choices=["sqlite", "memory"],
        default="sqlite",
        help="ADK session service: sqlite (paused runs survive a restart) or memory (faster)",
    )
    d.add_argument("--quiet", action="store_true")

    notify_cli.add_parser(sub, DEFAULT_STORE)
    return p


class UsageError(Exception):
    """A command-line input the desk cannot use (exit code 2)."""


def _accounts(store_url: str):  # type: ignore[no-untyped-def]
    from signoff.audit import ReviewService, open_store
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    store = open_store(store_url, create=False)
    return store, ReviewService(store), Accounts(make_engine(store_url), store.log_id)


def _admin(a: argparse.Namespace) -> Any:
    from signoff.audit.keys import read_private_key

    if not a.admin_key:
        raise UsageError(
            "--admin-key: expected the administrator's key file (or SIGNOFF_ADMIN_KEY), found none; "
            "only the admin key enrolls, resets or disables reviewers"
        )
    return read_private_key(a.admin_key)


def cmd_serve(a: argparse.Namespace) -> int:
    import uvicorn

    from signoff.desk.app import create_app
    from signoff.desk.reqlog import setup_logging

    if not a.quiet:
        setup_logging()
    app = create_app(
        a.store,
        a.key,
        secure_cookies=True if a.secure_cookies else None,
        access_log=not a.quiet,
        rp_id=a.rp_id,
        origin=a.origin,
        allowed_origins=a.allow_origin,
        max_body=a.max_body,
        stalled_after=a.stalled_after,
    )
    desk = app.state.desk
    mode = "signed decisions required" if desk.signed_decisions else "UNSIGNED decisions allowed"
    print(
        f"desk: serving log {desk.store.log_id} ({mode}) on http://{a.host}:{a.port}/",
        file=sys.stderr,
        flush=True,
    )
    notifier = notify_cli.start_in_desk(a, desk) if a.notify else None
    try:
        uvicorn.run(app, host=a.host, port=a.port, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    finally:
        if notifier is not None:
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


def cmd_reviewer(a: argparse.Namespace) -> int:
    from signoff.desk.auth import new_password

    store, svc, accounts = _accounts(a.store)
    try:
        if a.rcmd == "add":
            rid = _reviewer_id(a.email)
            tools = ["*"] if a.any_tool else list(a.tools)
            entry, code = _enroll_with_code(
                svc, accounts, rid, roles=a.role, tools=tools, replace=a.replace, admin=_admin(a)
            )
            print(f"enrolled {rid} (roles: {', '.join(a.role)}; tools: {', '.join(tools)}) at seq {entry.seq}")
            print(CODE_NOTE.format(code=code))
        elif a.rcmd == "reset":
            rid = _reviewer_id(a.email)
            info = svc.reviewer(rid)
            if info is None:
                print(f"desk: {rid} is not enrolled", file=sys.stderr)
                return 1
            if not info.enabled:
                print(f"desk: {rid} is disabled; enroll them again with `desk reviewer add`", file=sys.stderr)
                return 1
            admin = _admin(a)
            entry, code = _enroll_with_code(
                svc, accounts, rid, roles=list(info.roles), tools=list(info.tools), replace=False, admin=admin
            )
            print(f"re-enrolled {rid} with a new enrolment code at seq {entry.seq}; their sessions are ended")
            print(CODE_NOTE.format(code=code))
        elif a.rcmd == "list":
            for info in svc.reviewers():
                state = "enabled" if info.enabled else "disabled"
                kinds = [k.passkey.algorithm if k.passkey else "key file" for k in svc.keys(info.id)]
                keys = ",".join(kinds) or "none"
                print(
                    f"{info.id}\t{state}\troles={','.join(info.roles)}\ttools={','.join(info.tools) or '*'}"
                    f"\tkeys={keys}"
                )
        elif a.rcmd == "disable":
            rid = _reviewer_id(a.email)
            entry = svc.disable_reviewer(rid, reason=a.reason, admin=_admin(a))
            accounts.close_all_sessions(rid)
            accounts.revoke_all(rid)
            print(f"disabled {rid} at seq {entry.seq}; sessions ended, API tokens revoked")
        elif a.rcmd == "token":
            rid = _reviewer_id(a.email)
            if svc.reviewer(rid) is None:
                print(f"desk: {rid} is not enrolled", file=sys.stderr)
                return 1
            print(accounts.new_token(rid, a.label))
        elif a.rcmd == "password":
            rid = _reviewer_id(a.email)
            if svc.reviewer(rid) is None:
                print(f"desk: {rid} is not enrolled", file=sys.stderr)
                return 1
            password = new_password()
            accounts.set_password(rid, password, must_change=True)
            accounts.close_all_sessions(rid)
            print(f"initial password (works once; not an enrolment code): {password}")
    finally:
        store.close()
    return 0


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
    )


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    from signoff.audit.errors import AuditError, KeyFileError

    try:
        if a.cmd == "serve":
            return cmd_serve(a)
        if a.cmd == "reviewer":
            return cmd_reviewer(a)
        if a.cmd == "demo":
            return cmd_demo(a)
        if a.cmd == "notify":
            return notify_cli.run(a)
    except (UsageError, KeyFileError) as exc:
        print(f"desk: {exc}", file=sys.stderr)
        return 2
    except AuditError as exc:
        print(f"desk: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
