"""Reviewers and keys on the log: enrolment, the reviewer projection, and entry signatures.

:class:`Reviewers` is a base of :class:`signoff.audit.reviews.ReviewService`. Only a
``service:`` actor or an enabled admin enrolls a reviewer or disables one, or enrolls a key
for another actor (DESIGN.md "Who holds which key"); an actor may enroll its own key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select, update

from signoff.audit import rules
from signoff.audit.entry import Entry, check_actor
from signoff.audit.errors import InvalidEntry, MissingReason, NotAllowed
from signoff.audit.keys import Signer, decode_public, fingerprint
from signoff.audit.review_types import Review, ReviewerInfo, reviewer_info
from signoff.audit.store import Store, Tx
from signoff.audit.tables import KeyRow, ReviewerRow

SERVICE = "service:signoff"

# Driver-level, on the decision path (see ``audit.driver.fetch``).
_REVIEWER_SQL = "SELECT * FROM signoff_reviewer WHERE log = ? AND id = ?"


class Reviewers:
    """Reviewer and key operations over :attr:`store`, signing with :attr:`signer` where enrolled."""

    store: Store
    signer: Signer | None

    # -- helpers inside a transaction --------------------------------------------------

    def _reviewer_state(self, tx: Tx, actor: str) -> rules.ReviewerState | None:
        found = tx.rows(_REVIEWER_SQL, tx.log, actor)
        return reviewer_info(found[0]).state() if found else None

    def _signature(
        self, tx: Tx, actor: str, kind: str, body: dict[str, Any], sig: dict[str, str] | None = None
    ) -> dict[str, str] | None:
        return tx.signature(actor, kind, body, sig, self.signer)

    # -- reviewers and keys ------------------------------------------------------------

    def _check_admin(self, tx: Tx, actor: str) -> None:
        if actor.startswith("service:"):
            return
        state = self._reviewer_state(tx, actor)
        if not actor.startswith("human:") or state is None or not state.enabled or "admin" not in state.roles:
            raise NotAllowed(f"enroller: expected a service: actor or an enabled admin, found {actor!r}")

    def enroll_reviewer(
        self,
        reviewer: str,
        *,
        roles: Sequence[str],
        tools: Sequence[str] = (),
        key: str | None = None,
        actor: str = SERVICE,
    ) -> Entry:
        """Put a reviewer, their roles and tool globs (and optionally a public key) on the log."""
        check_actor(actor)
        check_actor(reviewer, "reviewer")
        if not reviewer.startswith("human:"):
            raise NotAllowed(f"reviewer: expected a human: actor, found {reviewer!r}")
        role_list = [str(r) for r in roles if str(r).strip()]
        if not role_list:
            raise InvalidEntry("roles: expected at least one role, found none")
        body: dict[str, Any] = {"reviewer": reviewer, "roles": role_list, "tools": [str(t) for t in tools]}
        if key is not None:
            decode_public(key)
            body["key"] = key

        def work(tx: Tx) -> Entry:
            self._check_admin(tx, actor)
            entry = tx.append(actor, "reviewer.enrolled", body, self._signature(tx, actor, "reviewer.enrolled", body))
            values = {"roles": json.dumps(role_list), "tools": json.dumps(body["tools"]), "enabled": True}
            exists = self._reviewer_state(tx, reviewer) is not None
            if exists:
                tx.conn.execute(
                    update(ReviewerRow)
                    .where(ReviewerRow.log == tx.log, ReviewerRow.id == reviewer)  # type: ignore[arg-type]
                    .values(**values, enrolled_seq=entry.seq)
                )
            else:
                tx.conn.execute(
                    insert(ReviewerRow), {"log": tx.log, "id": reviewer, "enrolled_seq": entry.seq, **values}
                )
            if key is not None:
                tx.conn.execute(
                    insert(KeyRow),
                    {"log": tx.log, "fingerprint": fingerprint(key), "actor": reviewer, "public_key": key,
                     "enrolled_seq": entry.seq},
                )  # fmt: skip
            return entry

        return self.store.transact(work)

    def enroll_key(self, owner: str, key: str, *, actor: str = SERVICE) -> Entry:
        """``key.enrolled``: bind a public Ed25519 key to an actor; from then on it signs its entries."""
        check_actor(actor)

        def work(tx: Tx) -> Entry:
            if actor != owner:
                self._check_admin(tx, actor)
            return tx.enroll_key(actor, owner, key, signer=self.signer)

        return self.store.transact(work)

    def disable_reviewer(self, reviewer: str, *, reason: str, actor: str = SERVICE) -> Entry:
        check_actor(actor)
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"reason: expected a reason for disabling {reviewer}, found {reason!r}")
        body = {"reviewer": reviewer, "reason": reason}

        def work(tx: Tx) -> Entry:
            self._check_admin(tx, actor)
            if self._reviewer_state(tx, reviewer) is None:
                raise NotAllowed(f"reviewer: expected an enrolled reviewer, found {reviewer!r} not enrolled")
            entry = tx.append(actor, "reviewer.disabled", body, self._signature(tx, actor, "reviewer.disabled", body))
            tx.conn.execute(
                update(ReviewerRow)
                .where(ReviewerRow.log == tx.log, ReviewerRow.id == reviewer)  # type: ignore[arg-type]
                .values(enabled=False)
            )
            return entry

        return self.store.transact(work)

    def reviewer(self, reviewer: str) -> ReviewerInfo | None:
        found = self.store.read_rows(_REVIEWER_SQL, self.store.log_id, reviewer)
        return reviewer_info(found[0]) if found else None

    def reviewers(self) -> list[ReviewerInfo]:
        with self.store.read_engine.connect() as conn:
            rows = conn.execute(
                select(ReviewerRow).where(ReviewerRow.log == self.store.log_id).order_by(ReviewerRow.id)  # type: ignore[arg-type]
            ).all()
        return [reviewer_info(row) for row in rows]

    def can_decide(self, reviewer: str, review: Review) -> bool:
        info = self.reviewer(reviewer)
        return (
            info is not None
            and reviewer.startswith("human:")
            and review.status == "pending"
            and rules.covers(info.state(), review.tool, review.policy.role)
        )
