"""The resumer runs plain (non-async) tools side by side (issue 34 item 12).

ADK calls a synchronous tool on the event loop unless the run's ``RunConfig`` has a
``tool_thread_pool_config``; the resumer set none, so with its concurrency of 8 one slow tool held
every other resume of the process. Each resumed run now gets a pool (``tool_threads``, default the
concurrency), and an app's own ``RunConfig`` is kept, its pool included. The bench is
``tests/benchmarks/tool_threads_bench.py`` (8 calls of a 1 s tool: 1.2 s, against 8.4 s before).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _support import REVIEWER, REVIEWER_KEY, ScriptedLlm, fc, make_app, new_session, run_turn
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode, ToolThreadPoolConfig
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools import FunctionTool

from signoff import bridge
from signoff.bridge._resumer import with_tool_threads

CALLS = 4
SLEEP = 1.0  # long beside a claim and an ADK turn, even on a loaded machine: the calls overlap if they can


class Spans:
    """When each run of the slow tool started and ended, and on which thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[float, float, int]] = []

    def most_at_once(self) -> int:
        edges = sorted([(s, 1) for s, _e, _t in self.seen] + [(e, -1) for _s, e, _t in self.seen])
        now = peak = 0
        for _at, step in edges:
            now += step
            peak = max(peak, now)
        return peak


async def _resume_slow_calls(signoff: bridge.Signoff, tmp_path: Path, **resumer: Any) -> Spans:
    spans = Spans()

    def slow_report(name: str) -> dict[str, Any]:
        """Build a report (slow, and not async)."""
        start = time.monotonic()
        time.sleep(SLEEP)
        with spans.lock:
            spans.seen.append((start, time.monotonic(), threading.get_ident()))
        return {"report": name}

    agent = LlmAgent(
        name="clerk",
        model=ScriptedLlm(script=[[fc("slow_report", {"name": "q4"}, "call-report")]]),
        tools=[FunctionTool(slow_report, require_confirmation=True)],
    )
    sessions = SqliteSessionService(db_path=str(tmp_path / "sessions.db"))
    runner = Runner(app=make_app(agent, signoff), session_service=sessions)
    for _ in range(CALLS):
        await run_turn(runner, await new_session(sessions), "the q4 report")
    for review in signoff.reviews.pending(limit=CALLS):
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    done = await signoff.resumer(runner, **resumer).run_once()
    assert len(done) == CALLS and len(spans.seen) == CALLS
    return spans


@pytest.mark.asyncio
async def test_slow_plain_tools_of_resumed_runs_run_side_by_side(
    signoff: bridge.Signoff, tmp_path: Path, runs_file: Path
) -> None:
    spans = await _resume_slow_calls(signoff, tmp_path)
    assert spans.most_at_once() >= 2, spans.seen  # one after another before (each on the event loop)
    assert threading.get_ident() not in {t for _s, _e, t in spans.seen}  # never on the loop's thread


@pytest.mark.asyncio
async def test_the_apps_own_tool_pool_is_kept(signoff: bridge.Signoff, tmp_path: Path, runs_file: Path) -> None:
    """An app that asks for one tool thread gets one: its calls run one at a time, off the loop."""
    own = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=1))
    spans = await _resume_slow_calls(signoff, tmp_path, run_config=own)
    assert spans.most_at_once() == 1, spans.seen
    assert threading.get_ident() not in {t for _s, _e, t in spans.seen}


def test_a_run_config_gets_a_pool_and_keeps_the_rest() -> None:
    given = RunConfig(max_llm_calls=7, streaming_mode=StreamingMode.SSE)
    made = with_tool_threads(given, 3)
    assert made.tool_thread_pool_config == ToolThreadPoolConfig(max_workers=3)
    assert (made.max_llm_calls, made.streaming_mode) == (7, StreamingMode.SSE)
    assert given.tool_thread_pool_config is None  # the app's own object is not changed
    assert with_tool_threads(None, 8).tool_thread_pool_config == ToolThreadPoolConfig(max_workers=8)
    kept = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=2))
    assert with_tool_threads(kept, 8) is kept
