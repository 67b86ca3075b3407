"""The ``desk`` command: serve, manage reviewers, run the offline demo.

Errors from ``audit`` become a one-line message and exit code 1 here, in one place.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_STORE = os.environ.get("SIGNOFF_STORE", "sqlite:///signoff.db")


def _reviewer_id(email: str) -> str:
    email = email.strip().lower()
    return email if email.startswith("human:") else "human:" + email


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="desk", description="Signoff desk: people decide paused agent tool calls.")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="serve the desk over HTTP")
    s.add_argument("--store", default=DEFAULT_STORE, help="store URL (sqlite:///path.db or postgresql://…)")
    s.add_argument(
        "--key", default=os.environ.get("SIGNOFF_KEY"), help="the log's key file (enables signing checkpoints)"
    )
    s.add_argument("--init", action="store_true", help="create the log (and --key) if the store has none")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--secure-cookies", action="store_true", help="always mark cookies Secure (behind a TLS proxy)")
    s.add_argument("--quiet", action="store_true", help="no per-request log lines")

    r = sub.add_parser("reviewer", help="enroll, list and disable reviewers")
    rs = r.add_subparsers(dest="rcmd", required=True)
    add = rs.add_parser("add", help="enroll a reviewer on the log and print a one-time initial password")
    add.add_argument("email")
    add.add_argument("--role", action="append", required=True, help="role (repeatable)")
    add.add_argument("--tools", nargs="*", default=[], help="tool name globs this reviewer may decide")
    add.add_argument("--store", default=DEFAULT_STORE)
    ls = rs.add_parser("list", help="list enrolled reviewers")
    ls.add_argument("--store", default=DEFAULT_STORE)
    dis = rs.add_parser("disable", help="disable a reviewer (on the log) and end their sessions and tokens")
    dis.add_argument("email")
    dis.add_argument("--reason", default="disabled by an administrator")
    dis.add_argument("--store", default=DEFAULT_STORE)
    tok = rs.add_parser("token", help="print a new API token for a reviewer")
    tok.add_argument("email")
    tok.add_argument("--label", default="cli")
    tok.add_argument("--store", default=DEFAULT_STORE)
    pw = rs.add_parser("password", help="reset a reviewer's password (prints a new one-time password)")
    pw.add_argument("email")
    pw.add_argument("--store", default=DEFAULT_STORE)

    d = sub.add_parser("demo", help="local SQLite desk with a scripted agent that keeps proposing calls")
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
    return p


def _accounts(store_url: str):  # type: ignore[no-untyped-def]
    from signoff.audit import ReviewService, open_store
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    store = open_store(store_url)
    return store, ReviewService(store), Accounts(make_engine(store_url), store.log_id)


def cmd_serve(a: argparse.Namespace) -> int:
    import uvicorn

    from signoff.desk.app import create_app
    from signoff.desk.reqlog import setup_logging

    if not a.quiet:
        setup_logging()
    app = create_app(
        a.store, a.key, init=a.init, secure_cookies=True if a.secure_cookies else None, access_log=not a.quiet
    )
    print(f"desk: serving log {app.state.desk.store.log_id} on http://{a.host}:{a.port}/", file=sys.stderr, flush=True)
    uvicorn.run(app, host=a.host, port=a.port, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
    return 0


def cmd_reviewer(a: argparse.Namespace) -> int:
    from signoff.desk.auth import new_password

    store, svc, accounts = _accounts(a.store)
    try:
        if a.rcmd == "add":
            rid = _reviewer_id(a.email)
            entry = svc.enroll_reviewer(rid, roles=a.role, tools=a.tools)
            password = new_password()
            accounts.set_password(rid, password, must_change=True)
            print(
                f"enrolled {rid} (roles: {', '.join(a.role)}; tools: {', '.join(a.tools) or 'any'}) at seq {entry.seq}"
            )
            print(f"initial password (works once; choose a new one at first sign-in): {password}")
        elif a.rcmd == "list":
            for info in svc.reviewers():
                state = "enabled" if info.enabled else "disabled"
                print(f"{info.id}\t{state}\troles={','.join(info.roles)}\ttools={','.join(info.tools) or '*'}")
        elif a.rcmd == "disable":
            rid = _reviewer_id(a.email)
            entry = svc.disable_reviewer(rid, reason=a.reason)
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
            print(f"initial password (works once): {password}")
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
    from signoff.audit.errors import AuditError

    try:
        if a.cmd == "serve":
            return cmd_serve(a)
        if a.cmd == "reviewer":
            return cmd_reviewer(a)
        if a.cmd == "demo":
            return cmd_demo(a)
    except AuditError as exc:
        print(f"desk: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
