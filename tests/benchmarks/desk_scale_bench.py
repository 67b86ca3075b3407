"""The desk at scale (issue 24 §5): a large queue, and many live browsers while decisions flow; prints JSON.

    .venv/bin/python tests/benchmarks/desk_scale_bench.py [--pending 100000] [--clients 100] [--rate 50]
                                                          [--seconds 20] [--requests 100]

Against a real ``desk serve`` subprocess on 127.0.0.1 (SQLite, a log made as ``audit init`` makes it):

* **the queue page** with ``--pending`` reviews waiting, p50/p95 over ``--requests`` requests, signed in
  as a reviewer who may see them all; beside it, the same desk's ``/healthz`` (the floor of one request);
* **the queue page after a decision**: each load right after one approval through the API, so that no
  cached page serves it (as while decisions flow), p50/p95 over ``--requests``/2 decisions;
* **live updates**: ``--clients`` browsers hold the queue page's ``/events`` stream open (one process,
  asyncio, so that the clients cost the machine as little as they can) while a script approves reviews
  through the API at ``--rate`` decisions/s for ``--seconds``. For each decision and each client, the
  time from the decision's POST being sent to that client reading its ``closed`` event (one clock:
  ``CLOCK_MONOTONIC``, shared by the processes). Target: p95 ≤ 250 ms. Every event must reach every
  client: a missing one is counted, never skipped.
* **the desk's memory**: its RSS (and peak) before the clients connect and at the end of the load.

The POSTs are paced, not bursts: one every 1/``--rate`` s, each signed beforehand by the reviewer's key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from desk_bench import (  # noqa: E402
    ENV,
    LeanClient,
    accounts,
    populate,
    settle,
    sign_in,
    signed_approve,
    start_desk,
    summary,
    timed,
    wait_up,
)


def rss_mb(pid: int) -> dict[str, float]:
    found: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    return {"rss_mb": found.get("VmRSS", 0.0), "peak_rss_mb": found.get("VmHWM", 0.0)}


# -- the browsers (a child process) -----------------------------------------------------------------


async def _listen(base: str, cookies: dict[str, str], index: int, seen: dict[str, list[float]], ready: Any) -> None:
    client = httpx.AsyncClient(base_url=base, cookies=cookies, timeout=None)
    async with client, client.stream("GET", "/events") as response:
        event = ""
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                if event == "hello":
                    ready(index)
            elif line.startswith("data: ") and event == "closed":
                review = json.loads(line[6:]).get("review")
                seen.setdefault(str(review), []).append(time.monotonic())


async def _browsers(base: str, cookies: dict[str, str], clients: int, seconds: float) -> dict[str, Any]:
    seen: dict[str, list[float]] = {}
    connected: set[int] = set()
    tasks = [asyncio.create_task(_listen(base, cookies, i, seen, connected.add)) for i in range(clients)]
    deadline = time.monotonic() + 60
    while len(connected) < clients and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    print(json.dumps({"connected": len(connected)}), flush=True)  # the parent starts deciding now
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    return {"connected": len(connected), "seen": seen}


def browsers_child(base: str, cookies: str, clients: int, seconds: float, out: str) -> None:
    found = asyncio.run(_browsers(base, json.loads(cookies), clients, seconds))
    Path(out).write_text(json.dumps(found), encoding="utf-8")


def after_decisions(browser: httpx.Client, lean: LeanClient, log_id: str, ids: list[tuple[str, str]], n: int) -> Any:
    """The queue page right after a decision (the log grew: nothing cached serves it), as a reviewer sees it
    while decisions flow; each decision from the end of the queue, away from those the live part makes."""
    times = []
    for review in ids[-n:]:
        assert lean.post(f"/api/reviews/{review[0]}/approve", signed_approve(log_id, review)).status_code == 200
        start = time.perf_counter()
        assert browser.get("/queue").status_code == 200
        times.append(time.perf_counter() - start)
    return summary(times)


# -- the run ------------------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pending", type=int, default=100_000)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--rate", type=float, default=50.0, help="decisions per second")
    p.add_argument("--seconds", type=float, default=20.0, help="how long the decisions flow")
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--browsers-child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.browsers_child:
        base, cookies, clients, seconds, out = args.browsers_child
        browsers_child(base, cookies, int(clients), float(seconds), out)
        return
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp_name:
        print(json.dumps(run(args, Path(tmp_name)), indent=2))


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    url = f"sqlite:///{tmp / 'scale.db'}"
    decisions = int(args.rate * args.seconds)
    start = time.monotonic()
    print(f"populating {args.pending:,} pending reviews ...", file=sys.stderr)
    ids, log_id = populate(url, tmp / "scale.key", args.pending)
    populated = time.monotonic() - start
    token, _ = accounts(url)
    desk, port, base = start_desk(url)
    try:
        wait_up(base, desk, timeout=180)
        browser = sign_in(base)
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        settled = settle(api)  # the start-up verification of the whole log, done before measuring
        lean = LeanClient(port, token)
        for _ in range(5):
            browser.get("/queue")
        out: dict[str, Any] = {
            "pending": args.pending,
            "populate_s": round(populated, 1),
            "startup_verification_s": round(settled, 1),
            "queue_page": summary(timed(lambda: browser.get("/queue"), args.requests)),
            "queue_page_by_deadline": summary(timed(lambda: browser.get("/queue?sort=deadline"), args.requests // 2)),
            "queue_page_after_a_decision": after_decisions(browser, lean, log_id, ids, args.requests // 2),
            "healthz": summary(timed(lambda: api.get("/healthz"), args.requests)),
            "desk_before_clients": rss_mb(desk.pid),
        }
        print(f"{args.clients} live browsers, {decisions} decisions at {args.rate}/s ...", file=sys.stderr)
        todo = ids[:decisions]
        bodies = [signed_approve(log_id, review) for review in todo]
        result = tmp / "browsers.json"
        cookies = json.dumps(dict(browser.cookies))
        child = subprocess.Popen(
            [sys.executable, __file__, "--browsers-child", base, cookies, str(args.clients),
             str(args.seconds + 5), str(result)],
            env=ENV, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert child.stdout is not None
        connected = json.loads(child.stdout.readline())["connected"]
        out["desk_with_clients"] = rss_mb(desk.pid)
        sent: dict[str, float] = {}
        refused = 0
        begin = time.monotonic()
        for n, (review, body) in enumerate(zip(todo, bodies, strict=True)):
            wait = begin + n / args.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            sent[review[0]] = time.monotonic()
            if lean.post(f"/api/reviews/{review[0]}/approve", body).status_code != 200:
                refused += 1
        flowed = time.monotonic() - begin
        out["desk_at_the_end"] = rss_mb(desk.pid)
        child.wait(timeout=args.seconds + 120)
        seen = json.loads(result.read_text(encoding="utf-8"))["seen"]
        delays, missing = [], 0
        for review, at in sent.items():
            arrivals = seen.get(review, [])
            missing += max(0, connected - len(arrivals))
            delays += [arrival - at for arrival in arrivals]
        out["live"] = {
            "clients": args.clients,
            "connected": connected,
            "decisions": len(sent),
            "refused": refused,
            "decisions_per_s": round(len(sent) / flowed, 1),
            "deliveries": len(delays),
            "missing_deliveries": missing,
            "decision_sent_to_client_read": summary(delays) if delays else "none arrived",
            "max_ms": round(max(delays, default=0) * 1000, 1),
        }
        out["targets"] = {"queue_page_p95_ms": "< 50", "after_a_decision_p95_ms": "< 50", "live_p95_ms": "<= 250"}
        out["machine"] = {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2)}
        return out
    finally:
        desk.terminate()
        desk.wait(timeout=30)


if __name__ == "__main__":
    main()
