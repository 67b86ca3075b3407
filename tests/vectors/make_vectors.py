"""Write the test vectors SPEC.md points to: a small log made by the real code, with every key derived
from a published seed, a fixed clock and counted ids, so each byte can be reproduced.

    python tests/vectors/make_vectors.py [DIR]     (default: tests/vectors)

It writes ``keys.json`` (the seeds: test keys, never use them for anything else), ``log.jsonl`` (the
entries' canonical bytes, one a line), ``hashes.json`` (leaf hashes and tree roots), ``checkpoint.txt``
(a C2SP checkpoint cosigned by two witnesses), ``inclusion.json``, ``consistency.json`` and
``receipt.tlog-proof``. ``tests/audit/test_vectors.py`` checks that the code reproduces every one of them
from the seeds; run this again only when the record changes, and say so in SPEC.md.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import secrets
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from signoff.audit import ReviewService, keys, open_store, witnessing  # noqa: E402
from signoff.audit.c2sp import log_vkey  # noqa: E402
from signoff.audit.merkle import consistency_proof, inclusion_proof, leaf_hash, root_from_leaves  # noqa: E402
from signoff.audit.proofs import build_tlog_proof  # noqa: E402
from signoff.audit.reviews import CallSpec  # noqa: E402
from signoff.audit.tlog_cosignature import Cosigner  # noqa: E402

ORIGIN = "vectors.signoff.example/log"
START = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
COSIGNED_AT = 1_796_126_400  # 2026-12-01T12:00:00Z
SEEDS = {
    "log": "signoff vectors: log key",
    "admin": "signoff vectors: admin key",
    "alice": "signoff vectors: human:alice@example.org",
    "witness.example.org/w1": "signoff vectors: witness w1",
    "witness.example.org/w2": "signoff vectors: witness w2",
}


def private(seed: str) -> Ed25519PrivateKey:
    """An Ed25519 key from a seed text: the private scalar seed is SHA-256 of the text (RFC 8032 §5.1.5)."""
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest())


def make(out: Path) -> None:
    counter = itertools.count()
    secrets.token_hex = lambda n=16: f"{next(counter):0{2 * n}x}"  # type: ignore[assignment]  # counted ids
    order = iter([keys.Signer(private(SEEDS["log"])), keys.Signer(private(SEEDS["admin"]))])
    keys.Signer.generate = classmethod(lambda cls: next(order))  # type: ignore[method-assign]  # the two init keys
    ticks = itertools.count()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/vectors.db", clock=lambda: START + timedelta(seconds=next(ticks)))
        store.init_log(Path(tmp) / "log.key", origin=ORIGIN)
        log_key = keys.read_private_key(Path(tmp) / "log.key")
        admin = keys.read_private_key(Path(tmp) / "log.admin.key")
        alice = keys.Signer(private(SEEDS["alice"]))
        svc = ReviewService(store)
        svc.enroll_reviewer(
            "human:alice@example.org", roles=["finance"], tools=["transfer*"], key=alice.public, admin=admin
        )
        names = ("witness.example.org/w1", "witness.example.org/w2")
        witnesses = {name: Cosigner(name, private(SEEDS[name])) for name in names}
        for name, cosigner in witnesses.items():
            witnessing.add_witness(store, f"https://{name}", cosigner.vkey(), admin=admin)
        witnessing.set_quorum(store, 2, admin=admin)
        call = CallSpec(
            app="bank", user="u1", session="s1", invocation="e-1", confirmation_id="adk-c1", call_id="call-1",
            tool="transfer", args={"amount": 100, "to": "Alice"},
        )  # fmt: skip
        review = svc.open_frontier([call], actor="agent:teller").reviews[0]
        edited = svc.edit(
            review.id, reviewer="human:alice@example.org", patch=[{"op": "replace", "path": "/amount", "value": 50}],
            rationale="half now", signer=alice,
        )  # fmt: skip
        svc.claim_resume(review.frontier, actor="agent:resumer")
        svc.record_execution(review.id, actor="agent:teller", args={"amount": 50, "to": "Alice"}, result={"sent": 50})
        old = store.checkpoint(log_key)
        svc.record_reply(review.frontier, actor="agent:resumer", text="Sent Alice 50.")
        point = store.checkpoint(log_key)
        text = point.note.split("\n\n", 1)[0].encode() + b"\n"
        lines = [c.cosign(text, COSIGNED_AT).line() for c in witnesses.values()]
        witnessing.record_cosignatures(store, point.size, lines, log_key)
        point = store.latest_checkpoint()
        assert point is not None
        raw = [r for _s, _h, r in store.iter_raw()]
        leaves = [leaf_hash(r) for r in raw]
        receipt = build_tlog_proof(store, edited.decision_seq or 0, point.size)
        store.close()
    out.mkdir(parents=True, exist_ok=True)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    (out / "keys.json").write_text(json.dumps({
        "note": "TEST KEYS: each private key is SHA-256 of its seed text (RFC 8032 seed); never use them elsewhere",
        "seeds": SEEDS,
        "log_vkey": log_vkey(ORIGIN, keys.Signer(private(SEEDS["log"])).public),
        "witness_vkeys": {name: c.vkey() for name, c in witnesses.items()},
        "origin": ORIGIN,
        "start": START.isoformat(),
        "cosigned_at": COSIGNED_AT,
    }, indent=2) + "\n")  # fmt: skip
    (out / "log.jsonl").write_bytes(b"".join(r + b"\n" for r in raw))
    (out / "hashes.json").write_text(json.dumps({
        "leaves": ["sha256:" + h.hex() for h in leaves],
        "roots": {str(n): "sha256:" + root_from_leaves(leaves[:n]).hex() for n in range(1, len(leaves) + 1)},
        "args_digest": {"opened": review.args_digest, "edited": _edited_digest(raw)},
    }, indent=2) + "\n")  # fmt: skip
    (out / "checkpoint.txt").write_text(point.note)
    seq = edited.decision_seq or 0
    (out / "inclusion.json").write_text(json.dumps({
        "seq": seq, "size": point.size, "path": [b64(h) for h in inclusion_proof(leaves, seq, point.size)],
        "root": "sha256:" + root_from_leaves(leaves[: point.size]).hex(),
    }, indent=2) + "\n")  # fmt: skip
    (out / "consistency.json").write_text(json.dumps({
        "old_size": old.size, "new_size": point.size, "old_root": old.root,
        "new_root": "sha256:" + root_from_leaves(leaves[: point.size]).hex(),
        "path": [b64(h) for h in consistency_proof(leaves, old.size, point.size)],
    }, indent=2) + "\n")  # fmt: skip
    (out / "receipt.tlog-proof").write_bytes(receipt)
    print(f"wrote {len(raw)} entries and the vectors to {out}")


def _edited_digest(raw: list[bytes]) -> Any:
    for line in raw:
        entry = json.loads(line)
        if entry["kind"] == "review.edited":
            return entry["body"]["args_digest"]
    return None


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
