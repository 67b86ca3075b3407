"""How the store grows per review, and what ``audit verify --incremental`` costs on a large log (issue 24 §6).

    python tests/benchmarks/growth_bench.py [--reviews 2000] [--big 1000000] [--new 1000] [--pg URL] [--quick]

Prints one JSON object (progress goes to stderr).

* **bytes per review**, on SQLite and PostgreSQL: a log as ``audit init`` makes it (signed decisions,
  sealed values) with one reviewer; each review goes through the real service as an app's does: the
  agent opens it (``open_frontier``), the reviewer's client signs the approval, the resumer claims the
  resume (``run.resumed``) and records what ran (``tool.executed``, with a result preview). The store's
  size is taken after ``--reviews`` reviews and again after as many more, so the figure is the growth
  of a store already in use, and the two halves show whether it is linear. Beside it, the **record's own
  bytes** (the canonical entries, as ``audit export`` writes them): what no layout can go below. Sizes
  are per table and index (SQLite's ``dbstat``, after a WAL checkpoint; PostgreSQL's
  ``pg_total_relation_size`` after ``VACUUM``), so the JSON shows where the bytes go. The size of a
  1M-review store is that growth times 1M plus the empty store: extrapolated, and labelled so.
* **verify --incremental**: a SQLite log of ``--big`` entries (built as ``audit_bench.py`` builds its
  verify logs), a checkpoint the auditor kept at its end, then ``--new`` entries written through the
  service; ``audit verify --against CP --incremental`` must be O(new). Beside it: the same on a log of
  10,000 entries (the same new entries; O(new) means the same time), and a full verify's per-entry rate
  times ``--new`` (what checking just the new entries costs at the full verify's pace).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from audit_bench import PG_DEFAULT, REVIEWER, build_log, pg_schema, say  # noqa: E402

from signoff.audit.decision import approve_body, sign_decision  # noqa: E402
from signoff.audit.keys import Signer, read_private_key  # noqa: E402
from signoff.audit.reviews import CallSpec, ReviewService  # noqa: E402
from signoff.audit.store import Store, default_admin_key, open_store  # noqa: E402

AGENT = "agent:bench"


class Reviews:
    """A store and the four steps of a review, through the real service."""

    def __init__(self, url: str, key: Path, *, signed: bool = True) -> None:
        self.store = open_store(url)
        self.store.init_log(key, signed_decisions=signed)
        admin = read_private_key(default_admin_key(key))
        self.person = Signer.generate() if signed else None
        self.service = ReviewService(self.store)
        public = self.person.public if self.person else None
        self.service.enroll_reviewer(REVIEWER, roles=["ops"], tools=["*"], key=public, admin=admin)
        self.n = 0

    def one(self) -> None:
        self.n += 1
        done_review(self.service, self.n, self.person)


def done_review(service: ReviewService, n: int, person: Signer | None, tag: str = "") -> None:
    """One review through the real service as an app's goes: opened by the agent, approved (signed by
    ``person``'s key where the log requires it), resumed, and run with a result. ``tag`` keeps its call
    ids apart from other reviews of the log."""
    args = {"amount": n % 1000, "to": f"acct-{n:06d}", "memo": "monthly rent, see ticket #4411"}
    call = CallSpec(
        app="bank", user="u1", session=f"{tag}s{n}", invocation=f"{tag}e-{n}", confirmation_id=f"{tag}c{n}",
        call_id=f"{tag}k{n}", tool="transfer", args=args, hint="Transfer the rent?", agent="teller",
        context={"user": "pay the rent"},
    )  # fmt: skip
    frontier = service.open_frontier([call], actor=AGENT)
    review = frontier.reviews[0]
    body = approve_body(review.id, review.args_digest)
    sig = sign_decision(person, service.store.log_id, "review.approved", REVIEWER, body) if person else None
    service.approve(review.id, reviewer=REVIEWER, sig=sig)
    service.claim_resume(frontier.id, actor=AGENT)
    service.record_execution(review.id, actor=AGENT, args=args, result={"ok": True, "ref": f"tx-{n}"})


def record_bytes(store: Store) -> int:
    """The canonical entries' own bytes: the record, as ``audit export`` holds it."""
    return sum(len(raw) for _seq, _hash, raw in store.iter_raw(0, store.size()))


def sqlite_sizes(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = con.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    return {str(name): int(size) for name, size in rows}


def pg_sizes(url: str) -> dict[str, int]:
    import psycopg

    base, _, options = url.partition("?options=-csearch_path%3D")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{options}"')
        conn.execute("VACUUM")
        rows = conn.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (options,),
        ).fetchall()
    return {str(name): int(size) for name, size in rows}


def growth(url: str, key: Path, sizes: Any, reviews: int) -> dict[str, Any]:
    """Bytes per review over two equal halves of ``reviews`` reviews each, after the first."""
    log = Reviews(url, key)
    empty = sum(sizes().values())
    points = []
    for _half in range(3):
        start = time.perf_counter()
        for _ in range(reviews):
            log.one()
        say(f"  {log.n} reviews ({time.perf_counter() - start:.1f} s)")
        points.append((log.store.size(), sizes(), record_bytes(log.store)))
    (e0, s0, r0), (e1, s1, r1), (e2, s2, r2) = points
    first = (sum(s1.values()) - sum(s0.values())) / reviews
    second = (sum(s2.values()) - sum(s1.values())) / reviews
    per_table = {name: round((s2.get(name, 0) - s0.get(name, 0)) / (2 * reviews)) for name in sorted(s2)}
    per_review = (sum(s2.values()) - sum(s0.values())) / (2 * reviews)
    log.store.close()
    return {
        "bytes_per_review": round(per_review),
        "bytes_per_review_halves": [round(first), round(second)],
        "entries_per_review": (e2 - e0) / (2 * reviews),
        "record_bytes_per_review": round((r2 - r0) / (2 * reviews)),
        "store_over_record": round(per_review / ((r2 - r0) / (2 * reviews)), 2),
        "per_table_bytes_per_review": {k: v for k, v in per_table.items() if v},
        "empty_store_bytes": empty,
        "store_of_1m_reviews_gb_extrapolated": round((empty + per_review * 1_000_000) / 1e9, 2),
    }


def incremental(path: Path, entries: int, new: int) -> dict[str, Any]:
    """Build a log of ``entries``, keep a checkpoint at its end, write ``new`` entries, verify incrementally."""
    from signoff.audit.verify import verify_store

    start = time.perf_counter()
    build_log(path, entries, signed=False)
    built = time.perf_counter() - start
    store = open_store(f"sqlite:///{path}")
    kept = store.checkpoint(path.with_suffix(".pem"))
    service = ReviewService(store)
    n = 0
    while store.size() < kept.size + new:  # each review: opened, approved, resumed, executed
        n += 1
        done_review(service, n, None, tag="new")
    times = []
    for _ in range(5):
        begin = time.perf_counter()
        report = verify_store(store, against=kept, incremental=True, jobs=1)
        times.append(time.perf_counter() - begin)
        if not report.ok:
            raise RuntimeError(f"incremental verify failed: {report.failure}")
    checked = report.size - report.checked_from
    store.close()
    return {
        "log_entries": kept.size,
        "new_entries": checked,
        "build_seconds": round(built, 1),
        "incremental_ms_median": round(sorted(times)[2] * 1000, 1),
        "incremental_ms_min": round(min(times) * 1000, 1),
    }


def full_rate(path: Path) -> float:
    """A full one-core verify's entries/s on the same kind of log (the pace of checking each entry)."""
    from signoff.audit.verify import verify_store

    store = open_store(f"sqlite:///{path}")
    begin = time.perf_counter()
    report = verify_store(store, jobs=1)
    elapsed = time.perf_counter() - begin
    store.close()
    if not report.ok:
        raise RuntimeError(f"full verify failed: {report.failure}")
    return report.size / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reviews", type=int, default=2000, help="reviews per measured half")
    parser.add_argument("--big", type=int, default=1_000_000, help="entries of the large log (verify --incremental)")
    parser.add_argument("--new", type=int, default=1000, help="entries written after the kept checkpoint")
    parser.add_argument("--pg", default=PG_DEFAULT, help="PostgreSQL for the same figures ('' to skip)")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.reviews, args.big, args.new = 100, 20_000, 200
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        say(f"growth, SQLite: {args.reviews} reviews per half")
        path = where / "growth.db"
        out["sqlite"] = growth(f"sqlite:///{path}", where / "growth.pem", lambda: sqlite_sizes(path), args.reviews)
        schemas = pg_schema(args.pg) if args.pg else None
        if schemas is not None:
            say(f"growth, PostgreSQL: {args.reviews} reviews per half")
            url = next(schemas)
            out["postgresql"] = growth(url, where / "growth-pg.pem", lambda: pg_sizes(url), args.reviews)
            schemas.close()
        small = 10_000
        say(f"verify --incremental: {args.new} new entries on {small:,} and on {args.big:,}")
        out["incremental_small"] = incremental(where / "small.db", small, args.new)
        out["incremental_big"] = incremental(where / "big.db", args.big, args.new)
        out["big_log_file_bytes"] = (where / "big.db").stat().st_size
        rate = full_rate(where / "small.db")
        out["full_verify_entries_per_s"] = round(rate)
        out["full_verify_ms_for_the_new_entries"] = round(args.new / rate * 1000, 1)
        big, little = out["incremental_big"]["incremental_ms_median"], out["incremental_small"]["incremental_ms_median"]
        out["incremental_big_over_small"] = round(big / little, 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
