"""The notifier, measured on 127.0.0.1 against a real ``desk notify serve`` subprocess; prints JSON.

    .venv/bin/python tests/benchmarks/notify_bench.py [--events 1000] [--decisions 500] [--backend both]

For each backend (SQLite file, PostgreSQL at SIGNOFF_PG_URL in a fresh schema):

- **notification delay**: from the commit of a ``review.opened`` entry (the moment ``Store.transact``
  returns in this process) to its webhook arriving at a receiver in this process (signature
  checked), p50/p95 over ``--events`` events: ``sequential`` (one review at a time, each waiting
  for its notification) and ``burst`` (all opened back to back, so queueing counts too);
- **decision path**: ``ReviewService.approve`` (signed by the reviewer's key), timed per call over
  ``--decisions`` reviews, without a notifier, with a notifier process following the same store and
  delivering every decision, and with the notifier's threads inside this process (what
  ``desk serve --notify`` does), interleaved over several rounds; ``paced`` at 50 decisions a
  second, and ``back_to_back`` (as fast as one thread can decide, so every core is busy).

The receiver runs in its own process, so its work does not share the timed process's CPU.

- **Slack app** (issue 22): a ``slack-app`` endpoint against the local Web API server of the tests
  (``tests/desk/slackapi.py``, a thread of this process), the notifier in this process: review opened
  → ``chat.postMessage`` arrived, and decision → ``chat.update`` arrived, p50/p95, one at a time; and
  the decision path's p50 with that notifier running, against none, interleaved over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from signoff.audit import CallSpec, Policy, ReviewService, Signer, open_store  # noqa: E402
from signoff.audit.keys import read_private_key  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402
from signoff.desk.notify import Endpoints, Engines, Notifier, NotifierOptions, verify  # noqa: E402
from signoff.desk.notify._endpoints import endpoint_from_options  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PG_URL = os.environ.get("SIGNOFF_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REVIEWER = "human:bench@example.org"
PACE = 0.02  # seconds between paced decisions: 50 a second, far more than people make
SECRET = os.environ.get("NOTIFY_BENCH_SECRET") or "bench-secret-" + secrets.token_hex(8)


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] * 1000, 2)


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": pct(xs, 50), "p95_ms": pct(xs, 95), "mean_ms": round(statistics.mean(xs) * 1000, 2), "n": len(xs)}


def receive(port_file: str) -> None:
    """The receiver process: check each signature, print ``<time.time()> <type> <review>`` per event."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            at = time.time()
            try:
                verify(SECRET, self.headers.get("Signoff-Signature"), body)
                data = json.loads(body)
                line = f"{at:.6f} {data['type']} {data['review']['id']}\n"
                status = 204
            except Exception:
                line = f"{at:.6f} bad -\n"
                status = 401
            with lock:  # one whole line at a time
                sys.stdout.write(line)
                sys.stdout.flush()
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    Path(port_file).write_text(str(server.server_port))
    server.serve_forever()


class Receiver:
    """A webhook receiver in its own process (so that its work does not share this process's CPU
    with the decisions being timed); notes when each review's event arrived (``time.time()``)."""

    def __init__(self, tmp: Path) -> None:
        self.arrived: dict[tuple[str, str], float] = {}  # (type, review) -> time.time()
        self.bad = 0
        self.cond = threading.Condition()
        port_file = tmp / "receiver.port"
        env = {**ENV, "NOTIFY_BENCH_SECRET": SECRET}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--receive", str(port_file)], env=env, stdout=subprocess.PIPE, text=True
        )
        end = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > end:
                raise SystemExit("notify_bench: the receiver did not start")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{port_file.read_text()}/hook"
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            at, kind, review = line.split()
            with self.cond:
                if kind == "bad":
                    self.bad += 1
                else:
                    self.arrived.setdefault((kind, review), float(at))
                self.cond.notify_all()

    def wait(self, keys: list[tuple[str, str]], timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        with self.cond:
            while not all(k in self.arrived for k in keys):
                if not self.cond.wait(timeout=max(0.0, end - time.monotonic())):
                    missing = sum(1 for k in keys if k not in self.arrived)
                    raise SystemExit(f"notify_bench: {missing} notifications never arrived")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class Bench:
    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.store = open_store(url)
        self.store.init_log(tmp / "log.key")
        admin = read_private_key(default_admin_key(tmp / "log.key"))
        self.svc = ReviewService(self.store)
        self.signer = Signer.generate()
        self.svc.enroll_reviewer(REVIEWER, roles=["finance"], tools=["*"], key=self.signer.public, admin=admin)
        self.commits: list[float] = []
        transact = self.store.transact

        def timed(work: Callable[[Any], Any]) -> Any:
            result = transact(work)
            self.commits.append(time.time())  # the commit has returned (wall clock: the receiver is another process)
            return result

        self.store.transact = timed  # type: ignore[method-assign]
        self.n = 0

    def open(self) -> tuple[str, float]:
        self.n += 1
        spec = CallSpec(
            app="bench",
            user="u",
            session=f"s{self.n}",
            invocation=f"i{self.n}",
            confirmation_id=f"c{self.n}",
            call_id=f"k{self.n}",
            tool="transfer",
            args={"amount": self.n, "to": "acct-x", "memo": "notify bench"},
            agent="teller",
        )
        front = self.svc.open_frontier([spec], actor="agent:bench", policies=Policy(role="finance"))
        return front.reviews[0].id, self.commits[-1]

    def approve(self, review: str) -> float:
        start = time.perf_counter()
        self.svc.approve(review, reviewer=REVIEWER, signer=self.signer)
        return time.perf_counter() - start

    def close(self) -> None:
        self.store.close()


@contextmanager
def notifier_process(url: str, log_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    errors = open(Path(os.environ.get("NOTIFY_BENCH_LOGS", log_dir)) / "notifier.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "signoff.desk",
            "notify",
            "serve",
            "--store",
            url,
            "--quiet",
            "--desk-url",
            "https://desk.bench",
        ],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=errors,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errors.close()


def warm_up(bench: Bench, receiver: Receiver, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until the notifier has taken its lock and delivered once (or say why it never will)."""
    review, _ = bench.open()
    end = time.monotonic() + 60
    while True:
        try:
            receiver.wait([("review.opened", review)], timeout=1.0)
            return
        except SystemExit:
            if proc is not None and proc.poll() is not None:
                raise SystemExit(
                    f"notify_bench: the notifier exited with {proc.returncode} (see notifier.log)"
                ) from None
            if time.monotonic() > end:
                raise


def delays(bench: Bench, receiver: Receiver, events: int) -> dict[str, Any]:
    sequential = []
    for _ in range(events):
        review, committed = bench.open()
        receiver.wait([("review.opened", review)])
        sequential.append(receiver.arrived[("review.opened", review)] - committed)
    burst_at = [bench.open() for _ in range(events)]
    receiver.wait([("review.opened", r) for r, _ in burst_at])
    burst = [receiver.arrived[("review.opened", r)] - committed for r, committed in burst_at]
    span = max(receiver.arrived[("review.opened", r)] for r, _ in burst_at) - burst_at[0][1]
    return {
        "sequential": summary(sequential),
        "burst": {**summary(burst), "events_per_s": round(events / span, 1)},
    }


def approvals(bench: Bench, receiver: Receiver | None, n: int, pace: float) -> tuple[list[float], list[float]]:
    """Time ``n`` approvals, ``pace`` seconds apart (0: back to back); with a receiver, also each
    decision's delay from its commit to its webhook."""
    reviews = [bench.open()[0] for _ in range(n)]
    if receiver is not None:  # let the notifier finish the opened events first: time the decisions alone
        receiver.wait([("review.opened", r) for r in reviews])
    times, committed = [], []
    for review in reviews:
        times.append(bench.approve(review))
        committed.append(bench.commits[-1])
        if pace:
            time.sleep(pace)
    if receiver is None:
        return times, []
    receiver.wait([("review.decided", r) for r in reviews])
    return times, [receiver.arrived[("review.decided", r)] - at for r, at in zip(reviews, committed, strict=True)]


WAYS = ("without_notifier", "with_notifier_process", "with_notifier_in_process")


def decision_rounds(
    url: str, tmp: Path, bench: Bench, receiver: Receiver, n: int, rounds: int, pace: float
) -> dict[str, Any]:
    """The three ways, interleaved over ``rounds`` rounds (so that load from elsewhere on the machine
    falls on all of them alike), ``n`` approvals each in all."""
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    told: dict[str, list[float]] = {way: [] for way in WAYS[1:]}  # each decision's delay to its webhook
    per_round = max(1, n // rounds)
    for _ in range(rounds):
        times["without_notifier"] += approvals(bench, None, per_round, pace)[0]
        with notifier_process(url, tmp) as proc:
            warm_up(bench, receiver, proc)
            took, delays = approvals(bench, receiver, per_round, pace)
            times["with_notifier_process"] += took
            told["with_notifier_process"] += delays
        with Notifier(url, NotifierOptions(desk_url="https://desk.bench"), store=bench.store, svc=bench.svc):
            warm_up(bench, receiver)
            took, delays = approvals(bench, receiver, per_round, pace)
            times["with_notifier_in_process"] += took
            told["with_notifier_in_process"] += delays
    out: dict[str, Any] = {"pace_ms": pace * 1000}
    for way, xs in times.items():
        out[way] = summary(xs)
        if not pace:
            out[way]["decisions_per_s"] = round(len(xs) / sum(xs), 1)
        if way in told:
            told_in = summary(told[way])
            out[way]["decision_to_webhook"] = {"p50_ms": told_in["p50_ms"], "p95_ms": told_in["p95_ms"]}
    base = out["without_notifier"]
    for way in told:
        out[way]["p50_vs_without"] = round(out[way]["p50_ms"] / base["p50_ms"], 3)
        out[way]["p95_vs_without"] = round(out[way]["p95_ms"] / base["p95_ms"], 3)
    return out


def _arrived(api: Any, method: str, review: str, since: int, needle: str = "") -> float | None:
    with api._lock:
        found = [
            at
            for (name, body), at in zip(api.calls[since:], api.stamps[since:], strict=True)
            if name == method and review in str(body.get("text", "")) and needle in json.dumps(body)
        ]
    return found[0] if found else None


def _until(check: Callable[[], float | None], timeout: float = 30.0) -> float:
    end = time.monotonic() + timeout
    while (found := check()) is None:
        if time.monotonic() > end:
            raise SystemExit("notify_bench: a Slack call never arrived")
        time.sleep(0.001)
    return found


def slack_app(url: str, bench: Bench, endpoints: Endpoints, n: int, rounds: int) -> dict[str, Any]:
    """Review opened → message posted, decision → message updated, and the decision path with the app on."""
    sys.path.insert(0, str(ROOT / "tests" / "desk"))
    from slackapi import TOKEN, SlackApi

    os.environ["NOTIFY_BENCH_SLACK_TOKEN"] = TOKEN
    api = SlackApi(users={REVIEWER.removeprefix("human:"): "U0BENCH"})
    endpoints.remove("bench")
    settings = {"bot_token_env": "NOTIFY_BENCH_SLACK_TOKEN", "channel": "C0BENCH", "api_url": api.url}
    endpoints.add(endpoint_from_options("slack-app", "bench-slack", settings), head=bench.store.size())
    posted, updated = [], []
    without: list[float] = []
    with_app: list[float] = []
    try:
        options = NotifierOptions(desk_url="https://desk.bench")
        for _ in range(rounds):
            without += approvals(bench, None, max(1, n // rounds), PACE)[0]
            with Notifier(url, options, store=bench.store, svc=bench.svc):
                for _ in range(max(1, n // rounds)):
                    since = len(api.calls)
                    review, committed = bench.open()
                    posted.append(_until(lambda r=review, s=since: _arrived(api, "chat.postMessage", r, s)) - committed)
                    _until(lambda r=review, s=since: _arrived(api, "chat.postMessage", r, s, "U0BENCH"))  # and the DM
                    since = len(api.calls)
                    with_app.append(bench.approve(review))
                    decided = bench.commits[-1]
                    updated.append(
                        _until(lambda r=review, s=since: _arrived(api, "chat.update", r, s, "Approved")) - decided
                    )
                    time.sleep(PACE)
    finally:
        api.close()
    return {
        "opened_to_posted": summary(posted),
        "decided_to_updated": summary(updated),
        "decision_path_paced": {
            "without_notifier": summary(without),
            "with_slack_app": summary(with_app),
            "p50_vs_without": round(pct(with_app, 50) / pct(without, 50), 3),
        },
        "note": "the Web API server is a thread of the timed process: its work shares this process's CPU",
    }


def run_backend(url: str, tmp: Path, events: int, decisions: int, rounds: int) -> dict[str, Any]:
    bench = Bench(url, tmp)
    receiver = Receiver(tmp)
    engines = Engines(url)
    endpoints = Endpoints(engines, bench.store.log_id)
    endpoints.add(
        endpoint_from_options("webhook", "bench", {"url": receiver.url, "secret": SECRET}, events=["opened"]),
        head=bench.store.size(),
    )
    out: dict[str, Any] = {}
    try:
        with notifier_process(url, tmp) as proc:
            warm_up(bench, receiver, proc)
            out["delay_commit_to_webhook"] = delays(bench, receiver, events)
        # The decision path: the endpoint now also takes every decision.
        endpoints.add(
            endpoint_from_options(
                "webhook", "bench", {"url": receiver.url, "secret": SECRET}, events=["opened", "decided"]
            ),
            replace=True,
            head=bench.store.size(),
        )
        out["decision_path_approve_paced"] = decision_rounds(url, tmp, bench, receiver, decisions, rounds, PACE)
        out["decision_path_approve_back_to_back"] = decision_rounds(url, tmp, bench, receiver, decisions, rounds, 0.0)
        out["bad_signatures"] = receiver.bad
        out["slack_app"] = slack_app(url, bench, endpoints, min(decisions, 200), rounds)
    finally:
        receiver.close()
        engines.dispose()
        bench.close()
    return out


@contextmanager
def pg_schema() -> Iterator[str]:
    import psycopg

    schema = "bench_" + secrets.token_hex(6)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--receive":
        receive(sys.argv[2])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1000)
    p.add_argument("--decisions", type=int, default=500)
    p.add_argument("--rounds", type=int, default=5, help="decision runs interleave over this many rounds")
    p.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    a = p.parse_args()
    result: dict[str, Any] = {
        "events": a.events,
        "decisions": a.decisions,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    if a.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            result["sqlite"] = run_backend(f"sqlite:///{tmp}/signoff.db", Path(tmp), a.events, a.decisions, a.rounds)
    if a.backend in ("postgresql", "both"):
        with tempfile.TemporaryDirectory() as tmp, pg_schema() as url:
            result["postgresql"] = run_backend(url, Path(tmp), a.events, a.decisions, a.rounds)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
