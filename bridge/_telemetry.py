"""OpenTelemetry for reviews: what Signoff adds to ADK's traces, and its metrics.

Internal module, not public API; import from ``bridge``. The names are listed in README.md
"OpenTelemetry", with where each comes from.

Only ``opentelemetry-api`` is used: the app chooses the SDK and exporter. With none configured the
API's tracer and meter do nothing; the gate asks ``span.is_recording()`` before it computes an
attribute, the metric callbacks are never called, and stamping a pause skips its traceparent
(``tests/benchmarks/telemetry_bench.py`` measures the gated call with and without an SDK).

* **ADK's ``execute_tool {tool}`` span** (current while ``before_tool_callback`` runs, for the call that
  runs or is stopped) gets ``signoff.review.*`` attributes: the review, its outcome, who decided (or
  ``policy:NAME`` for a call a policy let through), acting for whom (a delegate, rule 2b), the wait, an
  edit, the decision's log seq; and the event ``gen_ai.agent.resumed`` (resumed from the pause).
* **A span per review**, ``review {tool}``, from the review's opening to its decision (the log's own
  times), a child of the span that was current where the run paused (its W3C ``traceparent`` is
  stamped on the pause event, so it survives a restart), linked to the ``execute_tool`` span where the
  outcome reached the call. It carries ``gen_ai.agent.paused`` at the start and
  ``gen_ai.agent.pause.resolved`` at the end.
* **Metrics**: decisions by outcome (counter), time to decision by outcome (histogram), reviews pending
  by tool and entries not yet under a witnessed checkpoint (observed on collection, from the store).

The ``gen_ai.agent.pause.*`` and ``gen_ai.agent.resumed_from.*`` names, and the events, follow the
candidate agent-lifecycle conventions (open-telemetry/semantic-conventions-genai issue #159, PR #445):
``pause.reason`` is ``human_input`` and ``pause.resolution`` is ``approved``, ``refused``, ``expired``,
or ``cancelled`` (a withdrawn review, which #159 does not name yet). Everything else is Signoff's own,
under ``signoff.``.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from opentelemetry import context, metrics, trace
from opentelemetry.trace import Link, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from signoff.audit import Review, ReviewService, Store
from signoff.bridge._calls import METADATA_KEY, adk_confirmation_id

log = logging.getLogger("signoff.bridge")
SCOPE = "signoff"
TRACE_KEY = "trace"  # in the pause event's custom_metadata["signoff"]: the traceparent where the run paused

# The outcomes on the spans and metrics (the review's status on the log, and auto_approved).
RESOLUTION = {  # signoff.review.outcome -> gen_ai.agent.pause.resolution
    "approved": "approved",
    "edited": "approved",
    "rejected": "refused",
    "expired": "expired",
    "withdrawn": "cancelled",
}

_tracer = trace.get_tracer(SCOPE)
_meter = metrics.get_meter(SCOPE)
_propagator = TraceContextTextMapPropagator()
_decisions = _meter.create_counter(
    "signoff.review.decisions", unit="{decision}", description="Reviews decided, by outcome and tool"
)
_duration = _meter.create_histogram(
    "signoff.review.duration", unit="s", description="Time from a review's opening to its decision, by outcome"
)


class _Watched(Protocol):
    store: Store
    reviews: ReviewService


_watched: weakref.WeakSet[Any] = weakref.WeakSet()  # the Signoffs whose stores the observed metrics read
_watched_lock = threading.Lock()


def watch(signoff: _Watched) -> None:
    """Observe ``signoff``'s store for the pending and unwitnessed metrics while it is alive."""
    with _watched_lock:
        _watched.add(signoff)


def unwatch(signoff: _Watched) -> None:
    with _watched_lock:
        _watched.discard(signoff)


def _stores() -> list[_Watched]:
    """One watched Signoff per log (several Signoffs on one log would count it twice)."""
    with _watched_lock:
        live = list(_watched)
    seen: dict[tuple[str, str], _Watched] = {}
    for one in live:
        seen.setdefault((str(one.store.url), one.store.log_id), one)
    return list(seen.values())


_pending_tools: dict[str, set[str]] = {}  # log -> the tools it reported pending reviews for (0 once none are)


def _observe_pending(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
    for one in _stores():
        log_id = one.store.log_id
        try:
            counts = one.reviews.pending_by_tool()
        except Exception as exc:  # noqa: BLE001 - a collection must not fail the exporter; said, then skipped
            log.warning("signoff.review.pending: the store %s could not be read: %s", log_id, exc)
            continue
        seen = _pending_tools.setdefault(log_id, set())
        seen.update(counts)
        for tool in sorted(seen):  # a tool whose reviews were all decided says 0, not its last count
            yield metrics.Observation(counts.get(tool, 0), {"gen_ai.tool.name": tool, "signoff.log.id": log_id})


def _observe_unwitnessed(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
    from signoff.audit.witnessing import coverage

    for one in _stores():
        try:
            found = coverage(one.store)
        except Exception as exc:  # noqa: BLE001 - as above
            log.warning("signoff.log.unwitnessed: the store %s could not be read: %s", one.store.log_id, exc)
            continue
        yield metrics.Observation(found.unwitnessed, {"signoff.log.id": one.store.log_id})


_meter.create_observable_up_down_counter(
    "signoff.review.pending", callbacks=[_observe_pending], unit="{review}", description="Open reviews, by tool"
)
_meter.create_observable_gauge(
    "signoff.log.unwitnessed",
    callbacks=[_observe_unwitnessed],
    unit="{entry}",
    description="Entries after the newest checkpoint a quorum of the log's witnesses cosigned",
)


# -- where the run paused ---------------------------------------------------------------------------


def pause_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span current where a run pauses, when an SDK records it."""
    if not trace.get_current_span().is_recording():
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


def paused_in(events: Sequence[Any], frontier: str) -> str | None:
    """The traceparent stamped on the pause event of ``frontier`` (newest first), if any."""
    for event in reversed(events):
        meta = (event.custom_metadata or {}).get(METADATA_KEY)
        if isinstance(meta, dict) and meta.get("frontier") == frontier:
            found = meta.get(TRACE_KEY)
            return found if isinstance(found, str) else None
    return None


# -- where the outcome reaches the call -------------------------------------------------------------


def decided_by(review: Review) -> str:
    if review.status == "auto_approved":
        return f"policy:{review.policy.name}"
    return review.decided_by or ""


def wait_seconds(review: Review) -> float:
    if review.decided_at is None:
        return 0.0
    return max(0.0, (review.decided_at - review.opened_at).total_seconds())


def attributes(review: Review, log_id: str) -> dict[str, Any]:
    """The ``signoff.review.*`` attributes of a decided review (for ADK's ``execute_tool`` span)."""
    found: dict[str, Any] = {
        "signoff.log.id": log_id,
        "signoff.review.id": review.id,
        "signoff.review.outcome": review.status,
        "signoff.review.decided_by": decided_by(review),
        "signoff.review.wait": wait_seconds(review),
        "signoff.review.args_edited": review.status == "edited",
    }
    if review.decision_seq is not None:
        found["signoff.review.decision_seq"] = review.decision_seq
    acting_for = review.acting_for(review.decision_seq)
    if acting_for:
        found["signoff.review.acting_for"] = acting_for
    if review.status == "auto_approved" and review.policy.seq is not None:
        found["signoff.policy.seq"] = review.policy.seq
    return found


def reached_call(review: Review, log_id: str, events: Sequence[Any], *, not_run: str = "") -> None:
    """The decided ``review`` reached its call (it runs now, or is stopped): annotate ADK's current
    ``execute_tool`` span, emit the review's own span, and count the decision. ``not_run``: why an
    approved call does not run after all (``already_executed``, ``resume_failed``). Telemetry never
    stops a call: a failure here is logged."""
    try:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(attributes(review, log_id))
            if not_run:
                span.set_attribute("signoff.review.not_run", not_run)
            if review.status != "auto_approved":
                span.add_event(
                    "gen_ai.agent.resumed",
                    {"gen_ai.agent.resumed_from.type": "pause", "gen_ai.agent.resumed_from.id": _pause_id(review)},
                )
                _review_span(review, log_id, paused_in(events, review.frontier), link_to=span)
        if not not_run:
            count(review, log_id)
    except Exception as exc:  # noqa: BLE001
        log.warning("review %s: its telemetry was not recorded: %s", review.id, exc)


def not_proven(review_id: str, log_id: str, problem: str) -> None:
    """A decision the log does not prove reached its call: the span says so (nothing ran)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(
            {
                "signoff.log.id": log_id,
                "signoff.review.id": review_id,
                "signoff.review.not_run": "not_proven",
                "signoff.review.problem": problem,
            }
        )


def withdrawn(reviews: ReviewService, review_ids: Sequence[str]) -> None:
    """Reviews withdrawn because their run is gone (rewound or cancelled): nothing reaches a call, so
    each gets its span here, a child of whatever is current, and is counted."""
    tracing = _configured(trace.get_tracer_provider())
    if not tracing and not _configured(metrics.get_meter_provider()):
        return
    for review_id in review_ids:
        try:
            review = reviews.get(review_id)
        except Exception as exc:  # noqa: BLE001 - telemetry never fails the write it follows; said, then skipped
            log.warning("review %s: its withdrawal could not be traced: %s", review_id, exc)
            continue
        if tracing:
            _review_span(review, reviews.store.log_id, None, link_to=None)
        count(review, reviews.store.log_id)


def count(review: Review, log_id: str) -> None:
    labels = {
        "signoff.review.outcome": review.status,
        "gen_ai.tool.name": review.tool,
        "signoff.log.id": log_id,
    }
    _decisions.add(1, labels)
    if review.status != "auto_approved":
        _duration.record(wait_seconds(review), labels)


def _review_span(review: Review, log_id: str, paused: str | None, *, link_to: Span | None) -> None:
    """``review {tool}`` from the opening to the decision, under the pause's span (else the current one)."""
    parent = _propagator.extract({"traceparent": paused}) if paused else context.get_current()
    links = [Link(link_to.get_span_context())] if link_to is not None and paused else []
    pause_id = _pause_id(review)
    common = {"gen_ai.agent.pause.id": pause_id, "gen_ai.agent.execution.id": review.call.invocation}
    resolution = RESOLUTION.get(review.status, review.status)
    span = _tracer.start_span(
        f"review {review.tool}",
        context=parent,
        kind=SpanKind.INTERNAL,
        links=links,
        start_time=_ns(review.opened_at),
        attributes={
            **attributes(review, log_id),
            **common,
            "gen_ai.tool.name": review.tool,
            "gen_ai.tool.call.id": review.call.call_id,
            "gen_ai.agent.name": review.call.agent,
            "gen_ai.conversation.id": review.call.session,
            "gen_ai.agent.pause.reason": "human_input",
            "gen_ai.agent.pause.resolution": resolution,
        },
    )
    span.add_event(
        "gen_ai.agent.paused", {**common, "gen_ai.agent.pause.reason": "human_input"}, timestamp=_ns(review.opened_at)
    )
    ended = review.decided_at or review.opened_at
    span.add_event(
        "gen_ai.agent.pause.resolved", {**common, "gen_ai.agent.pause.resolution": resolution}, timestamp=_ns(ended)
    )
    span.end(end_time=_ns(ended))


def _pause_id(review: Review) -> str:
    return adk_confirmation_id(review.call.confirmation_id, review.call.kind)


def _ns(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


def _configured(provider: object) -> bool:
    """An SDK's provider is set: the API's defaults (a proxy until one is set, or a no-op) record nothing."""
    return not type(provider).__name__.startswith(("_Proxy", "Proxy", "NoOp"))
