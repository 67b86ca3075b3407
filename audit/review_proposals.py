"""Standing rules proposed by reviewers, approved or declined by an admin (``policy.proposed``, ``policy.set``
with ``proposal``, ``policy.declined``; :mod:`signoff.audit.proposals` holds the pure rules).

:class:`ReviewProposals` extends :class:`~signoff.audit.review_policies.ReviewPolicies`; the service uses it
as its policy base. A draft is built from the review's own call and the policy in force for its tool; the
proposer signs the draft's body, and :meth:`ReviewProposals.propose` checks it again in the transaction that
writes it. An approval writes the proposed ``policy.set`` exactly, in a transaction that checks the proposal
is still open and the policy it was built on still in force.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from signoff.audit import policies, proposals
from signoff.audit.canonical import check
from signoff.audit.decided import read_review
from signoff.audit.entry import Entry, check_actor
from signoff.audit.errors import InvalidEntry
from signoff.audit.keys import Signer
from signoff.audit.limits import MAX_ARGS_BYTES, bounded, bounded_text
from signoff.audit.proposals import Proposal, Proposals
from signoff.audit.reader import parse_entry
from signoff.audit.review_policies import POLICIES_SQL, ReviewPolicies
from signoff.audit.store import Tx

_PROPOSALS = (
    "SELECT seq, raw FROM signoff_entry WHERE log || '' = ? AND subject >= 'proposal:' AND subject < 'proposal;' "
    "ORDER BY seq"
)
_ENTRY = "SELECT raw FROM signoff_entry WHERE log = ? AND seq = ?"


class ReviewProposals(ReviewPolicies):
    """Draft, propose, approve, decline and read proposals of standing rules."""

    def _proposals_from(self, rows: Sequence[Any]) -> Proposals:
        found = Proposals()
        for item in sorted((parse_entry(bytes(r.raw)) for r in rows), key=lambda e: e.seq):
            found.apply(item.seq, item.kind, item.actor, item.body, item.at)
        return found

    def _proposals_in(self, tx: Tx) -> Proposals:
        rows = [*tx.rows(_PROPOSALS, tx.log), *tx.rows(POLICIES_SQL, tx.log)]
        found = self._proposals_from(rows)
        for item in tx.appended:
            found.apply(item.seq, item.kind, item.actor, item.body, item.at)
        return found

    def proposals(self) -> list[Proposal]:
        """Every proposal on the log, oldest first, with its state (open, approved, declined)."""
        rows = [
            *self.store.read_rows(_PROPOSALS, self.store.log_id),
            *self.store.read_rows(POLICIES_SQL, self.store.log_id),
        ]
        return sorted(self._proposals_from(rows).by_id.values(), key=lambda p: p.seq)

    def proposal(self, proposal_id: str) -> Proposal | None:
        return next((p for p in self.proposals() if p.id == proposal_id), None)

    # -- drafting and proposing (a reviewer) --------------------------------------------------

    def draft_proposal(
        self,
        review_id: str,
        *,
        conditions: Sequence[tuple[str, str, Any]],
        agent: bool = True,
        note: str = "",
        proposal_id: str | None = None,
    ) -> dict[str, Any]:
        """The ``policy.proposed`` body for "allow calls like this from now on": the review's tool (and its
        agent, unless ``agent`` is False) and ``conditions`` on its args, over the policy in force for the
        tool. Refused (:class:`InvalidEntry`) when the rule would not let this very call through."""
        review = read_review(self.store, review_id)  # its values revealed and checked, on a sealed log
        call = review.call
        in_force = self.policy_for(call.tool)
        base_body = self._policy_body(in_force.seq) if in_force is not None else None
        allow = proposals.allow_rule(call.tool, call.agent if agent else None, list(conditions))
        policy = proposals.proposed_policy(base_body, call.tool, allow)
        parsed = policies.parse(policy)  # a rule that does not compile is refused here, before anything is signed
        args = review.final_args if review.final_args is not None else call.args
        inputs = policies.rule_inputs(parsed, args=args, tool=call.tool, agent=call.agent, app=call.app, user=call.user)
        needed, why = policies.needs_person(parsed, inputs)
        if needed:
            raise InvalidEntry(f"conditions: expected a rule that lets this very call through, found: {why}")
        body: dict[str, Any] = {
            "proposal": proposal_id or "pp_" + secrets.token_hex(8),
            "tool": call.tool,
            "allow": allow,
            "policy": policy,
            "base": {"policy": in_force.name, "seq": in_force.seq} if in_force is not None else None,
            "from_review": review_id,
        }
        if note:
            body["note"] = note
        return body

    def _policy_body(self, seq: int) -> dict[str, Any]:
        rows = self.store.read_rows(_ENTRY, self.store.log_id, seq)
        return dict(parse_entry(bytes(rows[0].raw)).body)

    def propose(
        self, body: dict[str, Any], *, proposer: str, sig: dict[str, Any] | None = None, signer: Signer | None = None
    ) -> Proposal:
        """``policy.proposed`` by ``proposer`` (signed: ``sig`` over the body :meth:`draft_proposal` built, or
        ``signer``, their key), checked in the transaction. It changes nothing until an admin approves it."""
        check_actor(proposer, "proposer")
        bounded(body, "$.body", MAX_ARGS_BYTES)
        check(body, "$.body")
        if isinstance(body.get("note"), str):
            bounded_text(body["note"], "$.body.note")

        def work(tx: Tx) -> Proposal:
            tool = str(body.get("tool"))
            known = self._proposals_in(tx)
            proposals.check_proposal(
                proposer,
                body,
                self._reviewer_state(tx, proposer),
                self._in_force(tx, tool),
                known=str(body.get("proposal")) in known.by_id,
            )
            entry = tx.append(
                proposer, proposals.PROPOSED, body, tx.signature(proposer, proposals.PROPOSED, body, sig, signer)
            )
            known.apply(entry.seq, entry.kind, entry.actor, entry.body, entry.at)
            return known.by_id[str(body["proposal"])]

        return self.store.transact(work)

    # -- deciding on one (an admin) ------------------------------------------------------------

    def approve_proposal(self, proposal_id: str, *, admin: Signer) -> Entry:
        """The admin signs the proposed policy exactly (``policy.set`` with ``proposal``): from then on it is
        the policy in force for its tools."""
        writer = self._admin_actor(admin)

        def work(tx: Tx) -> Entry:
            found = self._proposals_in(tx).by_id.get(proposal_id)
            body = {**(found.policy if found is not None else {}), "proposal": proposal_id}
            proposals.check_approval(body, found, self._in_force(tx, found.tool) if found is not None else None)
            return tx.append(writer, "policy.set", body, tx.signature(writer, "policy.set", body, None, admin))

        return self.store.transact(work)

    def decline_proposal(self, proposal_id: str, *, reason: str, admin: Signer) -> Entry:
        """``policy.declined``: the admin says no, with a reason the proposer reads; nothing changes."""
        writer = self._admin_actor(admin)
        body = {"proposal": proposal_id, "reason": reason}

        def work(tx: Tx) -> Entry:
            proposals.check_decline(body, self._proposals_in(tx).by_id.get(proposal_id))
            return tx.append(
                writer, proposals.DECLINED, body, tx.signature(writer, proposals.DECLINED, body, None, admin)
            )

        return self.store.transact(work)

    def set_policy(self, body: dict[str, Any], *, admin: Signer, actor: str | None = None) -> Entry:
        """``policy.set``; a body naming a ``proposal`` goes through :meth:`approve_proposal`'s checks."""
        if "proposal" in body:
            found = self.proposal(str(body["proposal"]))
            if found is None or {k: v for k, v in body.items() if k != "proposal"} != found.policy:
                raise InvalidEntry("policy.proposal: expected a proposal's policy exactly (use approve_proposal)")
            return self.approve_proposal(found.id, admin=admin)
        return super().set_policy(body, admin=admin, actor=actor)
