"""The queue of a desk serving many logs (issue 23 §3) against one log holding as many reviews; prints JSON.

    .venv/bin/python tests/benchmarks/many_logs_bench.py [--pending 10000] [--decided 10000] [--logs 10]
                                                         [--requests 100]

Two SQLite stores, each served by a real ``desk serve`` subprocess on 127.0.0.1: one log with ``--pending``
open reviews, and ``--logs`` logs with ``--pending / --logs`` each, the reviewer enrolled (and given a desk
account) on every one of them. For each: the queue's first page, its last page and the deadline order,
p50/p95 over ``--requests`` requests of a signed-in browser. The one-log desk serves its queue from its page
cache until the log grows, and the merged one until one of its logs does; ``queue_page_after_a_write`` is
the same page right after a review landed on a log (the page is then read again, each row from its log).
With ``--decided`` decided reviews beside them (each decision signed), the Decided page too, cached and
right after a write: over many logs it orders the decisions by time, the one order the logs share.

Target: the merged queue within the single log's 50 ms p95 at 10,000 pending (desk_bench.py's target).
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from desk_bench import settle as settle_log  # noqa: E402

from signoff.audit import CallSpec, Policy, ReviewService, Signer, open_store  # noqa: E402
from signoff.audit.keys import read_private_key  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402

REVIEWER = "human:bench@example.org"
PASSWORD = "bench password 1"
SIGNER = Signer.generate()
BATCH = 200


def _batches(tag: str, n: int, prefix: str) -> Any:
    """``n`` calls in frontiers of ``BATCH``, as three tools of four agents make them."""
    for b in range(0, n, BATCH):
        yield (
            b,
            [
                CallSpec(
                    app=tag,
                    user="u",
                    session=f"{tag}-{prefix}s{b}",
                    invocation=f"{tag}-{prefix}i{b}",
                    confirmation_id=f"{prefix}c{b}-{k}",
                    call_id=f"{prefix}k{b}-{k}",
                    tool=("transfer", "send_email", "delete_record")[k % 3],
                    args={"amount": k, "currency": "EUR", "to": f"acct-{b + k}", "memo": f"Invoice {b + k}"},
                    agent=f"agent{k % 4}",
                    context={"user": "bench", "model": "bench"},
                )
                for k in range(min(BATCH, n - b))
            ],
        )


def _fill(svc: ReviewService, pending: int, tag: str) -> None:
    for b, specs in _batches(tag, pending, ""):
        svc.open_frontier(specs, actor="agent:bench", policies=Policy(role="finance", deadline_seconds=86400 + b))


def _decide(svc: ReviewService, decided: int, tag: str) -> None:
    """``decided`` reviews opened and approved, each decision signed."""
    for _b, specs in _batches(tag, decided, "d"):
        for review in svc.open_frontier(specs, actor="agent:bench", policies=Policy(role="finance")).reviews:
            svc.approve(review.id, reviewer=REVIEWER, rationale="bench", signer=SIGNER)


def build(url: str, tmp: Path, logs: int, pending: int, decided: int = 0) -> list[tuple[str, str]]:
    """``logs`` logs in the store at ``url``, ``pending`` open reviews and ``decided`` decided ones over them;
    the reviewer on each, with a desk password and an API token. Returns (log id, token) of each."""
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    made = []
    engine = make_engine(url)
    for n in range(logs):
        key = tmp / f"{Path(url).stem}-{n}.pem"
        store = open_store(url)
        store.init_log(key, origin=f"bench.example.org/app{n}", new_log=n > 0)
        svc = ReviewService(store)
        admin = read_private_key(default_admin_key(key))
        svc.enroll_reviewer(REVIEWER, roles=["finance"], tools=["*"], key=SIGNER.public, admin=admin)
        accounts = Accounts(engine, store.log_id)
        accounts.set_password(REVIEWER, PASSWORD, must_change=False)
        token = accounts.new_token(REVIEWER, "bench")
        _decide(svc, decided // logs, f"app{n}")
        _fill(svc, pending // logs, f"app{n}")
        made.append((store.log_id, token))
        store.close()
    return made


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(url: str, port: int) -> subprocess.Popen[bytes]:
    desk = str(Path(sys.executable).with_name("desk"))
    proc = subprocess.Popen(
        [desk, "serve", "--store", url, "--port", str(port), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"desk serve on port {port} did not start")


def signed_in(base: str) -> httpx.Client:
    c = httpx.Client(base_url=base, timeout=30, headers={"Origin": base})
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/signin").text).group(1)  # type: ignore[union-attr]
    r = c.post("/signin", data={"csrf": csrf, "email": REVIEWER[6:], "password": PASSWORD})
    assert r.status_code == 303, (r.status_code, r.text[:300])
    return c


def timed(client: httpx.Client, path: str, n: int, before: Any = None, shows: str = "wants to") -> dict[str, float]:
    samples = []
    for _ in range(n):
        if before is not None:
            before()
        t0 = time.perf_counter()
        r = client.get(path)
        samples.append(time.perf_counter() - t0)
        assert r.status_code == 200 and shows in r.text, (path, r.status_code)
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[max(0, round(0.95 * len(ordered)) - 1)] * 1000, 2),
    }


def settle(base: str, tokens: list[str]) -> float:
    """Wait until the desk has checked each of its logs at start-up (hash chain, Merkle roots and rules, off
    the request path), as its API reports it: measurements then see the steady state. Seconds waited."""
    start = time.monotonic()
    for token in tokens:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as api:
            settle_log(api)
    return round(time.monotonic() - start, 1)


def measure(
    url: str, port: int, tokens: list[str], pending: int, n: int, grow: Any = None, decided: int = 0
) -> dict[str, Any]:
    proc = serve(url, port)
    try:
        client = signed_in(f"http://127.0.0.1:{port}")
        settled = settle(f"http://127.0.0.1:{port}", tokens)
        last = max(1, (pending + 49) // 50)
        for path in ("/queue", f"/queue?page={last}", "/queue?sort=deadline"):
            client.get(path)  # warm up
        out = {
            "startup_verification_s": settled,
            "queue_page": timed(client, "/queue", n),
            "queue_page_last": timed(client, f"/queue?page={last}", n // 2),
            "queue_by_deadline": timed(client, "/queue?sort=deadline", n // 2),
        }
        if grow is not None:
            out["queue_page_after_a_write"] = timed(client, "/queue", n // 2, before=grow)
        if decided:
            client.get("/decided")
            out["decided_page"] = timed(client, "/decided", n // 2, shows="waiting to resume")
            if grow is not None:
                out["decided_page_after_a_write"] = timed(
                    client, "/decided", n // 2, before=grow, shows="waiting to resume"
                )
        client.close()
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--logs", type=int, default=10)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--decided", type=int, default=10_000, help="decided reviews beside the pending ones")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        one, many = f"sqlite:///{tmp / 'one.db'}", f"sqlite:///{tmp / 'many.db'}"
        t0 = time.perf_counter()
        [(one_log, one_token)] = build(one, tmp, 1, args.pending, args.decided)
        many_logs = build(many, tmp, args.logs, args.pending, args.decided)
        built = time.perf_counter() - t0
        count = iter(range(10**9))

        def grower(url: str, log: str) -> Any:
            svc = ReviewService(open_store(url, create=False, log=log))

            def grow() -> None:  # one review more lands on a log (at the queue's end): the page is read again
                n = next(count)
                call = CallSpec(app="g", user="u", session=f"g{n}", invocation=f"gi{n}", confirmation_id=f"gc{n}",
                                call_id=f"gk{n}", tool="transfer", args={"amount": n, "to": "acct"})  # fmt: skip
                svc.open_frontier([call], actor="agent:bench", policies=Policy(role="finance", deadline_seconds=10**7))

            return grow

        result = {
            "pending": args.pending,
            "logs": args.logs,
            "requests": args.requests,
            "decided": args.decided,
            "populate_s": round(built, 1),
            "one_log": measure(
                one, free_port(), [one_token], args.pending, args.requests, grower(one, one_log), args.decided
            ),
            "many_logs": measure(
                many,
                free_port(),
                [token for _log, token in many_logs],
                args.pending,
                args.requests,
                grower(many, many_logs[-1][0]),
                args.decided,
            ),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
