"""Bounded load on 127.0.0.1 against real ``desk serve`` / ``desk demo`` subprocesses; prints JSON.

    .venv/bin/python tests/benchmarks/desk_bench.py [--pending 10000] [--requests 200]

Measures, with ``--pending`` reviews waiting:
- the queue page (first and a deep page) and the API list: p50/p95 latency;
- the HTTP decision round trip (POST /api/reviews/{id}/approve, keep-alive): p50/p95, from a
  lean stdlib client (``http.client``), so the figure is the desk and the loopback rather than
  the client library; also from httpx, and with a browser connected to the live updates;
- decisions/s with 4 concurrent clients;
- decision POST → the scripted ADK agent's tool starting (``desk demo``, bridge resumer): p50/p95.

Targets (DESIGN/issue 4): queue p95 < 50 ms, decision round trip p50 < 4 ms, decision → tool p50 < 150 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from signoff.audit import CallSpec, Policy, ReviewService, open_store  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
REVIEWER = "human:bench@example.org"
PASSWORD = "bench password 123"


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] * 1000, 2)


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": pct(xs, 50), "p95_ms": pct(xs, 95), "mean_ms": round(statistics.mean(xs) * 1000, 2), "n": len(xs)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/healthz", timeout=0.5).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            time.sleep(0.02)
    raise SystemExit("server did not start")


def populate(url: str, key: Path, pending: int) -> list[str]:
    store = open_store(url)
    store.init_log(key)
    svc = ReviewService(store)
    svc.enroll_reviewer(REVIEWER, roles=["finance"], tools=["*"])
    ids: list[str] = []
    batch = 200
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
        "required": ["amount", "to"],
    }
    # Most reviews arrive in big frontiers (fast to populate); the last 100 are one call each,
    # like a real agent's pauses, and the review page is measured on one of those.
    bulk = max(0, pending - 100)
    for b in range(0, pending, batch):
        size = min(batch, bulk - b) if b < bulk else 1
        if b >= bulk:
            break
        specs = [
            CallSpec(
                app="bench",
                user="u",
                session=f"s{b}",
                invocation=f"i{b}",
                confirmation_id=f"c{b}-{k}",
                call_id=f"k{b}-{k}",
                tool=("transfer", "send_email", "delete_record")[k % 3],
                args={"amount": k, "to": f"acct-{b + k}"},
                hint="bench",
                agent=f"agent{k % 4}",
                context={"user": "bench", "model": "bench"},
                tool_schema=schema,
            )
            for k in range(size)
        ]
        front = svc.open_frontier(specs, actor="agent:bench", policies=Policy(role="finance", deadline_seconds=86400))
        ids.extend(r.id for r in front.reviews)
    for k in range(pending - bulk):
        spec = CallSpec(
            app="bench",
            user="u",
            session=f"single{k}",
            invocation=f"si{k}",
            confirmation_id=f"sc{k}",
            call_id=f"sk{k}",
            tool="transfer",
            args={"amount": k, "to": "acct-x"},
            hint="bench",
            agent="agent0",
            context={"user": "bench", "model": "bench"},
            tool_schema=schema,
        )
        front = svc.open_frontier([spec], actor="agent:bench", policies=Policy(role="finance", deadline_seconds=86400))
        ids.append(front.reviews[0].id)
    store.close()
    return ids


def accounts(url: str) -> tuple[str, str]:
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    store = open_store(url)
    acc = Accounts(make_engine(url), store.log_id)
    acc.set_password(REVIEWER, PASSWORD, must_change=False)
    token = acc.new_token(REVIEWER, "bench")
    store.close()
    return token, PASSWORD


def sign_in(base: str) -> httpx.Client:
    c = httpx.Client(base_url=base, timeout=10)
    page = c.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    r = c.post("/signin", data={"csrf": csrf, "email": REVIEWER[6:], "password": PASSWORD})
    assert r.status_code in (200, 303), r.status_code
    return c


class LeanClient:
    """Keep-alive JSON POSTs over one ``http.client`` connection (~0.1 ms of client work)."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def post(self, path: str, body: dict[str, Any]) -> Any:
        self.conn.request("POST", path, body=json.dumps(body), headers=self.headers)
        response = self.conn.getresponse()
        response.text = response.read().decode()  # type: ignore[attr-defined]
        response.status_code = response.status  # type: ignore[attr-defined]
        return response


def live_browser(client: httpx.Client) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A signed-in browser holding the /events stream open (the queue page's live updates)."""
    ready, done = threading.Event(), threading.Event()

    def listen() -> None:
        with client.stream("GET", "/events", timeout=60) as r:
            for line in r.iter_lines():
                if line == "event: hello":
                    ready.set()
                if done.is_set():
                    return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    return t, ready, done


def timed(fn: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = fn()
        out.append(time.perf_counter() - t)
        assert r.status_code == 200, (r.status_code, r.text[:200])
    return out


def bench_serve(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    url = f"sqlite:///{tmp / 'bench.db'}"
    t = time.monotonic()
    ids = populate(url, tmp / "bench.key", args.pending)
    populate_s = time.monotonic() - t
    token, _ = accounts(url)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "desk", "serve", "--store", url, "--port", str(port), "--quiet"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        startup = wait_up(base, proc)
        browser = sign_in(base)
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        n = args.requests
        # Steady state: let the desk finish its start-up verification of the whole log first.
        api.get("/api/verification?wait=30", timeout=120)
        for c, path in ((browser, "/queue"), (api, "/api/reviews")):  # warm up
            for _ in range(5):
                c.get(path)
        last_page = (args.pending + 49) // 50
        fresh = iter(ids[-51:-1])  # one-call frontiers, each page read once
        res: dict[str, Any] = {
            "pending": args.pending,
            "populate_s": round(populate_s, 1),
            "serve_startup_s": round(startup, 2),
            "queue_page": summary(timed(lambda: browser.get("/queue"), n)),
            "queue_page_last": summary(timed(lambda: browser.get(f"/queue?page={last_page}"), n // 2)),
            "queue_filtered": summary(timed(lambda: browser.get("/queue?tool=transfer&agent=agent0"), n // 2)),
            "api_list": summary(timed(lambda: api.get("/api/reviews?limit=50"), n)),
            "review_page": summary(timed(lambda: browser.get(f"/reviews/{ids[-1]}"), n // 2)),
            "review_page_uncached": summary(timed(lambda: browser.get(f"/reviews/{next(fresh)}"), 50)),
        }
        # Decision round trip, one client, keep-alive; each POST is one durable log append.
        todo = iter(ids)
        lean = LeanClient(port, token)
        approve = {"rationale": "bench"}
        timed(lambda: lean.post(f"/api/reviews/{next(todo)}/approve", approve), 10)  # warm up
        res["decision_round_trip"] = summary(timed(lambda: lean.post(f"/api/reviews/{next(todo)}/approve", approve), n))
        res["decision_round_trip_httpx"] = summary(
            timed(lambda: api.post(f"/api/reviews/{next(todo)}/approve", json=approve), n // 2)
        )
        watcher, ready, done = live_browser(browser)
        assert ready.wait(10), "the /events stream never said hello"
        res["decision_round_trip_browser_live"] = summary(
            timed(lambda: lean.post(f"/api/reviews/{next(todo)}/approve", approve), n // 2)
        )
        done.set()
        # 4 concurrent clients.
        per = args.concurrent_decisions // 4
        chunks = [[next(todo) for _ in range(per)] for _ in range(4)]
        lat: list[float] = []
        lock = threading.Lock()

        def worker(chunk: list[str]) -> None:
            c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            mine = []
            for rid in chunk:
                t0 = time.perf_counter()
                r = c.post(f"/api/reviews/{rid}/approve", json={})
                mine.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
            with lock:
                lat.extend(mine)

        threads = [threading.Thread(target=worker, args=(ch,)) for ch in chunks]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        took = time.perf_counter() - t0
        res["concurrent_4_clients"] = {
            "decisions": len(lat),
            "decisions_per_s": round(len(lat) / took, 1),
            **summary(lat),
        }
        res["metrics_ok"] = "signoff_pending_reviews" in api.get("/metrics").text
        return res
    finally:
        proc.terminate()
        proc.wait(10)


def bench_tool(args: argparse.Namespace, tmp: Path, sessions: str) -> dict[str, Any]:
    d = tmp / f"demo-{sessions}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "desk",
            "demo",
            "--dir",
            str(d),
            "--port",
            str(port),
            "--interval",
            "0",
            "--sessions",
            sessions,
            "--quiet",
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_up(base, proc)
        store_url = f"sqlite:///{d / 'signoff.db'}"
        out = subprocess.run(
            [sys.executable, "-m", "desk", "reviewer", "token", "demo@signoff.local", "--store", store_url],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            check=True,
        )
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {out.stdout.strip()}"}, timeout=10)
        runs = d / "tool-runs.jsonl"
        lat: list[float] = []
        for i in range(args.tool_runs):
            marker = f"bench-{i}-{secrets.token_hex(3)}"
            line = {
                "prompt": f"bench {marker}",
                "calls": [{"name": "send_email", "args": {"to": "b@example.com", "subject": marker, "body": "x"}}],
            }
            with (d / "inbox.jsonl").open("a") as f:
                f.write(json.dumps(line) + "\n")
            rid = None
            end = time.monotonic() + 20
            while rid is None and time.monotonic() < end:
                for r in api.get("/api/reviews?tool=send_email&limit=100").json()["items"]:
                    if r["call"]["args"]["subject"] == marker:
                        rid = r["id"]
                time.sleep(0.01)
            assert rid, "review never appeared"
            t0 = time.time()
            assert api.post(f"/api/reviews/{rid}/approve", json={}).status_code == 200
            end = time.monotonic() + 20
            ran = None
            while ran is None and time.monotonic() < end:
                if runs.exists():
                    for x in runs.read_text().splitlines():
                        if marker in x:
                            ran = json.loads(x)["t"]
                time.sleep(0.002)
            assert ran, "tool never ran"
            lat.append(ran - t0)
        return summary(lat)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pending", type=int, default=10_000)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrent-decisions", type=int, default=400)
    p.add_argument("--tool-runs", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="desk-bench-") as tmp:
        res = bench_serve(args, Path(tmp))
        # Default demo: ADK sessions in SQLite (paused runs survive a restart); and in memory.
        res["decision_to_tool_start"] = bench_tool(args, Path(tmp), "sqlite")
        res["decision_to_tool_start_memory_sessions"] = bench_tool(args, Path(tmp), "memory")
    res["targets"] = {
        "queue_page_p95_ms<50": res["queue_page"]["p95_ms"] < 50,
        "decision_round_trip_p50_ms<4": res["decision_round_trip"]["p50_ms"] < 4,
        "decision_to_tool_p50_ms<150": res["decision_to_tool_start"]["p50_ms"] < 150,
    }
    res["machine"] = {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
