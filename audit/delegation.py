"""Delegation: a reviewer lends their roles, or some of them, to another reviewer for a while (SPEC.md §7,
rule 2b), as pure functions.

Two entry kinds, each signed by whoever writes it:

* ``delegation.granted`` ``{delegation, delegator, delegate, roles, until, reason?}``, written by the
  delegator themselves (a ``human:`` signing with their own key or passkey) or by an admin (an ``admin:``
  actor signing with an admin key) for anyone. The roles must all be the delegator's own, as enrolled by
  an admin: a role someone holds only by delegation is never theirs to delegate, so delegations do not
  chain. ``until`` ends it.
* ``delegation.revoked`` ``{delegation, delegator, delegate, reason}``, by the delegator, the delegate
  (giving it back) or an admin, ends it earlier.

A delegate decides "for" the delegator: the decision's body names them (``acting_for``), so the person
signs that they act under a delegation, and the log shows "Bob, for Alice". Such a decision counts when,
at its own time, a delegation from that person to the decider is granted, not revoked and not past its
``until``, and the roles it lends, less any the delegator no longer holds, cover the review as rule 2
would for the delegator (their tool globs; their being enabled). What the delegate is lent is never
more than what the delegator holds at the moment of the decision.

The review service checks these in the transaction that writes each entry; ``audit verify`` and the gate
(:func:`signoff.audit.decided.prove_decision`) check them again from the log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from signoff.audit.entry import ACTOR, TIME
from signoff.audit.errors import DelegationRefused, InvalidEntry
from signoff.audit.limits import MAX_TEXT
from signoff.audit.rules import OBSERVER, ReviewerState

GRANTED = "delegation.granted"
REVOKED = "delegation.revoked"
KINDS = frozenset({GRANTED, REVOKED})
ID = re.compile(r"^dg_[0-9a-f]{16}$")
MAX_ROLES = 32


@dataclass(frozen=True)
class Delegation:
    """One ``delegation.granted`` and whether a ``delegation.revoked`` ended it (and at which seq)."""

    id: str
    delegator: str
    delegate: str
    roles: tuple[str, ...]
    until: str
    seq: int
    at: str
    by: str  # who wrote the grant: the delegator or an admin
    revoked_seq: int | None = None

    def active(self, at: str) -> bool:
        """In force at ``at``: granted, not revoked, and ``at`` before ``until`` (times share one format)."""
        return self.revoked_seq is None and at < self.until

    def to_json(self) -> dict[str, Any]:
        return {
            "delegation": self.id,
            "delegator": self.delegator,
            "delegate": self.delegate,
            "roles": list(self.roles),
            "until": self.until,
            "seq": self.seq,
            "at": self.at,
            "by": self.by,
            "revoked_seq": self.revoked_seq,
        }


@dataclass(frozen=True)
class Lending:
    """What one delegator lends a delegate now: what they may decide for them (:func:`acting`), until when."""

    delegator: str
    state: ReviewerState
    until: str  # when the first delegation making it ends


def grant_body(
    delegation: str, delegator: str, delegate: str, roles: Iterable[str], until: str, reason: str = ""
) -> dict[str, Any]:
    """The body of ``delegation.granted``, as every signer builds it (a script, the CLI, the desk's page)."""
    body: dict[str, Any] = {
        "delegation": delegation,
        "delegator": delegator,
        "delegate": delegate,
        "roles": sorted(dict.fromkeys(roles)),
        "until": until,
    }
    if reason:
        body["reason"] = reason
    return body


def revoke_body(found: Delegation, reason: str) -> dict[str, Any]:
    """The body of ``delegation.revoked`` ending ``found``."""
    return {"delegation": found.id, "delegator": found.delegator, "delegate": found.delegate, "reason": reason}


def check_grant(
    actor: str,
    body: Mapping[str, Any],
    at: str,
    delegator: ReviewerState | None,
    delegate: ReviewerState | None,
    *,
    known: bool,
) -> Delegation:
    """Rule 2b for ``delegation.granted`` at ``at``; ``delegator``/``delegate`` are the two reviewers as
    the admin enrolled them (None: not enrolled), ``known``: a delegation with this id exists already.
    Returns the delegation; raises :class:`InvalidEntry` for a malformed body, :class:`DelegationRefused`
    for one the rules refuse."""
    ident, giver, taker = body.get("delegation"), body.get("delegator"), body.get("delegate")
    roles, until, reason = body.get("roles"), body.get("until"), body.get("reason", "")
    extra = set(body) - {"delegation", "delegator", "delegate", "roles", "until", "reason"}
    if extra:
        raise InvalidEntry(f"body: expected only delegation, delegator, delegate, roles, until, reason, found {extra}")
    if not isinstance(ident, str) or not ID.match(ident):
        raise InvalidEntry(f"body.delegation: expected 'dg_' and 16 hex digits, found {ident!r}")
    for name, value in (("delegator", giver), ("delegate", taker)):
        if not isinstance(value, str) or not ACTOR.match(value) or not value.startswith("human:"):
            raise InvalidEntry(f"body.{name}: expected a human: reviewer, found {value!r}")
    if (
        not isinstance(roles, list)
        or not roles
        or len(roles) > MAX_ROLES
        or not all(isinstance(r, str) and r.strip() == r and r for r in roles)
    ):
        raise InvalidEntry(f"body.roles: expected 1 to {MAX_ROLES} role names, found {roles!r:.80}")
    if roles != sorted(set(roles)):
        raise InvalidEntry(f"body.roles: expected the role names sorted, each once, found {roles!r:.80}")
    if not isinstance(until, str) or not TIME.match(until):
        raise InvalidEntry(f"body.until: expected a time as YYYY-MM-DDTHH:MM:SS.ffffffZ, found {until!r}")
    if not isinstance(reason, str) or len(reason) > MAX_TEXT:
        raise InvalidEntry(f"body.reason: expected text of at most {MAX_TEXT} characters, found {reason!r:.60}")
    assert isinstance(giver, str) and isinstance(taker, str)
    if known:
        raise DelegationRefused(f"body.delegation: expected a new delegation id, found {ident} granted already")
    if actor != giver and not actor.startswith("admin:"):
        raise DelegationRefused(
            f"actor: expected the delegator {giver} (or an admin) to grant their delegation, found {actor}"
        )
    if giver == taker:
        raise DelegationRefused(f"body.delegate: expected someone other than the delegator, found {taker} twice")
    delegator = _enabled(delegator, giver, "body.delegator")
    _enabled(delegate, taker, "body.delegate")
    beyond = sorted(set(roles) - set(delegator.roles))
    if beyond:
        raise DelegationRefused(
            f"body.roles: expected only roles {giver} holds themselves ({sorted(delegator.roles)}; a role held "
            f"by delegation is not theirs to delegate), found {beyond}"
        )
    if until <= at:
        raise DelegationRefused(f"body.until: expected a time after the grant ({at}), found {until}")
    return Delegation(ident, giver, taker, tuple(roles), until, -1, at, actor)


def check_revoke(actor: str, body: Mapping[str, Any], found: Delegation | None) -> None:
    """Rule 2b for ``delegation.revoked``: an existing delegation, not revoked yet, ended by its delegator,
    its delegate or an admin, with a reason; the body names both people as the grant did."""
    ident, reason = body.get("delegation"), body.get("reason")
    extra = set(body) - {"delegation", "delegator", "delegate", "reason"}
    if extra:
        raise InvalidEntry(f"body: expected only delegation, delegator, delegate, reason, found {extra}")
    if not isinstance(ident, str) or not ID.match(ident):
        raise InvalidEntry(f"body.delegation: expected 'dg_' and 16 hex digits, found {ident!r}")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_TEXT:
        raise InvalidEntry(f"body.reason: expected why the delegation ends, found {reason!r:.60}")
    if found is None:
        raise DelegationRefused(f"body.delegation: expected a delegation granted on this log, found {ident} unknown")
    if (body.get("delegator"), body.get("delegate")) != (found.delegator, found.delegate):
        raise DelegationRefused(
            f"body: expected delegator {found.delegator} and delegate {found.delegate} as granted, "
            f"found {body.get('delegator')!r} and {body.get('delegate')!r}"
        )
    if found.revoked_seq is not None:
        raise DelegationRefused(
            f"delegation {ident}: expected one in force, found it revoked at seq {found.revoked_seq}"
        )
    if actor not in (found.delegator, found.delegate) and not actor.startswith("admin:"):
        raise DelegationRefused(
            f"actor: expected {found.delegator}, {found.delegate} or an admin to revoke delegation {ident}, "
            f"found {actor}"
        )


def acting(
    actor: str,
    acting_for: Any,
    at: str,
    delegate: ReviewerState | None,
    delegator: ReviewerState | None,
    delegations: Iterable[Delegation],
) -> ReviewerState:
    """Rule 2b for a decision (or claim) whose body names ``acting_for``: what ``actor`` may decide for
    them at ``at``, as a :class:`~signoff.audit.rules.ReviewerState` that rule 2 then checks like any
    reviewer's. Its roles are those the delegations in force from ``acting_for`` to ``actor`` lend, less any
    ``acting_for`` no longer holds; its tools are ``acting_for``'s. Raises :class:`DelegationRefused`."""
    if not isinstance(acting_for, str) or not acting_for.startswith("human:") or not ACTOR.match(acting_for):
        raise DelegationRefused(
            f"body.acting_for: expected the human: reviewer the decider acts for, found {acting_for!r}"
        )
    if acting_for == actor:
        raise DelegationRefused(f"body.acting_for: expected someone other than the decider, found {actor}")
    _enabled(delegate, actor, "decider")
    mine = [d for d in delegations if d.delegator == acting_for and d.delegate == actor]
    live = [d for d in mine if d.active(at)]
    if not live:
        raise DelegationRefused(
            f"decider: expected a delegation from {acting_for} to {actor} in force at {at}, found {_why_none(mine, at)}"
        )
    delegator = _enabled(delegator, acting_for, "body.acting_for")
    lent = {role for d in live for role in d.roles} & set(delegator.roles)
    lent.discard(OBSERVER)
    if not lent:
        raise DelegationRefused(
            f"decider: expected a role {acting_for} still holds among those lent to {actor} "
            f"({sorted({r for d in live for r in d.roles})}), found none (they hold {sorted(delegator.roles)})"
        )
    return ReviewerState(actor, tuple(sorted(lent)), delegator.tools, True)


def _enabled(state: ReviewerState | None, who: str, field: str) -> ReviewerState:
    if state is None or not state.enabled:
        found = "not enrolled" if state is None else "disabled"
        raise DelegationRefused(f"{field}: expected an enrolled, enabled reviewer, found {who} {found}")
    return state


def _why_none(mine: list[Delegation], at: str) -> str:
    if not mine:
        return "none granted"
    newest = max(mine, key=lambda d: d.seq)
    if newest.revoked_seq is not None:
        return f"{newest.id} revoked at seq {newest.revoked_seq}"
    return f"{newest.id} ended at {newest.until}"


class Delegations:
    """The delegations of a log, replayed entry by entry (the verifier's, the gate's and the desk's)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Delegation] = {}

    def grant(self, found: Delegation, seq: int) -> None:
        self.by_id[found.id] = Delegation(
            found.id, found.delegator, found.delegate, found.roles, found.until, seq, found.at, found.by
        )

    def revoke(self, ident: str, seq: int) -> None:
        found = self.by_id[ident]
        self.by_id[ident] = Delegation(
            found.id, found.delegator, found.delegate, found.roles, found.until, found.seq, found.at, found.by, seq
        )

    def to(self, delegate: str) -> list[Delegation]:
        return [d for d in self.by_id.values() if d.delegate == delegate]

    def apply(self, seq: int, kind: str, actor: str, body: Mapping[str, Any], at: str) -> None:
        """Take in an entry that passed its checks (or that a kept checkpoint proves)."""
        if kind == GRANTED:
            self.grant(
                Delegation(
                    str(body.get("delegation")),
                    str(body.get("delegator")),
                    str(body.get("delegate")),
                    tuple(body.get("roles") or ()),
                    str(body.get("until")),
                    seq,
                    at,
                    actor,
                ),
                seq,
            )
        elif kind == REVOKED and str(body.get("delegation")) in self.by_id:
            self.revoke(str(body.get("delegation")), seq)


def replay(entries: Iterable[Any]) -> Delegations:
    """The delegations that ``entries`` (oldest first; :class:`~signoff.audit.entry.Entry`) grant and revoke."""
    out = Delegations()
    for item in entries:
        if item.kind in KINDS:
            out.apply(item.seq, item.kind, item.actor, item.body, item.at)
    return out
