"""Prometheus metrics, written in the text exposition format (version 0.0.4) by hand.

- ``signoff_pending_reviews`` (gauge): pending reviews, read from the store at scrape time.
- ``signoff_decisions_total{kind}`` (counter): decisions this desk process recorded.
- ``signoff_decision_latency_seconds`` (histogram): time from a review's opening to its decision.
- ``desk_http_request_duration_seconds`` (histogram): request handling time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence

DECISION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0)
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += 1
        self.total += 1
        self.sum += value

    def lines(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        out = [f'{name}_bucket{{{labels}{sep}le="{b:g}"}} {c}' for b, c in zip(self.buckets, self.counts, strict=True)]
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.total}')
        lab = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{lab} {self.sum:.6f}")
        out.append(f"{name}_count{lab} {self.total}")
        return out


class Metrics:
    def __init__(self, pending: Callable[[], int]) -> None:
        self._pending = pending
        self._lock = threading.Lock()
        self.decisions: dict[str, int] = defaultdict(int)
        self.latency = Histogram(DECISION_BUCKETS)
        self.http = Histogram(HTTP_BUCKETS)

    def decided(self, kind: str, seconds: float | None) -> None:
        with self._lock:
            self.decisions[kind] += 1
            if seconds is not None and seconds >= 0:
                self.latency.observe(seconds)

    def request(self, seconds: float) -> None:
        with self._lock:
            self.http.observe(seconds)

    def render(self) -> str:
        try:
            pending = self._pending()
        except Exception:  # noqa: BLE001 - a scrape must not fail on a busy store
            pending = -1
        with self._lock:
            lines = [
                "# HELP signoff_pending_reviews Reviews waiting for a decision.",
                "# TYPE signoff_pending_reviews gauge",
                f"signoff_pending_reviews {pending}",
                "# HELP signoff_decisions_total Decisions recorded through this desk, by kind.",
                "# TYPE signoff_decisions_total counter",
            ]
            for kind in ("approved", "edited", "rejected"):
                lines.append(f'signoff_decisions_total{{kind="{kind}"}} {self.decisions.get(kind, 0)}')
            lines += [
                "# HELP signoff_decision_latency_seconds Time from a review's opening to its decision.",
                "# TYPE signoff_decision_latency_seconds histogram",
                *self.latency.lines("signoff_decision_latency_seconds"),
                "# HELP desk_http_request_duration_seconds Time to handle one HTTP request.",
                "# TYPE desk_http_request_duration_seconds histogram",
                *self.http.lines("desk_http_request_duration_seconds"),
            ]
        return "\n".join(lines) + "\n"
