"""Reviewers and keys on the log: enrolment, the reviewer projection, and entry signatures.

:class:`Reviewers` is a base of :class:`signoff.audit.reviews.ReviewService`. On a log under
rules version 2 (every log ``audit init`` makes), only an administrator, signing with an
enrolled admin key, enrolls or disables a reviewer and enrolls or revokes a key; a reviewer
enrolls a passkey of their own with the one-time code the admin gave them
(DESIGN.md "Who holds which key", :mod:`signoff.audit.trust`). Older logs keep their rules: a
``service:`` actor or an enabled admin reviewer enrolls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select, update

from signoff.audit import rules, trust
from signoff.audit.entry import Entry, check_actor
from signoff.audit.errors import InvalidEntry, MissingReason, NotAllowed
from signoff.audit.keys import Signer, decode_public
from signoff.audit.limits import MAX_TEXT, bounded_text
from signoff.audit.review_types import Review, ReviewerInfo, reviewer_info
from signoff.audit.store import Store, Tx
from signoff.audit.tables import ReviewerRow
from signoff.audit.trust import PublicKey
from signoff.audit.webauthn import Passkey

SERVICE = "service:signoff"
ANY_TOOL = "*"

# Driver-level, on the decision path (see ``audit.driver.fetch``).
_REVIEWER_SQL = "SELECT * FROM signoff_reviewer WHERE log = ? AND id = ?"
_KEYS_SQL = (
    "SELECT fingerprint, public_key, enrolled_seq FROM signoff_key WHERE log = ? AND actor = ? ORDER BY enrolled_seq"
)
_ADMIN_OF_KEY = "SELECT actor FROM signoff_key WHERE log = ? AND fingerprint = ? ORDER BY actor"


class Reviewers:
    """Reviewer and key operations over :attr:`store`, signing with :attr:`signer` where enrolled."""

    store: Store
    signer: Signer | None

    # -- helpers inside a transaction --------------------------------------------------

    def _reviewer_state(self, tx: Tx, actor: str) -> rules.ReviewerState | None:
        found = tx.rows(_REVIEWER_SQL, tx.log, actor)
        return reviewer_info(found[0]).state() if found else None

    def _signature(
        self, tx: Tx, actor: str, kind: str, body: dict[str, Any], sig: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        return tx.signature(actor, kind, body, sig, self.signer)

    def _legacy_admin(self, tx: Tx, actor: str) -> bool:
        """Rules version 1: an enabled reviewer with the admin role may enroll."""
        state = self._reviewer_state(tx, actor) if actor.startswith("human:") else None
        return state is not None and state.enabled and "admin" in state.roles

    def _enroller(self, admin: Signer | None, actor: str | None) -> tuple[str, Signer | None]:
        """Who writes an enrolment: the admin actor whose key ``admin`` is (rules 2), or ``actor``."""
        if admin is None:
            return actor or SERVICE, None
        if actor is not None:
            return actor, admin
        owners = [
            row.actor
            for row in self.store.read_rows(_ADMIN_OF_KEY, self.store.log_id, admin.fingerprint)
            if str(row.actor).startswith("admin:")
        ]
        if not owners:
            raise NotAllowed(
                f"admin key: expected a key enrolled on this log for an admin: actor, found {admin.fingerprint}"
            )
        return owners[0], admin

    def _authorise(self, tx: Tx, actor: str, kind: str, body: dict[str, Any], admin: Signer | None) -> Any:
        return tx.signature(actor, kind, body, None, admin or self.signer, legacy_admin=self._legacy_admin(tx, actor))

    # -- reviewers -------------------------------------------------------------------

    def enroll_reviewer(
        self,
        reviewer: str,
        *,
        roles: Sequence[str],
        tools: Sequence[str] = (),
        key: str | None = None,
        code: str | None = None,
        replace: bool = False,
        admin: Signer | None = None,
        actor: str | None = None,
    ) -> Entry:
        """Put a reviewer, their roles and tool globs on the log (``reviewer.enrolled``).

        ``tools`` names the tools they may decide (globs); ``["*"]`` is any tool, and must be said
        (an empty list is refused on a log under rules version 2). ``key`` enrolls an Ed25519 key
        file's public half with them; ``code`` is a one-time code (give it to them) whose derived
        public key goes on the log, so that they can later enroll a passkey of their own with it.
        A reviewer already enrolled with other roles or tools is re-enrolled only with
        ``replace=True``. ``admin`` signs it.
        """
        writer, signer = self._enroller(admin, actor)
        check_actor(writer)
        check_actor(reviewer, "reviewer")
        if not reviewer.startswith("human:"):
            raise NotAllowed(f"reviewer: expected a human: actor, found {reviewer!r}")
        role_list = [str(r).strip() for r in roles if str(r).strip()]
        if not role_list:
            raise InvalidEntry("roles: expected at least one role, found none")
        tool_list = [str(t).strip() for t in tools if str(t).strip()]
        body: dict[str, Any] = {"reviewer": reviewer, "roles": role_list, "tools": tool_list}
        if key is not None:
            decode_public(key)
            body["key"] = key
        if code is not None:
            body["code_key"] = trust.code_signer(code).public

        def work(tx: Tx) -> Entry:
            if tx.rules.version >= trust.RULES_VERSION and not tool_list:
                raise InvalidEntry(
                    f"tools: expected the tool globs {reviewer} may decide, or {ANY_TOOL!r} for any tool, found none"
                )
            before = self._reviewer_state(tx, reviewer)
            if (
                before is not None
                and not replace
                and (before.roles, before.tools) != (tuple(role_list), tuple(tool_list))
            ):
                raise InvalidEntry(
                    f"reviewer {reviewer}: expected a new reviewer or the same roles and tools, found them enrolled "
                    f"with roles {list(before.roles)} and tools {list(before.tools) or ['any (empty list)']}; "
                    f"re-enroll with replace=True (CLI: --replace) to change them to roles {role_list}, "
                    f"tools {tool_list}"
                )
            if key is not None:
                tx.check_key_free(reviewer, PublicKey.enrolled(reviewer, {"alg": "Ed25519", "key": key}, 0).fingerprint)
            entry = tx.append(
                writer, "reviewer.enrolled", body, self._authorise(tx, writer, "reviewer.enrolled", body, signer)
            )
            values = {"roles": json.dumps(role_list), "tools": json.dumps(tool_list), "enabled": True}
            if before is not None:
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
                tx.add_key_row(PublicKey.enrolled(reviewer, {"alg": "Ed25519", "key": key}, entry.seq), entry.seq)
            return entry

        return self.store.transact(work)

    def disable_reviewer(
        self, reviewer: str, *, reason: str, admin: Signer | None = None, actor: str | None = None
    ) -> Entry:
        writer, signer = self._enroller(admin, actor)
        check_actor(writer)
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"reason: expected a reason for disabling {reviewer}, found {reason!r}")
        bounded_text(reason, "$.reason", MAX_TEXT)
        body = {"reviewer": reviewer, "reason": reason}

        def work(tx: Tx) -> Entry:
            if self._reviewer_state(tx, reviewer) is None:
                raise NotAllowed(f"reviewer: expected an enrolled reviewer, found {reviewer!r} not enrolled")
            entry = tx.append(
                writer, "reviewer.disabled", body, self._authorise(tx, writer, "reviewer.disabled", body, signer)
            )
            tx.conn.execute(
                update(ReviewerRow)
                .where(ReviewerRow.log == tx.log, ReviewerRow.id == reviewer)  # type: ignore[arg-type]
                .values(enabled=False)
            )
            return entry

        return self.store.transact(work)

    # -- keys -------------------------------------------------------------------------

    def enroll_key(self, owner: str, key: str, *, admin: Signer | None = None, actor: str | None = None) -> Entry:
        """``key.enrolled``: bind an Ed25519 public key to an actor; from then on it signs its entries."""
        writer, signer = self._enroller(admin, actor)
        check_actor(writer)
        body = {"actor": owner, "key": key, "alg": "Ed25519"}

        def work(tx: Tx) -> Entry:
            return tx.enroll_key(
                writer, owner, body, signer=signer or self.signer, legacy_admin=self._legacy_admin(tx, writer)
            )

        return self.store.transact(work)

    def enroll_passkey(self, reviewer: str, passkey: Passkey, *, code: str) -> Entry:
        """A reviewer enrolls their own passkey with the one-time code an admin gave them: the entry is
        signed with the key derived from the code, whose public half the admin put on the log."""
        check_actor(reviewer, "reviewer")
        body: dict[str, Any] = {"actor": reviewer, **passkey.to_body(), "enrolment": "code"}
        signer = trust.code_signer(code)
        return self.store.transact(lambda tx: tx.enroll_key(reviewer, reviewer, body, signer=signer))

    def revoke_key(
        self, owner: str, fingerprint: str, *, reason: str, admin: Signer | None = None, actor: str | None = None
    ) -> Entry:
        """``key.revoked``: the key signs nothing from now on (a lost passkey, a leaked key file)."""
        writer, signer = self._enroller(admin, actor)
        check_actor(writer)
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"reason: expected a reason for revoking {fingerprint}, found {reason!r}")
        return self.store.transact(lambda tx: tx.revoke_key(writer, owner, fingerprint, reason, signer))

    def keys(self, actor: str) -> list[PublicKey]:
        """``actor``'s active keys (oldest first), as the key projection holds them."""
        return [
            PublicKey.from_stored(actor, row.public_key, row.enrolled_seq)
            for row in self.store.read_rows(_KEYS_SQL, self.store.log_id, actor)
        ]

    # -- reads ------------------------------------------------------------------------

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
            and any(rules.covers(info.state(), review.tool, role) for role in _deciding_roles(review))
        )


def _deciding_roles(review: Review) -> tuple[str | None, ...]:
    """The review's role, and the role it was escalated to: a reviewer with either may decide."""
    role = review.policy.role
    return (role,) if review.escalated_role is None else (role, review.escalated_role)
