"""Benchmark the audit log against limits measured in the same run on the same machine.

Prints one JSON object:
- durable single appends/s beside the raw SQLite durable-commit rate (a bare table, one
  insert per transaction, WAL, synchronous=FULL);
- batched appends/s beside the raw batched-commit rate (same batch size);
- for both, the "same-schema floor": pre-built rows of our shape (``signoff_entry``'s own
  DDL and indexes) inserted with no canonical form, hashing or Merkle work, which shows how
  much of the gap to the bare table is SQLite's work for our row rather than ours;
- decisions/s (open + approve) through the review service;
- ``audit verify`` entries/s beside raw Python SHA-256 over the same bytes;
- peak RSS while verifying N entries (default 1,000,000) in a child process.

Rates are taken in interleaved rounds (raw, ours, raw, ours, …) and the medians compared,
because these machines are shared and noisy. Run: ``python tests/benchmarks/audit_bench.py
[--entries N] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from signoff.audit import rules  # noqa: E402
from signoff.audit.canonical import digest  # noqa: E402
from signoff.audit.entry import build, format_time  # noqa: E402
from signoff.audit.keys import Signer  # noqa: E402
from signoff.audit.merkle import CompactRange  # noqa: E402
from signoff.audit.reviews import CallSpec, ReviewService  # noqa: E402
from signoff.audit.store import Tx, open_store  # noqa: E402

BATCH = 100


def rate(work: Callable[[], int], seconds: float) -> float:
    """Run ``work`` (which returns how many items it did) repeatedly for ``seconds``; items/s."""
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += work()
    return done / (time.perf_counter() - start)


def raw_sqlite(path: Path, batch: int) -> Callable[[], int]:
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
    payload = b"x" * 400

    def work() -> int:
        con.execute("BEGIN IMMEDIATE")
        con.executemany("INSERT INTO t (v) VALUES (?)", [(payload,)] * batch)
        con.execute("COMMIT")
        return batch

    return work


def schema_floor(store_path: Path, path: Path, batch: int) -> Callable[[], int]:
    """Rows shaped like ours (same DDL and indexes as ``signoff_entry``, same column sizes),
    built in advance and inserted with no canonical form, hashing or Merkle work: what
    SQLite alone allows for our row, beside the bare-table limit."""
    ddl = [
        row[0]
        for row in sqlite3.connect(store_path).execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'signoff_entry' AND sql IS NOT NULL"
        )
    ]
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    for statement in ddl:
        con.execute(statement)
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


def interleaved(pairs: dict[str, Callable[[], int]], rounds: int, seconds: float) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in pairs}
    for _ in range(rounds):
        for name, work in pairs.items():
            samples[name].append(rate(work, seconds))
    return {name: statistics.median(values) for name, values in samples.items()}


def build_log(path: Path, entries: int) -> Path:
    """Write a realistic log of ``entries`` entries straight to a SQLite file (fast fixture path).

    Review lifecycles (opened, approved/edited/rejected, resumed, executed) with their
    projection rows, built with the same entry code as the store, so ``verify`` checks a
    log the service could have written.
    """
    from sqlalchemy import insert

    from signoff.audit.tables import EntryRow, FrontierRow, KeyRow, LogRow, ReviewerRow, ReviewRow

    store = open_store(f"sqlite:///{path}")
    key = path.with_suffix(".pem")
    info = store.init_log(key)
    log = info.id
    signer = Signer.generate()
    seq, prev = 1, store.info().head
    compact = CompactRange()
    first = next(store.iter_raw(0, 1))
    compact.append(bytes.fromhex(first[1][7:]))
    at = format_time(store.clock())
    rows: list[dict[str, object]] = []
    reviews: list[dict[str, object]] = []
    fronts: list[dict[str, object]] = []
    engine = store.write_engine

    def add(actor: str, kind: str, body: dict[str, Any]) -> int:
        nonlocal seq, prev
        item = build(log=log, seq=seq, prev=prev, at=at, actor=actor, kind=kind, body=body)
        nodes = compact.append(bytes.fromhex(item.hash[7:]))
        rows.append(
            {
                "log": log,
                "seq": seq,
                "hash": item.hash,
                "kind": kind,
                "actor": actor,
                "subject": body.get("review") or body.get("frontier") or body.get("reviewer"),
                "raw": item.raw,
                "nodes": b"".join(h for _l, _i, h in nodes),
            }
        )
        seq += 1
        prev = item.hash
        return item.seq

    def flush() -> None:
        with engine.begin() as conn:
            if rows:
                conn.execute(insert(EntryRow), rows)
            if reviews:
                conn.execute(insert(ReviewRow), reviews)
            if fronts:
                conn.execute(insert(FrontierRow), fronts)
        rows.clear()
        reviews.clear()
        fronts.clear()

    add("service:signoff", "reviewer.enrolled", {"reviewer": "human:alice@example.org", "roles": ["ops"], "tools": []})
    with engine.begin() as conn:
        conn.execute(
            insert(ReviewerRow),
            {
                "log": log,
                "id": "human:alice@example.org",
                "roles": '["ops"]',
                "tools": "[]",
                "enabled": True,
                "enrolled_seq": 1,
            },
        )
    del signer, KeyRow, LogRow
    n = 0
    while seq < entries - 4:
        n += 1
        rid, fid = f"rv_{n:016x}", f"fr_{n:016x}"
        args = {"amount": n % 1000, "to": f"acct-{n}", "memo": "monthly rent, see ticket #4411"}
        call = {
            "app": "bank",
            "user": "u1",
            "session": f"s{n}",
            "invocation": f"e-{n}",
            "confirmation_id": f"c{n}",
            "call_id": f"k{n}",
            "tool": "transfer",
            "args": args,
            "args_digest": digest(args),
            "hint": "Transfer?",
            "payload": None,
            "agent": "teller",
            "node_path": "teller",
            "context": {"user": "pay rent"},
            "tool_description": "Move money",
            "tool_schema": None,
            "kind": "confirmation",
        }
        opened = add(
            "agent:teller",
            "review.opened",
            {
                "review": rid,
                "frontier": fid,
                "call": call,
                "policy": {"role": None, "deadline_seconds": None},
                "deadline": None,
            },
        )
        opened_body = {"call": call, "policy": {"role": None, "deadline_seconds": None}}
        if n % 10 == 0:
            decision: dict[str, Any] = {"review": rid, "reason": "not today"}
            decided = add("human:alice@example.org", "review.rejected", decision)
            status, final, executed = "rejected", None, None
            data = rules.closed_data(rules.opened_data(opened_body), "review.rejected", decision, None)
        else:
            decision = {"review": rid, "args_digest": call["args_digest"], "rationale": ""}
            decided = add("human:alice@example.org", "review.approved", decision)
            status, final = "approved", call["args_digest"]
            data = rules.closed_data(rules.opened_data(opened_body), "review.approved", decision, args)
        resumed = add(
            "agent:teller",
            "run.resumed",
            {"frontier": fid, "reviews": [rid], "invocation": f"e-{n}", "session": f"s{n}"},
        )
        if status == "approved":
            executed = add("agent:teller", "tool.executed", {"review": rid, "args_digest": final})
        reviews.append(
            {
                "id": rid,
                "log": log,
                "frontier": fid,
                "status": status,
                "tool": "transfer",
                "agent": "teller",
                "app": "bank",
                "session": f"s{n}",
                "confirmation_id": f"c{n}",
                "call_id": f"k{n}",
                "opened_seq": opened,
                "opened_at": at,
                "deadline": None,
                "decided_seq": decided,
                "decided_by": "human:alice@example.org",
                "decided_at": at,
                "args_digest": call["args_digest"],
                "final_digest": final,
                "executed_seq": executed,
                "data": json.dumps(data),
            }
        )
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


def verify_child(path: str) -> None:
    """Child process: verify the store and print entries/s and peak RSS as JSON."""
    from signoff.audit.verify import verify_store

    store = open_store(f"sqlite:///{path}")
    start = time.perf_counter()
    report = verify_store(store)
    elapsed = time.perf_counter() - start
    peak_kb = peak_rss_kb()
    print(
        json.dumps(
            {
                "ok": report.ok,
                "size": report.size,
                "seconds": elapsed,
                "peak_rss_mb": peak_kb / 1024,
                "failure": str(report.failure) if report.failure else None,
            }
        )
    )


def sha256_rate(path: Path) -> float:
    """Raw Python SHA-256 over the same entry bytes (read once into memory first): entries/s."""
    con = sqlite3.connect(path)
    blobs = [bytes(r[0]) for r in con.execute("SELECT raw FROM signoff_entry ORDER BY seq LIMIT 200000")]
    start = time.perf_counter()
    for blob in blobs:
        hashlib.sha256(b"\x00" + blob).digest()
    return len(blobs) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000, help="log size for the verify measurement")
    parser.add_argument("--seconds", type=float, default=1.5, help="seconds per measurement round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verify-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.verify_child:
        verify_child(args.verify_child)
        return

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", str(ROOT))) as tmp:
        base = Path(tmp)
        store = open_store(f"sqlite:///{base / 'store.db'}")
        store.init_log(base / "key.pem")
        # key.enrolled is the one kind Store.append writes itself (the review lifecycle goes
        # through ReviewService); each enrols one agent's key, a body of ~150 bytes.
        key = Signer.generate().public
        serial = iter(range(10**9))

        def draft() -> tuple[str, str, dict[str, object]]:
            return ("service:bench", "key.enrolled", {"actor": f"agent:a{next(serial)}", "key": key, "alg": "Ed25519"})

        # The append machinery every operation runs on (Tx.append: canonical bytes, hash, prev
        # link, Merkle nodes, compare-and-swap on the head, durable commit), without the rule
        # checks of any entry kind; then the public Store.append, which also checks a key
        # enrolment's rules (key format, owner, signature policy) and writes its key row.
        def single() -> int:
            store.transact(lambda tx: tx.append(*draft()))
            return 1

        def batched() -> int:
            def work(tx: Tx) -> None:
                for _ in range(BATCH):
                    tx.append(*draft())

            store.transact(work)
            return BATCH

        def public_single() -> int:
            store.append(*draft())
            return 1

        def public_batched() -> int:
            store.append_many([draft() for _ in range(BATCH)])
            return BATCH

        for _ in range(20):  # a few entries to copy the row shape from
            single()
        store_path = base / "store.db"
        singles = interleaved(
            {
                "raw": raw_sqlite(base / "raw1.db", 1),
                "floor": schema_floor(store_path, base / "floor1.db", 1),
                "signoff": single,
                "public": public_single,
            },
            args.rounds,
            args.seconds,
        )
        batches = interleaved(
            {
                "raw": raw_sqlite(base / "raw2.db", BATCH),
                "floor": schema_floor(store_path, base / "floor2.db", BATCH),
                "signoff": batched,
                "public": public_batched,
            },
            args.rounds,
            args.seconds,
        )

        service = ReviewService(store)
        service.enroll_reviewer("human:bench@example.org", roles=["ops"])
        counter = [0]

        def decision() -> int:
            counter[0] += 1
            n = counter[0]
            call = CallSpec(
                app="bench",
                user="u",
                session=f"s{n}",
                invocation=f"i{n}",
                confirmation_id=f"c{n}",
                call_id=f"k{n}",
                tool="transfer",
                args={"amount": n, "to": "bob"},
            )
            front = service.open_frontier([call], actor="agent:bench")
            service.approve(front.reviews[0].id, reviewer="human:bench@example.org")
            return 1

        decisions = rate(decision, args.seconds * 2)
        store.close()

        verified: dict[str, object] = {}
        if args.entries > 0:
            big = build_log(base / "big.db", args.entries)
            child = subprocess.run(
                [sys.executable, __file__, "--verify-child", str(big)], capture_output=True, text=True, check=True
            )
            found = json.loads(child.stdout)
            verified = {
                "verify_entries": found["size"],
                "verify_ok": found["ok"],
                "verify_entries_per_s": round(found["size"] / found["seconds"], 1),
                "raw_sha256_entries_per_s": round(sha256_rate(big), 1),
                "verify_peak_rss_mb": round(found["peak_rss_mb"], 1),
            }

    result = {
        "single_appends_per_s": round(singles["signoff"], 1),
        "raw_sqlite_durable_commits_per_s": round(singles["raw"], 1),
        "single_ratio": round(singles["signoff"] / singles["raw"], 3),
        "same_schema_single_rows_per_s": round(singles["floor"], 1),
        "same_schema_single_ratio": round(singles["floor"] / singles["raw"], 3),
        "public_key_enrolment_appends_per_s": round(singles["public"], 1),
        "batch_size": BATCH,
        "batched_appends_per_s": round(batches["signoff"], 1),
        "raw_sqlite_batched_rows_per_s": round(batches["raw"], 1),
        "batched_ratio": round(batches["signoff"] / batches["raw"], 3),
        "same_schema_batched_rows_per_s": round(batches["floor"], 1),
        "same_schema_batched_ratio": round(batches["floor"] / batches["raw"], 3),
        "public_batched_key_enrolments_per_s": round(batches["public"], 1),
        "decisions_per_s_open_plus_approve": round(decisions, 1),
        **verified,
        "targets": {"single_ratio": ">= 0.5", "batched_ratio": ">= 0.5", "verify_peak_rss_mb": "< 150"},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
