"""What OpenTelemetry costs a gated call (issue 23 §2), printed as JSON.

The same resumed run (a paused call, approved with the reviewer's key, resumed until the run ends:
claim, proof, tool, ``tool.executed``) is timed with no SDK (the API alone, as an app without one) and
then with the SDK recording (a batch span processor and a metric reader); beside it, bare ADK's resume
of the same tool, with and without the SDK: ADK's own tracing is the floor Signoff's adds to. Then, the SDK
still recording, the same run with Signoff's telemetry (:func:`signoff.bridge._telemetry.reached_call`)
switched off, interleaved with it on (the runs drift as the in-memory exporter grows); and that function
alone, per call, inside a recording span and with no SDK.

    .venv/bin/python tests/benchmarks/telemetry_bench.py [--samples 40]

An SDK provider is set once per process, so the runs without one come first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))
warnings.filterwarnings("ignore")

import bridge_bench as bb  # noqa: E402
from google.adk.tools.tool_confirmation import ToolConfirmation  # noqa: E402
from google.genai import types  # noqa: E402

from signoff import bridge  # noqa: E402
from signoff.bridge import _telemetry as telemetry  # noqa: E402

WARMUP = 3


async def signoff_resumes(url: str, tmp: Path, samples: int, tag: str) -> list[float]:
    signoff = bridge.Signoff(url)
    runner = bb.runner_for(signoff, str(tmp / f"{tag}-sessions.db"))
    resumer = signoff.resumer(runner, actor=f"agent:bench-{tag}")
    out = []
    for i in range(samples + WARMUP):
        await bb.pause(runner, 100_000 * (1 + len(tag)) + i)
        [review] = signoff.reviews.pending()
        bb.approve(signoff, review.id)
        t0 = time.perf_counter()
        [done] = await resumer.run_once()
        elapsed = time.perf_counter() - t0
        assert done.how == "sent" and signoff.reviews.get(review.id).executed, done
        if i >= WARMUP:
            out.append(elapsed)
    signoff.close()
    return out


async def adk_resumes(tmp: Path, samples: int, tag: str) -> list[float]:
    runner = bb.runner_for(None, str(tmp / f"{tag}-floor.db"))
    out = []
    for i in range(samples + WARMUP):
        sid, events = await bb.pause(runner, 500_000 * (1 + len(tag)) + i)
        [call] = [f for e in events for f in e.get_function_calls() if f.name == "adk_request_confirmation"]
        answer = ToolConfirmation(confirmed=True).model_dump(mode="json")
        part = types.Part(function_response=types.FunctionResponse(name=call.name, id=call.id, response=answer))
        t0 = time.perf_counter()
        async for _ in runner.run_async(
            user_id="u",
            session_id=sid,
            invocation_id=events[-1].invocation_id,
            new_message=types.Content(role="user", parts=[part]),
        ):
            pass
        if i >= WARMUP:
            out.append(time.perf_counter() - t0)
    return out


def reached_call_us(url: str, calls: int) -> float:
    """One :func:`telemetry.reached_call` (attributes, the resumed event, the review span, the metrics)
    inside the current span, per call, in microseconds (median of 5 rounds)."""
    from opentelemetry import trace

    signoff = bridge.Signoff(url)
    review = next(r for r in map(signoff.reviews.get, _executed(signoff)) if r.status == "approved")
    tracer = trace.get_tracer("bench")
    rounds = []
    for _ in range(5):
        with tracer.start_as_current_span("execute_tool pay"):
            t0 = time.perf_counter()
            for _ in range(calls):
                telemetry.reached_call(review, signoff.store.log_id, ())
            rounds.append((time.perf_counter() - t0) / calls * 1e6)
    signoff.close()
    return round(statistics.median(rounds), 2)


def _executed(signoff: bridge.Signoff) -> list[str]:
    return [e.body["review"] for e in signoff.store.entries(kind="tool.executed")]


def install_sdk() -> Any:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    return exporter


def p50_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


async def main_async(samples: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        url = f"sqlite:///{tmp / 'signoff.db'}"
        bb.init_store(url, tmp / "log.key")
        runs: dict[str, dict[str, list[float]]] = {"signoff": {}, "adk": {}}
        runs["signoff"]["none"] = await signoff_resumes(url, tmp, samples, "a")
        runs["adk"]["none"] = await adk_resumes(tmp, samples, "a")
        call_none = reached_call_us(url, calls)
        exporter = install_sdk()
        runs["signoff"]["sdk"] = await signoff_resumes(url, tmp, samples, "bb")
        runs["adk"]["sdk"] = await adk_resumes(tmp, samples, "bb")
        # The SDK recording, Signoff's own telemetry switched off, interleaved with it on: what is Signoff's.
        kept, ablation = telemetry.reached_call, {"on": [], "off": []}  # type: ignore[var-annotated]
        for n in range(2):
            ablation["on"] += await signoff_resumes(url, tmp, samples // 2, f"on{n}")
            telemetry.reached_call = lambda *_a, **_k: None
            ablation["off"] += await signoff_resumes(url, tmp, samples // 2, f"off{n}")
            telemetry.reached_call = kept
        call_sdk = reached_call_us(url, calls)
        spans = len(exporter.get_finished_spans())
    result: dict[str, Any] = {"samples": samples}
    for name, by in runs.items():
        result[f"{name}_resume"] = {mode: bb.summary(found) for mode, found in by.items()}
    added = {name: round(p50_ms(by["sdk"]) - p50_ms(by["none"]), 3) for name, by in runs.items()}
    result["sdk_adds_p50_ms"] = added
    result["sdk_signoff_telemetry_on_off_p50_ms"] = {mode: p50_ms(found) for mode, found in ablation.items()}
    result["reached_call_us"] = {"none": call_none, "sdk": call_sdk}
    result["spans_exported_at_least"] = spans
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args.samples, args.calls)), indent=2))


if __name__ == "__main__":
    main()
