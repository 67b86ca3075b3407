"""Benchmark the audit log against limits measured in the same run, with CHAP side by side.

    python tests/benchmarks/audit_bench.py [--entries 1000000] [--signed-entries 200000] [--seconds 1.5]
                                           [--pg postgresql://...] [--quick] [--only appends|decisions|verify]

Prints one JSON object (progress goes to stderr). Every rate is beside the reference it is judged by,
measured in the same run on the same machine (these machines are shared and noisy: rates are taken in
interleaved rounds and the medians compared):

* **appends**: durable single appends/s beside the raw SQLite durable-commit rate (a bare table, one
  insert per transaction, WAL, ``synchronous=FULL``); batched appends/s beside the raw batched rate
  and the **same-schema floor** (pre-built rows of ``signoff_entry``'s own DDL and indexes inserted
  with no canonical form, hashing or Merkle work). Target: batched ≥ 0.5 of the same-schema floor.
* **decisions**: durable decisions/s, each a review opened (``open_frontier``) and then approved with
  the reviewer's own Ed25519 signature (made by the client, checked in the transaction), with 1 and
  16 concurrent clients (threads; group commit gathers their work), on SQLite and PostgreSQL; beside
  CHAP 0.3.3 (``Coordinator(enable_chain=True, store=SqliteStore(...))``, one task created, reviewed
  and approved per decision; its coordinator is single-writer, so 16 clients take turns on a lock),
  and beside the **decision floor**: the same statements on the same schema with pre-built values
  (two durable commits per decision for one client; one pair of commits per 16 decisions for 16),
  plus the Ed25519 sign + check a signed decision costs; and beside the **no-disk-wait ceiling**: the
  same decisions on a store in tmpfs, where a commit waits for no disk, so the rate is what the Python
  and SQLite work of a decision allows in one process, however commits are grouped. Targets (issue 24
  §2): 1 client ≥ 2× CHAP's one client, 16 clients ≥ 3× CHAP's one client. The same 16 clients spread
  over several processes: ``decisions_processes.py`` (§3).
* **verify**: ``audit verify`` entries/s on a log of ``--entries`` entries with no per-entry signature
  (one core and all cores, peak RSS of the verifier and of its workers), beside raw SHA-256 over the
  same bytes and CHAP's two verifiers (its in-process ``audit.verify_chain`` and a bare reader that
  recomputes its links); and on a log of ``--signed-entries`` where every decision carries its
  reviewer's signature, beside the **signed floor**: parsing and hashing every entry plus one
  Ed25519 check per signed entry, on all cores. Beside the unsigned figure, the **sequential floor**:
  the order-bound work with no rule at all (read each entry through the store's reader, parse it,
  compare its ``seq`` and ``prev``, append it to the Merkle range and compare the stored nodes), one
  core; and the workers' per-entry cost (leaf hash and RFC 8785 check). At 100k entries/s each core
  may spend 10 µs per entry: the JSON shows what is left of that for the rules. Targets: ≥ 100k
  entries/s unsigned; ≥ 0.5 of the signed floor; < 150 MB RSS.
* **Ed25519**: µs per signature check through ``cryptography`` and PyNaCl (libsodium).

Without CHAP installed (``pip install -e '.[bench]'``) the CHAP figures say so and the rest is reported.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import resource
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from signoff.audit import rules  # noqa: E402
from signoff.audit.canonical import parse_canonical  # noqa: E402
from signoff.audit.decision import approve_body, sign_decision  # noqa: E402
from signoff.audit.entry import ZERO_HASH, build, format_time  # noqa: E402
from signoff.audit.keys import Signer, read_private_key  # noqa: E402
from signoff.audit.merkle import CompactRange  # noqa: E402
from signoff.audit.reviews import CallSpec, ReviewService  # noqa: E402
from signoff.audit.store import Store, Tx, default_admin_key, open_store  # noqa: E402
from signoff.audit.trust import statement as trust_statement  # noqa: E402

BATCH = 100
CLIENTS = 16
ADMIN = "admin:root"
REVIEWER = "human:bench@example.org"
PG_DEFAULT = os.environ.get("SIGNOFF_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def rate(work: Callable[[], int], seconds: float) -> float:
    """Run ``work`` (which returns how many items it did) repeatedly for ``seconds``; items/s."""
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += work()
    return done / (time.perf_counter() - start)


def interleaved(pairs: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each measurement ``rounds`` times, interleaved; the median of each."""
    samples: dict[str, list[float]] = {name: [] for name in pairs}
    for _ in range(rounds):
        for name, measure in pairs.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}


def concurrent_rate(one: Callable[[int], None], clients: int, seconds: float) -> float:
    """``clients`` threads each calling ``one(i)`` in a loop for ``seconds``; calls/s."""
    counter = iter(range(10**9))
    lock = threading.Lock()
    done = [0]
    stop = threading.Event()
    failures: list[BaseException] = []

    def client() -> None:
        try:
            while not stop.is_set():
                with lock:
                    n = next(counter)
                one(n)
                with lock:
                    done[0] += 1
        except BaseException as exc:  # a failed decision fails the benchmark, never counts
            failures.append(exc)
            stop.set()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return done[0] / (time.perf_counter() - start)


# -- the raw references ----------------------------------------------------------------------


def sqlite_connection(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    return con


def raw_sqlite(path: Path, batch: int) -> Callable[[], int]:
    con = sqlite_connection(path)
    con.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
    payload = b"x" * 400

    def work() -> int:
        con.execute("BEGIN IMMEDIATE")
        con.executemany("INSERT INTO t (v) VALUES (?)", [(payload,)] * batch)
        con.execute("COMMIT")
        return batch

    return work


def copy_schema(store_path: Path, path: Path) -> sqlite3.Connection:
    """A scratch SQLite file with every ``signoff_*`` table and index of the store, empty."""
    ddl = [
        row[0]
        for row in sqlite3.connect(store_path).execute(
            "SELECT sql FROM sqlite_master WHERE name LIKE '%signoff%' AND sql IS NOT NULL ORDER BY type DESC"
        )
    ]
    con = sqlite_connection(path)
    for statement in ddl:
        con.execute(statement)
    return con


def schema_floor(store_path: Path, path: Path, batch: int) -> Callable[[], int]:
    """Rows shaped like ours (same DDL and indexes as ``signoff_entry``, same sizes), built in advance
    and inserted with no canonical form, hashing or Merkle work: what SQLite alone allows for our row."""
    con = copy_schema(store_path, path)
    sample = sqlite3.connect(store_path).execute("SELECT * FROM signoff_entry ORDER BY seq DESC LIMIT 1").fetchone()
    log, _seq, hash_, kind, actor, subject, raw, _nodes = sample
    nodes = [b"", b"n" * 32, b"", b"n" * 64]  # one Merkle node per entry on average
    serial = iter(range(10**9))
    insert = "INSERT INTO signoff_entry VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

    def work() -> int:
        rows = [(log, s, hash_, kind, actor, subject, raw, nodes[s % 4]) for s in (next(serial) for _ in range(batch))]
        con.execute("BEGIN IMMEDIATE")
        con.executemany(insert, rows)
        con.execute("COMMIT")
        return batch

    return work


def decision_floor(store_path: Path, path: Path, per_commit: int) -> Callable[[], int]:
    """A decision's statements on our schema with pre-built values, no Python logic: the open (duplicate
    check, entry, review row, frontier row) and the approval (review, reviewer and key reads, entry,
    review and frontier updates), ``per_commit`` decisions to a pair of durable commits."""
    con = copy_schema(store_path, path)
    source = sqlite3.connect(store_path)
    opened = source.execute("SELECT * FROM signoff_entry WHERE kind = 'review.opened' LIMIT 1").fetchone()
    approved = source.execute("SELECT * FROM signoff_entry WHERE kind = 'review.approved' LIMIT 1").fetchone()
    review = source.execute("SELECT * FROM signoff_review LIMIT 1").fetchone()
    for table in ("signoff_reviewer", "signoff_key", "signoff_log"):
        for row in source.execute(f"SELECT * FROM {table}"):
            con.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
    log = opened[0]
    review_columns = [d[1] for d in source.execute("PRAGMA table_info(signoff_review)")]
    serial = iter(range(10**9))

    def one_open(n: int) -> None:
        rid, fid = f"rv_{n:016x}", f"fr_{n:016x}"
        con.execute(
            "SELECT id FROM signoff_review WHERE log = ? AND app = ? AND session = ? AND confirmation_id = ?",
            (log, "bench", f"s{n}", f"c{n}"),
        ).fetchall()
        con.execute(
            "INSERT INTO signoff_entry VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (log, 2 * n, *opened[2:5], rid, *opened[6:])
        )
        values = dict(zip(review_columns, review, strict=True))
        values.update(id=rid, frontier=fid, session=f"s{n}", confirmation_id=f"c{n}", status="pending")
        con.execute(f"INSERT INTO signoff_review VALUES ({', '.join('?' * len(values))})", tuple(values.values()))
        con.execute(
            "INSERT INTO signoff_frontier (id, log, opened_seq, size, open_count) VALUES (?, ?, ?, 1, 1)",
            (fid, log, 2 * n),
        )

    def one_approve(n: int) -> None:
        rid, fid = f"rv_{n:016x}", f"fr_{n:016x}"
        con.execute("SELECT * FROM signoff_review WHERE id = ? AND log = ?", (rid, log)).fetchall()
        con.execute("SELECT * FROM signoff_reviewer WHERE log = ? AND id = ?", (log, REVIEWER)).fetchall()
        con.execute(
            "SELECT fingerprint, public_key, enrolled_seq FROM signoff_key WHERE log = ? AND actor = ?", (log, REVIEWER)
        ).fetchall()
        con.execute(
            "INSERT INTO signoff_entry VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (log, 2 * n + 1, *approved[2:5], rid, *approved[6:]),
        )
        con.execute(
            "UPDATE signoff_review SET status = ?, decided_seq = ?, decided_by = ?, decided_at = ?, final_digest = ?, "
            "data = ? WHERE id = ?",
            ("approved", 2 * n + 1, REVIEWER, "2026-01-01T00:00:00.000000Z", "sha256:" + "0" * 64, review[-1], rid),
        )
        con.execute("UPDATE signoff_frontier SET open_count = open_count - 1 WHERE id = ?", (fid,))

    def work() -> int:
        numbers = [next(serial) for _ in range(per_commit)]
        con.execute("BEGIN IMMEDIATE")
        for n in numbers:
            one_open(n)
        con.execute("COMMIT")
        con.execute("BEGIN IMMEDIATE")
        for n in numbers:
            one_approve(n)
        con.execute("COMMIT")
        return per_commit

    return work


# -- decisions through the review service -------------------------------------------------------


def new_store(url: str, key: Path, *, signed: bool = True) -> tuple[Store, ReviewService, Signer, Signer]:
    """A fresh log with one reviewer (any tool) enrolled by the admin with their own key."""
    store = open_store(url)
    store.init_log(key, signed_decisions=signed)
    admin = read_private_key(default_admin_key(key))
    person = Signer.generate()
    service = ReviewService(store)
    service.enroll_reviewer(REVIEWER, roles=["ops"], tools=["*"], key=person.public, admin=admin)
    return store, service, admin, person


def decision_maker(service: ReviewService, person: Signer, tag: str) -> Callable[[int], None]:
    """One decision: the agent opens a review, the reviewer's client signs the approval and sends it."""
    log = service.store.log_id

    def one(n: int) -> None:
        call = CallSpec(
            app="bench", user="u", session=f"{tag}s{n}", invocation=f"i{n}", confirmation_id=f"c{n}",
            call_id=f"k{n}", tool="transfer", args={"amount": n, "to": "bob"},
        )  # fmt: skip
        review = service.open_frontier([call], actor="agent:bench").reviews[0]
        body = approve_body(review.id, review.args_digest)
        sig = sign_decision(person, log, "review.approved", REVIEWER, body)
        service.approve(review.id, reviewer=REVIEWER, sig=sig)

    return one


def signoff_decisions(url: str, key: Path, seconds: float, rounds: int) -> dict[str, float]:
    store, service, _admin, person = new_store(url, key)
    tags = iter(range(10**6))

    batching = [0, 0]  # group commits and writers they answered, in the 16-client rounds

    def measure(clients: int) -> Callable[[], float]:
        def run() -> float:
            before = (store._group.batches, store._group.batched)
            found = concurrent_rate(decision_maker(service, person, f"t{next(tags)}"), clients, seconds)
            if clients > 1:
                batching[0] += store._group.batches - before[0]
                batching[1] += store._group.batched - before[1]
            return found

        return run

    try:
        found = interleaved({"1": measure(1), str(CLIENTS): measure(CLIENTS)}, rounds)
        found["mean_batch"] = batching[1] / max(1, batching[0])
    finally:
        store.close()
    return found


def pg_breakdown(url: str, key: Path, count: int = 300) -> dict[str, Any]:
    """Where one client's PostgreSQL decision goes (issue 24 §3), over ``count`` decisions in a row.

    Per decision: the wall time; this process's CPU time (Python, SQLAlchemy, psycopg, Ed25519); the
    statements sent and the wall time spent in them; the commits and the wall time spent in them (each a
    round trip that also waits for the server's WAL flush). Beside them, on one raw psycopg connection in
    the same run: one round trip (``SELECT 1``) and one durable commit of a one-row insert. Wall time left
    after the CPU, the statements and the commits is waiting elsewhere (the pool, the group committer)."""
    import psycopg

    store, service, _admin, person = new_store(url, key)
    one = decision_maker(service, person, "pgb")
    one(0)  # warm: connections, caches
    spent = {"statements": 0, "statement_s": 0.0, "commits": 0, "commit_s": 0.0}

    # Every statement, whether through SQLAlchemy or a raw DB-API cursor (the store's hot path uses both).
    plain_execute, plain_many = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        try:
            return plain_execute(self, *args, **kwargs)
        finally:
            spent["statements"] += 1
            spent["statement_s"] += time.perf_counter() - begin

    def executemany(self: Any, *args: Any, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        try:
            return plain_many(self, *args, **kwargs)
        finally:
            spent["statements"] += 1
            spent["statement_s"] += time.perf_counter() - begin

    dialect = store.write_engine.dialect
    original_commit = dialect.do_commit

    def timed_commit(dbapi_connection: Any) -> None:
        begin = time.perf_counter()
        original_commit(dbapi_connection)
        spent["commits"] += 1
        spent["commit_s"] += time.perf_counter() - begin

    psycopg.Cursor.execute, psycopg.Cursor.executemany = execute, executemany  # type: ignore[method-assign]
    dialect.do_commit = timed_commit  # type: ignore[method-assign]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    try:
        for n in range(1, count + 1):
            one(n)
    finally:
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        dialect.do_commit = original_commit  # type: ignore[method-assign]
        psycopg.Cursor.execute, psycopg.Cursor.executemany = plain_execute, plain_many  # type: ignore[method-assign]
        store.close()
    base = url.partition("?options=")[0]
    with psycopg.connect(base) as conn:
        start = time.perf_counter()
        for _ in range(500):
            conn.execute("SELECT 1").fetchall()
        round_trip = (time.perf_counter() - start) / 500
        conn.execute("CREATE TABLE IF NOT EXISTS public.bench_commit (x int)")
        conn.commit()
        start = time.perf_counter()
        for i in range(200):
            conn.execute("INSERT INTO public.bench_commit VALUES (%s)", (i,))
            conn.commit()
        commit = (time.perf_counter() - start) / 200
        conn.execute("DROP TABLE public.bench_commit")
        conn.commit()
    ms = 1000 / count
    trips = (spent["statements"] + spent["commits"]) / count
    return {
        "decisions": count,
        "wall_ms_per_decision": round(wall * ms, 2),
        "cpu_ms_per_decision": round(cpu * ms, 2),
        "statements_per_decision": round(spent["statements"] / count, 1),
        "in_statements_ms_per_decision": round(spent["statement_s"] * ms, 2),
        "commits_per_decision": round(spent["commits"] / count, 1),
        "in_commits_ms_per_decision": round(spent["commit_s"] * ms, 2),
        "one_round_trip_ms": round(round_trip * 1000, 3),
        "one_durable_commit_ms": round(commit * 1000, 3),
        "its_round_trips_at_that_latency_ms": round(trips * round_trip * 1000, 2),
        "note": "statement and commit times are wall time, the CPU psycopg spends on them included",
    }


def cpu_ceiling(seconds: float, rounds: int) -> dict[str, Any] | str:
    """The same decisions on a store in tmpfs (``/dev/shm``), where a commit's fsync waits for no disk:
    what the Python and SQLite work of a decision allows in this process, however commits are grouped."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return "not measured: no /dev/shm here"
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        found = signoff_decisions(f"sqlite:///{Path(tmp) / 'decisions.db'}", Path(tmp) / "key.pem", seconds, rounds)
    return {"clients_1_per_s": round(found["1"]), f"clients_{CLIENTS}_per_s": round(found[str(CLIENTS)])}


# -- CHAP, side by side ---------------------------------------------------------------------------


def chap_available() -> str | None:
    try:
        import chap_coordinator  # noqa: F401
        from chap_coordinator.storage.sqlite import SqliteStore  # noqa: F401
    except ImportError:
        return "chap-coordinator is not installed (pip install -e '.[bench]' or chap-coordinator==0.3.3)"
    return None


class Chap:
    """CHAP's coordinator on its SQLite store with the hash chain on, driven through ``dispatch``."""

    def __init__(self, path: Path | None) -> None:
        from chap_coordinator import Coordinator
        from chap_coordinator.storage.sqlite import SqliteStore

        self.store = SqliteStore(str(path)) if path is not None else None
        self.coordinator = Coordinator(enable_chain=True, store=self.store)
        self.lock = threading.Lock()  # CHAP's coordinator is single-writer: its clients take turns
        self.ids = iter(range(10**9))
        self.workspace = self.call("workspace.create")["workspace"]
        self.call("participant.join", workspace=self.workspace, type="agent", **{"from": "agent:bench"})
        self.call("participant.join", workspace=self.workspace, type="human", **{"from": REVIEWER})

    def call(self, method: str, **params: Any) -> Any:
        with self.lock:
            answer = self.coordinator.dispatch(
                {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
            )
        if "error" in answer:
            raise RuntimeError(f"CHAP {method}: {answer['error']}")
        return answer["result"]

    def create(self, n: int) -> str:
        task: str = self.call(
            "task.create", workspace=self.workspace, kind="tool_call", assignee="agent:bench",
            input={"tool": "transfer", "args": {"amount": n, "to": "bob"}}, **{"from": "agent:bench"},
        )["task_id"]  # fmt: skip
        return task

    def review(self, task: str, n: int) -> None:
        self.call(
            "review.request", workspace=self.workspace, task_id=task, to=[REVIEWER],
            artefact={"tool": "transfer", "args": {"amount": n, "to": "bob"}}, **{"from": "agent:bench"},
        )  # fmt: skip
        self.call("decide.approve", workspace=self.workspace, task_id=task, **{"from": REVIEWER})

    def decision(self, n: int) -> None:
        """A paused call opened for review and approved: task.create, review.request, decide.approve."""
        self.review(self.create(n), n)


def chap_decisions(base: Path, seconds: float, rounds: int) -> dict[str, float]:
    chap = Chap(base / "chap.db")
    for n in range(20):
        chap.decision(n)

    def two_calls() -> float:
        """review.request + decide.approve only, the task made beforehand (not timed)."""
        spent, done = 0.0, 0
        while spent < seconds:
            task = chap.create(done)
            start = time.perf_counter()
            chap.review(task, done)
            spent += time.perf_counter() - start
            done += 1
        return done / spent

    found = interleaved(
        {
            "1": lambda: concurrent_rate(chap.decision, 1, seconds),
            str(CLIENTS): lambda: concurrent_rate(chap.decision, CLIENTS, seconds),
            "1_two_calls": two_calls,
        },
        rounds,
    )
    assert chap.store is not None
    chap.store.close()
    return found


def build_chap_log(path: Path, entries: int) -> None:
    """A CHAP log of about ``entries`` chained entries in its SQLite file (built in memory, saved once)."""
    chap = Chap(None)
    n = 0
    workspace = chap.coordinator.workspaces[chap.workspace]
    while len(workspace.audit) < entries:
        chap.decision(n)
        n += 1
    from chap_coordinator.storage.sqlite import SqliteStore

    store = SqliteStore(str(path))
    store.save(chap.coordinator._snapshot_workspace(workspace))
    store.close()


def chap_verify_child(path: str) -> None:
    """Child process: load CHAP's file into its coordinator and run ``audit.verify_chain``; entries/s."""
    from chap_coordinator import Coordinator
    from chap_coordinator.storage.sqlite import SqliteStore

    store = SqliteStore(path)
    started = time.perf_counter()
    coordinator = Coordinator(enable_chain=True, store=store)
    loaded = time.perf_counter()
    workspace = next(iter(coordinator.workspaces))
    answer = coordinator.dispatch(
        {"jsonrpc": "2.0", "id": 1, "method": "audit.verify_chain", "params": {"workspace": workspace}}
    )
    done = time.perf_counter()
    result = answer.get("result") or {}
    print(
        json.dumps(
            {
                "ok": bool(result.get("ok")),
                "entries": result.get("entries_total", 0),
                "verify_chain_seconds": done - loaded,
                "load_seconds": loaded - started,
            }
        )
    )


def chap_bare_links(path: Path) -> tuple[int, float]:
    """A bare reader of CHAP's file that recomputes only its hash links (sha256(JCS(record) || prev))."""
    from chap_coordinator.canonical import ZERO_HASH, canonicalize

    con = sqlite3.connect(path)
    start = time.perf_counter()
    prev = ZERO_HASH
    count = 0
    for (data,) in con.execute("SELECT data FROM chap_entries ORDER BY seq"):
        entry = json.loads(data)
        if entry.get("prev_hash") != prev:
            raise RuntimeError(f"CHAP link broken at {count}")
        record = (
            entry["envelope"]
            if entry.get("outcome") is None
            else {"outcome": entry["outcome"], "request": entry["request"]}
        )
        prev = "sha256:" + hashlib.sha256(canonicalize(record) + prev.encode()).hexdigest()
        count += 1
    return count, count / (time.perf_counter() - start)


# -- a big log, written straight to SQLite ------------------------------------------------------


def build_log(path: Path, entries: int, *, signed: bool) -> Path:
    """A realistic log of ``entries`` entries in a SQLite file, with the projection rows the rules imply.

    The log is made and the reviewer enrolled through the service (so the trust entries are real); the
    review lifecycles after them (opened, approved/rejected, resumed, executed) are built with the
    store's own entry code and written in bulk, each call sealed with its values beside the log (the
    default of a log made today). ``signed``: the log requires signed decisions and every
    decision carries the reviewer's Ed25519 signature; otherwise decisions are unsigned (the reviewer
    has no key), as in a log made with ``signed_decisions=False``.
    """
    from sqlalchemy import insert

    from signoff.audit.review_types import Policy
    from signoff.audit.sealing import seal_call, value_json
    from signoff.audit.tables import EntryRow, FrontierRow, ReviewRow, ValueRow

    url = f"sqlite:///{path}"
    key = path.with_suffix(".pem")
    store = open_store(url)
    store.init_log(key, signed_decisions=signed)
    admin = read_private_key(default_admin_key(key))
    person = Signer.generate()
    ReviewService(store).enroll_reviewer(
        REVIEWER, roles=["ops"], tools=["*"], key=person.public if signed else None, admin=admin
    )
    info = store.info()
    log, log_rules = info.id, store.rules
    seq, prev = info.size, info.head
    compact = CompactRange()
    for _seq, leaf, _raw in store.iter_raw(0, seq):
        compact.append(bytes.fromhex(leaf[7:]))
    at = format_time(store.clock())
    rows: list[dict[str, object]] = []
    reviews: list[dict[str, object]] = []
    fronts: list[dict[str, object]] = []
    kept: list[dict[str, object]] = []
    policy = Policy().to_json() if hasattr(Policy(), "to_json") else {"role": None, "deadline_seconds": None}

    def add(actor: str, kind: str, body: dict[str, Any]) -> int:
        nonlocal seq, prev
        sig = None
        if signed and actor == REVIEWER:
            sig = person.sign(trust_statement(log_rules, kind, actor, body))
        item = build(log=log, seq=seq, prev=prev, at=at, actor=actor, kind=kind, body=body, sig=sig)
        nodes = compact.append(bytes.fromhex(item.hash[7:]))
        subject = body.get("review") or body.get("frontier") or body.get("reviewer")
        rows.append(
            {"log": log, "seq": seq, "hash": item.hash, "kind": kind, "actor": actor, "subject": subject,
             "raw": item.raw, "nodes": b"".join(h for _l, _i, h in nodes)}
        )  # fmt: skip
        seq += 1
        prev = item.hash
        return item.seq

    def flush() -> None:
        with store.write_engine.begin() as conn:
            for table, batch in ((EntryRow, rows), (ReviewRow, reviews), (FrontierRow, fronts), (ValueRow, kept)):
                if batch:
                    conn.execute(insert(table), batch)
                    batch.clear()

    n = 0
    while seq < entries - 4:
        n += 1
        rid, fid = f"rv_{n:016x}", f"fr_{n:016x}"
        args = {"amount": n % 1000, "to": f"acct-{n}", "memo": "monthly rent, see ticket #4411"}
        call = CallSpec(
            app="bank", user="u1", session=f"s{n}", invocation=f"e-{n}", confirmation_id=f"c{n}", call_id=f"k{n}",
            tool="transfer", args=args, hint="Transfer?", agent="teller", context={"user": "pay rent"},
        ).to_json()  # fmt: skip
        call, values = seal_call(call, None)  # as a log made today holds it (SPEC.md "Values beside the log")
        kept += [
            {"log": log, "commitment": v.commitment, "owner": rid, "salt": v.salt.hex(), "value": value_json(v.value)}
            for v in values
        ]
        args = call["args"]
        body = {"review": rid, "frontier": fid, "call": call, "policy": policy, "deadline": None}
        opened = add("agent:teller", "review.opened", body)
        if n % 10 == 0:
            decision: dict[str, Any] = {"review": rid, "reason": "not today"}
            kind, status, final, final_args = "review.rejected", "rejected", None, None
        else:
            decision = approve_body(rid, call["args_digest"])
            kind, status, final, final_args = "review.approved", "approved", call["args_digest"], args
        decided = add(REVIEWER, kind, decision)
        data = rules.closed_data(rules.opened_data(body), kind, decision, final_args, REVIEWER, decided)
        resumed = add(
            "agent:teller",
            "run.resumed",
            {"frontier": fid, "reviews": [rid], "invocation": f"e-{n}", "session": f"s{n}"},
        )
        executed = add("agent:teller", "tool.executed", {"review": rid, "args_digest": final}) if final else None
        reviews.append(
            {"id": rid, "log": log, "frontier": fid, "status": status, "tool": "transfer", "agent": "teller",
             "app": "bank", "session": f"s{n}", "confirmation_id": f"c{n}", "call_id": f"k{n}", "opened_seq": opened,
             "opened_at": at, "deadline": None, "decided_seq": decided, "decided_by": REVIEWER, "decided_at": at,
             "args_digest": call["args_digest"], "final_digest": final, "executed_seq": executed,
             "data": json.dumps(data)}
        )  # fmt: skip
        fronts.append({"id": fid, "log": log, "opened_seq": opened, "size": 1, "open_count": 0, "resumed_seq": resumed})
        if len(rows) >= 20000:
            flush()
    flush()
    store.close()
    return path


def peak_rss_kb() -> int:
    """This process's peak RSS (VmHWM). Unlike ``ru_maxrss``, it is not inherited across fork+exec."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def verify_child(path: str, jobs: int) -> None:
    """Child process: verify the store with ``jobs`` processes; entries/s and peak RSS as JSON."""
    from signoff.audit.verify import verify_store

    store = open_store(f"sqlite:///{path}")
    start = time.perf_counter()
    report = verify_store(store, jobs=jobs)
    elapsed = time.perf_counter() - start
    from signoff.audit import verify_parallel

    workers = [pid for pool in verify_parallel._POOLS.values() for pid in (pool._processes or {})]
    children = max((worker_peak_kb(pid) for pid in workers), default=0)  # the largest worker's peak
    print(
        json.dumps(
            {
                "ok": report.ok,
                "size": report.size,
                "seconds": elapsed,
                "peak_rss_mb": peak_kb_mb(peak_rss_kb()),
                "worker_peak_rss_mb": peak_kb_mb(children) if jobs > 1 else None,
                "failure": str(report.failure) if report.failure else None,
            }
        )
    )


def worker_peak_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_kb_mb(kb: int) -> float:
    return round(kb / 1024, 1)


def run_child(*argv: str) -> dict[str, Any]:
    child = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, check=False)
    if child.returncode != 0:
        raise RuntimeError(f"child {argv} failed: {child.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return found


def sequential_floor(path: str) -> None:
    """Child process: the order-bound work of ``audit verify`` with no rule at all, one core; entries/s.

    Each entry is read through the store's own reader, parsed (``orjson``, as the sequential pass does
    for an entry a worker found canonical), its ``seq`` and ``prev`` link compared, and its leaf appended
    to the Merkle range with the stored nodes compared. This is what the one sequential pass costs before
    any field, key, review, policy or projection check; a worker's hashing and RFC 8785 check come on top.
    """
    import orjson

    store = open_store(f"sqlite:///{path}")
    compact = CompactRange()
    prev = ZERO_HASH
    count = 0
    start = time.perf_counter()
    for seq, digest, raw, nodes, _columns in store.iter_rows(0):
        data = orjson.loads(raw)
        if data["seq"] != seq or data["prev"] != prev:
            raise RuntimeError(f"link broken at {seq}")
        completed = compact.append(bytes.fromhex(digest[7:]))
        if b"".join(node for _level, _index, node in completed) != nodes:
            raise RuntimeError(f"Merkle nodes differ at {seq}")
        prev = digest
        count += 1
    elapsed = time.perf_counter() - start
    store.close()
    print(json.dumps({"entries": count, "seconds": elapsed}))


def entry_blobs(path: Path, limit: int) -> list[bytes]:
    con = sqlite3.connect(path)
    return [bytes(r[0]) for r in con.execute("SELECT raw FROM signoff_entry ORDER BY seq LIMIT ?", (limit,))]


def sha256_rate(blobs: list[bytes]) -> float:
    """Raw Python SHA-256 over the same entry bytes (in memory): entries/s, one core."""
    start = time.perf_counter()
    for blob in blobs:
        hashlib.sha256(b"\x00" + blob).digest()
    return len(blobs) / (time.perf_counter() - start)


def worker_cost_us(blobs: list[bytes]) -> float:
    """µs per entry of what the workers do for every entry, one core: the leaf hash, the RFC 8785 check and
    the entry's form (:func:`signoff.audit.verify_parallel.check_chunk` itself, with no stored hash or
    columns to compare)."""
    from signoff.audit.verify_parallel import check_chunk

    start = time.perf_counter()
    check_chunk(blobs, [None] * len(blobs), [None] * len(blobs))
    return (time.perf_counter() - start) / len(blobs) * 1e6


def _floor_chunk(chunk: list[tuple[bytes, bytes | None, bytes | None, bytes | None]]) -> int:
    """Parse (RFC 8785 check), hash, and check the one signature of each entry that has one."""
    from nacl.bindings import crypto_sign_open

    for raw, public, signature, message in chunk:
        hashlib.sha256(b"\x00" + raw).digest()
        parse_canonical(raw)
        if public is not None and signature is not None and message is not None:
            crypto_sign_open(signature + message, public)
    return len(chunk)


def signed_floor(path: Path, jobs: int) -> tuple[int, float]:
    """The signed log's floor: every entry parsed and hashed, every signature checked, on ``jobs`` cores.

    The statements and keys are prepared before the clock starts (the verifier must also make them)."""
    from signoff.audit.keys import public_bytes

    con = sqlite3.connect(path)
    keys: dict[str, bytes] = {}
    for (raw,) in con.execute("SELECT raw FROM signoff_entry WHERE kind IN ('key.enrolled', 'reviewer.enrolled')"):
        body = json.loads(raw)["body"]
        for name in ("key",):
            if isinstance(body.get(name), str) and str(body[name]).startswith("ed25519:"):
                public = body[name]
                keys[hashlib.sha256(public_bytes(public)).hexdigest()] = public_bytes(public)
    items: list[tuple[bytes, bytes | None, bytes | None, bytes | None]] = []
    log_id = con.execute("SELECT id FROM signoff_log").fetchone()[0]
    for (raw,) in con.execute("SELECT raw FROM signoff_entry ORDER BY seq"):
        raw = bytes(raw)
        data = json.loads(raw)
        sig = data.get("sig")
        if sig is not None and data["seq"] > 1:
            from signoff.audit.trust import LogRules

            message = trust_statement(LogRules(log_id, 2), data["kind"], data["actor"], data["body"])
            items.append((raw, keys.get(sig["key"].split(":", 1)[1]), base64.b64decode(sig["value"]), message))
        else:
            items.append((raw, None, None, None))
    chunks = [items[i : i + 2000] for i in range(0, len(items), 2000)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(_floor_chunk, chunks[:jobs]))  # warm the workers
        start = time.perf_counter()
        done = sum(pool.map(_floor_chunk, chunks))
    return done, done / (time.perf_counter() - start)


def ed25519_costs() -> dict[str, float]:
    """µs per Ed25519 signature check, one core: ``cryptography`` (OpenSSL) and PyNaCl (libsodium)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from nacl.bindings import crypto_sign_open

    key = Ed25519PrivateKey.generate()
    public = key.public_key()
    raw_public = public.public_bytes_raw()
    message = secrets.token_bytes(300)
    signature = key.sign(message)
    count = 3000
    start = time.perf_counter()
    for _ in range(count):
        public.verify(signature, message)
    openssl = (time.perf_counter() - start) / count * 1e6
    start = time.perf_counter()
    for _ in range(count):
        crypto_sign_open(signature + message, raw_public)
    sodium = (time.perf_counter() - start) / count * 1e6
    start = time.perf_counter()
    for _ in range(count):
        key.sign(message)
    signing = (time.perf_counter() - start) / count * 1e6
    return {
        "cryptography_check_us": round(openssl, 1),
        "pynacl_check_us": round(sodium, 1),
        "sign_us": round(signing, 1),
    }


# -- PostgreSQL ------------------------------------------------------------------------------------


def pg_schema(base: str) -> Generator[str, None, None] | None:
    try:
        import psycopg

        with psycopg.connect(base, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # no server: say so, report the rest
        say(f"PostgreSQL at {base} not reachable ({exc}); its figures are skipped")
        return None
    return _schema(base)


def _schema(base: str) -> Generator[str, None, None]:
    import psycopg

    while True:
        name = "bench_" + secrets.token_hex(5)
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        try:
            yield f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{name}"
        finally:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{name}" CASCADE')


# -- main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000, help="log size for the unsigned verify")
    parser.add_argument("--signed-entries", type=int, default=200_000, help="log size for the signed verify")
    parser.add_argument("--chap-entries", type=int, default=150_000, help="CHAP log size for its verifiers")
    parser.add_argument("--seconds", type=float, default=1.5, help="seconds per measurement round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg", default=PG_DEFAULT, help="PostgreSQL for the same decision figures ('' to skip)")
    parser.add_argument("--quick", action="store_true", help="small logs and short rounds (a smoke run)")
    parser.add_argument(
        "--only", action="append", choices=["appends", "decisions", "verify"], help="run only these parts (repeat)"
    )
    parser.add_argument("--verify-child", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--chap-verify-child", help=argparse.SUPPRESS)
    parser.add_argument("--sequential-floor-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sequential_floor_child:
        sequential_floor(args.sequential_floor_child)
        return
    if args.verify_child:
        verify_child(args.verify_child, args.jobs)
        return
    if args.chap_verify_child:
        chap_verify_child(args.chap_verify_child)
        return
    if args.quick:
        args.entries, args.signed_entries, args.chap_entries = 60_000, 30_000, 20_000
        args.seconds, args.rounds = 0.5, 1
    cores = len(os.sched_getaffinity(0))
    parts = set(args.only or ["appends", "decisions", "verify"])
    s = args.seconds
    no_chap = chap_available()
    result: dict[str, Any] = {
        "cores": cores,
        "chap": no_chap or "chap-coordinator 0.3.3, SqliteStore, enable_chain=True",
    }

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", str(ROOT))) as tmp:
        base = Path(tmp)
        if "appends" in parts:
            say("appends ...")
            store, _service, admin, _person = new_store(f"sqlite:///{base / 'store.db'}", base / "key.pem")
            public_key = Signer.generate().public
            serial = iter(range(10**9))

            def draft() -> tuple[str, str, dict[str, object]]:
                return (
                    "service:bench",
                    "key.enrolled",
                    {"actor": f"agent:a{next(serial)}", "key": public_key, "alg": "Ed25519"},
                )

            def admin_draft() -> tuple[str, str, dict[str, Any], dict[str, str]]:
                body = {"actor": f"agent:a{next(serial)}", "key": Signer.generate().public, "alg": "Ed25519"}
                return (
                    ADMIN,
                    "key.enrolled",
                    body,
                    admin.sign(trust_statement(store.rules, "key.enrolled", ADMIN, body)),
                )

            # The append machinery every operation runs on (Tx.append: canonical bytes, hash, prev link, Merkle
            # nodes, compare-and-swap on the head, durable commit), without any kind's rules; then the public
            # Store.append, which also checks a key enrolment's rules and the admin's signature.
            def single() -> int:
                store.transact(lambda tx: tx.append(*draft()))
                return 1

            def batched() -> int:
                def work(tx: Tx) -> None:
                    for _ in range(BATCH):
                        tx.append(*draft())

                store.transact(work)
                return BATCH

            for _ in range(20):  # a few entries to copy the row shape from
                single()
            store_path = base / "store.db"
            raw1, floor1 = raw_sqlite(base / "raw1.db", 1), schema_floor(store_path, base / "floor1.db", 1)
            raw2, floor2 = raw_sqlite(base / "raw2.db", BATCH), schema_floor(store_path, base / "floor2.db", BATCH)
            appends = interleaved(
                {
                    "raw": lambda: rate(raw1, s),
                    "floor": lambda: rate(floor1, s),
                    "signoff": lambda: rate(single, s),
                    "public": lambda: rate(lambda: (store.append(*admin_draft()), 1)[1], s),
                    "raw_batched": lambda: rate(raw2, s),
                    "floor_batched": lambda: rate(floor2, s),
                    "signoff_batched": lambda: rate(batched, s),
                    "public_batched": lambda: rate(
                        lambda: (store.append_many([admin_draft() for _ in range(BATCH)]), BATCH)[1], s
                    ),
                },
                args.rounds,
            )
            store.close()
            result["appends"] = {
                "single_per_s": round(appends["signoff"]),
                "raw_sqlite_durable_commits_per_s": round(appends["raw"]),
                "same_schema_single_rows_per_s": round(appends["floor"]),
                "public_key_enrolments_per_s": round(appends["public"]),
                "batch_size": BATCH,
                "batched_per_s": round(appends["signoff_batched"]),
                "raw_sqlite_batched_rows_per_s": round(appends["raw_batched"]),
                "same_schema_batched_rows_per_s": round(appends["floor_batched"]),
                "batched_vs_same_schema_floor": round(appends["signoff_batched"] / appends["floor_batched"], 3),
                "public_batched_key_enrolments_per_s": round(appends["public_batched"]),
            }

        if "decisions" in parts:
            say("decisions ...")
            sqlite_dec = signoff_decisions(f"sqlite:///{base / 'decisions.db'}", base / "dkey.pem", s * 2, args.rounds)
            floor_src = base / "decisions.db"
            floor_1 = decision_floor(floor_src, base / "dfloor1.db", 1)
            floor_16 = decision_floor(floor_src, base / "dfloor16.db", CLIENTS)
            floors = interleaved({"1": lambda: rate(floor_1, s), "16": lambda: rate(floor_16, s)}, args.rounds)
            ceiling = cpu_ceiling(s * 2, args.rounds)
            crypto = ed25519_costs()
            decisions: dict[str, Any] = {
                "sqlite": {
                    "clients_1_per_s": round(sqlite_dec["1"]),
                    f"clients_{CLIENTS}_per_s": round(sqlite_dec[str(CLIENTS)]),
                    f"mean_group_commit_batch_{CLIENTS}_clients": round(sqlite_dec["mean_batch"], 1),
                    "same_schema_decision_floor_1_client_per_s": round(floors["1"]),
                    f"same_schema_decision_floor_{CLIENTS}_per_commit_per_s": round(floors["16"]),
                    "no_disk_wait_ceiling": ceiling,
                },
                "ed25519": crypto,
            }
            if no_chap is None:
                chap = chap_decisions(base, s * 2, args.rounds)
                decisions["chap_sqlite"] = {
                    "clients_1_per_s": round(chap["1"]),
                    f"clients_{CLIENTS}_per_s": round(chap[str(CLIENTS)]),
                    "clients_1_review_request_and_approve_only_per_s": round(chap["1_two_calls"]),
                }
                decisions["ratio_clients_1"] = round(sqlite_dec["1"] / chap["1"], 2)
                decisions[f"ratio_clients_{CLIENTS}"] = round(sqlite_dec[str(CLIENTS)] / chap[str(CLIENTS)], 2)
                many_vs_one = sqlite_dec[str(CLIENTS)] / chap["1"]
                decisions[f"ratio_clients_{CLIENTS}_vs_chap_one_client"] = round(many_vs_one, 2)
                decisions["ratio_clients_1_vs_chap_two_calls"] = round(sqlite_dec["1"] / chap["1_two_calls"], 2)
            else:
                decisions["chap_sqlite"] = no_chap
            schemas = pg_schema(args.pg) if args.pg else None
            if schemas is not None:
                url = next(schemas)
                try:
                    pg = signoff_decisions(url, base / "pgkey.pem", s * 2, args.rounds)
                finally:
                    schemas.close()
                decisions["postgresql"] = {
                    "clients_1_per_s": round(pg["1"]),
                    f"clients_{CLIENTS}_per_s": round(pg[str(CLIENTS)]),
                    f"mean_group_commit_batch_{CLIENTS}_clients": round(pg["mean_batch"], 1),
                }
                breakdown = pg_schema(args.pg)
                if breakdown is not None:
                    try:
                        decisions["postgresql"]["one_client_breakdown"] = pg_breakdown(next(breakdown), base / "b.pem")
                    finally:
                        breakdown.close()
            decisions["targets"] = {"ratio_clients_1": ">= 2", f"ratio_clients_{CLIENTS}_vs_chap_one_client": ">= 3"}
            result["decisions"] = decisions

        if "verify" in parts:
            say(f"verify: building a {args.entries:,}-entry log ...")
            verify: dict[str, Any] = {}
            big = build_log(base / "big.db", args.entries, signed=False)
            say("verify: one core, all cores ...")
            one = run_child("--verify-child", str(big), "--jobs", "1")
            every = run_child("--verify-child", str(big), "--jobs", str(cores))
            bare = run_child("--sequential-floor-child", str(big))
            blobs = entry_blobs(big, 200_000)
            floor_per_s = bare["entries"] / bare["seconds"]
            verify["unsigned"] = {
                "entries": every["size"],
                "ok": one["ok"] and every["ok"],
                "failure": one["failure"] or every["failure"],
                "entries_per_s_all_cores": round(every["size"] / every["seconds"]),
                "entries_per_s_one_core": round(one["size"] / one["seconds"]),
                "peak_rss_mb": every["peak_rss_mb"],
                "worker_peak_rss_mb": every["worker_peak_rss_mb"],
                "one_core_peak_rss_mb": one["peak_rss_mb"],
                "raw_sha256_entries_per_s_one_core": round(sha256_rate(blobs)),
                "sequential_floor_entries_per_s": round(floor_per_s),
                "sequential_floor_us_per_entry": round(1e6 / floor_per_s, 1),
                "sequential_pass_budget_at_100k_us_per_entry": round(10.0 - 1e6 / floor_per_s, 1),
                "worker_checks_us_per_entry": round(worker_cost_us(blobs), 1),
            }
            # At 100k entries/s every core may spend 10 µs per entry; what is left after the bare sequential
            # pass and the workers' hashing and RFC 8785 check is all the rule checking may cost.
            verify["unsigned"]["cpu_left_for_rules_at_100k_us_per_entry"] = round(
                cores * 10.0
                - verify["unsigned"]["sequential_floor_us_per_entry"]
                - verify["unsigned"]["worker_checks_us_per_entry"],
                1,
            )
            del blobs
            big.unlink()
            say(f"verify: a {args.signed_entries:,}-entry log with signed decisions ...")
            signed = build_log(base / "signed.db", args.signed_entries, signed=True)
            signed_every = run_child("--verify-child", str(signed), "--jobs", str(cores))
            signed_one = run_child("--verify-child", str(signed), "--jobs", "1")
            floor_count, floor_rate = signed_floor(signed, cores)
            verify["signed"] = {
                "entries": signed_every["size"],
                "ok": signed_every["ok"] and signed_one["ok"],
                "failure": signed_every["failure"] or signed_one["failure"],
                "entries_per_s_all_cores": round(signed_every["size"] / signed_every["seconds"]),
                "entries_per_s_one_core": round(signed_one["size"] / signed_one["seconds"]),
                "floor_entries_per_s_all_cores": round(floor_rate),
                "vs_floor": round(signed_every["size"] / signed_every["seconds"] / floor_rate, 3),
                "peak_rss_mb": signed_every["peak_rss_mb"],
            }
            if no_chap is None:
                say(f"verify: CHAP, a {args.chap_entries:,}-entry chain ...")
                chap_path = base / "chap-verify.db"
                build_chap_log(chap_path, args.chap_entries)
                in_process = run_child("--chap-verify-child", str(chap_path))
                count, bare = chap_bare_links(chap_path)
                verify["chap"] = {
                    "entries": count,
                    "verify_chain_ok": in_process["ok"],
                    "verify_chain_entries_per_s": round(in_process["entries"] / in_process["verify_chain_seconds"]),
                    "verify_chain_with_load_entries_per_s": round(
                        in_process["entries"] / (in_process["verify_chain_seconds"] + in_process["load_seconds"])
                    ),
                    "bare_link_reader_entries_per_s": round(bare),
                }
                verify["ratio_vs_chap_verify_chain"] = round(
                    verify["unsigned"]["entries_per_s_all_cores"] / verify["chap"]["verify_chain_entries_per_s"], 2
                )
                verify["ratio_vs_chap_bare_reader"] = round(
                    verify["unsigned"]["entries_per_s_all_cores"] / verify["chap"]["bare_link_reader_entries_per_s"], 2
                )
            else:
                verify["chap"] = no_chap
            verify["targets"] = {
                "unsigned_entries_per_s_all_cores": ">= 100000",
                "signed_vs_floor": ">= 0.5",
                "peak_rss_mb": "< 150",
            }
            result["verify"] = verify
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
