"""``audit sso``: the IdP groups each role needs on a desk that signs people in through single sign-on.

    audit sso require finance --group grp-finance --admin-key admin.pem   # admin-signed (sso.required)
    audit sso require finance --admin-key admin.pem                        # no group needed any more
    audit sso show
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from signoff.audit.cli_common import add_json, emit, group, verb


def cmd_require(args: argparse.Namespace) -> int:
    from signoff.audit import sso_required
    from signoff.audit.cli_common import open_existing
    from signoff.audit.cli_witness import _admin

    entry = sso_required.require(open_existing(args), args.role, args.group, admin=_admin(args))
    groups = entry.body["groups"]
    text = (
        f"role {args.role}: signing in needs one of the IdP groups {', '.join(groups)} (seq {entry.seq})"
        if groups
        else f"role {args.role}: no IdP group needed any more (seq {entry.seq})"
    )
    emit(args, {"seq": entry.seq, "role": args.role, "groups": groups}, text)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from signoff.audit import sso_required
    from signoff.audit.cli_common import open_existing

    needed = sso_required.requirements(open_existing(args))
    lines = [f"{role}: one of {', '.join(groups)}" for role, groups in sorted(needed.items())]
    emit(args, {"required": {role: list(groups) for role, groups in needed.items()}}, "\n".join(lines) or "none")
    return 0


def register(sub: Any) -> None:
    verbs = group(
        sub,
        "sso",
        "the IdP groups each role needs where the desk signs people in through single sign-on (OIDC)",
        ["audit sso require finance --group grp-finance --admin-key admin.pem", "audit sso show"],
        "sso_command",
    )
    require = verb(
        verbs,
        "require",
        "people with ROLE must be in one of these IdP groups to sign in and decide (admin-signed; none: no longer)",
        "audit sso require finance --group grp-finance --admin-key admin.pem",
        cmd_require,
    )
    require.add_argument("role", help="a role reviewers are enrolled with")
    require.add_argument("--group", action="append", default=[], help="an IdP group (repeat: any one of them)")
    admin_help = "the admin's private key (env SIGNOFF_ADMIN_KEY)"
    require.add_argument("--admin-key", default=os.environ.get("SIGNOFF_ADMIN_KEY"), help=admin_help)
    add_json(require)
    show = verb(verbs, "show", "the IdP groups each role needs", "audit sso show", cmd_show)
    add_json(show)
