"""The three decisions, and a claim ("I'm on it"), shared by the pages and the API. Domain rules stay
in ``audit``; this only keeps two desk rules (desk/scope.py) and records metrics after a decision was
written.

* An ``observer`` whose only role that is reads everything and decides nothing: refused (403)
  before ``audit`` is asked.
* A review the reviewer may not see does not exist for them: whatever ``audit`` refuses about it
  (their role, its being closed already, a signature), they get the same 404 as for an unknown id.
  A decision ``audit`` records is one the reviewer's role covers, so it is one they may see: the
  check costs nothing on the path that succeeds.

``sig`` is the person's own signature on the decision (a passkey's assertion from the page, or
what an API client sends); the review service checks it against the body it builds. A passkey that
signed another statement than that body's (the page showed other values than the server's copy of the
review) is flagged to the operator: a ``signature_mismatch`` warning line (desk/reqlog.py) and the
``signoff_signature_mismatches_total`` counter.

On a sealed log one more desk rule: an approval or an edit of a review whose values beside the log do
not check (desk/reveal.py) is refused before ``audit`` is asked (:class:`~signoff.desk.errors.ValuesDoNotMatch`,
409; the service would record an approval of the commitments, which the gate then refuses to run). A
rejection names none of the values, and stays possible. ``salts`` and ``payload_salt`` are what the signer
sealed the new values with (``signoff.audit.decision.prepare_edit``), passed on to the service.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from signoff.audit.errors import AuditError, InvalidEntry, NotAllowed, UnknownReview
from signoff.audit.sealing import ValueProblem
from signoff.desk import reqlog, reveal
from signoff.desk.auth import SignedIn
from signoff.desk.context import Desk
from signoff.desk.errors import ValuesDoNotMatch, statement_mismatch

OBSERVER_REFUSED = "decider: expected a reviewer with a deciding role, found {who} with only the observer role"


def _latency(review: Any) -> float | None:
    try:
        opened = review.opened_at
        decided = review.decided_at or datetime.now(UTC)
        if opened.tzinfo is None:
            opened = opened.replace(tzinfo=UTC)
        if decided.tzinfo is None:
            decided = decided.replace(tzinfo=UTC)
        return (decided - opened).total_seconds()
    except (AttributeError, TypeError):
        return None


Sig = dict[str, Any] | None


def _decide(desk: Desk, who: SignedIn, review_id: str, kind: str | None, write: Callable[[], Any]) -> Any:
    """Run ``write`` under the desk's two rules; ``kind`` names the decision for the metrics (None: a claim)."""
    scope = desk.scope(who)
    if not scope.deciding_roles:
        if not scope.observer:
            raise UnknownReview(review_id)
        desk.svc.get(review_id)  # an unknown id is still 404
        raise NotAllowed(OBSERVER_REFUSED.format(who=who.reviewer))
    try:
        try:
            review = write()
        except ValueProblem as exc:  # a salt that is not 32 bytes in hex (checked before any transaction)
            raise InvalidEntry(str(exc)) from None
    except AuditError as exc:
        if kind is not None and statement_mismatch(exc):
            _flag_mismatch(desk, who, review_id, kind, exc)
        if isinstance(exc, UnknownReview):
            raise
        try:
            seen = scope.sees_review(desk.svc.get(review_id))
        except UnknownReview:
            seen = False
        if not seen:
            raise UnknownReview(review_id) from None
        raise
    if kind is not None:
        # Every decision entry counts; the latency only once the review is decided (the quorum's last approval).
        final = getattr(review, "status", "pending") != "pending"
        desk.metrics.decided(kind, _latency(review) if final else None)
    return review


def _flag_mismatch(desk: Desk, who: SignedIn, review_id: str, kind: str, exc: Exception) -> None:
    """The person signed what their page showed, and the server's copy of the review says otherwise: nothing
    is recorded (``audit`` refused it), and the operator hears of it, as a warning line and a count."""
    desk.metrics.mismatch(kind)
    reqlog.warn(
        "signature_mismatch",
        message="a decision's signed statement differs from the server's copy of the review: possible tampering",
        review=review_id,
        reviewer=who.reviewer,
        decision=kind,
        log=desk.store.log_id,
        detail=str(exc)[:500],
    )


def _values_check(desk: Desk, review_id: str) -> None:
    """On a sealed log, refuse to record an approval or an edit of a review whose values do not check."""
    if not desk.store.rules.sealed_values:
        return
    review = desk.svc.get(review_id)
    if reveal.withheld(review):
        raise ValuesDoNotMatch(f"review {review_id}: nothing is decided on it: {review.problem}")


def approve(
    desk: Desk,
    who: SignedIn,
    review_id: str,
    rationale: str = "",
    payload: Any = None,
    sig: Sig = None,
    shown_round: int | None = None,
    payload_salt: str | None = None,
    acting_for: str | None = None,
) -> Any:
    def write() -> Any:  # a round the review has left is refused in the write transaction (StaleRound)
        _values_check(desk, review_id)
        return desk.svc.approve(
            review_id,
            reviewer=who.reviewer,
            rationale=rationale,
            payload=payload,
            sig=sig,
            round=shown_round,
            payload_salt=payload_salt,
            acting_for=acting_for,
        )

    return _decide(desk, who, review_id, "approved", write)


def edit(
    desk: Desk,
    who: SignedIn,
    review_id: str,
    patch: list[Any],
    rationale: str = "",
    payload: Any = None,
    sig: Sig = None,
    shown_round: int | None = None,
    salts: dict[str, str] | None = None,
    payload_salt: str | None = None,
    acting_for: str | None = None,
) -> Any:
    def write() -> Any:
        _values_check(desk, review_id)
        return desk.svc.edit(
            review_id,
            reviewer=who.reviewer,
            patch=patch,
            rationale=rationale,
            payload=payload,
            sig=sig,
            round=shown_round,
            salts=salts,
            payload_salt=payload_salt,
            acting_for=acting_for,
        )

    return _decide(desk, who, review_id, "edited", write)


def reject(
    desk: Desk, who: SignedIn, review_id: str, reason: str, sig: Sig = None, acting_for: str | None = None
) -> Any:
    return _decide(
        desk,
        who,
        review_id,
        "rejected",
        lambda: desk.svc.reject(review_id, reviewer=who.reviewer, reason=reason, sig=sig, acting_for=acting_for),
    )


def claim(desk: Desk, who: SignedIn, review_id: str) -> str:
    """``review.claimed`` for the signed-in reviewer ("I'm on it"); returns the time it lasts until.
    A claim is advice, not a lock: anyone who may decide still can. A delegate claims for the reviewer
    whose delegation they would decide under."""

    def write() -> str:
        acting_for = desk.scope(who).acting_for(desk.svc.get(review_id))
        return desk.svc.claim(review_id, reviewer=who.reviewer, acting_for=acting_for)

    until: str = _decide(desk, who, review_id, None, write)
    return until
