"""The three decisions, shared by the pages and the API. Domain rules stay in ``audit``;
this only records metrics after a decision was written.

``sig`` is the person's own signature on the decision (a passkey's assertion from the page, or
what an API client sends); the review service checks it against the body it builds.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from signoff.desk.context import Desk


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


def approve(
    desk: Desk, reviewer: str, review_id: str, rationale: str = "", payload: Any = None, sig: Sig = None
) -> Any:
    r = desk.svc.approve(review_id, reviewer=reviewer, rationale=rationale, payload=payload, sig=sig)
    desk.metrics.decided("approved", _latency(r))
    return r


def edit(
    desk: Desk,
    reviewer: str,
    review_id: str,
    patch: list[Any],
    rationale: str = "",
    payload: Any = None,
    sig: Sig = None,
) -> Any:
    r = desk.svc.edit(review_id, reviewer=reviewer, patch=patch, rationale=rationale, payload=payload, sig=sig)
    desk.metrics.decided("edited", _latency(r))
    return r


def reject(desk: Desk, reviewer: str, review_id: str, reason: str, sig: Sig = None) -> Any:
    r = desk.svc.reject(review_id, reviewer=reviewer, reason=reason, sig=sig)
    desk.metrics.decided("rejected", _latency(r))
    return r
