"""Durable signed decisions from 16 clients spread over several processes (issue 24 §3); prints JSON.

    .venv/bin/python tests/benchmarks/decisions_processes.py [--pg postgresql://...] [--processes 2 4]
                                                             [--seconds 3] [--rounds 3]

``audit_bench.py`` measures 16 clients as 16 threads of one process: a decision's Python work (4 ms of
CPU on PostgreSQL) then runs one at a time under that process's GIL. Here the same decisions
(``audit_bench.decision_maker``: a review opened, then approved with the reviewer's own Ed25519
signature) come from ``--processes`` processes of 16/N threads each, all on one log, started together at
one wall-clock instant; the rate is the sum of theirs. Beside it, in the same run: SQLite's 16 clients in
one process (the target: PostgreSQL over several processes reaches it) and SQLite over the same
processes; and the machine's cores, which the clients share with the PostgreSQL server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from audit_bench import (  # noqa: E402
    CLIENTS,
    PG_DEFAULT,
    concurrent_rate,
    decision_maker,
    new_store,
    pg_schema,
    say,
    signoff_decisions,
)

from signoff.audit.keys import read_private_key, write_private_key  # noqa: E402
from signoff.audit.reviews import ReviewService  # noqa: E402
from signoff.audit.store import open_store  # noqa: E402

START_AFTER = 3.0  # seconds between spawning the processes and their common start: imports and a warm decision


def head_held(store: Any) -> dict[str, float]:
    """On PostgreSQL, time each write transaction holds the log's head: from its ``SELECT … FOR UPDATE``
    returning to its commit returning (every append of the log waits for that lock). Returns the live
    totals: ``held_s`` and ``transactions``."""
    import psycopg

    totals = {"held_s": 0.0, "transactions": 0.0}
    since: dict[int, float] = {}
    lock_sql = store._sql["lock"]
    plain_execute = psycopg.Cursor.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        found = plain_execute(self, query, *args, **kwargs)
        if query == lock_sql:
            since[id(self.connection)] = time.perf_counter()
        return found

    dialect = store.write_engine.dialect
    plain_commit = dialect.do_commit

    def commit(dbapi_connection: Any) -> None:
        plain_commit(dbapi_connection)
        raw = getattr(dbapi_connection, "dbapi_connection", dbapi_connection)  # (SQLAlchemy's pool wraps it)
        began = since.pop(id(raw), None)
        if began is not None:
            totals["held_s"] += time.perf_counter() - began
            totals["transactions"] += 1

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    dialect.do_commit = commit  # type: ignore[method-assign]
    return totals


def child(url: str, key: str, clients: int, seconds: float, start_at: float, tag: str) -> None:
    """One process's clients: decisions/s over ``seconds`` from ``start_at`` (wall clock), and on
    PostgreSQL how long its transactions held the log's head meanwhile, as JSON."""
    store = open_store(url)
    try:
        service = ReviewService(store)
        one = decision_maker(service, read_private_key(key), tag)
        one(-1)  # connections, caches
        held = head_held(store) if store.backend == "postgresql" else None
        time.sleep(max(0.0, start_at - time.time()))
        if held is not None:
            held["held_s"] = held["transactions"] = 0.0
        per_s = concurrent_rate(one, clients, seconds)
        print(json.dumps({"per_s": per_s, **(held or {})}), flush=True)
    finally:
        store.close()


def over_processes(url: str, key: Path, processes: int, seconds: float, tag: str) -> dict[str, float]:
    """``CLIENTS`` clients over ``processes`` processes, on the log at ``url``: their summed decisions/s,
    and (PostgreSQL) the share of the time the log's head was held, and for how long per decision."""
    start_at = time.time() + START_AFTER
    each = CLIENTS // processes
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", url, str(key), str(each), str(seconds), repr(start_at), f"{tag}p{i}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    found = []
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 120)
        if proc.returncode != 0:
            raise SystemExit(f"a decisions process exited with {proc.returncode}")
        found.append(json.loads(out.splitlines()[-1]))
    per_s = sum(f["per_s"] for f in found)
    result = {"per_s": per_s}
    if "held_s" in found[0]:
        held = sum(f["held_s"] for f in found)
        result["head_held_share"] = held / seconds
        result["head_held_ms_per_decision"] = 1000 * held / (per_s * seconds)
    return result


def measure(url: str, tmp: Path, name: str, counts: list[int], seconds: float, rounds: int) -> dict[str, Any]:
    """On a new log at ``url``: the median rate over ``rounds`` of 16 clients over each count of processes."""
    store, _service, _admin, person = new_store(url, tmp / f"{name}.pem")
    store.close()
    key = write_private_key(person, tmp / f"{name}-reviewer.pem")
    found: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    for r in range(rounds):
        for n in counts:
            found[n].append(over_processes(url, key, n, seconds, f"{name}r{r}n{n}"))
    out: dict[str, Any] = {}
    for n, runs in found.items():
        out[f"clients_{CLIENTS}_over_{n}_processes_per_s"] = round(statistics.median(x["per_s"] for x in runs))
        if "head_held_share" in runs[0]:
            out[f"over_{n}_processes_head_held_share"] = round(statistics.median(x["head_held_share"] for x in runs), 2)
            out[f"over_{n}_processes_head_held_ms_per_decision"] = round(
                statistics.median(x["head_held_ms_per_decision"] for x in runs), 2
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg", default=PG_DEFAULT)
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, key, clients, seconds, start_at, tag = args.child
        child(url, key, int(clients), float(seconds), float(start_at), tag)
        return
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as name:
        tmp = Path(name)
        say("SQLite: 16 clients in one process ...")
        one_process = signoff_decisions(f"sqlite:///{tmp / 'one.db'}", tmp / "one.pem", args.seconds, args.rounds)
        say("SQLite: 16 clients over several processes ...")
        sqlite = measure(f"sqlite:///{tmp / 'many.db'}", tmp, "sqlite", args.processes, args.seconds, args.rounds)
        result: dict[str, Any] = {
            "cores": len(os.sched_getaffinity(0)),
            "sqlite": {f"clients_{CLIENTS}_one_process_per_s": round(one_process[str(CLIENTS)]), **sqlite},
        }
        schemas = pg_schema(args.pg) if args.pg else None
        if schemas is None:
            result["postgresql"] = f"skipped: not reachable at {args.pg}"
        else:
            say("PostgreSQL: 16 clients in one process, and over several ...")
            url = next(schemas)
            try:
                pg_one = signoff_decisions(url, tmp / "pg-one.pem", args.seconds, args.rounds)
            finally:
                schemas.close()
            many = pg_schema(args.pg)
            assert many is not None
            try:
                pg = measure(next(many), tmp, "pg", args.processes, args.seconds, args.rounds)
            finally:
                many.close()
            result["postgresql"] = {f"clients_{CLIENTS}_one_process_per_s": round(pg_one[str(CLIENTS)]), **pg}
            best = max(v for k, v in pg.items() if k.endswith("processes_per_s"))
            result["postgresql_best_vs_sqlite_one_process"] = round(best / one_process[str(CLIENTS)], 2)
        result["target"] = f"PostgreSQL, {CLIENTS} clients over several processes >= SQLite's {CLIENTS}-client rate"
        result["machine"] = {"loadavg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
