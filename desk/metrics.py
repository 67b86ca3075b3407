"""Prometheus metrics for ``/metrics``, through ``prometheus-client`` (one registry per desk).

- ``signoff_pending_reviews`` (gauge): pending reviews, read from the store at scrape time.
- ``signoff_decisions_total{kind}`` (counter): decisions this desk process recorded.
- ``signoff_decision_latency_seconds`` (histogram): time from a review's opening to its decision.
- ``desk_http_request_duration_seconds`` (histogram): request handling time.
- ``signoff_unwitnessed_entries`` (gauge): log entries after the newest checkpoint a quorum of the
  log's witnesses cosigned (all of them when none is), read from the store at scrape time (every 5 s
  at most); -1 when the store cannot say.
- ``signoff_projection_alarms`` (gauge, by kind): times this process found a projection row that
  disagrees with the log (``signoff.audit.log_state.alarm``); the log decided each time.
- ``signoff_signature_mismatches_total`` (counter, by decision kind): decisions refused because the person's
  passkey signed what their page showed and the server's copy of the review says otherwise (the
  WebAuthn challenge is not the SHA-256 of the statement the server built): possible tampering.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

DECISION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0)
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what generate_latest writes


class Metrics:
    """One desk's metrics, in a registry of its own (several desks may share a process in tests)."""

    def __init__(self, pending: Callable[[], int], unwitnessed: Callable[[], int] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        gauge = Gauge("signoff_pending_reviews", "Reviews waiting for a decision.", registry=self.registry)
        gauge.set_function(lambda: float(_or_unknown(pending)))
        if unwitnessed is not None:
            behind = Gauge(
                "signoff_unwitnessed_entries",
                "Log entries not yet covered by a checkpoint a quorum of the log's witnesses cosigned.",
                registry=self.registry,
            )
            behind.set_function(lambda: float(_or_unknown(unwitnessed)))
        self.registry.register(_Alarms())
        self.decisions = Counter(
            "signoff_decisions", "Decisions recorded through this desk, by kind.", ["kind"], registry=self.registry
        )
        for kind in ("approved", "edited", "rejected"):
            self.decisions.labels(kind=kind)  # present at 0 from the start
        self.mismatches = Counter(
            "signoff_signature_mismatches",
            "Decisions refused because the signed page and the server's copy of the review differ, by kind.",
            ["kind"],
            registry=self.registry,
        )
        for kind in ("approved", "edited", "rejected"):
            self.mismatches.labels(kind=kind)
        self.latency = Histogram(
            "signoff_decision_latency_seconds",
            "Time from a review's opening to its decision.",
            buckets=DECISION_BUCKETS,
            registry=self.registry,
        )
        self.http = Histogram(
            "desk_http_request_duration_seconds",
            "Time to handle one HTTP request.",
            buckets=HTTP_BUCKETS,
            registry=self.registry,
        )

    def decided(self, kind: str, seconds: float | None) -> None:
        self.decisions.labels(kind=kind).inc()
        if seconds is not None and seconds >= 0:
            self.latency.observe(seconds)

    def mismatch(self, kind: str) -> None:
        self.mismatches.labels(kind=kind).inc()

    def request(self, seconds: float) -> None:
        self.http.observe(seconds)

    def render(self) -> str:
        return generate_latest(self.registry).decode("utf-8")


class _Alarms:
    """``signoff_projection_alarms{kind}``: the process's count of projection rows found disagreeing with the log."""

    def collect(self) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from signoff.audit.log_state import ALARMS

        family = GaugeMetricFamily(
            "signoff_projection_alarms",
            "Projection rows found disagreeing with the log (the log decided).",
            labels=["kind"],
        )
        for kind in ("review row", "frontier row", *sorted(set(ALARMS) - {"review row", "frontier row"})):
            family.add_metric([kind], float(ALARMS.get(kind, 0)))
        return [family]


def _or_unknown(pending: Callable[[], int]) -> int:
    try:
        return pending()
    except Exception:  # noqa: BLE001 - a scrape must not fail on a busy store
        return -1
