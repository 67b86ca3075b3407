"""Delegations on the log (``delegation.granted``, ``delegation.revoked``; SPEC.md §7 rule 2b).

:class:`ReviewDelegations` is a base of :class:`signoff.audit.reviews.ReviewService`. The pure rules are
:mod:`signoff.audit.delegation`; each operation here is one transaction that checks them against the log,
read after the head lock. Delegations are read from their own entries (the subject index's
``delegation:<delegate>`` range), never from a projection.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from signoff.audit import delegation, rules
from signoff.audit.decided import DecisionNotProven, TrustCache, prove_entry
from signoff.audit.delegation import Delegation, Delegations, Lending
from signoff.audit.entry import Entry, check_actor, format_time
from signoff.audit.errors import InvalidEntry, NotAllowed
from signoff.audit.keys import Signer
from signoff.audit.limits import bounded_text
from signoff.audit.reader import parse_entry
from signoff.audit.review_types import Review
from signoff.audit.reviewers import Reviewers
from signoff.audit.store import Tx

# ``log || ''`` keeps SQLite on the subject index (as for policies: audit/review_policies.py).
_ALL = (
    "SELECT seq, raw FROM signoff_entry WHERE log || '' = ? AND subject >= 'delegation:' "
    "AND subject < 'delegation;' ORDER BY seq"
)
_TO = "SELECT seq, raw FROM signoff_entry WHERE subject = ? AND log = ? ORDER BY seq"


log = logging.getLogger("signoff.audit")


def _entries(rows: Iterable[Any]) -> list[Entry]:
    return [parse_entry(bytes(row.raw)) for row in rows]


class ReviewDelegations(Reviewers):
    """Grant, revoke and read delegations; work out what a delegate may decide, in a transaction."""

    trust_cache: TrustCache  # the trust entries this service has proven (set by ReviewService)

    # -- proving the trust entries relied on ----------------------------------------------------

    def _proven(self, found: list[Entry]) -> list[Entry]:
        """Committed trust entries (``policy.set``, ``delegation.*``) the write path is about to rely on,
        each proven as the gate proves it (:func:`signoff.audit.decided.prove_entry`: link, writer and
        signature; once per entry and service), so that no decision or auto-approval rests on an entry
        nobody could have signed (one written into the database behind the service's back). Raises
        :class:`NotAllowed` naming the seq; ``audit verify`` names it too."""
        for entry in found:
            try:
                prove_entry(self.store, entry, self.trust_cache)
            except DecisionNotProven as exc:
                raise NotAllowed(
                    f"seq {entry.seq}: expected a {entry.kind} its writer signed, found one that is not proven "
                    f"({exc}); nothing is written on it"
                ) from None
        return found

    def _proven_only(self, found: list[Entry]) -> list[Entry]:
        """The entries that prove; one that does not is left out (nothing is in force on it) and logged:
        for the readers that list (``audit delegations``, the desk) and the policies a review opens under."""
        kept = []
        for entry in found:
            known = entry.seq in self.trust_cache.refused
            try:
                prove_entry(self.store, entry, self.trust_cache)
            except DecisionNotProven as exc:
                if not known:  # once per entry and service, not on every read
                    log.error("seq %d: %s is not proven, left out: %s", entry.seq, entry.kind, exc)
                continue
            kept.append(entry)
        return kept

    # -- inside a transaction -----------------------------------------------------------------

    def _delegations_in(self, tx: Tx, delegate: str | None = None) -> Delegations:
        """The log's delegations (to ``delegate`` only, when given), this transaction's own included."""
        if delegate is None:
            found = self._proven(_entries(tx.rows(_ALL, tx.log)))
        else:
            found = self._proven(_entries(tx.rows(_TO, f"delegation:{delegate}", tx.log)))
        seen = {e.seq for e in found}
        found += [
            e
            for e in tx.appended
            if e.kind in delegation.KINDS
            and e.seq not in seen
            and (delegate is None or e.body.get("delegate") == delegate)
        ]
        return delegation.replay(sorted(found, key=lambda e: e.seq))

    def _acting(self, tx: Tx, reviewer: str, acting_for: Any, own: rules.ReviewerState | None) -> rules.ReviewerState:
        """Rule 2b: what ``reviewer`` may decide for ``acting_for`` now (raises ``DelegationRefused``)."""
        lent = self._delegations_in(tx, reviewer).to(reviewer)
        giver = self._reviewer_state(tx, acting_for) if isinstance(acting_for, str) else None
        return delegation.acting(reviewer, acting_for, tx.at, own, giver, lent)

    # -- writing ----------------------------------------------------------------------------

    def delegate(
        self,
        delegator: str,
        delegate: str,
        *,
        until: str | datetime,
        roles: Sequence[str] | None = None,
        reason: str = "",
        sig: dict[str, Any] | None = None,
        signer: Signer | None = None,
        admin: Signer | None = None,
        delegation_id: str | None = None,
    ) -> Delegation:
        """``delegation.granted``: ``delegator`` lends ``roles`` (default: every role they hold, but
        ``observer``) to ``delegate`` until ``until``. Signed by the delegator (``sig`` made elsewhere over
        the body :func:`signoff.audit.delegation.grant_body` builds, or ``signer``, their key), or by an
        admin (``admin``, the admin key) for anyone. ``delegation_id`` (``dg_`` and 16 hex digits): the id
        the signer put in the body it signed; a new one by default."""
        check_actor(delegator, "delegator")
        check_actor(delegate, "delegate")
        until_text = format_time(until) if isinstance(until, datetime) else until
        if reason:
            bounded_text(reason, "$.reason")
        ident = delegation_id or "dg_" + secrets.token_hex(8)
        writer, admin_signer = self._enroller(admin, delegator if admin is None else None)

        def work(tx: Tx) -> Delegation:
            giver = self._reviewer_state(tx, delegator)
            wanted = (
                list(roles) if roles is not None else [r for r in (giver.roles if giver else ()) if r != rules.OBSERVER]
            )
            if not wanted:
                raise InvalidEntry(f"roles: expected roles of {delegator} to delegate, found none")
            body = delegation.grant_body(ident, delegator, delegate, wanted, until_text, reason)
            known = ident in self._delegations_in(tx).by_id
            found = delegation.check_grant(writer, body, tx.at, giver, self._reviewer_state(tx, delegate), known=known)
            signed = tx.signature(writer, delegation.GRANTED, body, sig, admin_signer or signer)
            entry = tx.append(writer, delegation.GRANTED, body, signed)
            return Delegation(
                found.id, found.delegator, found.delegate, found.roles, found.until, entry.seq, entry.at, writer
            )

        return self.store.transact(work)

    def revoke_delegation(
        self,
        delegation_id: str,
        *,
        actor: str | None = None,
        reason: str,
        sig: dict[str, Any] | None = None,
        signer: Signer | None = None,
        admin: Signer | None = None,
    ) -> Entry:
        """``delegation.revoked``: ``actor`` (the delegator or the delegate, signing with ``sig`` or
        ``signer``; or an admin, with ``admin``) ends a delegation before its ``until``."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidEntry(f"reason: expected why delegation {delegation_id} ends, found {reason!r}")
        bounded_text(reason, "$.reason")
        if admin is None and actor is None:
            raise InvalidEntry(
                "actor: expected who revokes the delegation (its delegator or delegate), or an admin key"
            )
        writer, admin_signer = self._enroller(admin, actor if admin is None else None)

        def work(tx: Tx) -> Entry:
            found = self._delegations_in(tx).by_id.get(delegation_id)
            body: dict[str, Any] = (
                delegation.revoke_body(found, reason)
                if found is not None
                else {"delegation": delegation_id, "reason": reason}
            )
            delegation.check_revoke(writer, body, found)
            return tx.append(
                writer,
                delegation.REVOKED,
                body,
                tx.signature(writer, delegation.REVOKED, body, sig, admin_signer or signer),
            )

        return self.store.transact(work)

    # -- reading ----------------------------------------------------------------------------

    def delegations(self, *, reviewer: str | None = None) -> list[Delegation]:
        """Every delegation on the log, oldest first (those from or to ``reviewer``, when given), each with
        its revocation if any; :meth:`Delegation.active` tells which are in force."""
        found = delegation.replay(self._proven_only(_entries(self.store.read_rows(_ALL, self.store.log_id))))
        out = sorted(found.by_id.values(), key=lambda d: d.seq)
        return [d for d in out if reviewer is None or reviewer in (d.delegator, d.delegate)]

    def delegations_to(self, delegate: str) -> list[Delegation]:
        """The delegations to ``delegate`` (in force or not), from their own entries."""
        rows = self.store.read_rows(_TO, f"delegation:{delegate}", self.store.log_id)
        return delegation.replay(self._proven_only(_entries(rows))).to(delegate)

    def delegation(self, delegation_id: str) -> Delegation | None:
        return next((d for d in self.delegations() if d.id == delegation_id), None)

    def lent(self, delegate: str, at: str | None = None) -> list[Lending]:
        """What each delegator lends ``delegate`` at ``at`` (default: now): the state rule 2b lets them decide
        with for that person (:func:`signoff.audit.delegation.acting`), and when the first of the delegations
        making it ends."""
        when = at or format_time(self.store.clock())
        own = self.reviewer(delegate)
        mine = self.delegations_to(delegate)
        out = []
        for giver in dict.fromkeys(d.delegator for d in mine if d.active(when)):
            info = self.reviewer(giver)
            try:
                state = delegation.acting(
                    delegate, giver, when, own.state() if own else None, info.state() if info else None, mine
                )
            except delegation.DelegationRefused:
                continue  # the delegator no longer holds what they lent, or either of them is disabled
            until = min(d.until for d in mine if d.delegator == giver and d.active(when))
            out.append(Lending(giver, state, until))
        return out

    def may_decide(self, reviewer: str, review: Review) -> bool:
        """Whether ``reviewer`` may decide the pending ``review`` now: by their own roles, or for someone
        under a delegation in force (who did not ask for the call). Who to notify and remind; the rules
        themselves are checked when a decision is written."""
        if self.can_decide(reviewer, review):
            return True
        roles = (review.policy.role,) if review.escalated_role is None else (review.policy.role, review.escalated_role)
        giver = self.acting_for(reviewer, review.tool, roles) if review.status == "pending" else None
        return giver is not None and giver != review.call.requested_by

    def acting_for(self, reviewer: str, tool: str, roles: Sequence[str | None]) -> str | None:
        """Whom ``reviewer`` would decide a review of ``tool`` (decided by ``roles``) for: None when their
        own roles cover it; else the first delegator whose delegation in force does (None when none does,
        and the decision is refused as any other)."""
        own = self.reviewer(reviewer)
        if own is not None and any(rules.covers(own.state(), tool, role) for role in roles):
            return None
        return next(
            (lent.delegator for lent in self.lent(reviewer) if any(rules.covers(lent.state, tool, r) for r in roles)),
            None,
        )
