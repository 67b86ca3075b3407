"""Values beside the log (issue 20), measured on SQLite against references taken in the same run.

    python tests/benchmarks/values_bench.py [--seconds 6] [--reviews 2000] [--quick]

Prints one JSON object (progress on stderr).

* **decisions**: durable signed decisions/s (a review opened with personal args, then approved by a
  script that signs ahead with ``decision.prepare_approve``), on a sealed log against a log that keeps
  values in its entries, interleaved in rounds of one second; and raw durable SQLite commits/s (one
  small row per commit, ``synchronous=FULL``), the floor the store's commits stand on.
* **verify**: ``verify_store`` entries/s of a sealed log of ``--reviews`` done reviews (opened, approved,
  resumed, run, replied), with none of its values erased and with 50% of its reviews erased (a copy
  of the same file), beside the same reviews on a log that keeps values in its entries.
* **space**: store bytes per done review (the SQLite file after a WAL checkpoint, divided by the
  reviews), sealed and in entries, and per million reviews.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from signoff.audit import ReviewService, Signer, decision, erasure, open_store  # noqa: E402
from signoff.audit.decided import prove_decision  # noqa: E402
from signoff.audit.keys import read_private_key  # noqa: E402
from signoff.audit.reviews import CallSpec  # noqa: E402
from signoff.audit.verify import verify_store  # noqa: E402

ALICE = "human:alice@example.org"


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Log:
    def __init__(self, where: Path, sealed: bool) -> None:
        self.path = where / ("sealed.db" if sealed else "entries.db")
        self.store = open_store(f"sqlite:///{self.path}")
        self.store.init_log(where / f"{self.path.stem}.pem", sealed_values=sealed)
        self.admin = read_private_key(where / f"{self.path.stem}.admin.pem")
        self.svc = ReviewService(self.store)
        self.alice = Signer.generate()
        self.svc.enroll_reviewer(ALICE, roles=["finance"], tools=["*"], key=self.alice.public, admin=self.admin)
        self.n = 0

    def decide(self, *, run: bool = False) -> str:
        self.n += 1
        call = CallSpec(
            app="bank", user=f"cust-{self.n % 50}", session=f"s-{self.n}", invocation="i",
            confirmation_id=f"c-{self.n}",
            call_id=f"k-{self.n}", tool="transfer_money",
            args={"to": f"Customer {self.n}", "iban": "DE89370400440532013000", "amount": self.n, "memo": "invoice 7"},
            hint="Send the money?",
        )  # fmt: skip
        front = self.svc.open_frontier([call], actor="agent:bank")
        review = self.svc.get(front.reviews[0].id)
        prepared = decision.prepare_approve(review, "ok")
        self.svc.approve(
            review.id, reviewer=ALICE, rationale="ok", sig=prepared.sign(self.alice, self.store.log_id, ALICE)
        )
        if run:
            self.svc.claim_resume(front.id, actor="agent:bank")
            args = prove_decision(self.store, review.id).review.final_args or {}
            self.svc.record_execution(review.id, actor="agent:bank", args=args, result={"status": "sent"})
            self.svc.record_reply(front.id, actor="agent:bank", text=f"Sent {self.n} to Customer {self.n}.")
        return review.id


def raw_commits(where: Path, seconds: float) -> float:
    conn = sqlite3.connect(where / "raw.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", (b"x" * 300,))
        conn.execute("COMMIT")
        count += 1
    conn.close()
    return count / (time.perf_counter() - start)


def decisions(where: Path, seconds: float) -> dict[str, Any]:
    logs = {"sealed": Log(where / "d1", True), "in_entries": Log(where / "d2", False)}
    done = {name: 0 for name in logs}
    spent = {name: 0.0 for name in logs}
    rounds = max(2, int(seconds))
    for _ in range(rounds):
        for name, log in logs.items():
            start = time.perf_counter()
            while time.perf_counter() - start < seconds / rounds:
                log.decide()
                done[name] += 1
            spent[name] += time.perf_counter() - start
    rates = {name: round(done[name] / spent[name], 1) for name in logs}
    return {
        "decisions_per_s": rates,
        "sealed_vs_in_entries": round(rates["sealed"] / rates["in_entries"], 3),
        "raw_durable_commits_per_s": round(raw_commits(where, 2.0), 1),
    }


def _size(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _verify_rate(path: Path, key: Path) -> tuple[float, float]:
    store = open_store(f"sqlite:///{path}")
    start = time.perf_counter()
    report = verify_store(store, jobs=1)
    took = time.perf_counter() - start
    assert report.ok, report.failure
    size = report.size
    store.close()
    return round(size / took, 1), round(took, 3)


def verify_and_space(where: Path, reviews: int) -> dict[str, Any]:
    sealed, plain = Log(where / "v1", True), Log(where / "v2", False)
    ids = []
    for index in range(reviews):
        ids.append(sealed.decide(run=True))
        plain.decide(run=True)
        if index and index % 500 == 0:
            progress(f"  {index} reviews")
    space = {"sealed": _size(sealed.path) / reviews, "in_entries": _size(plain.path) / reviews}
    sealed.store.close()
    erased_path = where / "v1" / "half-erased.db"
    shutil.copy(sealed.path, erased_path)
    half = open_store(f"sqlite:///{erased_path}")
    for review_id in ids[::2]:
        erasure.erase(half, review_id, reason="benchmark", admin=sealed.admin)
    half.close()
    plain.store.close()
    none_rate, none_s = _verify_rate(sealed.path, where)
    half_rate, half_s = _verify_rate(erased_path, where)
    plain_rate, plain_s = _verify_rate(plain.path, where)
    return {
        "verify_entries_per_s": {
            "sealed_none_erased": none_rate,
            "sealed_half_erased": half_rate,
            "in_entries": plain_rate,
        },
        "verify_seconds": {"sealed_none_erased": none_s, "sealed_half_erased": half_s, "in_entries": plain_s},
        "half_erased_vs_none": round(half_rate / none_rate, 3),
        "bytes_per_review": {name: round(value) for name, value in space.items()},
        "gib_per_million_reviews": {name: round(value * 1e6 / 2**30, 2) for name, value in space.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="a short run (seconds 2, reviews 200)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.reviews = 2.0, 200
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        for sub in ("d1", "d2", "v1", "v2"):
            (where / sub).mkdir()
        progress("decisions, sealed against in entries …")
        out: dict[str, Any] = {"decisions": decisions(where, args.seconds)}
        progress(f"verify and space, {args.reviews} done reviews …")
        out["verify"] = verify_and_space(where, args.reviews)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
