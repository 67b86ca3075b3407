"""Witnessing, measured against references taken in the same run (issue 18).

    python tests/benchmarks/witness_bench.py [--entries 1000000] [--rounds 30] [--seconds 8] [--quick]

Prints one JSON object (progress on stderr). Three real witness processes (``python -m
signoff.audit.cli_witness serve``) run on 127.0.0.1 throughout.

* **cosigned**: checkpoint → cosigned by the 3 witnesses (``Publisher.publish_once``: the checkpoint
  transaction, three ``add-checkpoint`` round trips with their consistency proofs, the cosignatures
  recorded), p50 / p95, after one new entry each round.
* **witness rate**: ``add-checkpoint`` requests the witness handles per second, in process (the parse,
  the checks, the cosignature and the state write) and over HTTP with keep-alive, beside the pure
  crypto one request needs: one Ed25519 signature check of the log's note, one Ed25519 cosignature, and
  one RFC 6962 consistency proof check.
* **verify --witness**: ``audit verify`` of the same store with and without ``--witness`` (offline, and
  online: asking the three witnesses), seconds.
* **tiles**: ``audit tiles`` of a log of ``--entries`` entries (fresh directory), beside writing the same
  bytes (the same files and sizes) with no hashing and no store reads, seconds.
* **decisions with a publisher**: durable signed decisions/s (a review opened, then approved) for
  ``--seconds``, with a publisher checkpointing and pushing to the 3 witnesses every second in a thread
  of the same process, against without, interleaved. Target: no more than 5% fewer.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from signoff.audit import ReviewService, Signer, open_store, witnessing  # noqa: E402
from signoff.audit.c2sp import log_vkey  # noqa: E402
from signoff.audit.keys import read_private_key  # noqa: E402
from signoff.audit.publisher import Publisher  # noqa: E402
from signoff.audit.reviews import CallSpec  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402

NAMES = ("bench.witness/w1", "bench.witness/w2", "bench.witness/w3")


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class WitnessProcs:
    def __init__(self, tmp: Path, vkey: str) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.vkeys: list[str] = []
        self.urls: list[str] = []
        for name in NAMES:
            key = tmp / f"{name.rsplit('/', 1)[1]}.pem"
            keygen = [sys.executable, "-m", "signoff.audit.cli_witness", "keygen", "--name", name, "--out", str(key)]
            subprocess.run(keygen, check=True, capture_output=True, cwd=ROOT)
            self.vkeys.append(Path(f"{key}.vkey").read_text().strip())
            argv = [sys.executable, "-m", "signoff.audit.cli_witness", "serve", "--key", str(key), "--port", "0",
                    "--store", str(tmp / f"{key.stem}.db"), "--log", vkey, "--quiet"]  # fmt: skip
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert proc.stdout is not None
            found = re.search(r"listening on (http://\S+)", proc.stdout.readline().decode())
            assert found
            self.procs.append(proc)
            self.urls.append(found.group(1))

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait(10)


def fresh_log(tmp: Path, name: str) -> tuple[Any, Signer, Signer, Signer]:
    store = open_store(f"sqlite:///{tmp / name}.db")
    store.init_log(tmp / f"{name}.key")
    log_key = read_private_key(tmp / f"{name}.key")
    admin = read_private_key(default_admin_key(tmp / f"{name}.key"))
    person = Signer.generate()
    ReviewService(store).enroll_reviewer("human:b@x.org", roles=["ops"], tools=["*"], key=person.public, admin=admin)
    return store, log_key, admin, person


def decision(svc: ReviewService, person: Signer, n: int) -> None:
    call = CallSpec(app="a", user="u", session=f"s{n}", invocation=f"i{n}", confirmation_id=f"c{n}",
                    call_id=f"k{n}", tool="pay", args={"n": n})  # fmt: skip
    review = svc.open_frontier([call], actor="agent:bench").reviews[0]
    svc.approve(review.id, reviewer="human:b@x.org", signer=person)


def bench_cosigned(tmp: Path, rounds: int) -> dict[str, Any]:
    store, log_key, admin, person = fresh_log(tmp, "cosign")
    (tmp / "w-cosign").mkdir()
    procs = WitnessProcs(tmp / "w-cosign", log_vkey(store.rules.origin, store.public_key))
    try:
        for url, vkey in zip(procs.urls, procs.vkeys, strict=True):
            witnessing.add_witness(store, url, vkey, admin=admin)
        witnessing.set_quorum(store, 3, admin=admin)
        publisher = Publisher(store, log_key)
        svc = ReviewService(store)
        times = []
        for n in range(rounds + 2):
            decision(svc, person, n)
            t0 = time.perf_counter()
            report = publisher.publish_once()
            elapsed = time.perf_counter() - t0
            assert [p.outcome for p in report.pushed] == ["cosigned"] * 3, report.to_json()
            if n >= 2:  # the first two pay for connections and the witnesses' first state rows
                times.append(elapsed * 1000)
        publisher.close()
        verify = bench_verify_witness(store, procs)
    finally:
        procs.close()
        store.close()
    return {"cosigned_ms": {"p50": round(pct(times, 0.5), 2), "p95": round(pct(times, 0.95), 2), "n": len(times)},
            "verify_witness": verify}  # fmt: skip


def bench_verify_witness(store: Any, procs: WitnessProcs) -> dict[str, Any]:
    from signoff.audit.tlog_cosignature import CosignatureVerifier
    from signoff.audit.verify import verify_store

    verifiers = [CosignatureVerifier.from_vkey(v) for v in procs.vkeys]
    plain, offline, online = [], [], []
    for _ in range(5):
        t0 = time.perf_counter()
        assert verify_store(store).ok
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert verify_store(store, witnesses=verifiers, quorum=3, online=False).ok
        offline.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert verify_store(store, witnesses=verifiers, quorum=3).ok
        online.append(time.perf_counter() - t0)
    med = statistics.median
    return {"entries": store.size(), "plain_s": round(med(plain), 4), "witness_offline_s": round(med(offline), 4),
            "witness_online_s": round(med(online), 4),
            "overhead_offline_ms": round((med(offline) - med(plain)) * 1000, 2),
            "overhead_online_ms": round((med(online) - med(plain)) * 1000, 2)}  # fmt: skip


def bench_witness_rate(tmp: Path, n: int) -> dict[str, Any]:
    """The witness's own work per add-checkpoint, against the crypto it cannot avoid."""
    import httpx
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from signoff.audit.merkle import consistency_proof, leaf_hash, root_from_leaves, verify_consistency
    from signoff.audit.signed_note import Ed25519Signer
    from signoff.audit.tlog_checkpoint import Checkpoint, sign_checkpoint
    from signoff.audit.tlog_cosignature import Cosigner
    from signoff.audit.tlog_witness import format_request
    from signoff.audit.vkeys import verifier_from_vkey
    from signoff.audit.witness import Witness, make_server, open_state

    origin = "bench.example/log"
    log_signer = Ed25519Signer(origin, Ed25519PrivateKey.generate())
    leaves = [leaf_hash(str(i).encode()) for i in range(n + 2)]
    bodies = []
    for size in range(1, n + 2):
        note = sign_checkpoint(Checkpoint(origin, size, root_from_leaves(leaves[:size])), [log_signer])
        proof = consistency_proof(leaves, size - 1, size) if size > 1 else []
        bodies.append((size, note, proof))

    def make(path: str) -> Witness:
        return Witness(Cosigner("bench.witness/w", Ed25519PrivateKey.generate()),
                       {origin: [verifier_from_vkey(log_signer.vkey())]}, open_state(path))  # fmt: skip

    witness = make(str(tmp / "rate1.db"))
    t0 = time.perf_counter()
    for size, note, proof in bodies:
        assert witness.add_checkpoint(format_request(note, size - 1, proof)).status == 200
    in_process = n / (time.perf_counter() - t0)
    server = make_server(make(str(tmp / "rate2.db")), port=0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with httpx.Client(base_url=f"http://127.0.0.1:{server.server_port}") as client:
        t0 = time.perf_counter()
        for size, note, proof in bodies:
            assert client.post("/add-checkpoint", content=format_request(note, size - 1, proof)).status_code == 200
        over_http = n / (time.perf_counter() - t0)
    server.shutdown()
    # The floor: one note signature check, one cosignature, one consistency proof check per request.
    verifier = verifier_from_vkey(log_signer.vkey())
    cosigner = Cosigner("bench.witness/floor", Ed25519PrivateKey.generate())
    roots = [root_from_leaves(leaves[:s]) for s in range(1, n + 2)]
    t0 = time.perf_counter()
    for i, (size, note, proof) in enumerate(bodies):
        text, _b, line = note.partition(b"\n\n")
        verifier.verify(text + b"\n", base64.b64decode(line.split(b" ")[2])[4:])
        cosigner.sign_at(text + b"\n", 1_800_000_000)
        if size > 1:
            verify_consistency(size - 1, size, roots[i - 1], roots[i], proof)
    floor = n / (time.perf_counter() - t0)
    # And the durable write each request must make before it answers: raw SQLite commits (WAL, FULL).
    import sqlite3

    db = sqlite3.connect(tmp / "raw.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (origin TEXT PRIMARY KEY, size INTEGER, note BLOB)")
    t0 = time.perf_counter()
    for size, note, _proof in bodies:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT OR REPLACE INTO t VALUES ('o', ?, ?)", (size, note))
        db.execute("COMMIT")
    commits = n / (time.perf_counter() - t0)
    db.close()
    return {"requests": n, "in_process_per_s": round(in_process), "http_keepalive_per_s": round(over_http),
            "crypto_floor_per_s": round(floor), "raw_durable_commits_per_s": round(commits),
            "in_process_of_commit_floor": round(in_process / commits, 3)}  # fmt: skip


def bench_tiles(tmp: Path, entries: int) -> dict[str, Any]:
    from audit_bench import build_log

    from signoff.audit import tlog_store

    path = build_log(tmp / "tiles.db", entries, signed=False)
    store = open_store(f"sqlite:///{path}")
    store.checkpoint(path.with_suffix(".pem"))
    t0 = time.perf_counter()
    report = tlog_store.write_store_tiles(store, tmp / "tiles", durable=False)
    tiles_s = time.perf_counter() - t0
    files = [(tmp / "tiles" / rel).stat().st_size for rel in report.written]
    t0 = time.perf_counter()  # the same files and sizes, written with no hashing and no store reads
    base = tmp / "plain"
    for i, size in enumerate(files):
        target = base / f"{i // 1000}" / f"{i}"
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            out.write(b"\0" * size)
    plain_s = time.perf_counter() - t0
    # Reading every entry back from the store once (what a tiles pass must at least do).
    t0 = time.perf_counter()
    for _row in store.iter_raw(0, store.size()):
        pass
    read_s = time.perf_counter() - t0
    store.close()
    return {"entries": entries, "files": len(files), "bytes": sum(files), "tiles_s": round(tiles_s, 2),
            "same_bytes_no_hashing_s": round(plain_s, 2), "one_store_read_s": round(read_s, 2),
            "ratio": round(tiles_s / max(plain_s, 1e-9), 2)}  # fmt: skip


def bench_decisions(tmp: Path, seconds: float, rounds: int) -> dict[str, Any]:
    store, log_key, admin, person = fresh_log(tmp, "rate")
    (tmp / "w-rate").mkdir()
    procs = WitnessProcs(tmp / "w-rate", log_vkey(store.rules.origin, store.public_key))
    try:
        for url, vkey in zip(procs.urls, procs.vkeys, strict=True):
            witnessing.add_witness(store, url, vkey, admin=admin)
        svc = ReviewService(store)
        counter = [0]
        rates: dict[str, list[float]] = {"without": [], "with_publisher": []}
        for _ in range(rounds):
            for mode in ("without", "with_publisher"):
                publisher = Publisher(store, log_key) if mode == "with_publisher" else None
                started = publisher.start(1.0) if publisher else None
                end = time.perf_counter() + seconds
                done = 0
                while time.perf_counter() < end:
                    counter[0] += 1
                    decision(svc, person, counter[0])
                    done += 1
                rates[mode].append(done / seconds)
                if publisher is not None and started is not None:
                    started[1].set()
                    started[0].join(10)
                    publisher.close()
        pushes = len(list(store.entries(kind="log.cosigned")))
    finally:
        procs.close()
        store.close()
    without, with_pub = statistics.median(rates["without"]), statistics.median(rates["with_publisher"])
    return {"seconds_each": seconds, "rounds": rounds, "without_per_s": round(without, 1),
            "with_publisher_per_s": round(with_pub, 1), "drop": round(1 - with_pub / without, 4),
            "cosignatures_recorded": pushes, "target": "drop <= 0.05", "met": with_pub >= 0.95 * without}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.entries, args.rounds, args.seconds = 20_000, 10, 2.0
    out: dict[str, Any] = {"machine": {"cpus": os.cpu_count()}}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        progress("checkpoint -> cosigned by 3 witnesses")
        out["cosigned"] = bench_cosigned(tmp, args.rounds)
        progress("the witness's add-checkpoint rate")
        out["witness_rate"] = bench_witness_rate(tmp, 300 if args.quick else 2000)
        progress(f"tiles of {args.entries} entries")
        out["tiles"] = bench_tiles(tmp, args.entries)
        progress("decisions with and without a publisher")
        out["decisions"] = bench_decisions(tmp, args.seconds, 2 if args.quick else 3)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
