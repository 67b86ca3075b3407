"""Decision-recorded -> tool-starting latency through the bridge, against bare ADK as the floor.

    python tests/benchmarks/bridge_bench.py [--samples 25] [--pg postgresql://...]

Prints one JSON object. For each backend (SQLite file; PostgreSQL when reachable):

* ``in_process``: the resumer (``serve()``) runs in the process that records the decision;
* ``cross_process``: the resumer runs in another process, woken through the store (SQLite
  ``data_version`` / PostgreSQL ``LISTEN/NOTIFY``);
* ``api_server``: the deployment without Python glue: ``adk api_server`` serves the app (the pause
  is a real ``POST /run``) and the ``signoff resume`` sidecar resumes it (the tool runs there);
* ``adk_floor``: the same app without Signoff; the clock starts when the resume message is handed
  to ``run_async`` (ADK's own pause-and-resume cost: session load, confirmation replay, tool start).

``input_in_process``: as ``in_process``, for a question to a person (a review of kind ``input``): from
the signed answer's commit to the model reading it, beside ``in_process`` (a confirmation).

``where_it_goes``: the in-process path step by step beside bare ADK's, each step timed
(``resume_breakdown.py``).

``resumer_look``: what a resumer pass costs when it also looks for rewinds and cancels, with
``--idle`` (1,000) paused sessions nobody has decided, against none.

Latency is from the decision's commit returning (``approve()``, signed with the reviewer's key) to
the first line of the tool.
Target: cross-process p50 < 150 ms, p95 < 500 ms. Bounded: about a minute on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
warnings.filterwarnings("ignore")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App, ResumabilityConfig  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions.sqlite_session_service import SqliteSessionService  # noqa: E402
from google.adk.tools import FunctionTool, ToolContext  # noqa: E402
from google.adk.tools.tool_confirmation import ToolConfirmation  # noqa: E402
from google.genai import types  # noqa: E402

from signoff import bridge  # noqa: E402
from signoff.audit import ReviewService, Signer, open_store  # noqa: E402
from signoff.audit.keys import read_private_key  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402

REVIEWER = "human:bench@example.org"
APP = "bench"
TIMES_ENV = "SIGNOFF_BENCH_TIMES"
STORE_ENV = "SIGNOFF_BENCH_STORE"  # the api-server app's store (see AGENT_MODULE)
REVIEWER_KEY = Signer.generate()  # the reviewer's own key: every decision is signed
WARMUP = 2  # first runs of each configuration (imports, caches, connections) are not counted
_started: dict[int, float] = {}


class Model(BaseLlm):
    model: str = "bench"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        first_parts = llm_request.contents[0].parts if llm_request.contents else None
        first = first_parts[0].text if first_parts else "0"
        if not any(c.role == "model" for c in llm_request.contents):
            call = types.FunctionCall(name="pay", args={"n": int(first or 0)}, id="call-pay")
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
        else:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="ok")]))


class AskModel(BaseLlm):
    """Asks a person (``adk_request_input``); on the turn after the answer, notes when it read it."""

    model: str = "bench-ask"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        first_parts = llm_request.contents[0].parts if llm_request.contents else None
        n = int((first_parts[0].text if first_parts else "0") or 0)
        if not any(c.role == "model" for c in llm_request.contents):
            call = types.FunctionCall(name="adk_request_input", args={"message": f"Pay invoice {n}?"}, id="call-ask")
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
        else:
            _started.setdefault(n, time.time())  # the answer reached the agent
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="ok")]))


def pay(n: int, tool_context: ToolContext) -> dict[str, Any]:
    """Pay invoice n."""
    now = time.time()
    _started[n] = now
    path = os.environ.get(TIMES_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{n} {now!r}\n")
    return {"paid": n}


def app_for(signoff: bridge.Signoff | None, *, ask: bool = False) -> App:
    from google.adk.tools import request_input

    if ask:
        agent = LlmAgent(name="payer", model=AskModel(), tools=[request_input])
    else:
        agent = LlmAgent(name="payer", model=Model(), tools=[FunctionTool(pay, require_confirmation=True)])
    return App(
        name=APP,
        root_agent=agent,
        plugins=[signoff.plugin()] if signoff is not None else [],
        resumability_config=ResumabilityConfig(is_resumable=True),
    )


def runner_for(signoff: bridge.Signoff | None, sessions: str, *, ask: bool = False) -> Runner:
    return Runner(app=app_for(signoff, ask=ask), session_service=SqliteSessionService(db_path=sessions))


async def pause(runner: Runner, n: int) -> tuple[str, list[Any]]:
    session = await runner.session_service.create_session(app_name=APP, user_id="u")
    events = []
    message = types.Content(role="user", parts=[types.Part(text=str(n))])
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        events.append(event)
    return session.id, events


def summary(samples: list[float]) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in samples)
    if not ms:
        return {"n": 0}
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(p95, 2),
        "max_ms": round(ms[-1], 2),
    }


def init_store(url: str, key: Path) -> None:
    """A new log (``audit init``), with the reviewer and their key enrolled by the admin."""
    store = open_store(url)
    try:
        store.init_log(key)
        admin = read_private_key(default_admin_key(key))
        ReviewService(store).enroll_reviewer(
            REVIEWER, roles=["bench"], tools=["*"], key=REVIEWER_KEY.public, admin=admin
        )
    finally:
        store.close()


def approve(signoff: bridge.Signoff, review_id: str) -> None:
    signoff.reviews.approve(review_id, reviewer=REVIEWER, signer=REVIEWER_KEY)


async def bench_floor(tmp: Path, samples: int) -> dict[str, Any]:
    runner = runner_for(None, str(tmp / "floor-sessions.db"))
    out = []
    for n in range(samples + WARMUP):
        sid, events = await pause(runner, n)
        [call] = [f for e in events for f in e.get_function_calls() if f.name == "adk_request_confirmation"]
        message = types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        name=call.name, id=call.id, response=ToolConfirmation(confirmed=True).model_dump(mode="json")
                    )
                )
            ],
        )
        t0 = time.time()
        async for _ in runner.run_async(
            user_id="u", session_id=sid, invocation_id=events[-1].invocation_id, new_message=message
        ):
            pass
        if n >= WARMUP:
            out.append(_started[n] - t0)
    return summary(out)


async def bench_in_process(url: str, tmp: Path, samples: int, tag: str, *, ask: bool = False) -> dict[str, Any]:
    """``ask``: the pause is a question to a person (a review of kind ``input``), answered with a signed
    payload; the clock stops when the model reads the answer (for a confirmation: when the tool starts)."""
    signoff = bridge.Signoff(url)
    what = "ask" if ask else "inproc"
    runner = runner_for(signoff, str(tmp / f"{tag}-{what}-sessions.db"), ask=ask)
    stop = asyncio.Event()
    server = asyncio.create_task(signoff.resumer(runner, actor=f"agent:bench-{tag}-{what}").serve(stop=stop))
    out = []
    base = (10_000 if tag == "sqlite" else 30_000) + (5_000 if ask else 0)
    for i in range(samples + WARMUP):
        n = base + i
        await pause(runner, n)
        [review] = signoff.reviews.pending()
        if ask:
            await asyncio.to_thread(
                signoff.reviews.approve, review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, payload="yes"
            )
        else:
            await asyncio.to_thread(approve, signoff, review.id)
        t0 = time.time()
        while n not in _started:
            await asyncio.sleep(0.0005)
        if i >= WARMUP:
            out.append(_started[n] - t0)
        while not signoff.reviews.get(review.id).executed:
            await asyncio.sleep(0.001)
    stop.set()
    signoff.store.feed.bump()  # wake the server's wait at once
    await asyncio.wait_for(server, 10)
    signoff.close()
    return summary(out)


async def bench_cross_process(url: str, tmp: Path, samples: int, tag: str) -> dict[str, Any]:
    sessions = str(tmp / f"{tag}-cross-sessions.db")
    times = tmp / f"{tag}-times.txt"
    times.write_text("")
    ready = tmp / f"{tag}-ready"
    env = {**os.environ, TIMES_ENV: str(times), "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, __file__, "--serve", url, sessions, str(ready)], env=env, cwd=ROOT)
    try:
        while not ready.exists():
            if server.poll() is not None:
                raise SystemExit(f"resumer process exited with {server.returncode}")
            await asyncio.sleep(0.05)
        signoff = bridge.Signoff(url)
        runner = runner_for(signoff, sessions)
        out = []
        for i in range(samples + WARMUP):
            n = 20_000 + i
            await pause(runner, n)
            [review] = signoff.reviews.pending()
            await asyncio.to_thread(approve, signoff, review.id)
            t0 = time.time()
            started = None
            while started is None:
                for line in times.read_text().splitlines():
                    k, v = line.split()
                    if int(k) == n:
                        started = float(v)
                if started is None:
                    await asyncio.sleep(0.001)
            if i >= WARMUP:
                out.append(started - t0)
            while not signoff.reviews.get(review.id).executed:
                await asyncio.sleep(0.002)
        signoff.close()
        return summary(out)
    finally:
        server.terminate()
        server.wait(10)


AGENT_MODULE = '''"""The bench app, served by `adk api_server` and loaded by `signoff resume` (bridge_bench.py)."""
import os

from bridge_bench import STORE_ENV, app_for

from signoff import bridge

signoff = bridge.Signoff(os.environ[STORE_ENV])
app = app_for(signoff)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def started_at(times: Path, n: int) -> float | None:
    for line in times.read_text().splitlines():
        k, v = line.split()
        if int(k) == n:
            return float(v)
    return None


async def bench_api_server(url: str, tmp: Path, samples: int, tag: str) -> dict[str, Any]:
    """``adk api_server`` pauses (``POST /run``), the ``signoff resume`` sidecar resumes: no Python glue."""
    import httpx

    agents = tmp / f"{tag}-agents"
    (agents / APP).mkdir(parents=True)
    (agents / APP / "__init__.py").write_text("from . import agent  # noqa: F401\n")
    (agents / APP / "agent.py").write_text(AGENT_MODULE)
    sessions = f"sqlite:///{tmp / f'{tag}-api-sessions.db'}"  # absolute path: sqlite:////tmp/...
    times = tmp / f"{tag}-api-times.txt"
    times.write_text("")
    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, STORE_ENV: url, TIMES_ENV: str(times), "PYTHONPATH": os.pathsep.join([here, str(ROOT)])}
    bin_dir = Path(sys.executable).parent
    port = free_port()
    logs = [(tmp / f"{tag}-{name}.log").open("wb") for name in ("api_server", "sidecar")]
    server = subprocess.Popen(
        [str(bin_dir / "adk"), "api_server", "--host", "127.0.0.1", "--port", str(port)]
        + ["--session_service_uri", sessions, "--no-reload", str(agents)],
        env=env,
        cwd=tmp,
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    sidecar = subprocess.Popen(
        [str(bin_dir / "signoff"), "resume", "--agents-dir", str(agents), "--app", f"{APP}.agent:app"]
        + ["--sessions", sessions, "--actor", f"agent:bench-{tag}-sidecar", "--max-wait", "1"],
        env=env,
        cwd=tmp,
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    signoff = bridge.Signoff(url, default=False)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            while True:
                if server.poll() is not None or sidecar.poll() is not None:
                    raise SystemExit(f"api_server or sidecar exited; see {tmp}/{tag}-*.log")
                try:
                    if (await http.get("/list-apps")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            out = []
            base = 40_000 if tag == "sqlite" else 50_000
            for i in range(samples + WARMUP):
                n = base + i
                created = await http.post(f"/apps/{APP}/users/u/sessions", json={})
                sid = created.json()["id"]
                body = {"appName": APP, "userId": "u", "sessionId": sid}
                paused = await http.post(
                    "/run", json={**body, "newMessage": {"role": "user", "parts": [{"text": str(n)}]}}
                )
                paused.raise_for_status()
                review = await asyncio.to_thread(signoff.reviews.find, sid, call_id="call-pay")
                assert review is not None, f"no review opened for session {sid}"
                await asyncio.to_thread(approve, signoff, review.id)
                t0 = time.time()
                started = None
                while started is None:
                    started = started_at(times, n)
                    if started is None:
                        await asyncio.sleep(0.001)
                if i >= WARMUP:
                    out.append(started - t0)
                while not signoff.reviews.get(review.id).executed:
                    await asyncio.sleep(0.002)
        return summary(out)
    finally:
        signoff.close()
        for proc in (sidecar, server):
            proc.terminate()
            proc.wait(30)
        for f in logs:
            f.close()


async def bench_resumer_look(tmp: Path, idle: int, looks: int = 20) -> dict[str, Any]:
    """The resumer's cost per pass when it also looks for rewinds and cancels (issue 21): with ``idle``
    paused sessions whose reviews nobody has decided, against none, on SQLite (log and sessions).

    * ``pass_no_sessions``: ``run_once()`` with the look due and nothing paused (the reference);
    * ``first_look_ms``: the first look, which reads every paused session once;
    * ``pass_idle``: later passes with the look due (one ``list_sessions`` and one indexed query);
    * ``pass_idle_without_look``: the same passes with the look not due (the rest of a pass).
    """
    url = f"sqlite:///{tmp / 'look.db'}"
    init_store(url, tmp / "look.key")
    signoff = bridge.Signoff(url)
    runner = runner_for(signoff, str(tmp / "look-sessions.db"))
    resumer = signoff.resumer(runner, actor="agent:bench-look")

    async def passes(due: bool) -> list[float]:
        out = []
        for _ in range(looks):
            resumer.rewinds._next = 0.0 if due else float("inf")
            t0 = time.perf_counter()
            await resumer.run_once()
            out.append(time.perf_counter() - t0)
        return out

    result: dict[str, Any] = {"idle_sessions": idle, "unit": "ms per run_once()"}
    result["pass_no_sessions"] = summary(await passes(True))
    for n in range(idle):
        await pause(runner, 50_000 + n)
    assert signoff.reviews.count_pending() == idle
    resumer.rewinds._next = 0.0
    t0 = time.perf_counter()
    await resumer.run_once()
    result["first_look_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    result["pass_idle"] = summary(await passes(True))
    result["pass_idle_without_look"] = summary(await passes(False))
    signoff.close()
    return result


async def serve(url: str, sessions: str, ready: str) -> None:
    signoff = bridge.Signoff(url)
    runner = runner_for(signoff, sessions)
    Path(ready).write_text("ready")
    await signoff.resumer(runner, actor="agent:bench-cross").serve()


def pg_schema_url(base: str) -> tuple[str, Any] | None:
    try:
        import psycopg

        conn = psycopg.connect(base, autocommit=True, connect_timeout=3)
    except Exception:  # noqa: BLE001
        return None
    schema = "bench_" + secrets.token_hex(5)
    conn.execute(f'CREATE SCHEMA "{schema}"')
    return f"{base}?options=-csearch_path%3D{schema}", (conn, schema)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "samples": args.samples,
        "warmup_excluded": WARMUP,
        "unit": "ms, decision commit -> tool start",
    }
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        result["adk_floor"] = await bench_floor(tmp, args.samples)
        from resume_breakdown import breakdown  # (it imports this module)

        result["where_it_goes"] = await breakdown(tmp, args.samples)
        result["resumer_look"] = await bench_resumer_look(tmp, args.idle)
        backends: list[tuple[str, str, Any]] = [("sqlite", f"sqlite:///{tmp / 'bench.db'}", None)]
        pg = pg_schema_url(args.pg)
        if pg is not None:
            backends.append(("postgresql", pg[0], pg[1]))
        else:
            result["postgresql"] = {"skipped": f"not reachable at {args.pg}"}
        for tag, url, cleanup in backends:
            try:
                init_store(url, tmp / f"{tag}.key")
                result[tag] = {
                    "in_process": await bench_in_process(url, tmp, args.samples, tag),
                    "input_in_process": await bench_in_process(url, tmp, args.samples, tag, ask=True),
                    "cross_process": await bench_cross_process(url, tmp, args.samples, tag),
                    "api_server": await bench_api_server(url, tmp, args.samples, tag),
                }
            finally:
                if cleanup is not None:
                    conn, schema = cleanup
                    conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
                    conn.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--idle", type=int, default=1000, help="paused sessions for the resumer's look")
    parser.add_argument("--pg", default=os.environ.get("SIGNOFF_PG_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--serve", nargs=3, metavar=("STORE", "SESSIONS", "READY"))
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(*args.serve))
        return
    print(json.dumps(asyncio.run(main_async(args)), indent=2))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
