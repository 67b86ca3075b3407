"""``audit`` verbs about delegation (SPEC.md §7 rule 2b): delegate, revoke-delegation, delegations.

A reviewer delegates with their own key file (``--as``, ``--reviewer-key``); an administrator may do it
for anyone with the admin key (``--from``, ``--admin-key``). Wired into the parser by :mod:`signoff.audit.cli`.
"""

from __future__ import annotations

import argparse
import os
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from signoff.audit.cli_common import add_json, emit, verb
from signoff.audit.cli_people import check_own_key, human
from signoff.audit.errors import UnusableInput

if TYPE_CHECKING:
    from signoff.audit.reviews import ReviewService

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([dhm])$")
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0}


def parse_until(text: str, now: datetime) -> datetime:
    """``--until``: a date (``2027-01-03``: the delegation ends as that day begins, UTC), a time
    (``2027-01-03T09:00:00Z``, or with an offset), or a span from now (``7d``, ``12h``, ``30m``), at most
    the record's longest span (:data:`signoff.audit.limits.MAX_SECONDS`)."""
    from signoff.audit.entry import later
    from signoff.audit.limits import MAX_DAYS, MAX_SECONDS

    span = _DURATION.match(text.strip())
    if span:
        seconds = float(span.group(1)) * _UNITS[span.group(2)]
        if seconds > MAX_SECONDS:
            raise UnusableInput(f"--until: expected a span of at most {MAX_DAYS:,}d, found {text!r}")
        return later(now, seconds)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UnusableInput(
            f"--until: expected a date (2027-01-03), a time (2027-01-03T09:00:00Z) or a span (7d, 12h), found {text!r}"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _service(args: argparse.Namespace) -> ReviewService:
    from signoff.audit.cli_common import open_existing
    from signoff.audit.reviews import ReviewService

    return ReviewService(open_existing(args))


def _signers(args: argparse.Namespace, svc: ReviewService, actor: str | None) -> dict[str, Any]:
    """The admin key, or the person's own key file (checked to be theirs)."""
    from signoff.audit.keys import read_private_key

    if args.admin_key:
        return {"admin": read_private_key(args.admin_key)}
    if actor is None or not args.reviewer_key:
        raise UnusableInput("--as and --reviewer-key: expected your own e-mail and key file, or --admin-key")
    signer = read_private_key(args.reviewer_key)
    check_own_key(svc, actor, signer, args.reviewer_key)
    return {"signer": signer}


def cmd_delegate(args: argparse.Namespace) -> int:
    from signoff.audit.entry import format_time

    svc = _service(args)
    if args.admin_key and not args.delegator:
        raise UnusableInput("--from: expected whose roles an admin delegates, found none")
    if not args.admin_key and args.delegator:
        raise UnusableInput("--from: only an admin (--admin-key) delegates for someone else; use --as for your own")
    delegator = human(args.delegator or args.reviewer or "")
    if not args.delegator and not args.reviewer:
        raise UnusableInput("--as: expected your e-mail (the delegator), found none")
    until = parse_until(args.until, svc.store.clock())
    roles = [r.strip() for item in args.roles or [] for r in item.split(",") if r.strip()] or None
    signing = _signers(args, svc, None if args.admin_key else delegator)
    made = svc.delegate(
        delegator, human(args.delegate), until=format_time(until), roles=roles, reason=args.reason or "", **signing
    )
    data = made.to_json()
    emit(
        args,
        data,
        f"delegated roles {', '.join(made.roles)} of {made.delegator} to {made.delegate} until {made.until} "
        f"({made.id}, seq {made.seq})\n"
        f"  {made.delegate} decides for {made.delegator} what those roles cover, signing with their own key; "
        f"end it sooner with: audit revoke-delegation {made.id} --reason …",
    )
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    svc = _service(args)
    actor = None if args.admin_key else human(args.reviewer or "")
    entry = svc.revoke_delegation(args.delegation, actor=actor, reason=args.reason, **_signers(args, svc, actor))
    emit(
        args,
        {"delegation": args.delegation, "seq": entry.seq, "by": entry.actor},
        f"revoked {args.delegation} at seq {entry.seq} (by {entry.actor})",
    )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from signoff.audit.entry import format_time

    svc = _service(args)
    now = format_time(svc.store.clock())
    found = svc.delegations(reviewer=human(args.reviewer) if args.reviewer else None)
    rows = [{**d.to_json(), "active": d.active(now)} for d in found if args.all or d.active(now)]

    def text() -> None:
        if not rows:
            print("no delegation in force" if not args.all else "no delegation")
        for row in rows:
            state = "in force" if row["active"] else ("revoked" if row["revoked_seq"] is not None else "ended")
            print(
                f"{row['delegation']}  {row['delegator']} -> {row['delegate']}  roles {','.join(row['roles'])}  "
                f"until {row['until']}  {state}"
            )

    emit(args, rows, text)
    return 0


def register(sub: Any) -> None:
    # --admin-key takes no default from SIGNOFF_ADMIN_KEY here: with it, a delegation is the admin's, not yours.
    reviewer_key = os.environ.get("SIGNOFF_REVIEWER_KEY")

    grant = verb(
        sub, "delegate", "lend your roles (or some) to another reviewer for a while, signed with your key",
        "audit delegate --to bob@example.org --roles finance --until 2027-01-03 --as alice@example.org "
        "--reviewer-key alice.pem",
        cmd_delegate,
    )  # fmt: skip
    grant.add_argument("--to", dest="delegate", required=True, help="the reviewer who decides for you meanwhile")
    grant.add_argument("--roles", action="append", help="roles to lend (repeatable or comma-separated; default: all)")
    grant.add_argument(
        "--until", required=True, help="when it ends: a date (2027-01-03, as it begins, UTC), a time, or 7d / 12h"
    )
    grant.add_argument("--reason", help="why (kept on the log)")
    grant.add_argument("--as", dest="reviewer", help="you, the delegator: an enrolled reviewer's e-mail")
    grant.add_argument("--reviewer-key", default=reviewer_key, help="your key file (env SIGNOFF_REVIEWER_KEY)")
    grant.add_argument("--from", dest="delegator", help="an admin delegating for someone: whose roles")
    grant.add_argument("--admin-key", help="the admin's key file, to delegate for someone else")
    add_json(grant)

    revoke = verb(
        sub, "revoke-delegation", "end a delegation before its --until (its delegator, its delegate or an admin)",
        "audit revoke-delegation dg_… --reason 'back early' --as alice@example.org --reviewer-key alice.pem",
        cmd_revoke,
    )  # fmt: skip
    revoke.add_argument("delegation", help="the delegation id (see `audit delegations`)")
    revoke.add_argument("--reason", required=True)
    revoke.add_argument("--as", dest="reviewer", help="you: the delegator or the delegate")
    revoke.add_argument("--reviewer-key", default=reviewer_key, help="your key file (env SIGNOFF_REVIEWER_KEY)")
    revoke.add_argument("--admin-key", help="or the admin's key file")
    add_json(revoke)

    listing = verb(
        sub, "delegations", "list the delegations in force (--all: ended and revoked ones too)",
        "audit delegations --reviewer bob@example.org", cmd_list,
    )  # fmt: skip
    listing.add_argument("--reviewer", help="only those from or to this reviewer")
    listing.add_argument("--all", action="store_true", help="ended and revoked ones too")
    add_json(listing)
