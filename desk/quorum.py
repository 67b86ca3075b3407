"""Quorum, claims and escalation as a reviewer reads them (issue 13): how many approvals a review has
and needs, who may still give one, who said "I'm on it", and which role it was handed to.

Pure functions over the review service's values (:class:`signoff.audit.Review`,
:class:`signoff.audit.ReviewerInfo`); the rules themselves stay in :mod:`signoff.audit.rules`
(who covers a tool, a round's approvals, a claim's lapse), and ``audit`` checks them again on
every write. Nothing here decides anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from signoff.audit import rules
from signoff.audit.entry import parse_time
from signoff.desk.scope import OBSERVER, review_roles
from signoff.desk.summary import cut

MAX_NAMED = 8
"""People a page names as still able to approve; the rest are counted."""


@dataclass(frozen=True)
class Claim:
    """A claim that still holds ("I'm on it"): advice to the others, never a lock."""

    reviewer: str
    until: datetime
    mine: bool

    def to_json(self) -> dict[str, Any]:
        return {"reviewer": self.reviewer, "until": self.until}


@dataclass(frozen=True)
class Progress:
    """Where a review's approvals stand, for one reader."""

    needed: int
    round: int
    approved_by: tuple[str, ...]  # the current round's approvers, in order (after an edit, the editor first)
    still: tuple[str, ...]  # who else may approve this round: enrolled, enabled, covering the tool and role
    mine: bool  # the reader approved this round already
    labels: tuple[str, ...] = ()  # the approvers as the line names them ("X, for Y": a delegate's, rule 2b)

    @property
    def quorum(self) -> bool:
        """Whether the review needs several people (a policy's ``approvals`` > 1)."""
        return self.needed > 1

    @property
    def left(self) -> int:
        return max(0, self.needed - len(self.approved_by))

    @property
    def line(self) -> str:
        """The progress line: "1 of 2 approvals: human:alice@example.org"."""
        done = f"{len(self.approved_by)} of {self.needed} approvals"
        return f"{done}: {'; '.join(self.labels or self.approved_by)}" if self.approved_by else done

    @property
    def named(self) -> tuple[str, ...]:
        return self.still[:MAX_NAMED]

    @property
    def unnamed(self) -> int:
        return max(0, len(self.still) - MAX_NAMED)

    @property
    def stuck(self) -> bool:
        """Approvals are missing and nobody enrolled may give them (the review can only expire or be rejected)."""
        return self.left > len(self.still)


def now() -> datetime:
    return datetime.now(UTC)


def active_claim(review: Any, reader: str, at: datetime | None = None) -> Claim | None:
    """The review's claim while it holds: on a pending review, until its ``until`` passes."""
    found = getattr(review, "claim", None)
    if review.status != "pending" or not found:
        return None
    who, until = found
    try:
        ends = parse_time(until) if isinstance(until, str) else until
    except ValueError:
        return None
    if ends.tzinfo is None:
        ends = ends.replace(tzinfo=UTC)
    if ends <= (at or now()):
        return None
    return Claim(str(who), ends, str(who) == reader)


def may_approve(reviewers: Iterable[Any], review: Any) -> tuple[str, ...]:
    """Who else may approve the review's current round: enabled ``human:`` reviewers whose roles (other
    than ``observer``, which decides nothing in the desk) and tools cover the tool with the review's
    role or the role it was escalated to (:func:`signoff.audit.rules.covers`), less those who approved
    this round already."""
    approvals = tuple(getattr(review, "approvals", ()))
    lent = dict(getattr(review, "delegated", ()))
    done = {by for by, _seq in approvals} | {lent[seq] for _by, seq in approvals if seq in lent}  # seats (rule 2b)
    roles = review_roles(review)
    out = []
    for info in reviewers:
        if not info.enabled or not str(info.id).startswith("human:") or info.id in done:
            continue
        deciding = rules.ReviewerState(info.id, tuple(r for r in info.roles if r != OBSERVER), tuple(info.tools))
        if deciding.roles and any(rules.covers(deciding, review.call.tool, role) for role in roles):
            out.append(str(info.id))
    return tuple(sorted(out))


def progress(review: Any, reader: str, reviewers: Sequence[Any] | None = None) -> Progress:
    """The review's approvals this round, and (given the enrolled ``reviewers``) who may still approve."""
    approvals = tuple(getattr(review, "approvals", ()))
    approved = tuple(by for by, _seq in approvals)
    lent = dict(getattr(review, "delegated", ()))
    still = may_approve(reviewers, review) if reviewers is not None and review.status == "pending" else ()
    return Progress(
        needed=int(getattr(review, "approvals_needed", 1) or 1),
        round=int(getattr(review, "round", 0) or 0),
        approved_by=approved,
        still=still,
        mine=reader in approved,
        labels=tuple(f"{by}, for {lent[seq]}" if seq in lent else by for by, seq in approvals),
    )


def round_args(review: Any) -> dict[str, Any]:
    """The args the current round approves (``round_args``; the call's own args in round 0 and once decided)."""
    found = getattr(review, "round_args", None)
    return dict(found) if review.status == "pending" and found is not None else dict(review.call.args)


def editor(review: Any) -> str | None:
    """Who made the edit that started the current round (their approval is the round's first)."""
    if not getattr(review, "round", 0) or not getattr(review, "approvals", ()):
        return None
    return str(review.approvals[0][0])


@dataclass(frozen=True)
class Change:
    """One argument the current round changed from the agent's proposal, as a person reads it."""

    name: str
    before: str | None  # None: the agent did not set it
    after: str | None  # None: the edit removed it


def changes(proposed: dict[str, Any], current: dict[str, Any], width: int = 80) -> list[Change]:
    """The top-level arguments that differ between the agent's proposal and the round's args (the patch
    in full stays next to it; this is the line a reviewer reads)."""

    def text(value: Any) -> str:
        return cut(json.dumps(value, ensure_ascii=False, sort_keys=True), width)

    out = []
    for name in [*proposed, *(k for k in current if k not in proposed)]:
        if name in proposed and name in current and proposed[name] == current[name]:
            continue
        out.append(
            Change(
                str(name),
                text(proposed[name]) if name in proposed else None,
                text(current[name]) if name in current else None,
            )
        )
    return out


def signed_round(review: Any) -> int | None:
    """The ``round`` a decision body names: only on a review that needs several people."""
    return int(review.round) if int(getattr(review, "approvals_needed", 1) or 1) > 1 else None


__all__ = [
    "Change",
    "Claim",
    "Progress",
    "active_claim",
    "changes",
    "editor",
    "may_approve",
    "progress",
    "round_args",
    "signed_round",
]
