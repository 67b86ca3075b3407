"""Run reviews through real google-adk with the OpenTelemetry SDK recording, in a process of their own.

    python tests/bridge/_otel_run.py WORKDIR memory SCENARIO...     -> prints {"spans", "metrics", "reviews"}
    python tests/bridge/_otel_run.py WORKDIR otlp:URL SCENARIO...   -> exports over OTLP/HTTP to URL, prints {"reviews"}

A process of its own because an SDK provider is set once per process and ADK's tracer binds to it for
good: the other tests keep running with no SDK, as an app without one does. Scenarios: approve, edit,
reject, expire, withdraw, auto (a policy lets the call through), delegate (a delegate decides),
cancel (the run's task is cancelled at its pause), tamper (the approval's bytes changed after it),
pending (left open).
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for p in (str(HERE.parents[1]), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

from opentelemetry import metrics, trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

ALICE = "human:alice@example.org"
BOB = "human:bob@example.org"


def providers(mode: str) -> tuple[TracerProvider, MeterProvider, Any, MetricReader]:
    exporter: SpanExporter
    reader: MetricReader
    if mode == "memory":
        exporter = InMemorySpanExporter()
        reader = InMemoryMetricReader()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        url = mode.removeprefix("otlp:")
        exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces")
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{url}/v1/metrics"), export_interval_millis=3_600_000
        )
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return tracer_provider, meter_provider, exporter, reader


def span_json(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace": f"{context.trace_id:032x}",
        "id": f"{context.span_id:016x}",
        "parent": f"{span.parent.span_id:016x}" if span.parent else None,
        "parent_trace": f"{span.parent.trace_id:032x}" if span.parent else None,
        "start": span.start_time,
        "end": span.end_time,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "at": e.timestamp, "attributes": dict(e.attributes or {})} for e in span.events],
        "links": [f"{link.context.span_id:016x}" for link in span.links],
    }


def metrics_json(reader: InMemoryMetricReader) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = out.setdefault(metric.name, [])
                for point in metric.data.data_points:
                    row: dict[str, Any] = {"attributes": dict(point.attributes or {})}
                    if hasattr(point, "value"):
                        row["value"] = point.value
                    else:
                        row["count"], row["sum"] = point.count, point.sum  # type: ignore[attr-defined]
                    points.append(row)
    return out


async def run(workdir: Path, scenarios: list[str]) -> dict[str, str]:
    from _support import REVIEWER_KEY, Harness, key_of, single_agent, transfer_script

    from signoff import bridge
    from signoff.audit import ReviewService, open_store
    from signoff.audit.keys import read_private_key
    from signoff.audit.store import default_admin_key

    url = f"sqlite:///{workdir / 'signoff.db'}"
    store = open_store(url)
    store.init_log(workdir / "log.key")
    admin = read_private_key(default_admin_key(workdir / "log.key"))
    setup = ReviewService(store)
    setup.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=REVIEWER_KEY.public, admin=admin)
    setup.enroll_reviewer(BOB, roles=["intern"], tools=["lookup"], key=key_of(BOB).public, admin=admin)
    store.close()

    reviews: dict[str, str] = {}
    for name in scenarios:
        where = workdir / name
        where.mkdir()
        policies = [bridge.ToolPolicy("transfer", deadline_seconds=0.3)] if name == "expire" else []
        signoff = bridge.Signoff(url, policies=policies)
        amount = 60 if name == "auto" else 700
        if name == "auto":
            rule = {"policy": "small", "tools": "transfer", "review_when": "args.amount > 100"}
            signoff.reviews.set_policy(rule, admin=admin)
        h = Harness(signoff, single_agent(transfer_script(amount=amount)), where)
        if name == "cancel":
            await _cancelled_at_pause(h)
            reviews[name] = list(signoff.store.entries(kind="run.cancelled"))[-1].body["withdrawn"][0]
            signoff.close()
            continue
        await h.start()
        if name == "pending":  # left open: the pending metric counts it
            reviews[name] = signoff.reviews.pending()[0].id
            signoff.close()
            continue
        if name == "auto":
            reviews[name] = list(signoff.store.entries(kind="review.auto_approved"))[-1].body["review"]
            signoff.close()
            continue
        [review] = signoff.reviews.pending()
        reviews[name] = review.id
        await asyncio.sleep(0.05)  # a wait the spans can show
        if name == "approve":
            signoff.reviews.approve(review.id, reviewer=ALICE, signer=REVIEWER_KEY, rationale="fine")
        elif name == "edit":
            patch = [{"op": "replace", "path": "/amount", "value": 70}]
            signoff.reviews.edit(review.id, reviewer=ALICE, signer=REVIEWER_KEY, patch=patch)
        elif name == "reject":
            signoff.reviews.reject(review.id, reviewer=ALICE, signer=REVIEWER_KEY, reason="acct-1 is flagged")
        elif name == "expire":
            await asyncio.sleep(0.4)
            signoff.reviews.expire_due()
        elif name == "withdraw":
            signoff.reviews.withdraw(review.id, actor="agent:teller", reason="the customer hung up")
        elif name == "tamper":  # approved, then the approval's bytes changed behind the service's back
            signoff.reviews.approve(review.id, reviewer=ALICE, signer=REVIEWER_KEY, rationale="fine")
            import sqlite3

            with sqlite3.connect(workdir / "signoff.db") as db:
                seq = signoff.reviews.get(review.id).decision_seq
                db.execute(
                    "UPDATE signoff_entry SET raw = CAST(replace(CAST(raw AS TEXT), '\"fine\"', '\"FINE\"') AS BLOB) "
                    "WHERE seq = ?",
                    (seq,),
                )
        elif name == "delegate":
            until = datetime.now(UTC) + timedelta(days=1)
            signoff.reviews.delegate(ALICE, BOB, until=until, roles=["teller"], signer=REVIEWER_KEY)
            signoff.reviews.approve(review.id, reviewer=BOB, signer=key_of(BOB), acting_for=ALICE)
        await h.resume()
        signoff.close()
    return reviews


async def _cancelled_at_pause(h: Any) -> None:
    """A first turn whose task is cancelled at its pause event (the plugin withdraws its review)."""
    from _support import new_session
    from google.genai import types

    h.session_id = await new_session(h.sessions)
    message = types.Content(role="user", parts=[types.Part(text="pay")])

    async def consume() -> None:
        async for event in h.runner.run_async(user_id="u1", session_id=h.session_id, new_message=message):
            if event.long_running_tool_ids:
                task = asyncio.current_task()
                assert task is not None
                task.cancel()

    task = asyncio.create_task(consume())
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)  # the task's done-callbacks run after the awaiting code wakes up


def main() -> None:
    workdir, mode, *scenarios = sys.argv[1:]
    tracer_provider, meter_provider, exporter, reader = providers(mode)
    reviews = asyncio.run(run(Path(workdir), scenarios))
    # The observed metrics read the stores of live Signoffs: one stays open for the collection.
    from signoff import bridge

    keep = bridge.Signoff(f"sqlite:///{Path(workdir) / 'signoff.db'}")
    out: dict[str, Any] = {"reviews": reviews}
    if mode == "memory":
        out["spans"] = [span_json(s) for s in exporter.get_finished_spans()]
        out["metrics"] = metrics_json(reader)
        if "pending" in reviews:  # decided now: the next collection counts 0 pending for its tool
            from _support import REVIEWER_KEY

            keep.reviews.reject(reviews["pending"], reviewer=ALICE, signer=REVIEWER_KEY, reason="too late")
            out["metrics_after"] = metrics_json(reader)
    tracer_provider.force_flush()
    meter_provider.force_flush()
    keep.close()
    tracer_provider.shutdown()
    meter_provider.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
