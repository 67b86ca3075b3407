"""``audit verify`` on all cores finds exactly what the sequential verifier finds.

The tampering fixtures of ``auditkit`` (a pristine log holding every entry kind, cloned per test) are
checked with one process and with worker processes (hashes, canonical form and signatures in the
workers): the same verdict, the same ``seq``, rule, expected and found. A slow test reruns the whole
tampering and trust suites with every verification on workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
from auditkit import ROOT, Case, Db, leaf, python_env, rebuild_tree, relink

from signoff.audit import verify as verify_module
from signoff.audit import verify_parallel
from signoff.audit.verify import verify_file, verify_store


def _verdict(case: Case, jobs: int) -> tuple[object, ...]:
    report = verify_store(case.store, jobs=jobs)
    found = report.failure
    return (report.ok, report.root, None if found is None else (found.seq, found.rule, found.expected, found.found))


def _flip_byte(db: Db, seq: int) -> None:
    raw = db.raw(seq)
    db.run(("UPDATE signoff_entry SET raw = ? WHERE seq = ?", (raw[:10] + bytes([raw[10] ^ 1]) + raw[11:], seq)))


def _loose_bytes(db: Db, seq: int) -> None:
    rows = db.entries()
    loose = json.dumps(json.loads(rows[seq][2]), indent=1).encode()
    hashes = [h for _s, h, _r in rows]
    hashes[seq] = leaf(loose)
    rebuild_tree(db, hashes, [("UPDATE signoff_entry SET raw = ?, hash = ? WHERE seq = ?", (loose, hashes[seq], seq))])


def _rewrite_signed(db: Db, seq: int) -> None:
    relink(db, seq, lambda data: data["body"].update(rationale="forged"))


def _swap_passkey(db: Db, seq: int) -> None:
    from passkeys import SoftPasskey

    relink(db, seq, lambda data: data["body"].update(SoftPasskey("ES256").passkey.to_body()))


TAMPERS: dict[str, tuple[str, Callable[[Db, int], None]]] = {
    "flipped byte": ("approve_r1", _flip_byte),
    "edited hash column": (
        "resume_F1",
        lambda db, seq: db.run(("UPDATE signoff_entry SET hash = ? WHERE seq = ?", ("sha256:" + "ab" * 32, seq))),
    ),
    "non-canonical bytes": ("tail_1", _loose_bytes),
    "deleted row": ("resume_F2", lambda db, seq: db.run(("DELETE FROM signoff_entry WHERE seq = ?", (seq,)))),
    "re-linked rewrite of an Ed25519-signed decision": ("approve_r1", _rewrite_signed),
    "re-linked rewrite of a passkey-signed decision": ("edit_r2", _rewrite_signed),
    "swapped passkey enrolment": ("bob_passkey", _swap_passkey),
    "edited Merkle node": (
        "opened_r2",
        lambda db, seq: db.run(("UPDATE signoff_entry SET nodes = ? WHERE seq = ?", (b"\x11" * 96, 7))),
    ),
    "edited projection row": (
        "approve_r1",
        lambda db, seq: db.run(("UPDATE signoff_review SET status = 'rejected' WHERE decided_seq = ?", (seq,))),
    ),
}


@pytest.fixture
def parallel_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers for every log, however small (the pristine log has 31 entries)."""
    monkeypatch.setattr(verify_parallel, "MIN_PARALLEL", 0)
    monkeypatch.setattr(verify_parallel, "CHUNK", 7)  # several chunks, a failure inside one
    monkeypatch.setattr(verify_parallel, "SIGNATURE_BATCH", 2)


@pytest.mark.usefixtures("parallel_always")
def test_pristine_log_verifies_the_same_on_workers(case: Case) -> None:
    assert _verdict(case, 2) == _verdict(case, 1)
    assert _verdict(case, 2)[0] is True
    assert verify_parallel._POOLS, "the workers were never used"


@pytest.mark.usefixtures("parallel_always")
@pytest.mark.parametrize("name", list(TAMPERS))
def test_tampering_is_named_the_same_on_workers(case: Case, name: str) -> None:
    entry, tamper = TAMPERS[name]
    with case.db() as db:
        tamper(db, case.meta["seq"][entry])
    alone, workers = _verdict(case, 1), _verdict(case, 2)
    assert alone[0] is False, f"{name}: the sequential verifier missed it"
    assert workers == alone, f"{name}: workers found {workers[2]}, one process {alone[2]}"


@pytest.mark.usefixtures("parallel_always")
def test_the_first_failure_wins_when_a_signature_fails_before_a_later_break(case: Case) -> None:
    """A forged signature early (found by a worker, late) and a deleted row later (found by the pass at
    once): the report names the earlier one, as the sequential verifier does."""
    with case.db() as db:
        _rewrite_signed(db, case.meta["seq"]["approve_r1"])
        db.run(("DELETE FROM signoff_entry WHERE seq = ?", (case.meta["seq"]["tail_0"],)))
    assert _verdict(case, 2) == _verdict(case, 1)
    assert _verdict(case, 2)[2][0] == case.meta["seq"]["approve_r1"]  # type: ignore[index]


@pytest.mark.usefixtures("parallel_always")
def test_exported_file_verifies_the_same_on_workers(
    case: Case, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "log.jsonl"
    with case.db() as db:
        path.write_bytes(b"".join(raw + b"\n" for _s, _h, raw in db.entries()))
    monkeypatch.setattr(verify_module, "verify_parallel", verify_parallel)
    assert verify_file(path, jobs=2).ok
    lines = path.read_bytes().splitlines()
    lines[8] = lines[8].replace(b'"rationale":"', b'"rationale":"x', 1)
    path.write_bytes(b"\n".join(lines) + b"\n")
    alone, workers = verify_file(path, jobs=1), verify_file(path, jobs=2)
    assert not alone.ok and alone.failure is not None and workers.failure is not None
    assert (workers.failure.seq, workers.failure.rule) == (alone.failure.seq, alone.failure.rule)


@pytest.mark.slow
def test_the_tampering_and_trust_suites_pass_with_every_verification_on_workers() -> None:
    """Every verification in test_tamper.py and test_trust.py on 2 worker processes (SQLite)."""
    env = python_env(SIGNOFF_VERIFY_JOBS="2", SIGNOFF_VERIFY_MIN_PARALLEL="0")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", "not postgresql",
         "tests/audit/test_tamper.py", "tests/audit/test_trust.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
