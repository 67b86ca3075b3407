"""``audit`` verbs about people and decisions: keygen, enroll, disable, enroll-key, revoke-key,
reviewers, pending, approve, edit, reject. Wired into the parser by :mod:`signoff.audit.cli`.

An administrator's verbs sign with the admin key (``--admin-key``); a reviewer's decisions sign
with their own key file (``--reviewer-key``). Neither key ever enters the log or the database.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.audit.cli_common import add_json, emit, open_existing, verb
from signoff.audit.cli_people import check_own_key, human
from signoff.audit.errors import UnusableInput

if TYPE_CHECKING:
    from signoff.audit.keys import Signer
    from signoff.audit.reviews import ReviewService

# Each verb imports what it needs when it runs: `audit --help` loads no database driver (tests/test_startup.py).


def _admin(args: argparse.Namespace) -> Signer:
    from signoff.audit.keys import read_private_key

    if not args.admin_key:
        raise UnusableInput("--admin-key: expected the admin's key file (or env SIGNOFF_ADMIN_KEY), found none")
    return read_private_key(args.admin_key)


def _reviewer_key(args: argparse.Namespace) -> Signer | None:
    from signoff.audit.keys import read_private_key

    return read_private_key(args.reviewer_key) if args.reviewer_key else None


def _tools(args: argparse.Namespace) -> list[str]:
    from signoff.audit.reviewers import ANY_TOOL

    if args.any_tool and args.tools:
        raise UnusableInput("--tools and --any-tool: expected one of them, found both")
    if args.any_tool:
        return [ANY_TOOL]
    if not args.tools:
        raise UnusableInput("--tools: expected the tool globs the reviewer may decide, or --any-tool, found neither")
    return list(args.tools)


def _service(args: argparse.Namespace) -> ReviewService:
    from signoff.audit.reviews import ReviewService

    return ReviewService(open_existing(args))


# -- keys and people ----------------------------------------------------------------------


def cmd_keygen(args: argparse.Namespace) -> int:
    from signoff.audit.keys import Signer, write_private_key

    signer = Signer.generate()
    write_private_key(signer, args.output)
    public_file = Path(f"{args.output}.pub")
    public_file.write_text(signer.public + "\n", encoding="utf-8")
    data = {"file": str(args.output), "public": signer.public, "public_file": str(public_file)}
    emit(
        args,
        data,
        f"wrote {args.output} (mode 0600; it never leaves you) and {public_file}\npublic key: {signer.public}\n"
        f"give {public_file} to your admin: audit enroll YOU@example.org --role R --tools … "
        f"--public-key {public_file} --admin-key …",
    )
    return 0


def public_key(text: str | None) -> str | None:
    """``--public-key``: the key itself (``ed25519:…``) or a file holding it (``audit keygen``'s ``.pub``)."""
    if text is None or text.startswith("ed25519:"):
        return text
    path = Path(text)
    if not path.is_file():
        raise UnusableInput(f"--public-key: expected ed25519:<base64> or a .pub file, found {text!r}")
    return path.read_text(encoding="utf-8").strip()


def cmd_enroll(args: argparse.Namespace) -> int:
    svc = _service(args)
    reviewer = human(args.reviewer)
    before = svc.reviewer(reviewer)
    code = secrets.token_urlsafe(12) if args.code else None
    entry = svc.enroll_reviewer(
        reviewer,
        roles=args.role,
        tools=_tools(args),
        key=public_key(args.public_key),
        code=code,
        replace=args.replace,
        admin=_admin(args),
    )
    after = svc.reviewer(reviewer)
    assert after is not None
    data: dict[str, Any] = {
        "reviewer": reviewer,
        "seq": entry.seq,
        "before": None if before is None else {"roles": list(before.roles), "tools": list(before.tools)},
        "after": {"roles": list(after.roles), "tools": list(after.tools)},
    }
    lines = [f"enrolled {reviewer} at seq {entry.seq}"]
    if before is not None:
        lines.append(f"  before: roles {list(before.roles)}, tools {list(before.tools) or ['any (empty list)']}")
    lines.append(f"  now:    roles {list(after.roles)}, tools {list(after.tools)}")
    if code is not None:
        data["code"] = code
        lines.append(f"  one-time enrolment code (lets them register one passkey in the desk): {code}")
    emit(args, data, "\n".join(lines))
    return 0


def cmd_disable(args: argparse.Namespace) -> int:
    svc = _service(args)
    reviewer = human(args.reviewer)
    entry = svc.disable_reviewer(reviewer, reason=args.reason, admin=_admin(args))
    emit(args, {"reviewer": reviewer, "seq": entry.seq}, f"disabled {reviewer} at seq {entry.seq}")
    return 0


def cmd_enroll_key(args: argparse.Namespace) -> int:
    svc = _service(args)
    entry = svc.enroll_key(args.actor, public_key(args.public_key) or "", admin=_admin(args))
    emit(args, {"actor": args.actor, "seq": entry.seq}, f"enrolled a key for {args.actor} at seq {entry.seq}")
    return 0


def cmd_revoke_key(args: argparse.Namespace) -> int:
    svc = _service(args)
    entry = svc.revoke_key(args.actor, args.fingerprint, reason=args.reason, admin=_admin(args))
    emit(
        args, {"actor": args.actor, "seq": entry.seq}, f"revoked {args.fingerprint} of {args.actor} at seq {entry.seq}"
    )
    return 0


def cmd_reviewers(args: argparse.Namespace) -> int:
    svc = _service(args)
    rows: list[dict[str, Any]] = [
        {
            "reviewer": info.id,
            "enabled": info.enabled,
            "roles": list(info.roles),
            "tools": list(info.tools),
            "keys": [{"fingerprint": k.fingerprint, "alg": k.alg} for k in svc.keys(info.id)],
        }
        for info in svc.reviewers()
    ]

    def text() -> None:
        for row in rows:
            state = "enabled" if row["enabled"] else "disabled"
            keys = ", ".join(f"{k['alg']} {k['fingerprint'][:24]}…" for k in row["keys"]) or "no key"
            print(f"{row['reviewer']}\t{state}\troles={','.join(row['roles'])}\ttools={','.join(row['tools'])}\t{keys}")

    emit(args, rows, text)
    return 0


# -- decisions ----------------------------------------------------------------------------


def cmd_pending(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise UnusableInput(f"--limit: expected 0 or more reviews, found {args.limit}")
    svc = _service(args)
    if args.first or args.last:  # one review: the oldest or the newest
        total = svc.count_pending(tool=args.tool)
        if total == 0:
            raise UnusableInput(
                f"expected a pending review{' of ' + args.tool if args.tool else ''}, found none (nothing waits)"
            )
        reviews = svc.pending(tool=args.tool, limit=1, offset=0 if args.first else total - 1)
    else:
        reviews = svc.pending(tool=args.tool, limit=args.limit)
    if args.id:
        for r in reviews:
            print(r.id)
        return 0
    rows: list[dict[str, Any]] = [
        {
            "review": r.id,
            "tool": r.tool,
            "agent": r.call.agent,
            "args": r.call.args,
            "deadline": r.deadline.isoformat() if r.deadline else None,
            "approvals": [who for who, _seq in r.approvals],
            "approvals_needed": r.approvals_needed,
            "round_args": r.round_args,
        }
        for r in reviews
    ]

    def text() -> None:
        for r in rows:
            quorum = f" approvals {len(r['approvals'])}/{r['approvals_needed']}" if r["approvals_needed"] > 1 else ""
            print(
                f"{r['review']}  {r['tool']:<20} {r['agent'] or '-':<16} deadline {r['deadline'] or '-'}{quorum}  "
                f"{json.dumps(r['round_args'] or r['args'], ensure_ascii=False)[:80]}"
            )

    emit(args, rows, text)
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    from signoff.audit.canonical import decode
    from signoff.audit.cli_people import acting_for
    from signoff.audit.edits import patch_from_pairs
    from signoff.audit.errors import CanonicalFormError

    svc = _service(args)
    actor = human(args.reviewer)
    signer = _reviewer_key(args)
    if signer is not None:
        check_own_key(svc, actor, signer, args.reviewer_key)
    current = svc.get(args.review)
    for_whom = acting_for(svc, actor, current, args.acting_for)  # a delegate's decision names its delegator
    if args.decision == "approve":
        review = svc.approve(
            args.review, reviewer=actor, rationale=args.rationale or "", signer=signer, acting_for=for_whom
        )
    elif args.decision == "edit":
        if args.patch is not None and args.changes:
            raise UnusableInput("edit: expected name=value changes or --patch, found both")
        if args.patch is not None:
            try:
                patch = decode(args.patch.encode("utf-8"), "patch")
            except CanonicalFormError as exc:
                raise UnusableInput(f"--patch: expected an RFC 6902 JSON patch, found {exc}") from None
        else:
            patch = patch_from_pairs(current.call.args, current.call.tool_schema, args.changes)
        review = svc.edit(
            args.review, reviewer=actor, patch=patch, rationale=args.rationale or "", signer=signer, acting_for=for_whom
        )
    else:
        review = svc.reject(args.review, reviewer=actor, reason=args.reason or "", signer=signer, acting_for=for_whom)
    by = f"{review.decided_by}, for {for_whom}" if for_whom else review.decided_by
    data: dict[str, Any] = {
        "review": review.id,
        "status": review.status,
        "decided_by": review.decided_by,
        "seq": review.decision_seq,
        "final_args": review.final_args,
        "signed": signer is not None,
        "acting_for": for_whom,
    }
    if review.status == "pending":  # one approval toward a quorum
        data["approvals"] = [{"by": who, "seq": seq} for who, seq in review.approvals]
        data["approvals_needed"] = review.approvals_needed
        more = review.approvals_needed - len(review.approvals)
        text = (
            f"{review.id}: approval {len(review.approvals)} of {review.approvals_needed} recorded "
            f"(by {', '.join(who for who, _ in review.approvals)}); "
            f"{more} more {'person' if more == 1 else 'people'} must approve before it runs"
        )
    else:
        runs = f"; runs with {json.dumps(review.final_args, ensure_ascii=False)}" if review.final_args else ""
        text = f"{review.id}: {review.status} by {by} at seq {review.decision_seq}{runs}"
    emit(args, data, text)
    return 0


def register(sub: Any) -> None:
    admin_key = os.environ.get("SIGNOFF_ADMIN_KEY")
    reviewer_key = os.environ.get("SIGNOFF_REVIEWER_KEY")

    keygen = verb(
        sub, "keygen", "make a reviewer's Ed25519 key file (for deciding from a terminal or a script)",
        "audit keygen -o ~/.signoff/alice.pem", cmd_keygen,
    )  # fmt: skip
    keygen.add_argument("-o", "--output", type=Path, required=True, help="where to write the private key (mode 0600)")
    add_json(keygen)

    enroll = verb(
        sub, "enroll", "enroll a person as a reviewer (signed by the admin key)",
        "audit enroll alice@example.org --role finance --tools 'transfer_*' --code --admin-key admin.pem", cmd_enroll,
    )  # fmt: skip
    enroll.add_argument("reviewer", help="their e-mail (or human:…)")
    enroll.add_argument("--role", action="append", required=True, help="a role (repeatable)")
    enroll.add_argument("--tools", nargs="+", help="the tool names or globs they may decide")
    enroll.add_argument("--any-tool", action="store_true", help="they may decide any tool (said explicitly)")
    enroll.add_argument("--public-key", help="their Ed25519 public key, or the .pub file `audit keygen` wrote")
    enroll.add_argument("--code", action="store_true", help="print a one-time code to register a passkey in the desk")
    enroll.add_argument("--replace", action="store_true", help="change the roles or tools of an enrolled reviewer")
    enroll.add_argument("--admin-key", default=admin_key, help="the admin's key file (env SIGNOFF_ADMIN_KEY)")
    add_json(enroll)

    disable = verb(
        sub, "disable", "disable a reviewer (signed by the admin key)",
        "audit disable bob@example.org --reason 'left the team' --admin-key admin.pem", cmd_disable,
    )  # fmt: skip
    disable.add_argument("reviewer")
    disable.add_argument("--reason", required=True)
    disable.add_argument("--admin-key", default=admin_key, help="the admin's key file (env SIGNOFF_ADMIN_KEY)")
    add_json(disable)

    enroll_key = verb(
        sub, "enroll-key", "enroll a public key for an actor: a reviewer, an agent host's service, another admin",
        "audit enroll-key service:bank-agents ed25519:… --admin-key admin.pem", cmd_enroll_key,
    )  # fmt: skip
    enroll_key.add_argument("actor", help="human:…, agent:…, service:… or admin:…")
    enroll_key.add_argument("public_key", help="ed25519:<base64>, or a .pub file")
    enroll_key.add_argument("--admin-key", default=admin_key, help="the admin's key file (env SIGNOFF_ADMIN_KEY)")
    add_json(enroll_key)

    revoke = verb(
        sub, "revoke-key", "revoke a key (lost passkey, leaked key file): it signs nothing from now on",
        "audit revoke-key human:alice@example.org webauthn:3f… --reason 'lost laptop' --admin-key admin.pem",
        cmd_revoke_key,
    )  # fmt: skip
    revoke.add_argument("actor")
    revoke.add_argument("fingerprint", help="the key's fingerprint (see `audit reviewers`)")
    revoke.add_argument("--reason", required=True)
    revoke.add_argument("--admin-key", default=admin_key, help="the admin's key file (env SIGNOFF_ADMIN_KEY)")
    add_json(revoke)

    reviewers = verb(
        sub, "reviewers", "list reviewers, their roles, tools and keys", "audit reviewers --json", cmd_reviewers
    )
    add_json(reviewers)

    pending = verb(
        sub, "pending", "list open reviews, oldest first", "REVIEW=$(audit pending --first --id)", cmd_pending
    )
    pending.add_argument("--tool", help="only this tool")
    pending.add_argument("--limit", type=int, default=50)
    one = pending.add_mutually_exclusive_group()
    one.add_argument("--first", action="store_true", help="only the oldest (exit 2 when nothing waits)")
    one.add_argument("--last", action="store_true", help="only the newest (exit 2 when nothing waits)")
    pending.add_argument("--id", action="store_true", help="print only the review ids, one a line (for scripts)")
    add_json(pending)

    examples = {
        "approve": "audit approve rv_… --as alice@example.org --reviewer-key alice.pem --rationale 'known payee'",
        "edit": "audit edit rv_… amount=50 to=bob --as alice@example.org --reviewer-key alice.pem",
        "reject": "audit reject rv_… --as alice@example.org --reviewer-key alice.pem --reason 'wrong account'",
    }
    for name, example in examples.items():
        decide = verb(sub, name, f"{name} a review, signed with your own key file", example, cmd_decide)
        decide.set_defaults(decision=name)
        decide.add_argument("review", help="the review id (see `audit pending`)")
        if name == "edit":
            decide.add_argument("changes", nargs="*", help="name=value: set an argument (typed by the tool's schema)")
            decide.add_argument(
                "--patch", help='or an RFC 6902 patch, e.g. \'[{"op":"replace","path":"/amount","value":50}]\''
            )
        decide.add_argument("--as", dest="reviewer", required=True, help="you: an enrolled reviewer's e-mail")
        decide.add_argument(
            "--reviewer-key", default=reviewer_key, help="your key file from `audit keygen` (env SIGNOFF_REVIEWER_KEY)"
        )
        decide.add_argument(
            "--for",
            dest="acting_for",
            help="decide for this reviewer, under their delegation to you (default: "
            "found by itself when your own roles do not cover the review)",
        )
        if name == "reject":
            decide.add_argument("--reason", required=True, help="what the model reads")
        else:
            decide.add_argument("--rationale", help="why (kept on the log)")
        add_json(decide)
