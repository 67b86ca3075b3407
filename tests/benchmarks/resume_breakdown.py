"""Where decision → tool goes, step by step (issue 24 §4); ``bridge_bench.py`` reports it.

The resumer runs in the process that records the decisions (SQLite log, ADK's ``SqliteSessionService``),
and each step it takes is timed by wrapping the function that does it, for the time of this bench only:
from the approval's commit returning, the resumer woken by the log, its read of the decided frontiers
(projection) and of the frontier (from the log), its read of the ADK session (is the pause there?), its
claim (``run.resumed``, a durable commit: exactly once), then ADK's own resume (its ``get_session`` and
``append_event`` of the answer), and the gate's proof of the signed decision before the tool's first line.
Beside it, the same wrapped ADK calls in bare ADK's pause-and-resume (``bridge_bench.bench_floor``'s app
without Signoff), so that each step can be held against the 1.5× budget: half the floor.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bridge_bench as bb
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from signoff import bridge
from signoff.audit import ReviewService
from signoff.bridge import _gate, _resumer
from signoff.bridge._calls import REQUEST_CONFIRMATION

Marks = list[tuple[str, float, float]]  # (step, start, end), time.time()

# (owner, attribute, step): each call's span is recorded under its step
SYNC = [
    (ReviewService, "ready_frontier_ids", "ready frontiers (projection)"),
    (ReviewService, "frontier", "the frontier (log)"),
    (ReviewService, "claim_resume", "claim: run.resumed (durable commit)"),
    (_gate, "prove_decision", "gate: proof of the signed decision"),
]
ASYNC = [
    (_resumer.Resumer, "_session", "the session read (ADK get_session)"),
    (SqliteSessionService, "get_session", "ADK get_session"),
    (SqliteSessionService, "append_event", "ADK append_event"),
]


@contextmanager
def traced() -> Iterator[Marks]:
    marks: Marks = []
    saved = []

    def sync(fn: Any, step: str) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.time()
            try:
                return fn(*args, **kwargs)
            finally:
                marks.append((step, start, time.time()))

        return timed

    def asynchronous(fn: Any, step: str) -> Any:
        @functools.wraps(fn)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.time()
            try:
                return await fn(*args, **kwargs)
            finally:
                marks.append((step, start, time.time()))

        return timed

    woken = ReviewService.wait_for_change

    def wait_for_change(*args: Any, **kwargs: Any) -> Any:
        found = woken(*args, **kwargs)
        marks.append(("woken", time.time(), time.time()))
        return found

    plain_run = Runner.run_async

    def run_async(self: Runner, *args: Any, **kwargs: Any) -> Any:
        marks.append(("run_async", time.time(), time.time()))
        return plain_run(self, *args, **kwargs)

    wraps = [(o, n, sync(getattr(o, n), s)) for o, n, s in SYNC]
    wraps += [(o, n, asynchronous(getattr(o, n), s)) for o, n, s in ASYNC]
    wraps += [(ReviewService, "wait_for_change", wait_for_change), (Runner, "run_async", run_async)]
    for owner, name, wrapper in wraps:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, wrapper)
    try:
        yield marks
    finally:
        for owner, name, plain in saved:
            setattr(owner, name, plain)


SESSION_READ = ASYNC[0][2]


def _spans(marks: Marks, t0: float, started: float) -> dict[str, float]:
    """Milliseconds per step between ``t0`` (the decision committed) and ``started`` (the tool's first line);
    a step taken twice is summed; ADK's get_session inside the resumer's session read counts as that read."""
    out: dict[str, float] = {"total": (started - t0) * 1000}
    firsts: dict[str, float] = {}
    reads = [(start, end) for step, start, end in marks if step == SESSION_READ]
    for step, start, end in marks:
        if start < t0 or end > started + 1e-6:
            continue
        if step == "ADK get_session" and any(a <= start and end <= b for a, b in reads):
            continue
        firsts.setdefault(step, start)
        out[step] = out.get(step, 0.0) + (end - start) * 1000
    if "woken" in firsts:
        out["woken by the log"] = (firsts.pop("woken") - t0) * 1000
        out.pop("woken", None)
    if "run_async" in firsts:
        out["to ADK's run_async"] = (firsts["run_async"] - t0) * 1000
        out.pop("run_async", None)
    return out


def _medians(samples: list[dict[str, float]], steps: list[str]) -> dict[str, float]:
    return {k: round(statistics.median(s.get(k, 0.0) for s in samples), 2) for k in steps}


async def breakdown(tmp: Path, samples: int) -> dict[str, Any]:
    """The medians of each step, in process on SQLite, and of bare ADK's resume in the same run."""
    url = f"sqlite:///{tmp / 'breakdown.db'}"
    bb.init_store(url, tmp / "breakdown.key")
    floor_runner = bb.runner_for(None, str(tmp / "breakdown-floor.db"))
    signoff = bridge.Signoff(url)
    runner = bb.runner_for(signoff, str(tmp / "breakdown-sessions.db"))
    stop = asyncio.Event()
    server = asyncio.create_task(signoff.resumer(runner, actor="agent:bench-breakdown").serve(stop=stop))
    floor: list[dict[str, float]] = []
    ours: list[dict[str, float]] = []
    try:
        with traced() as marks:
            for i in range(samples + bb.WARMUP):
                n = 70_000 + i
                sid, events = await bb.pause(floor_runner, n)
                [call] = [f for e in events for f in e.get_function_calls() if f.name == REQUEST_CONFIRMATION]
                answer = types.FunctionResponse(
                    name=call.name, id=call.id, response=bb.ToolConfirmation(confirmed=True).model_dump(mode="json")
                )
                marks.clear()
                t0 = time.time()
                async for _ in floor_runner.run_async(
                    user_id="u",
                    session_id=sid,
                    invocation_id=events[-1].invocation_id,
                    new_message=types.Content(role="user", parts=[types.Part(function_response=answer)]),
                ):
                    pass
                if i >= bb.WARMUP:
                    floor.append(_spans(marks, t0, bb._started[n]))
                n += 10_000
                await bb.pause(runner, n)
                [review] = signoff.reviews.pending()
                await asyncio.to_thread(bb.approve, signoff, review.id)
                marks.clear()
                t0 = time.time()
                while n not in bb._started:
                    await asyncio.sleep(0.0005)
                if i >= bb.WARMUP:
                    ours.append(_spans(marks, t0, bb._started[n]))
                while not signoff.reviews.get(review.id).executed:
                    await asyncio.sleep(0.001)
    finally:
        stop.set()
        signoff.store.feed.bump()
        await asyncio.wait_for(server, 10)
        signoff.close()
    adk = ["ADK get_session", "ADK append_event"]
    bare = _medians(floor, ["total", *adk])
    before = ["woken by the log", *(step for _o, _n, step in SYNC[:2]), SESSION_READ, SYNC[2][2]]
    steps = _medians(ours, ["total", *before, "to ADK's run_async", *adk, SYNC[3][2]])
    return {
        "unit": "ms, median per step; decision committed -> tool's first line, in process, SQLite",
        "bare_adk": bare,
        "signoff": steps,
        "budget_at_1_5x_ms": round(bare["total"] / 2, 2),
        "claim_and_proof_ms": round(steps[SYNC[2][2]] + steps[SYNC[3][2]], 2),
    }
