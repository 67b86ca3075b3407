"""A decision's values on a sealed log, in its write transaction (SPEC.md §10, :mod:`.sealing`).

:class:`Sealer` is what ``ReviewService``'s decisions build their bodies with: it reveals the round's
values (each checked against its commitment), seals the decision's new ones (an edit's changed
members, an answer) and keeps them for the transaction to write, and reveals the review returned.
On a log that keeps values in its entries it passes everything through.
"""

from __future__ import annotations

import json
from typing import Any

from signoff.audit import rules, sealing, values
from signoff.audit.errors import ExecutionMismatch, InvalidEntry
from signoff.audit.revealing import reveal_review
from signoff.audit.review_types import Policy, Review
from signoff.audit.store import Tx


class Sealer:
    """A decision's values on a sealed log, in its transaction: the round's revealed (and checked),
    the new ones sealed and kept; on a log that keeps values in its entries, it passes them through."""

    def __init__(self, tx: Tx, row: Any, review_id: str) -> None:
        self.sealed = tx.rules.sealed_values and row is not None
        self.review_id = review_id
        self.kept: list[sealing.Kept] = []
        self._private = Policy.from_json(json.loads(row.data).get("policy")).private if row is not None else None
        self._memo: dict[str, tuple[bytes, Any]] = {}
        self._tx = tx
        self._lookup: sealing.Lookup | None = None if self.sealed else values.none

    def get(self, commitment: str) -> tuple[bytes, Any] | None:
        found = self._memo.get(commitment)
        if found is None:
            if self._lookup is None:  # read the review's values once, when first needed
                self._lookup = values.lookup_for(self._tx.rows, self._tx.log, [self.review_id])
            found = self._lookup(commitment)
            if found is not None:
                self._memo[commitment] = found
        return found

    def args(self, sealed_args: dict[str, Any]) -> dict[str, Any]:
        if not self.sealed:
            return sealed_args
        try:
            return sealing.reveal_args(sealed_args, self.get, f"review {self.review_id}: args")
        except sealing.ValueProblem as exc:
            raise ExecutionMismatch(str(exc)) from None

    def payload(self, payload: Any, salt: bytes | None, round_payload: Any) -> Any:
        """The answer as the entry holds it: sealed with ``salt``, or the salt of the round's earlier
        answer (so that the same answer gives the same commitment), or a new one."""
        if not self.sealed or payload is None:
            return payload
        if salt is None and sealing.is_commitment(round_payload):
            earlier = self.get(round_payload)
            salt = earlier[0] if earlier is not None else None
        item = sealing.seal(payload, salt)
        if item.commitment == round_payload:  # the round's answer again: its value is kept already
            return item.commitment
        return self._keep(item)

    def edit(
        self,
        round_sealed: dict[str, Any],
        round_plain: dict[str, Any],
        result: dict[str, Any],
        salts: dict[str, bytes] | None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The patch a sealed edit records, and the sealed args it gives."""
        if salts is None:
            salts = {name: sealing.new_salt() for name in [*result, sealing.WHOLE]}
        try:
            recorded, kept = sealing.edit_patch(round_plain, result, round_sealed, self._private, salts)
        except sealing.ValueProblem as exc:
            raise InvalidEntry(str(exc)) from None
        for item in kept:
            self._keep(item)
        return recorded, rules.patched_args(round_sealed, recorded)

    def _keep(self, item: sealing.Kept) -> str:
        if self.get(item.commitment) is not None:  # a salt used again: one value, one commitment, one row
            raise InvalidEntry(
                f"salts: expected a fresh salt for each new value of review {self.review_id}, found one that gives "
                "a commitment the review holds already"
            )
        self.kept.append(item)
        self._memo[item.commitment] = (item.salt, item.value)
        return item.commitment

    def shown(self, review: Review) -> Review:
        """The review returned to the caller, its values revealed."""
        return reveal_review(review, (), self.get) if self.sealed else review
