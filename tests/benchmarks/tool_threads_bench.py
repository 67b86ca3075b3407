"""Plain (non-async) tools of resumed runs run side by side (issue 34 item 12).

    python tests/benchmarks/tool_threads_bench.py [--calls 8] [--seconds 1.0]

``--calls`` approved calls of a plain tool that sleeps ``--seconds`` (a slow HTTP call, a report) are
resumed by one ``Resumer.run_once()`` with its default concurrency of 8, through a real ``Runner`` on
a SQLite store and session file. Measured twice in the same run: with the tool thread pool the resumer
now gives its runs, and with ADK's default ``RunConfig`` (no pool: ADK calls the tool on the event loop,
as the resumer did before). Prints one JSON object. Target: the calls take about one tool's time
(``seconds``, the limit measured by the same sleep), not ``calls`` of them in a row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


async def measure(calls: int, seconds: float, *, pool: bool) -> dict[str, Any]:
    """Pause ``calls`` sessions, approve them all, and time one resumer pass."""
    warnings.filterwarnings("ignore")
    from google.adk.agents import LlmAgent
    from google.adk.agents.run_config import RunConfig
    from google.adk.apps import App, ResumabilityConfig
    from google.adk.runners import Runner
    from google.adk.sessions.sqlite_session_service import SqliteSessionService
    from google.adk.tools import FunctionTool
    from google.genai import types

    from signoff import bridge
    from signoff.audit import ReviewService, Signer, open_store
    from signoff.audit.keys import read_private_key
    from signoff.audit.store import default_admin_key
    from signoff.bridge.scripted import ScriptedModel

    ran: list[float] = []

    def report(name: str) -> dict[str, Any]:
        """Build a report (slow, and not async)."""
        time.sleep(seconds)
        ran.append(time.perf_counter())
        return {"report": name}

    tmp = Path(tempfile.mkdtemp(prefix="tool-threads-"))
    url = f"sqlite:///{tmp / 'signoff.db'}"
    store = open_store(url)
    store.init_log(tmp / "log.key")
    reviewer, key = "human:alice@example.org", Signer.generate()
    admin = read_private_key(default_admin_key(tmp / "log.key"))
    ReviewService(store).enroll_reviewer(reviewer, roles=["ops"], tools=["*"], key=key.public, admin=admin)
    store.close()
    signoff = bridge.Signoff(url)
    agent = LlmAgent(
        name="clerk",
        model=ScriptedModel.calling("report", name="q4"),
        tools=[FunctionTool(report, require_confirmation=True)],
    )
    app = App(
        name="reports",
        root_agent=agent,
        plugins=[signoff.plugin()],
        resumability_config=ResumabilityConfig(is_resumable=True),
    )
    sessions = SqliteSessionService(db_path=str(tmp / "sessions.db"))
    runner = Runner(app=app, session_service=sessions)
    for _ in range(calls):
        session = await sessions.create_session(app_name="reports", user_id="u1")
        message = types.Content(role="user", parts=[types.Part(text="the q4 report")])
        async for _event in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
            pass
    for review in signoff.reviews.pending(limit=calls):
        signoff.reviews.approve(review.id, reviewer=reviewer, signer=key)
    resumer = signoff.resumer(runner)
    if not pool:
        resumer.run_config = RunConfig()  # the code before: ADK's default, no tool thread pool
    start = time.perf_counter()
    done = await resumer.run_once()
    took = time.perf_counter() - start
    signoff.close()
    return {"resumed": len(done), "ran": len(ran), "seconds": round(took, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    start = time.perf_counter()
    time.sleep(args.seconds)
    limit = time.perf_counter() - start  # one tool's time, on this machine now
    threads = asyncio.run(measure(args.calls, args.seconds, pool=True))
    loop = asyncio.run(measure(args.calls, args.seconds, pool=False))
    print(
        json.dumps(
            {
                "bench": "tool_threads",
                "calls": args.calls,
                "tool_seconds": args.seconds,
                "limit_one_tool_seconds": round(limit, 3),
                "with_tool_threads": threads,
                "without_tool_threads": loop,
                "ratio_to_one_tool": round(threads["seconds"] / limit, 2),
                "target": "about one tool's time (ratio < 2), not calls x seconds",
                "met": threads["seconds"] < 2 * limit and threads["ran"] == args.calls,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
