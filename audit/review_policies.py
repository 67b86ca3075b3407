"""Teams and policies on the log: policies (``policy.set``), calls no person needs to see
(``review.auto_approved``), escalation (``review.escalated``) and claims (``review.claimed``).

:class:`ReviewPolicies` is a base of :class:`signoff.audit.reviews.ReviewService`. The pure rules
are :mod:`signoff.audit.policies` (the policy and its CEL rule) and :mod:`signoff.audit.rules`;
each operation here is one transaction that checks them against state read after the head lock.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import insert

from signoff.audit import policies, rules, sealing, values
from signoff.audit.canonical import check
from signoff.audit.decided import read_review
from signoff.audit.entry import Entry, check_actor, format_time, later, parse_time
from signoff.audit.errors import InvalidEntry, NotAllowed
from signoff.audit.keys import Signer
from signoff.audit.limits import MAX_ARGS_BYTES, bounded, bounded_seconds
from signoff.audit.policies import PolicyDef
from signoff.audit.reader import parse_entry
from signoff.audit.review_delegations import ReviewDelegations
from signoff.audit.review_types import CallSpec, Policy, Review, state_from_row
from signoff.audit.reviewers import SERVICE
from signoff.audit.store import Tx
from signoff.audit.tables import ReviewRow

# ``log || ''`` keeps SQLite on the subject index: with a plain ``log = ?`` it walks the whole (log, seq) key
# to serve ORDER BY seq, a scan of the log on every review opened (2 ms at 8k entries, growing).
POLICIES_SQL = (
    "SELECT seq, raw FROM signoff_entry WHERE log || '' = ? AND subject >= 'policy:' AND subject < 'policy;' "
    "ORDER BY seq"
)
_OPEN_WITH_ESCALATION = (
    "SELECT * FROM signoff_review WHERE log = ? AND status = 'pending' AND data LIKE ? ORDER BY opened_seq"
)
_ESCALATES = '%"escalate"%'  # a cheap prefilter: reviews whose policy names an escalation
_SAME_CALL = "SELECT id FROM signoff_review WHERE log = ? AND app = ? AND session = ? AND confirmation_id = ?"
_REVIEW_SQL = "SELECT * FROM signoff_review WHERE id = ? AND log = ?"
_DATA_SQL = "UPDATE signoff_review SET data = ? WHERE id = ?"


def policy_entries(rows: Iterable[Any]) -> list[Entry]:
    """Every ``policy.set`` among ``rows`` (seq, raw), oldest first."""
    return [item for item in (parse_entry(bytes(row.raw)) for row in rows) if item.kind == "policy.set"]


def policies_from(entries: Iterable[Entry]) -> list[PolicyDef]:
    return [policies.parse(item.body, item.seq, on_log=True) for item in entries]


def effective(
    given: Policy, in_force: PolicyDef | None, *, sealed: bool = False, retain: float | None = None
) -> Policy:
    """The policy a review is opened under: the log's policy for the tool (an admin's) wins over the app's
    role and deadline; the app may only ask for more approvals, never fewer. On a sealed log the review
    also records which args members are private and how long its values are kept (``retain``)."""
    if in_force is None:  # (self_approval is only ever the log's: an admin-signed policy field)
        plain = replace(given, self_approval=False)
        return replace(plain, private=None, retain_seconds=retain) if sealed else plain
    return Policy(
        role=in_force.role if in_force.role is not None else given.role,
        deadline_seconds=in_force.deadline_seconds if in_force.deadline_seconds is not None else given.deadline_seconds,
        approvals=max(in_force.approvals, given.approvals),
        name=in_force.name,
        seq=in_force.seq,
        digest=in_force.digest,
        escalate=in_force.escalate,
        claim_seconds=in_force.claim_seconds,
        private=in_force.private if sealed else None,
        retain_seconds=retain if sealed else None,
        self_approval=in_force.self_approval,
    )


class ReviewPolicies(ReviewDelegations):
    """Policies, auto-approvals, escalation and claims over :attr:`store`."""

    # -- policies ----------------------------------------------------------------------

    def policies(self) -> list[PolicyDef]:
        """The policies on the log, one per name (the newest ``policy.set`` of each), retired ones included."""
        latest: dict[str, PolicyDef] = {}
        found = self._proven_only(policy_entries(self.store.read_rows(POLICIES_SQL, self.store.log_id)))
        for policy in policies_from(found):
            latest[policy.name] = policy
        return list(latest.values())

    def policy_for(self, tool: str) -> PolicyDef | None:
        return policies.in_force(self.policies(), tool)

    def set_policy(self, body: dict[str, Any], *, admin: Signer, actor: str | None = None) -> Entry:
        """``policy.set`` (signed by an admin): add or replace the policy named ``body["policy"]``."""
        bounded(body, "$.policy", MAX_ARGS_BYTES)
        check(body, "$.policy")
        policies.parse(body)  # refuse a bad policy before anything is written
        writer = actor or self._admin_actor(admin)

        def work(tx: Tx) -> Entry:
            sig = tx.signature(writer, "policy.set", body, None, admin)
            return tx.append(writer, "policy.set", body, sig)

        return self.store.transact(work)

    def _admin_actor(self, admin: Signer) -> str:
        return self.store.admin_actor(admin)

    def _in_force(self, tx: Tx, tool: str) -> PolicyDef | None:
        """The policy in force for ``tool`` at this transaction's head: the committed ``policy.set``
        entries, and those appended earlier in this transaction (group commit inserts the entries only
        at its commit, so they are not in the table yet)."""
        return policies.in_force(self._policy_defs(tx), tool)

    def _policy_defs(self, tx: Tx) -> list[PolicyDef]:
        # An unproven policy.set (written behind the service's back) is left out, so that no review is opened,
        # and no call auto-approved, under it; the agent's pause still opens its review under the others.
        committed = self._proven_only(policy_entries(tx.rows(POLICIES_SQL, tx.log)))
        return policies_from([*committed, *(e for e in tx.appended if e.kind == "policy.set")])

    def _opening_policy(self, tx: Tx, given: Policy, tool: str) -> Policy:
        """The policy a review of ``tool`` opens under, in this transaction (see :func:`effective`)."""
        defs = self._policy_defs(tx)
        sealed = tx.rules.sealed_values
        retain = policies.retention_for(defs, tool) if sealed else None
        return effective(given, policies.in_force(defs, tool), sealed=sealed, retain=retain)

    # -- calls no person needs to see ----------------------------------------------------

    def auto_approve(self, call: CallSpec, *, actor: str) -> tuple[Review | None, str]:
        """Record ``review.auto_approved`` if the policy in force for the tool lets the call through; else
        nothing is written and (None, why a person must review) is returned (a failing rule fails closed)."""
        check_actor(actor)
        if not actor.startswith(("agent:", "service:")):
            raise NotAllowed(f"actor: expected an agent: or service: actor, found {actor!r}")
        call_json = _checked_call(call)
        review_id = "rv_" + secrets.token_hex(8)

        def work(tx: Tx) -> tuple[bool, str]:
            earlier = tx.rows(_SAME_CALL, tx.log, call.app, call.session, call.confirmation_id)
            if earlier:  # the same call again (a re-driven invocation): its one auto-approval, not a second
                return True, str(earlier[0].id)
            policy = self._in_force(tx, call.tool)
            if policy is None or policy.review_when is None:
                return False, "no policy with a review_when rule governs this tool: a person reviews it"
            inputs = policies.rule_inputs(
                policy, args=call.args, tool=call.tool, agent=call.agent, app=call.app, user=call.user
            )
            needed, why = policies.needs_person(policy, inputs)
            if needed:
                return False, why
            recorded = call_json
            body = {"review": review_id, "call": call_json, "policy": policy.ref(), "inputs": inputs}
            if tx.rules.sealed_values:
                sealed_call, kept = sealing.seal_call(call_json, policy.private)
                retain = policies.retention_for(self._policy_defs(tx), call.tool)
                named = {**policy.ref(), **({"retain_seconds": retain} if retain is not None else {})}
                body = {
                    "review": review_id,
                    "call": sealed_call,
                    "policy": named,
                    "inputs": {**inputs, "args": sealed_call["args"]},
                }
                values.keep(tx.rows, tx.log, review_id, kept)
                recorded = sealed_call
            entry = tx.append(actor, "review.auto_approved", body, tx.signature(actor, "review.auto_approved", body))
            data = rules.auto_data(body)
            tx.conn.execute(
                insert(ReviewRow),
                {
                    "id": review_id, "log": tx.log, "frontier": "", "status": "auto_approved", "tool": call.tool,
                    "agent": call.agent, "app": call.app, "session": call.session,
                    "confirmation_id": call.confirmation_id, "call_id": call.call_id, "opened_seq": entry.seq,
                    "opened_at": entry.at, "deadline": None, "args_digest": recorded["args_digest"],
                    "decided_seq": entry.seq, "decided_by": actor, "decided_at": entry.at,
                    "final_digest": recorded["args_digest"], "data": json.dumps(data),
                },
            )  # fmt: skip
            return True, review_id

        done, outcome = self.store.transact(work)
        if done:
            return read_review(self.store, outcome), "the policy's rule lets this call through"
        return None, outcome

    # -- escalation ----------------------------------------------------------------------

    def escalate_due(self, *, actor: str = SERVICE) -> list[str]:
        """Escalate every open review whose policy's escalation time has passed by the log's clock
        (``review.escalated``); the entry's own time is the time checked, as ``audit verify`` checks it."""
        check_actor(actor)

        def work(tx: Tx) -> list[str]:
            at = tx.at
            done = []
            for row in tx.rows(_OPEN_WITH_ESCALATION, tx.log, _ESCALATES):
                data = json.loads(row.data)
                policy = Policy.from_json(data.get("policy"))
                due = policies.escalation_due(policy.escalate, policy.deadline_seconds, row.opened_at)
                state = state_from_row(row)
                if due is None or at < due or state.escalated_role is not None:
                    continue
                role = str((policy.escalate or {}).get("to_role"))
                rules.escalate(state, row.id, role, at, due)
                body = {"review": row.id, "role": role}
                sig = tx.signature(actor, "review.escalated", body, None, self.signer)
                tx.append(actor, "review.escalated", body, sig)
                data["escalated_role"] = role
                tx.rows(_DATA_SQL, json.dumps(data), row.id)
                done.append(row.id)
            return done

        return self.store.transact(work)

    def next_escalation(self) -> datetime | None:
        """The earliest escalation still to come among open reviews (for waking to escalate)."""
        times = []
        for row in self.store.read_rows(_OPEN_WITH_ESCALATION, self.store.log_id, _ESCALATES):
            data = json.loads(row.data)
            if data.get("escalated_role"):
                continue
            policy = Policy.from_json(data.get("policy"))
            due = policies.escalation_due(policy.escalate, policy.deadline_seconds, row.opened_at)
            if due is not None:
                times.append(due)
        return parse_time(min(times)) if times else None

    # -- claims --------------------------------------------------------------------------

    def claim(
        self,
        review_id: str,
        *,
        reviewer: str,
        actor: str = "service:desk",
        seconds: float | None = None,
        acting_for: str | None = None,
    ) -> str:
        """``review.claimed``: "I'm on it" for ``reviewer``, until the policy's claim time (or ``seconds``)
        passes; others see it, and it lapses by itself. ``acting_for``: the reviewer whose delegation
        ``reviewer`` would decide under (rule 2b). Returns the time it lasts until."""
        check_actor(actor)
        if seconds is not None:
            bounded_seconds(seconds, "$.seconds")

        def work(tx: Tx) -> str:
            found = tx.rows(_REVIEW_SQL, review_id, tx.log)
            state = state_from_row(found[0]) if found else None
            data = json.loads(found[0].data) if found else {}
            span = seconds or Policy.from_json(data.get("policy")).claim_seconds or 900.0
            until = format_time(later(tx.now, float(span)))
            who = self._reviewer_state(tx, reviewer)
            if acting_for is not None:
                who = self._acting(tx, reviewer, acting_for, who)
            rules.claim(state, review_id, reviewer, who, tx.at, until)
            body = {"review": review_id, "reviewer": reviewer, "until": until}
            if acting_for is not None:
                body["acting_for"] = acting_for
            tx.append(actor, "review.claimed", body, tx.signature(actor, "review.claimed", body, None, self.signer))
            data["claim"] = {"reviewer": reviewer, "until": until}
            tx.rows(_DATA_SQL, json.dumps(data), review_id)
            return until

        return self.store.transact(work)


def _checked_call(call: CallSpec) -> dict[str, Any]:
    """The call as ``review.auto_approved`` records it, checked as ``open_frontier`` checks a paused call."""
    for name in ("app", "user", "session", "invocation", "confirmation_id", "call_id", "tool"):
        value = getattr(call, name)
        if not isinstance(value, str) or not value:
            raise InvalidEntry(f"call.{name}: expected a non-empty string, found {value!r}")
    if not isinstance(call.args, dict):
        raise InvalidEntry(f"call.args: expected a JSON object, found {type(call.args).__name__}")
    bounded(call.args, "$.call.args", MAX_ARGS_BYTES)
    call_json = call.to_json()
    check(call_json, "$.call")
    return call_json


def check_policies(given: Sequence[Policy], first: int = 0) -> None:
    """Refuse an app policy that asks for an impossible quorum (naming it by its index)."""
    for index, policy in enumerate(given, start=first):
        count = policy.approvals
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= policies.MAX_APPROVALS:
            raise InvalidEntry(
                f"policies[{index}].approvals: expected an integer from 1 to {policies.MAX_APPROVALS}, found {count!r}"
            )
