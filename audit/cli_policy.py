"""``audit policy``: review policies on the log (``policy.set``, signed by the admin key).

``audit policy set NAME --tools GLOB …`` adds or replaces a policy, ``audit policy list`` shows
them, ``audit policy retire NAME`` ends one. The fields are :mod:`signoff.audit.policies`'.
``audit policy proposals`` lists the standing rules reviewers proposed from the desk, ``audit policy
approve ID`` signs one into force and ``audit policy decline ID --reason …`` says no
(:mod:`signoff.audit.proposals`).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from signoff.audit.cli_common import EXIT_CODES, add_json, emit, open_existing, verb
from signoff.audit.errors import UnusableInput

if TYPE_CHECKING:
    from signoff.audit.policies import PolicyDef
    from signoff.audit.reviews import ReviewService

# Each verb imports what it needs when it runs: `audit --help` loads no database driver (tests/test_startup.py).


def _service(args: argparse.Namespace) -> ReviewService:
    from signoff.audit.reviews import ReviewService

    return ReviewService(open_existing(args))


def _admin_key(args: argparse.Namespace) -> Any:
    from signoff.audit.keys import read_private_key

    if not args.admin_key:
        raise UnusableInput("--admin-key: expected the admin's key file (or env SIGNOFF_ADMIN_KEY), found none")
    return read_private_key(args.admin_key)


def _value(text: str) -> Any:
    """``--var`` values: JSON where it parses (``1000``, ``["bob","ann"]``, ``true``), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def policy_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``policy.set`` body the options describe (checked by ``ReviewService.set_policy``)."""
    body: dict[str, Any] = {"policy": args.name, "tools": args.tools}
    if args.approvals is not None:
        body["approvals"] = args.approvals
    if args.role is not None:
        body["role"] = args.role
    if args.review_when is not None:
        body["review_when"] = args.review_when
    variables = {}
    for pair in args.var or ():
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UnusableInput(f"--var: expected name=value, found {pair!r}")
        variables[name] = _value(value)
    if variables:
        body["vars"] = variables
    if args.deadline is not None:
        body["deadline_seconds"] = args.deadline
    if args.escalate_to is not None:
        escalate: dict[str, Any] = {"to_role": args.escalate_to}
        if args.escalate_after is not None:
            escalate["after_seconds"] = args.escalate_after
        if args.escalate_at is not None:
            escalate["at_fraction"] = args.escalate_at
        body["escalate"] = escalate
    elif args.escalate_after is not None or args.escalate_at is not None:
        raise UnusableInput("--escalate-to: expected the role to escalate to, found none")
    if args.claim_seconds is not None:
        body["claim_seconds"] = args.claim_seconds
    if args.private is not None:
        body["private"] = [name for name in args.private.split(",") if name]
    if args.retain_values is not None:
        body["retain_values"] = args.retain_values
    if args.self_approval:
        body["self_approval"] = True
    return body


def describe(policy: PolicyDef) -> dict[str, Any]:
    return {
        "policy": policy.name,
        "tools": policy.tools,
        "seq": policy.seq,
        "approvals": policy.approvals,
        "role": policy.role,
        "review_when": policy.review_when,
        "vars": policy.vars,
        "deadline_seconds": policy.deadline_seconds,
        "escalate": policy.escalate,
        "claim_seconds": policy.claim_seconds,
        "retired": policy.retired,
        "self_approval": policy.self_approval,
    }


def cmd_set(args: argparse.Namespace) -> int:
    svc = _service(args)
    body = policy_body(args)
    entry = svc.set_policy(body, admin=_admin_key(args))
    emit(args, {"policy": args.name, "seq": entry.seq, "body": body}, f"set policy {args.name} at seq {entry.seq}")
    return 0


def cmd_retire(args: argparse.Namespace) -> int:
    svc = _service(args)
    current = next((p for p in svc.policies() if p.name == args.name and not p.retired), None)
    if current is None:
        raise UnusableInput(
            f"policy: expected a policy in force named {args.name!r}, found none (see audit policy list)"
        )
    body = {"policy": current.name, "tools": current.tools, "retired": True}
    entry = svc.set_policy(body, admin=_admin_key(args))
    emit(args, {"policy": args.name, "seq": entry.seq}, f"retired policy {args.name} at seq {entry.seq}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    svc = _service(args)
    found = [describe(p) for p in svc.policies() if args.all or not p.retired]

    def text() -> None:
        if not found:
            print("no policies: every gated call waits for one person whose role covers it")
        for p in svc.policies():
            if p.retired and not args.all:
                continue
            rule = f"a person reviews when {p.review_when}" if p.review_when else "a person reviews every call"
            lines = [
                f"{p.name} (seq {p.seq}){' RETIRED' if p.retired else ''}: tools {p.tools}",
                f"  {rule}; {p.approvals} approval{'s' if p.approvals > 1 else ''}"
                + (f" by role {p.role}" if p.role else ""),
            ]
            if p.vars:
                lines.append(f"  vars {json.dumps(p.vars, ensure_ascii=False)}")
            if p.deadline_seconds is not None:
                lines.append(f"  deadline {p.deadline_seconds:g} s")
            if p.self_approval:
                lines.append("  the person the agent acts for may approve their own call")
            if p.escalate is not None:
                from signoff.audit.policies import escalation_summary

                lines.append(f"  {escalation_summary(p.escalate)}")
            print("\n".join(lines))

    emit(args, found, text)
    return 0


def cmd_proposals(args: argparse.Namespace) -> int:
    svc = _service(args)
    found = [p.to_json() for p in svc.proposals() if args.all or p.state == "open"]

    def text() -> None:
        if not found:
            print("no open proposal" if not args.all else "no proposal")
        for p in found:
            state = p["state"] + (f" at seq {p['closed_seq']}" if p["closed_seq"] is not None else "")
            print(f"{p['proposal']}  {state}  by {p['proposer']} (seq {p['seq']}) for {p['tool']}")
            print(f"  no person reviews a call when {p['allow']}")
            print(f"  policy {p['policy']['policy']} then: a person reviews when {p['policy'].get('review_when')}")
            if p["reason"]:
                print(f"  declined: {p['reason']}")

    emit(args, found, text)
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    svc = _service(args)
    entry = svc.approve_proposal(args.proposal, admin=_admin_key(args))
    emit(
        args,
        {"proposal": args.proposal, "policy": entry.body["policy"], "seq": entry.seq},
        f"approved {args.proposal}: policy {entry.body['policy']} set at seq {entry.seq}, in force from now on",
    )
    return 0


def cmd_decline(args: argparse.Namespace) -> int:
    svc = _service(args)
    entry = svc.decline_proposal(args.proposal, reason=args.reason, admin=_admin_key(args))
    emit(args, {"proposal": args.proposal, "seq": entry.seq}, f"declined {args.proposal} at seq {entry.seq}")
    return 0


def register(sub: Any, admin_key: str | None) -> None:
    policy = sub.add_parser(
        "policy",
        help="review policies on the log: set, list, retire; proposals, approve, decline",
        description="Review policies on the log: how many people approve which tools, when a call needs a "
        "person at all, escalation and claims. Each verb has its own --help.",
        epilog=f"example:\n  audit policy set four-eyes --tools 'transfer_*' --approvals 2 --admin-key admin.pem\n"
        f"  audit policy list\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = policy.add_subparsers(dest="policy_command", required=True, metavar="VERB")

    setter = verb(
        verbs, "set", "add or replace a review policy (signed by the admin key)",
        "audit policy set four-eyes --tools 'transfer_*' --approvals 2 --role finance "
        "--review-when 'args.amount > vars.limit' --var limit=1000 --admin-key admin.pem",
        cmd_set,
    )  # fmt: skip
    setter.add_argument("name", help="the policy's name (setting it again replaces it)")
    setter.add_argument("--tools", required=True, help="the tool name or glob it covers")
    setter.add_argument("--approvals", type=int, help="how many different people must approve (default 1)")
    setter.add_argument("--role", help="the role a reviewer needs")
    setter.add_argument(
        "--review-when", help="a CEL rule over args, tool, agent, app, user, vars: true when a person must review"
    )
    setter.add_argument("--var", action="append", help="name=value for the rule's vars (JSON values; repeatable)")
    setter.add_argument("--deadline", type=float, help="seconds a review stays open")
    setter.add_argument("--escalate-to", help="the role a review still pending escalates to")
    setter.add_argument("--escalate-after", type=float, help="seconds after opening")
    setter.add_argument("--escalate-at", type=float, help="or a fraction of the deadline, e.g. 0.5")
    setter.add_argument("--claim-seconds", type=float, help="how long a reviewer's claim lasts (default 900)")
    setter.add_argument(
        "--private", help="sealed logs: the args members kept beside the log, comma-separated (default: all)"
    )
    setter.add_argument("--retain-values", help="sealed logs: how long values are kept, e.g. 180d, 12h")
    setter.add_argument(
        "--self-approval",
        action="store_true",
        help="let the person on whose behalf the agent asked approve their own call "
        "(by default they may only reject it)",
    )
    setter.add_argument("--admin-key", default=admin_key, help="the admin's key file (env SIGNOFF_ADMIN_KEY)")
    add_json(setter)

    lister = verb(verbs, "list", "list the policies in force", "audit policy list --json", cmd_list)
    lister.add_argument("--all", action="store_true", help="retired ones too")
    add_json(lister)

    retire = verb(
        verbs, "retire", "end a policy (signed by the admin key)",
        "audit policy retire four-eyes --admin-key admin.pem", cmd_retire,
    )  # fmt: skip
    retire.add_argument("name")
    retire.add_argument("--admin-key", default=admin_key, help="the admin's key file (env SIGNOFF_ADMIN_KEY)")
    add_json(retire)

    proposed = verb(
        verbs, "proposals", "list the standing rules reviewers proposed that wait for an admin (--all: every one)",
        "audit policy proposals", cmd_proposals,
    )  # fmt: skip
    proposed.add_argument("--all", action="store_true", help="approved and declined ones too")
    add_json(proposed)

    approve = verb(
        verbs, "approve", "approve a proposal: sign its policy exactly (policy.set), in force from then on",
        "audit policy approve pp_… --admin-key admin.pem", cmd_approve,
    )  # fmt: skip
    approve.add_argument("proposal", help="the proposal id (see `audit policy proposals`)")
    approve.add_argument("--admin-key", default=admin_key, help="the admin's key file (env SIGNOFF_ADMIN_KEY)")
    add_json(approve)

    decline = verb(
        verbs, "decline", "decline a proposal, with a reason the proposer reads; nothing changes",
        "audit policy decline pp_… --reason 'too broad' --admin-key admin.pem", cmd_decline,
    )  # fmt: skip
    decline.add_argument("proposal")
    decline.add_argument("--reason", required=True)
    decline.add_argument("--admin-key", default=admin_key, help="the admin's key file (env SIGNOFF_ADMIN_KEY)")
    add_json(decline)
