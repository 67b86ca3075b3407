"""The verifier's checks of a sealed log's values (SPEC.md §10), split from :mod:`.verifier` (pure).

:class:`SealedChecks` is a base of :class:`~signoff.audit.verifier.Verifier`: it adds the commitments
each entry holds to the ledger (:mod:`.value_ledger`), checks each ``data.erased`` (a sealed log, a done
review, retention only once its time has passed), and, where the values are at hand, checks again the
rules that need them (an edit's schema, an auto-approval's rule). :func:`check_sealed_call` holds a
sealed opening's private values to being commitments. :class:`ReviewFacts`, what the verifier keeps per
open review, lives here, below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from signoff.audit import rules, sealing, trust, value_ledger
from signoff.audit.errors import ReviewError, VerificationFailed
from signoff.audit.schema import check_args

if TYPE_CHECKING:
    from signoff.audit.value_ledger import ValueLedger


@dataclass
class ReviewFacts:
    """What the verifier keeps per open review; a settled review is folded away (flat memory)."""

    state: rules.ReviewState
    frontier: str
    opened: dict[str, Any] | None  # the projection's data while pending: the call and its policy
    fixed: tuple[Any, ...]  # projection columns set at opening
    decided: tuple[Any, ...] = (None, None, None)  # (seq, by, at)
    executed_seq: int | None = None
    data_digest: str | None = None  # digest of the projection's data once closed
    simple: bool = False  # the opening entry took parse_canonical's fast path (no floats, no astral chars)
    retain_until: str | None = None  # sealed logs: when a retention policy lets its values be erased

    @property
    def decided_seq(self) -> int | None:
        seq: int | None = self.decided[0]
        return seq


class SealedChecks:
    """The value checks of a :class:`~signoff.audit.verifier.Verifier` (which sets these attributes)."""

    ring: trust.Keyring
    reviews: dict[str, ReviewFacts]
    closed_reviews: set[int | str]
    retention: dict[int | str, str]
    ledger: ValueLedger
    values: sealing.Lookup | None

    def _hold_values(self, kind: str, body: dict[str, Any]) -> None:
        """Add the commitments an entry holds to the ledger (the round's answer again holds no new value)."""
        owner, held = value_ledger.held(kind, body)
        if held and kind == "review.approved":
            facts = self.reviews.get(str(body.get("review")))
            if facts is not None and facts.state.round_payload is not None:
                held = [c for c in held if c != facts.state.round_payload]
        if held:
            self.ledger.hold(owner, held)

    def _erased(self, seq: int, actor: str, body: dict[str, Any], at: str) -> None:
        """``data.erased``: values of a settled review (and its frontier's reply) deleted from beside the
        log, on a sealed log only; by retention only once the review's policy lets them go."""
        if not self.ring.rules.sealed_values:
            raise VerificationFailed(
                seq, "data.erased", "a log with sealed values", "a log that keeps values in entries"
            )
        value_ledger.check_erased_body(seq, body)
        review_id = str(body["review"])
        if not self._done(review_id):
            raise VerificationFailed(seq, "data.erased", f"review {review_id} done (decided and run, or closed)",
                                     "a review still open, still to run, or unknown")  # fmt: skip
        if body.get("reason") == trust.RETENTION:
            until = self.retention.get(small_id(review_id))
            if until is None or at < until:
                raise VerificationFailed(
                    seq, "data.erased (retention)", f"review {review_id}'s retention to have passed ({until})", at
                )
        self.ledger.erase(review_id, value_ledger.erased_by(body))

    def _done(self, review_id: str) -> bool:
        """Settled: closed without running, run, or failed (folded away, or kept with ``keep_all``)."""
        if small_id(review_id) in self.closed_reviews:
            return True
        facts = self.reviews.get(review_id)
        if facts is None:
            return False
        state = facts.state
        return state.status in rules.FINAL and (state.status not in rules.RUNNABLE or state.executed or state.failed)

    def _sealed_schema(self, seq: int, review_id: str, schema: Any, sealed_args: dict[str, Any]) -> None:
        """An edit's args on a sealed log meet the tool's schema, checked where the values are at hand."""
        if schema is None or self.values is None or not sealing.commitments_in(sealed_args):
            return
        try:
            plain = sealing.reveal_args(sealed_args, self.values, f"review {review_id}")
        except sealing.ValueProblem:
            return  # erased (or missing: the values pass names it)
        try:
            check_args(schema, plain)
        except ReviewError as exc:
            raise VerificationFailed(seq, "edited args (tool schema)", "args the schema allows", str(exc)) from None

    def _revealed(self, sealed_args: dict[str, Any], review_id: str) -> dict[str, Any] | None:
        if self.values is None:
            return None
        try:
            return sealing.reveal_args(sealed_args, self.values, f"review {review_id}")
        except sealing.ValueProblem:
            return None


def check_sealed_call(seq: int, review_id: str, call: dict[str, Any], private: Any) -> None:
    """On a sealed log a call's private args members, its question, hint and excerpts are commitments."""
    args = call.get("args") or {}
    clear = [] if sealing.sealed_whole(args) else [
        name for name, value in args.items()
        if (private is None or name in private) and not sealing.is_commitment(value)
    ]  # fmt: skip
    if call.get("payload") is not None and not sealing.is_commitment(call.get("payload")):
        clear.append("payload")
    if call.get("hint") and not sealing.is_commitment(call.get("hint")):
        clear.append("hint")
    clear += [f"context.{k}" for k, v in (call.get("context") or {}).items() if not sealing.is_commitment(v)]
    if clear:
        raise VerificationFailed(
            seq, "sealed values", f"review {review_id}: commitments for its private values", f"{clear} in clear"
        )


def small_id(identifier: str) -> int | str:
    """A compact set key for a closed id: ``rv_``/``fr_`` + 16 hex digits fit in one int."""
    if len(identifier) == 19 and identifier[2] == "_":
        try:
            return int(identifier[3:], 16) << 1 | (identifier[0] == "f")
        except ValueError:
            pass
    return identifier
