"""Two desks and two resumers on one PostgreSQL, with failover (issue 11): throughput and decision → tool.

    python tests/benchmarks/scale_bench.py [--reviews 1000] [--pg postgresql://...] [--only failover|steady]

On the real PostgreSQL server, in a fresh schema per phase:

* 2 ``desk serve`` processes on different ports (the same store URL);
* 2 ``signoff resume`` sidecars, each with its own ``--actor``, over one ADK ``DatabaseSessionService``
  (PostgreSQL, ``postgresql+psycopg://``) serving the scripted bank app of ``tests/bridge/api_agents``;
* a driver that opens ``--reviews`` reviews from scripted agent runs (ADK ``Runner`` on the same app and
  session database) and decides each through the JSON API of one of the two desks, at random, signed with
  the reviewer's own Ed25519 key (``sig``), authenticated by an API token;
* an SSE client on the first desk's live queue (``/events``), signed in as the reviewer.

Two phases: ``steady`` (nothing killed) and ``failover`` (once 40% are decided, ``kill -9`` of the second
desk and the first resumer, which are started again 1 s later). After each phase:

* every frontier resumed exactly once (one ``run.resumed`` each on the log), one ``tool.executed`` per review,
  and every transfer booked once by the bank (its ledger, keyed by ``bridge.idempotency_key``);
* a tool ran more than once only where its earlier attempt was in a process killed here (between the
  transfer and its ``tool.executed``: the README's "Exactly-once covers the resume, not the world"); each
  attempt is one line in the tool's side file, with its process id;
* every decision answered 2xx is on the log;
* ``audit verify`` exits 0;
* the first desk's live queue carried the decisions made through the second one.

Reports decisions/s, reviews completed/s (open → tool) and the decision → tool latency p50/p95 (from the
decision entry's time to the ``tool.executed`` entry's time on the log). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
AGENTS = ROOT / "tests" / "bridge" / "api_agents"
BIN = Path(sys.executable).parent
PG_DEFAULT = os.environ.get("SIGNOFF_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REVIEWER = "human:alice@example.org"
ADMIN = "admin:root"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proc:
    """A child process with its output in a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], root: Path) -> None:
        self.name, self.argv, self.env, self.root = name, argv, env, root
        self.log = root / f"{name}.log"
        self.start()

    def start(self) -> None:
        with self.log.open("a") as sink:
            self.proc = subprocess.Popen(self.argv, stdout=sink, stderr=subprocess.STDOUT, env=self.env, cwd=self.root)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def wait_until(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.05)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def seconds_of(at: str) -> float:
    from signoff.audit.entry import parse_time

    return parse_time(at).timestamp()


class Phase:
    """One run of the deployment on a fresh schema."""

    def __init__(self, base: str, root: Path, reviews: int, failover: bool) -> None:
        import psycopg

        self.root, self.reviews, self.failover = root, reviews, failover
        self.schema = "scale_" + secrets.token_hex(5)
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        sep = "&" if "?" in base else "?"
        self.url = f"{base}{sep}options=-csearch_path%3D{self.schema}"
        self.sessions = self.url.replace("postgresql://", "postgresql+psycopg://", 1)
        self.base = base
        self.runs = root / "runs.jsonl"
        self.ledger = root / "ledger.jsonl"
        self.killed_pids: set[int] = set()
        self.killed_at = float("inf")  # when the killed processes were gone
        self.procs: list[Proc] = []
        self.acks: list[tuple[str, str, int, float]] = []  # review, desk, status, time
        self.seen_on_a: set[str] = set()
        self.stop_sse = threading.Event()
        self.stale_openers = 0

    # -- set up ------------------------------------------------------------------------

    def setup(self) -> None:
        from signoff.audit import ReviewService, Signer, open_store
        from signoff.audit.keys import read_private_key
        from signoff.audit.store import default_admin_key
        from signoff.desk.auth import Accounts
        from signoff.desk.db import make_engine

        key = self.root / "log.pem"
        store = open_store(self.url)
        store.init_log(key)
        self.person = Signer.generate()
        ReviewService(store).enroll_reviewer(
            REVIEWER,
            roles=["teller"],
            tools=["*"],
            key=self.person.public,
            admin=read_private_key(default_admin_key(key)),
        )
        self.log_id = store.log_id
        self.store = store
        accounts = Accounts(make_engine(self.url), store.log_id)
        self.token = accounts.new_token(REVIEWER, "scale")
        accounts.set_password(REVIEWER, secrets.token_urlsafe(16), must_change=False)
        self.cookie, _csrf = accounts.open_session(REVIEWER)
        env = {
            **os.environ,
            "SIGNOFF_TEST_STORE": self.url,
            "SIGNOFF_TEST_RUNS": str(self.runs),
            "SIGNOFF_TEST_LEDGER": str(self.ledger),
            "PYTHONUNBUFFERED": "1",
        }
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.env = env
        self.ports = [free_port(), free_port()]
        self.desks = [
            Proc(
                f"desk-{i}",
                [str(BIN / "desk"), "serve", "--store", self.url, "--port", str(port), "--quiet"],
                env,
                self.root,
            )
            for i, port in enumerate(self.ports)
        ]
        self.resumers = [
            Proc(
                f"resumer-{i}",
                [
                    str(BIN / "signoff"),
                    "resume",
                    "--agents-dir",
                    str(AGENTS),
                    "--app",
                    "bank.agent:app",
                    "--sessions",
                    self.sessions,
                    "--actor",
                    f"agent:resumer-{i}",
                    "--max-wait",
                    "0.5",
                    "--takeover-after",
                    "5",
                ],
                env,
                self.root,
            )  # fmt: skip
            for i in range(2)
        ]
        import httpx

        for port in self.ports:
            wait_until(lambda port=port: self._up(httpx, port), f"desk on {port}")
        for resumer in self.resumers:
            wait_until(lambda r=resumer: "signoff: resuming app" in r.text(), f"{resumer.name} to start")

    @staticmethod
    def _up(httpx: Any, port: int) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code < 500
        except httpx.HTTPError:
            return False

    # -- the live queue on desk 0 --------------------------------------------------------

    def watch(self) -> None:
        import httpx

        url = f"http://127.0.0.1:{self.ports[0]}/events"
        while not self.stop_sse.is_set():
            try:
                with httpx.stream("GET", url, cookies={"desk_session": self.cookie}, timeout=None) as stream:
                    for line in stream.iter_lines():
                        if self.stop_sse.is_set():
                            return
                        if line.startswith("data: "):
                            event = json.loads(line[6:])
                            if event.get("type") == "closed" and event.get("review"):
                                self.seen_on_a.add(str(event["review"]))
            except (httpx.HTTPError, ValueError):
                time.sleep(0.2)

    # -- agents open, people decide ------------------------------------------------------

    async def open_reviews(self) -> None:
        """Scripted agent runs (ADK) that pause on the gated transfer: one review each."""
        os.environ["SIGNOFF_TEST_STORE"] = self.url
        os.environ["SIGNOFF_TEST_RUNS"] = str(self.runs)
        os.environ["SIGNOFF_TEST_LEDGER"] = str(self.ledger)
        sys.path.insert(0, str(AGENTS))
        import importlib

        import bank.agent as bank
        from google.adk.errors._stale_session_error import StaleSessionError
        from google.adk.runners import Runner
        from google.adk.sessions.database_session_service import DatabaseSessionService
        from google.genai import types

        bank = importlib.reload(bank)
        runner = Runner(app=bank.app, session_service=DatabaseSessionService(self.sessions))
        gate = asyncio.Semaphore(8)

        async def one(n: int) -> None:
            async with gate:
                session = await runner.session_service.create_session(app_name="bank", user_id="u")
                message = types.Content(role="user", parts=[types.Part(text=f"pay rent {n}")])
                try:
                    async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
                        pass
                except StaleSessionError:
                    # The review was opened, decided and resumed by a resumer before this run had stored
                    # the last events of its own pause: ADK refuses this run's late append (counted).
                    self.stale_openers += 1

        await asyncio.gather(*(one(n) for n in range(self.reviews)))

    def decide(self, stop: threading.Event, killed: threading.Event) -> None:
        """Decide every pending review through desk 0 or desk 1 at random (retrying a desk that is down)."""
        import httpx

        from signoff.audit.decision import approve_body, sign_decision

        headers = {"Authorization": f"Bearer {self.token}"}
        decided: set[str] = set()
        clients = [
            httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) for port in self.ports
        ]
        rng = random.Random(7)
        while not stop.is_set():
            try:
                page = clients[0 if killed.is_set() and rng.random() < 0.5 else rng.randrange(2)].get(
                    "/api/reviews", params={"limit": 50}
                )
                items = page.json().get("items", []) if page.status_code == 200 else []
            except httpx.HTTPError:
                items = []
            todo = [item for item in items if item["id"] not in decided]
            if not todo:
                time.sleep(0.05)
                continue
            for item in todo:
                which = rng.randrange(2)
                body = approve_body(item["id"], item["args_digest"])
                sig = sign_decision(self.person, self.log_id, "review.approved", REVIEWER, body)
                try:
                    answer = clients[which].post(f"/api/reviews/{item['id']}/approve", json={"sig": sig})
                except httpx.HTTPError:
                    continue  # that desk is down: the review stays pending and is taken again
                self.acks.append((item["id"], f"desk-{which}", answer.status_code, time.time()))
                if answer.status_code < 300 or answer.status_code == 409:
                    decided.add(item["id"])

    # -- one phase ---------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.setup()
        watcher = threading.Thread(target=self.watch, daemon=True)
        watcher.start()
        stop, killed = threading.Event(), threading.Event()
        decider = threading.Thread(target=self.decide, args=(stop, killed), daemon=True)
        started = time.time()
        decider.start()
        failover_at: float | None = None

        def failover() -> None:
            nonlocal failover_at
            wait_until(lambda: sum(1 for a in self.acks if a[2] < 300) >= 0.4 * self.reviews, "40% decided", 600)
            failover_at = time.time()
            say("failover: kill -9 desk-1 and resumer-0")
            killed.set()
            self.killed_pids.update({self.desks[1].proc.pid, self.resumers[0].proc.pid})
            self.desks[1].kill9()
            self.resumers[0].kill9()
            self.killed_at = time.time()
            time.sleep(1.0)
            self.desks[1].start()
            self.resumers[0].start()
            killed.clear()

        chaos = threading.Thread(target=failover, daemon=True) if self.failover else None
        if chaos is not None:
            chaos.start()
        asyncio.run(self.open_reviews())
        opened_done = time.time()
        self._wait_for_tools()
        finished = time.time()
        stop.set()
        decider.join(10)
        if chaos is not None:
            chaos.join(60)
        time.sleep(1.0)  # the live queue's last events
        self.stop_sse.set()
        result = self.check()
        ok_acks = [a for a in self.acks if a[2] < 300]
        result.update(
            {
                "reviews": self.reviews,
                "seconds": round(finished - started, 1),
                "open_seconds": round(opened_done - started, 1),
                "decisions_per_s": round(len(ok_acks) / (max(a[3] for a in ok_acks) - min(a[3] for a in ok_acks)), 1),
                "completed_per_s": round(self.reviews / (finished - started), 1),
                "decisions_by_desk": dict(Counter(a[1] for a in ok_acks)),
                "refused_or_failed_requests": dict(Counter(str(a[2]) for a in self.acks if a[2] >= 300)),
                "failover_at_s": round(failover_at - started, 1) if failover_at else None,
                "opening_runs_refused_as_stale_by_adk": self.stale_openers,
            }
        )
        return result

    def _wait_for_tools(self, stall: float = 30.0) -> None:
        """Until every tool ran, or nothing more ran for ``stall`` seconds (what is left is reported)."""
        seen, last = -1, time.monotonic()
        while True:
            done = self._executed()
            if done >= self.reviews:
                return
            if done != seen:
                seen, last = done, time.monotonic()
            elif time.monotonic() - last > stall:
                say(f"stalled: {done} of {self.reviews} tools ran; reporting what is left")
                return
            time.sleep(0.2)

    def _executed(self) -> int:
        found = self.store.read_rows(
            "SELECT COUNT(*) AS n FROM signoff_entry WHERE log = ? AND kind = 'tool.executed'", self.log_id
        )
        return int(found[0].n)

    def check(self) -> dict[str, Any]:
        entries = list(self.store.entries())
        resumed = Counter(str(e.body.get("frontier")) for e in entries if e.kind == "run.resumed")
        opened = {str(e.body["review"]): e for e in entries if e.kind == "review.opened"}
        decisions = {str(e.body["review"]): e for e in entries if e.kind == "review.approved"}
        executed = {str(e.body["review"]): e for e in entries if e.kind == "tool.executed"}
        frontiers = {str(e.body["frontier"]) for e in opened.values()}
        executions = Counter(str(e.body["review"]) for e in entries if e.kind == "tool.executed")
        runs = [json.loads(line) for line in self.runs.read_text().splitlines() if line.strip()]
        per_session = Counter(run["session"] for run in runs)
        # A call attempted again is explained by a kill only if every earlier attempt was in a process killed
        # here and its one tool.executed was written after the kill (the killed attempt never reached it).
        earlier: dict[str, list[int]] = {}
        for run in runs:
            earlier.setdefault(run["session"], []).append(int(run["pid"]))
        review_of = {str(e.body["call"]["session"]): rid for rid, e in opened.items()}
        after_kill = {
            session
            for session, pids in earlier.items()
            if len(pids) > 1
            and set(pids[:-1]) <= self.killed_pids
            and review_of.get(session) in executed
            and seconds_of(executed[review_of[session]].at) > self.killed_at
        }
        again = [session for session, pids in earlier.items() if len(pids) > 1]
        # What a reader needs to judge a call that ran again without a kill to explain it: who ran it (pid,
        # and whether it was killed here), and the log's entries for its review and frontier (actor, time
        # relative to the kill).
        unexplained = {}
        for session in again:
            if session in after_kill:
                continue
            rid = review_of.get(session)
            frontier = opened[rid].body.get("frontier") if rid in opened else None
            unexplained[session] = {
                "pids": earlier[session],
                "killed": [pid in self.killed_pids for pid in earlier[session]],
                "entries": [
                    (e.seq, e.kind, e.actor, round(seconds_of(e.at) - self.killed_at, 3))
                    for e in entries
                    if rid is not None
                    and (e.body.get("review") == rid or (frontier and e.body.get("frontier") == frontier))
                ],
            }
        booked = (
            Counter(json.loads(line)["session"] for line in self.ledger.read_text().splitlines() if line.strip())
            if self.ledger.exists()
            else Counter()
        )
        acked = {a[0] for a in self.acks if a[2] < 300}
        by_b = {a[0] for a in self.acks if a[2] < 300 and a[1] == "desk-1"}
        latencies = [
            (seconds_of(executed[rid].at) - seconds_of(decisions[rid].at)) * 1000
            for rid in executed
            if rid in decisions
        ]
        verify = subprocess.run(
            [str(BIN / "audit"), "--store", self.url, "verify", "--json"], capture_output=True, text=True, env=self.env
        )
        return {
            "opened": len(opened),
            "frontiers_resumed_exactly_once": sum(1 for f in frontiers if resumed.get(f) == 1),
            "frontiers_resumed_more_than_once": sum(1 for f in frontiers if resumed.get(f, 0) > 1),
            "frontiers": len(frontiers),
            "frontiers_never_resumed": sum(1 for f in frontiers if f not in resumed),
            "reviews_with_one_tool_executed": sum(1 for rid in opened if executions.get(rid) == 1),
            "tools_ran_exactly_once": sum(1 for n in per_session.values() if n == 1),
            "tools_run_again_after_a_kill": len(after_kill),
            "tools_run_again_otherwise": len(unexplained),
            "tools_run_again_otherwise_detail": unexplained,
            "tool_attempts": len(runs),
            "tools_never_ran": len(opened) - len(per_session),
            "transfers_booked_once": sum(1 for n in booked.values() if n == 1),
            "acknowledged_decisions_missing_from_log": len(acked - set(decisions)),
            "audit_verify_exit": verify.returncode,
            "desk1_decisions_seen_live_on_desk0": len(by_b & self.seen_on_a),
            "desk1_decisions": len(by_b),
            "decision_to_tool_ms_p50": round(percentile(latencies, 0.5), 1),
            "decision_to_tool_ms_p95": round(percentile(latencies, 0.95), 1),
        }

    def close(self) -> None:
        import psycopg

        self.stop_sse.set()
        for proc in self.desks + self.resumers:
            proc.stop()
        self.store.close()
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{self.schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reviews", type=int, default=1000)
    parser.add_argument("--pg", default=PG_DEFAULT)
    parser.add_argument("--only", choices=["steady", "failover"])
    args = parser.parse_args()
    result: dict[str, Any] = {}
    for name in ("steady", "failover"):
        if args.only and args.only != name:
            continue
        with tempfile.TemporaryDirectory(prefix=f"scale-{name}-") as tmp:
            say(f"{name}: {args.reviews} reviews ...")
            phase = Phase(args.pg, Path(tmp), args.reviews, failover=name == "failover")
            try:
                result[name] = phase.run()
            finally:
                phase.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
