"""What the gate's proof costs before a tool runs (issue 8), printed as JSON.

``prove_decision`` reads the review's own entries, checks their hashes and links, replays the trust
entries of the decider and the admins, and checks the person's signature. Measured per call on a
SQLite log of each size below, cold (a fresh ``TrustCache``: the first proof in a process) and warm
(the bridge's shared cache: every later one), beside what it cannot go below in the same run: one
Ed25519 check and the one indexed read of the review's entries; and the same for decisions a delegate
made for the reviewer (SPEC.md rule 2b), whose proof also reads and proves the delegation.

    .venv/bin/python tests/benchmarks/gate_bench.py [--sizes 1000 20000] [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from signoff.audit import CallSpec, ReviewService, open_store  # noqa: E402
from signoff.audit.decided import TrustCache, prove_decision  # noqa: E402
from signoff.audit.keys import Signer, read_private_key, verify_signature  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402
from signoff.audit.trust import statement  # noqa: E402

REVIEWER = "human:alice@example.org"
DELEGATE = "human:bob@example.org"
_BY_SUBJECT = "SELECT seq, hash, raw FROM signoff_entry WHERE subject = ? AND log = ? ORDER BY seq"


def _call(n: int) -> CallSpec:
    return CallSpec(
        app="bench", user="u", session=f"s{n}", invocation=f"i{n}", confirmation_id=f"c{n}",
        call_id=f"call{n}", tool="transfer", args={"amount": n, "to": "acct"},
    )  # fmt: skip


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
    }


def measure(size: int, calls: int, tmp: Path) -> dict[str, Any]:
    """A log of about ``size`` entries (reviews opened and approved with a signature); proofs of the newest."""
    store = open_store(f"sqlite:///{tmp / f'gate-{size}.db'}")
    key = tmp / f"gate-{size}.pem"
    store.init_log(key)
    admin = read_private_key(default_admin_key(key))
    svc = ReviewService(store)
    alice = Signer.generate()
    svc.enroll_reviewer(REVIEWER, roles=["teller"], tools=["*"], key=alice.public, admin=admin)
    bob = Signer.generate()  # an observer, who decides the newest calls for alice under her delegation
    svc.enroll_reviewer(DELEGATE, roles=["observer"], tools=["*"], key=bob.public, admin=admin)
    svc.delegate(REVIEWER, DELEGATE, until="2999-01-01T00:00:00.000000Z", roles=["teller"], signer=alice)
    reviews = []
    for n in range(size // 2):
        review = svc.open_frontier([_call(n)], actor="agent:bench").reviews[0]
        if n >= size // 2 - calls:
            svc.approve(review.id, reviewer=DELEGATE, signer=bob, acting_for=REVIEWER)
        else:
            svc.approve(review.id, reviewer=REVIEWER, signer=alice)
        reviews.append(review.id)
    newest, delegated = reviews[-2 * calls : -calls], reviews[-calls:]
    pinned = store.public_key

    def proofs(ids: list[str]) -> tuple[list[float], list[float]]:
        cold, warm = [], []
        shared = TrustCache(log_key=pinned)
        for review_id in ids:
            start = time.perf_counter()
            prove_decision(store, review_id, cache=TrustCache(log_key=pinned))
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            prove_decision(store, review_id, cache=shared)
            warm.append(time.perf_counter() - start)
        return cold, warm

    cold, warm = proofs(newest)
    lent_cold, lent_warm = proofs(delegated)

    reads = []
    for review_id in newest:
        start = time.perf_counter()
        store.read_rows(_BY_SUBJECT, review_id, store.log_id)
        reads.append(time.perf_counter() - start)
    entry = store.entry(store.size() - 1)  # the newest approval (bob's, for alice)
    payload = statement(store.rules, entry.kind, entry.actor, entry.body)
    checks = []
    for _ in range(calls):
        start = time.perf_counter()
        assert verify_signature(bob.public, entry.sig or {}, payload)
        checks.append(time.perf_counter() - start)
    out = {
        "entries": store.size(),
        "proof_cold": _percentiles(cold),
        "proof_warm": _percentiles(warm),
        # a delegate's decision (rule 2b): the delegation's entries and the delegator's are proven too
        "proof_delegated_cold": _percentiles(lent_cold),
        "proof_delegated_warm": _percentiles(lent_warm),
        "floor_one_indexed_read": _percentiles(reads),
        "floor_one_ed25519_check": _percentiles(checks),
    }
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 20_000])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = {str(size): measure(size, args.calls, Path(tmp)) for size in args.sizes}
    print(json.dumps({"unit": "ms per prove_decision call", "by_log_size": found}, indent=2))


if __name__ == "__main__":
    main()
