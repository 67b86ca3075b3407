"""Standing rules proposed from a review (SPEC.md §7, "Proposals"), as pure functions.

A reviewer who decides a call may propose "allow this from now on": a ``policy.proposed`` entry, signed by
them, holding the whole ``policy.set`` body an admin would sign, built on the policy in force for the tool
(its ``base``) with a ``review_when`` rule that lets calls like this one through. It changes nothing:

* an admin approves it by signing exactly that body, with ``"proposal": <id>`` added, as a ``policy.set``;
  that is refused once the policy in force for the tool has changed since the proposal (it would undo the
  change), or once the proposal was approved or declined;
* or declines it (``policy.declined`` ``{proposal, reason}``).

The allowing condition is a CEL expression over the call (``tool``, ``agent``, ``args``), built by
:func:`allow_rule` from plain conditions (an argument equals a value, ends with a text, is at most a
number); the proposed ``review_when`` is ``(<base rule>) && !(<allow>)``, or ``!(<allow>)`` where the base
policy reviews every call, so nothing the base rule let through changes and only calls matching the
condition stop needing a person.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from signoff.audit import policies
from signoff.audit.errors import InvalidEntry, ProposalRefused
from signoff.audit.limits import MAX_TEXT
from signoff.audit.rules import ReviewerState, covers

PROPOSED = "policy.proposed"
DECLINED = "policy.declined"
ID = re.compile(r"^pp_[0-9a-f]{16}$")
OPS = ("equals", "ends_with", "at_most")
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Proposal:
    """One ``policy.proposed`` and what became of it."""

    id: str
    proposer: str
    tool: str
    policy: dict[str, Any]  # the policy.set body an admin signs to approve it (without "proposal")
    allow: str  # the CEL condition it lets through (the policy's review_when also says "and not this")
    base: tuple[str, int] | None  # (name, seq) of the policy in force for the tool when it was proposed
    seq: int
    at: str
    from_review: str | None = None
    note: str = ""
    state: str = "open"  # open | approved | declined
    closed_seq: int | None = None
    reason: str = ""  # a decline's

    def to_json(self) -> dict[str, Any]:
        return {
            "proposal": self.id,
            "proposer": self.proposer,
            "tool": self.tool,
            "allow": self.allow,
            "policy": self.policy,
            "base": {"policy": self.base[0], "seq": self.base[1]} if self.base else None,
            "seq": self.seq,
            "at": self.at,
            "from_review": self.from_review,
            "note": self.note,
            "state": self.state,
            "closed_seq": self.closed_seq,
            "reason": self.reason,
        }


# -- building one (the desk, a script) ---------------------------------------------------------------


def literal(value: Any) -> str:
    """A JSON scalar as a CEL literal: strings quoted (JSON escapes are CEL escapes), ints as ints and
    floats as doubles (CEL compares an int with an int, a double with a double)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return json.dumps(value)
    raise InvalidEntry(f"condition value: expected text, a number or true/false, found {type(value).__name__}")


def allow_rule(tool: str, agent: str | None, conditions: Sequence[tuple[str, str, Any]]) -> str:
    """The CEL condition a proposal allows: this tool, this agent (when given), and each ``(arg, op, value)``
    (``equals``, ``ends_with`` a text, ``at_most`` a number)."""
    terms = [f"tool == {literal(tool)}"]
    if agent:
        terms.append(f"agent == {literal(agent)}")
    for name, op, value in conditions:
        arg = f"args[{literal(str(name))}]"
        if op == "equals":
            terms.append(f"{arg} == {literal(value)}")
        elif op == "ends_with":
            if not isinstance(value, str) or not value:
                raise InvalidEntry(f"conditions.{name}: expected a text to end with, found {value!r}")
            terms.append(f"{arg}.endsWith({literal(value)})")
        elif op == "at_most":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidEntry(f"conditions.{name}: expected a number to stay at or under, found {value!r}")
            terms.append(f"{arg} <= {literal(value)}")
        else:
            raise InvalidEntry(f"conditions.{name}: expected one of {', '.join(OPS)}, found {op!r}")
    return " && ".join(terms)


def proposed_policy(base: Mapping[str, Any] | None, tool: str, allow: str) -> dict[str, Any]:
    """The ``policy.set`` body a proposal holds: the base policy's terms (its body as signed, or a new
    policy for the tool alone), with a ``review_when`` that also lets ``allow`` through."""
    if base is not None:
        body = {k: v for k, v in base.items() if k != "proposal"}
        when = body.get("review_when")
        body["review_when"] = f"({when}) && !({allow})" if when else f"!({allow})"
        return body
    name = "allow-" + _NAME.sub("-", tool).strip("-")[:60]
    return {"policy": name, "tools": tool, "review_when": f"!({allow})"}


# -- the rules (the write transaction, audit verify) --------------------------------------------------


def check_proposal(
    actor: str,
    body: Mapping[str, Any],
    proposer: ReviewerState | None,
    in_force: policies.PolicyDef | None,
    *,
    known: bool,
) -> policies.PolicyDef:
    """``policy.proposed``: a well-formed, new proposal by an enrolled, enabled reviewer whose own roles
    cover its tool, of a policy for that tool built on the policy in force for it now (``base``)."""
    extra = set(body) - {"proposal", "tool", "allow", "policy", "base", "from_review", "note"}
    if extra:
        raise InvalidEntry(
            f"body: expected only proposal, tool, allow, policy, base, from_review, note, found {sorted(extra)}"
        )
    allow = body.get("allow")
    if not isinstance(allow, str) or not allow.strip():
        raise InvalidEntry(f"body.allow: expected the CEL condition the proposal lets through, found {allow!r:.60}")
    try:
        policies.compile_rule(allow)
    except InvalidEntry as exc:
        raise InvalidEntry(str(exc).replace("policy.review_when", "body.allow", 1)) from None
    ident, tool, policy, base = body.get("proposal"), body.get("tool"), body.get("policy"), body.get("base")
    if not isinstance(ident, str) or not ID.match(ident):
        raise InvalidEntry(f"body.proposal: expected 'pp_' and 16 hex digits, found {ident!r}")
    if not isinstance(tool, str) or not tool:
        raise InvalidEntry(f"body.tool: expected the tool the rule is for, found {tool!r}")
    if not isinstance(policy, dict) or "proposal" in policy:
        raise InvalidEntry("body.policy: expected the policy.set body to propose (without a proposal field)")
    parsed = policies.parse(policy)
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_TEXT:
        raise InvalidEntry(f"body.note: expected text of at most {MAX_TEXT} characters, found {note!r:.60}")
    if parsed.retired or parsed.review_when is None or not parsed.covers(tool):
        raise InvalidEntry(
            f"body.policy: expected a live policy for {tool} with a review_when rule, found {policy!r:.120}"
        )
    if known:
        raise ProposalRefused(f"body.proposal: expected a new proposal id, found {ident} proposed already")
    if not actor.startswith("human:") or proposer is None or not proposer.enabled:
        raise ProposalRefused(f"actor: expected an enrolled, enabled reviewer, found {actor}")
    if not covers(proposer, tool, parsed.role):
        raise ProposalRefused(
            f"actor: expected a reviewer whose own roles cover {tool}{_with_role(parsed.role)}, "
            f"found {actor} with roles {list(proposer.roles)}"
        )
    expected = {"policy": in_force.name, "seq": in_force.seq} if in_force is not None else None
    if base != expected:
        raise ProposalRefused(f"body.base: expected the policy in force for {tool} now, {expected}, found {base!r}")
    if in_force is not None and (parsed.name, parsed.tools) != (in_force.name, in_force.tools):
        raise ProposalRefused(
            f"body.policy: expected a new version of policy {in_force.name} for tools {in_force.tools}, "
            f"found {parsed.name} for {parsed.tools}"
        )
    if in_force is None and (parsed.tools != tool or set(policy) != {"policy", "tools", "review_when"}):
        raise ProposalRefused(
            f"body.policy: expected a policy for {tool} alone with nothing but a review_when rule (no policy "
            f"governs it), found {policy!r:.160}"
        )
    if in_force is not None and not _same_terms(policy, in_force):
        raise ProposalRefused(
            f"body.policy: expected policy {in_force.name}'s own terms with only its review_when rule changed, "
            "found other terms"
        )
    when = f"({in_force.review_when}) && !({allow})" if in_force and in_force.review_when else f"!({allow})"
    if parsed.review_when != when:
        raise ProposalRefused(f"body.policy.review_when: expected {when!r}, found {parsed.review_when!r:.200}")
    return parsed


def _same_terms(policy: Mapping[str, Any], base: policies.PolicyDef) -> bool:
    """Whether ``policy`` is the body ``base`` was set with, its ``review_when`` aside (by the digest the
    log recorded for it: the body as signed, its own approved ``proposal`` field included)."""
    original = {k: v for k, v in policy.items() if k != "review_when"}
    if base.review_when is not None:
        original["review_when"] = base.review_when
    if base.proposal is not None:
        original["proposal"] = base.proposal
    return policies.policy_digest(original) == base.digest


def check_approval(body: Mapping[str, Any], found: Proposal | None, in_force: policies.PolicyDef | None) -> None:
    """``policy.set`` naming ``proposal``: that proposal, still open, exactly as proposed, and the policy in
    force for its tool still the one it was built on."""
    ident = body.get("proposal")
    if found is None:
        raise ProposalRefused(f"policy.proposal: expected a proposal on this log, found {ident!r} unknown")
    if found.state != "open":
        raise ProposalRefused(
            f"proposal {found.id}: expected it open, found it {found.state} at seq {found.closed_seq}"
        )
    if {k: v for k, v in body.items() if k != "proposal"} != found.policy:
        raise ProposalRefused(f"proposal {found.id}: expected the policy exactly as proposed, found another")
    now = (in_force.name, in_force.seq) if in_force is not None else None
    if now != found.base:
        raise ProposalRefused(
            f"proposal {found.id}: expected the policy in force for {found.tool} to be the one it was built on "
            f"({found.base}), found {now} (propose again on the current policy)"
        )


def check_decline(body: Mapping[str, Any], found: Proposal | None) -> None:
    """``policy.declined`` (by an admin: :mod:`signoff.audit.trust`): an open proposal, with a reason."""
    extra = set(body) - {"proposal", "reason"}
    if extra:
        raise InvalidEntry(f"body: expected only proposal and reason, found {sorted(extra)}")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_TEXT:
        raise InvalidEntry(f"body.reason: expected why the proposal is declined, found {reason!r:.60}")
    if found is None:
        raise ProposalRefused(f"body.proposal: expected a proposal on this log, found {body.get('proposal')!r} unknown")
    if found.state != "open":
        raise ProposalRefused(
            f"proposal {found.id}: expected it open, found it {found.state} at seq {found.closed_seq}"
        )


def _with_role(role: str | None) -> str:
    return f" with role {role}" if role else ""


class Proposals:
    """The proposals of a log, replayed entry by entry."""

    def __init__(self) -> None:
        self.by_id: dict[str, Proposal] = {}

    def apply(self, seq: int, kind: str, actor: str, body: Mapping[str, Any], at: str) -> None:
        """Take in an entry that passed its checks (or that a kept checkpoint proves)."""
        ident = body.get("proposal")
        if kind == PROPOSED and isinstance(ident, str):
            base = body.get("base")
            self.by_id[ident] = Proposal(
                ident,
                actor,
                str(body.get("tool")),
                dict(body.get("policy") or {}),
                str(body.get("allow") or ""),
                (str(base["policy"]), int(base["seq"])) if isinstance(base, dict) else None,
                seq,
                at,
                body.get("from_review") if isinstance(body.get("from_review"), str) else None,
                str(body.get("note") or ""),
            )
        elif kind in ("policy.set", DECLINED) and isinstance(ident, str) and ident in self.by_id:
            state = "approved" if kind == "policy.set" else "declined"
            reason = str(body.get("reason") or "") if kind == DECLINED else ""
            self.by_id[ident] = replace(self.by_id[ident], state=state, closed_seq=seq, reason=reason)
