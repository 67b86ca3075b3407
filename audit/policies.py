"""Review policies on the log (``policy.set``, signed by an admin), as pure functions.

A policy names the tools it covers (an fnmatch glob) and says, for their calls:

* ``review_when``: a CEL expression (the Common Expression Language, through ``cel-python``)
  over the call, true when a person must review it, e.g.
  ``args.amount > 1000 || !(args.to in vars.allow)``. Its inputs are ``args``, ``tool``,
  ``agent``, ``app``, ``user`` and the policy's own ``vars``. When it is false, no person is
  asked: the call is recorded as ``review.auto_approved`` with the policy (seq and digest) and the
  inputs, so ``audit verify`` evaluates the rule again and sees why. When it cannot be evaluated
  (a missing field, a type error), it fails closed: a person reviews the call.
* ``approvals``: how many distinct people must approve (four eyes: 2). One rejection rejects.
* ``role``: the role a reviewer needs (besides the tools they are enrolled for).
* ``escalate``: ``{"after_seconds": S}`` or ``{"at_fraction": F}`` of the deadline, ``"to_role": R``:
  a review still pending then is escalated to another role (``review.escalated``).
* ``claim_seconds``: how long a reviewer's "I'm on it" claim lasts.
* ``private``: on a log with sealed values, the top-level args members kept beside the log under a
  commitment (default: all of them); the others are written into the entry in clear.
* ``proposal``: set when an admin approves a reviewer's proposal (:mod:`signoff.audit.proposals`).
* ``retain_values``: how long the values of its reviews are kept once they are done (``"180d"``,
  ``"12h"``, ``"30m"``, ``"45s"``, or seconds); ``audit retention run`` erases them after that. A policy
  for ``"*"`` that says it sets it for every tool whose own policy does not.

The policy in force for a tool is the newest ``policy.set`` whose glob matches it; a later
``policy.set`` with the same name (``policy``) replaces a policy (``"retired": true`` ends it). Every review
opened under a policy names it (``policy_seq``), so the log shows which rule decided each call.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from signoff.audit.canonical import canonical
from signoff.audit.entry import format_time, later, parse_time
from signoff.audit.errors import InvalidEntry
from signoff.audit.limits import MAX_DAYS, MAX_SECONDS, bounded_seconds

MAX_APPROVALS = 10
_FIELDS = {
    "policy", "tools", "review_when", "vars", "approvals", "role", "deadline_seconds", "escalate", "claim_seconds",
    "retired", "private", "retain_values", "self_approval", "proposal",
}  # fmt: skip
_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


@dataclass(frozen=True)
class PolicyDef:
    """One ``policy.set`` body, checked."""

    name: str
    tools: str
    seq: int = -1
    review_when: str | None = None
    vars: dict[str, Any] = field(default_factory=dict)
    approvals: int = 1
    role: str | None = None
    deadline_seconds: float | None = None
    escalate: dict[str, Any] | None = None
    claim_seconds: float = 900.0
    retired: bool = False
    digest: str = ""
    private: tuple[str, ...] | None = None
    retain_seconds: float | None = None
    self_approval: bool = False
    proposal: str | None = None  # the reviewer's proposal an admin approved with it

    def covers(self, tool: str) -> bool:
        return not self.retired and fnmatch.fnmatchcase(tool, self.tools)

    def ref(self) -> dict[str, Any]:
        """How a review names the policy it was opened under."""
        return {"name": self.name, "seq": self.seq, "digest": self.digest}


def policy_digest(body: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical(dict(body))).hexdigest()


def parse(body: Mapping[str, Any], seq: int = -1, *, on_log: bool = False) -> PolicyDef:
    """A ``policy.set`` body as a :class:`PolicyDef`; :class:`InvalidEntry` names the bad field.

    A new policy's spans (``deadline_seconds``, ``escalate.after_seconds``, ``claim_seconds``,
    ``retain_values``) are bounded (:func:`signoff.audit.limits.bounded_seconds`). ``on_log``: a body
    already on the log, written under the rules of its day, which may hold a longer span: it is read as
    it is (the times it gives stop at :data:`signoff.audit.entry.END_OF_TIME`), and a retention beyond
    any number (``"1e999d"``) as none (values kept until erased), so that such a log still verifies and
    still takes new entries."""
    extra = set(body) - _FIELDS
    if extra:
        raise InvalidEntry(f"policy: expected only the fields {sorted(_FIELDS)}, found {sorted(extra)}")
    name, tools = body.get("policy"), body.get("tools")
    if not isinstance(name, str) or not name.strip() or ":" in name:
        raise InvalidEntry(f"policy: expected a policy name (no ':'), found {name!r}")
    if not isinstance(tools, str) or not tools.strip():
        raise InvalidEntry(f"policy.tools: expected a tool name or glob, found {tools!r}")
    approvals = body.get("approvals", 1)
    if not isinstance(approvals, int) or isinstance(approvals, bool) or not 1 <= approvals <= MAX_APPROVALS:
        raise InvalidEntry(f"policy.approvals: expected an integer from 1 to {MAX_APPROVALS}, found {approvals!r}")
    when = body.get("review_when")
    if when is not None:
        if not isinstance(when, str) or not when.strip():
            raise InvalidEntry(f"policy.review_when: expected a CEL expression, found {when!r}")
        compile_rule(when)
    variables = body.get("vars", {})
    if not isinstance(variables, dict):
        raise InvalidEntry(f"policy.vars: expected an object of named values, found {type(variables).__name__}")
    role = body.get("role")
    if role is not None and (not isinstance(role, str) or not role.strip()):
        raise InvalidEntry(f"policy.role: expected a role name, found {role!r}")
    deadline = body.get("deadline_seconds")
    if deadline is not None:
        _span(deadline, "policy.deadline_seconds", on_log)
    escalate = body.get("escalate")
    if escalate is not None:
        _check_escalate(escalate, deadline, on_log)
    self_approval = body.get("self_approval", False)
    if not isinstance(self_approval, bool):
        raise InvalidEntry(f"policy.self_approval: expected true or false, found {self_approval!r}")
    proposal = body.get("proposal")  # an admin approving a reviewer's proposal (signoff.audit.proposals)
    if proposal is not None and (not isinstance(proposal, str) or not re.match(r"^pp_[0-9a-f]{16}$", proposal)):
        raise InvalidEntry(
            f"policy.proposal: expected the id of a proposal ('pp_' and 16 hex digits), found {proposal!r}"
        )
    claim = body.get("claim_seconds", 900)
    _span(claim, "policy.claim_seconds", on_log)
    return PolicyDef(
        name=name.strip(),
        tools=tools.strip(),
        seq=seq,
        review_when=when,
        vars=dict(variables),
        approvals=approvals,
        role=role,
        deadline_seconds=float(deadline) if deadline is not None else None,
        escalate=dict(escalate) if escalate is not None else None,
        claim_seconds=float(claim),
        retired=bool(body.get("retired", False)),
        digest=policy_digest(body),
        private=_private(body.get("private")),
        retain_seconds=retain_seconds(body.get("retain_values"), on_log=on_log),
        self_approval=self_approval,
        proposal=proposal,
    )


def _private(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidEntry(f"policy.private: expected a list of args member names, found {value!r:.80}")
    return tuple(value)


def retain_seconds(value: Any, *, on_log: bool = False) -> float | None:
    """``retain_values`` in seconds: ``"180d"``, ``"12h"``, ``"30m"``, ``"45s"`` or a number of seconds, at
    most :data:`MAX_DAYS` days. ``on_log`` (see :func:`parse`): longer is read as it is, and beyond any
    number as None."""
    if value is None:
        return None
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value[-1:] in _UNITS:
        try:
            seconds = float(value[:-1]) * _UNITS[value[-1]]
        except ValueError:
            seconds = None
    if seconds is None or not seconds > 0 or (not on_log and seconds > MAX_SECONDS):
        raise InvalidEntry(
            f'policy.retain_values: expected a duration > 0 and at most {MAX_DAYS:,}d such as "180d", found {value!r}'
        )
    return seconds if math.isfinite(seconds) else None


def _span(value: Any, path: str, on_log: bool) -> None:
    """A policy's span in seconds: bounded when new (:func:`signoff.audit.limits.bounded_seconds`); a
    positive number when read from the log."""
    if not on_log:
        bounded_seconds(value, path)
    elif isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidEntry(f"{path}: expected a number > 0, found {value!r}")


def retention_for(policies: Iterable[PolicyDef], tool: str) -> float | None:
    """How long the values of ``tool``'s reviews are kept: its own policy's ``retain_values``, else
    that of the newest live policy for ``"*"``; None: until erased."""
    own = in_force(policies, tool)
    if own is not None and own.retain_seconds is not None:
        return own.retain_seconds
    everything = in_force([p for p in policies if p.tools == "*"], tool)
    return everything.retain_seconds if everything is not None else None


def _check_escalate(escalate: Any, deadline: Any, on_log: bool) -> None:
    if not isinstance(escalate, dict) or not isinstance(escalate.get("to_role"), str) or not escalate["to_role"]:
        raise InvalidEntry(f"policy.escalate: expected {{to_role, after_seconds | at_fraction}}, found {escalate!r}")
    after, fraction = escalate.get("after_seconds"), escalate.get("at_fraction")
    if (after is None) == (fraction is None):
        raise InvalidEntry("policy.escalate: expected exactly one of after_seconds or at_fraction")
    if after is not None:
        _span(after, "policy.escalate.after_seconds", on_log)
    if fraction is not None:
        if not isinstance(fraction, int | float) or isinstance(fraction, bool) or not 0 < fraction < 1:
            raise InvalidEntry(f"policy.escalate.at_fraction: expected a number between 0 and 1, found {fraction!r}")
        if deadline is None:
            raise InvalidEntry("policy.escalate.at_fraction: expected the policy to set deadline_seconds")


def escalation_due(escalate: Any, deadline_seconds: Any, opened_at: str) -> str | None:
    """When a review opened at ``opened_at`` under a policy with ``escalate`` (and ``deadline_seconds``)
    escalates, in the log's time format; None when its policy does not escalate."""
    if not isinstance(escalate, Mapping):
        return None
    after = escalate.get("after_seconds")
    if after is None:
        after = float(escalate.get("at_fraction") or 0) * float(deadline_seconds or 0)
    return format_time(later(parse_time(opened_at), float(after)))


def escalation_summary(escalate: Mapping[str, Any]) -> str:
    """``escalate`` in words, for people."""
    if escalate.get("after_seconds") is not None:
        when = f"{float(escalate['after_seconds']):g} s after opening"
    else:
        when = f"at {float(escalate.get('at_fraction') or 0):.0%} of the deadline"
    return f"escalates to role {escalate.get('to_role')} {when} if still pending"


def in_force(policies: Iterable[PolicyDef], tool: str) -> PolicyDef | None:
    """The policy in force for ``tool``: the newest live one whose glob matches."""
    live: dict[str, PolicyDef] = {}
    for policy in sorted(policies, key=lambda p: p.seq):
        live[policy.name] = policy
    matching = [p for p in live.values() if p.covers(tool)]
    return max(matching, key=lambda p: p.seq) if matching else None


# -- the rule (CEL) -----------------------------------------------------------------------------


@lru_cache(maxsize=256)
def compile_rule(expression: str) -> Any:
    """A compiled CEL program; :class:`InvalidEntry` if the expression does not parse."""
    import celpy

    try:
        environment = celpy.Environment()
        return environment.program(environment.compile(expression))
    except Exception as exc:  # noqa: BLE001 - celpy raises its own family of parse errors
        raise InvalidEntry(
            f"policy.review_when: expected a CEL expression, found one that does not parse: {exc}"
        ) from None


def rule_inputs(
    policy: PolicyDef, *, args: Mapping[str, Any], tool: str, agent: str, app: str, user: str
) -> dict[str, Any]:
    """What the rule sees (and what ``review.auto_approved`` records, so it can be evaluated again)."""
    return {"args": dict(args), "tool": tool, "agent": agent, "app": app, "user": user, "vars": policy.vars}


def needs_person(policy: PolicyDef, inputs: Mapping[str, Any]) -> tuple[bool, str]:
    """Evaluate ``review_when`` on ``inputs``: (a person is needed, why). Fails closed: an error,
    or a result that is not a boolean, means a person is needed."""
    if policy.review_when is None:
        return True, "the policy reviews every call"
    import celpy

    try:
        result = compile_rule(policy.review_when).evaluate({k: celpy.json_to_cel(v) for k, v in inputs.items()})
    except Exception as exc:  # noqa: BLE001 - any evaluation failure fails closed
        return True, f"the rule could not be evaluated ({type(exc).__name__}: {exc}); a person reviews"
    if isinstance(result, celpy.celtypes.BoolType):
        return bool(result), "the rule says a person must review" if result else "the rule lets it through"
    return True, f"the rule gave {type(result).__name__}, not true or false; a person reviews"
