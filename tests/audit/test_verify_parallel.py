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
    # Fields and stored columns, checked by the workers and raised in the pass's order (entry_form).
    "edited kind column": (
        "approve_r1",
        lambda db, seq: db.run(("UPDATE signoff_entry SET kind = 'review.rejected' WHERE seq = ?", (seq,))),
    ),
    "re-linked bad timestamp": ("opened_r2", lambda db, seq: relink(db, seq, lambda d: d.update(at="yesterday"))),
    "re-linked other log id": ("tail_1", lambda db, seq: relink(db, seq, lambda d: d.update(log="log_other"))),
    "re-linked other log id and version": (
        "tail_1",
        lambda db, seq: relink(db, seq, lambda d: d.update(log="log_other", v=2)),
    ),
    "re-linked other log id and extra field": (
        "tail_1",
        lambda db, seq: relink(db, seq, lambda d: d.update(log="log_other", extra=1)),
    ),
    # The order-free sums a worker reads meanwhile (verify_sums): a difference goes the single-core way.
    "edited frontier row": (
        "resume_F1",
        lambda db, seq: db.run(("UPDATE signoff_frontier SET open_count = 3 WHERE resumed_seq = ?", (seq,))),
    ),
    "edited value beside the log": (
        "tail_0",
        lambda db, _seq: db.run(("UPDATE signoff_value SET value = '\"forged\"' WHERE commitment = ?", (_first(db),))),
    ),
    "deleted value beside the log": (
        "tail_0",
        lambda db, _seq: db.run(("DELETE FROM signoff_value WHERE commitment = ?", (_first(db),))),
    ),
}


def _first(db: Db) -> str:
    """The first value beside the log, by commitment."""
    rows = db.rows("SELECT commitment FROM signoff_value ORDER BY commitment")
    assert rows, "the pristine log holds values beside it"
    return str(rows[0][0])


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
def test_the_sums_read_meanwhile_settle_an_intact_log(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """On workers the projection and the values are summed by a worker while the pass runs; for an intact,
    quiet log those sums decide, and the single-core look (which reads them again) is not taken."""
    from signoff.audit import verify_projection, verify_values

    taken: list[str] = []
    real_projection, real_values = verify_projection.check_projection, verify_values.check
    monkeypatch.setattr(verify_projection, "check_projection", lambda *a: taken.append("p") or real_projection(*a))
    monkeypatch.setattr(verify_values, "check", lambda *a: taken.append("v") or real_values(*a))
    report = verify_store(case.store, jobs=2)
    assert report.ok and taken == [], (report.failure, taken)
    assert any("value(s) beside the log checked" in note for note in report.notes), report.notes
    alone = verify_store(case.store, jobs=1)
    assert alone.notes == report.notes and taken == ["p", "v"]


@pytest.mark.usefixtures("parallel_always")
def test_a_sums_worker_that_fails_leaves_the_verdict_to_the_single_core_way(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import Future

    from signoff.audit import verify_sums

    real_submit = verify_parallel.submit

    def failing(jobs: int, work: Callable[..., object], *args: object) -> Future[object]:
        if work is not verify_sums.read:
            return real_submit(jobs, work, *args)
        failed: Future[object] = Future()
        failed.set_exception(OSError("the worker could not open the store"))
        return failed

    monkeypatch.setattr(verify_parallel, "submit", failing)
    assert _verdict(case, 2) == _verdict(case, 1) and _verdict(case, 2)[0] is True
    with case.db() as db:
        TAMPERS["edited projection row"][1](db, case.meta["seq"]["approve_r1"])
    assert _verdict(case, 2) == _verdict(case, 1) and _verdict(case, 2)[0] is False


def test_sums_of_another_state_of_the_store_settle_nothing(case: Case) -> None:
    """Sums read in a snapshot of more (or fewer) entries than the pass checked, or read before a write
    that landed since, leave the decision to the single-core look."""
    from auditkit import AGENT, call

    from signoff.audit import ReviewService, verify_sums
    from signoff.audit.verify import verify_stream
    from signoff.audit.verify_projection import check_with_sums

    store = case.store
    v, _count = verify_stream(store.iter_rows(0, store.size()))
    sums = verify_sums.read(store.url, store.log_id, store.rules.sealed_values)
    assert sums.size == v.expected_seq and sums.values == v.ledger.expected
    assert check_with_sums(store, v, sums.size, sums.reviews, sums.frontiers)
    assert not check_with_sums(store, v, sums.size + 1, sums.reviews, sums.frontiers)
    assert not check_with_sums(store, v, sums.size, sums.reviews + 1, sums.frontiers)
    ReviewService(store).open_frontier([call("late")], actor=AGENT)  # a write lands after the pass
    assert not check_with_sums(store, v, sums.size, sums.reviews, sums.frontiers)
    assert verify_store(store, jobs=1).ok


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
