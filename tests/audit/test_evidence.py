"""The evidence pack (issue 23 §4), on SQLite and PostgreSQL: ``audit evidence`` writes one for a range of
days, ``audit verify DIR`` checks it offline against the log's vkey and the auditor's witnesses (real
witness processes here), and then the pack is tampered with: a row removed from decisions.csv, an entry
removed from the slice, a receipt altered, and more. Each makes ``audit verify DIR`` exit 1 naming it.
"""

from __future__ import annotations

import base64
import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from auditkit import AGENT, ALICE, FakeClock, Keys, call, run_cli
from c2spkit import NAMES, Witnesses, cosigner

from signoff.audit import ReviewService, Signer, Store, witnessing
from signoff.audit.c2sp import log_vkey
from signoff.audit.errors import UnusableInput, VerificationFailed
from signoff.audit.evidence import build
from signoff.audit.evidence_check import check_pack
from signoff.audit.evidence_rows import Range, from_csv
from signoff.audit.publisher import Publisher

DAY = timedelta(days=1)
ERIN = "human:erin@example.org"


def _day(clock: FakeClock) -> str:
    return clock.peek().date().isoformat()


@pytest.fixture
def history(svc: ReviewService, keys: Keys, store: Store, clock: FakeClock, witnesses: Witnesses) -> dict[str, Any]:
    """Three days of reviews: day 1 before the range, day 2 the range (an approval run, an edit, a
    rejection, a delegate's decision, one left pending), day 3 after it; witnesses cosign the checkpoints."""
    for name in NAMES:
        witnessing.add_witness(store, witnesses.procs[name].url, witnesses.vkey(name), admin=keys.admin)
    witnessing.set_quorum(store, 2, admin=keys.admin)
    erin = Signer.generate()
    svc.enroll_reviewer(ERIN, roles=["observer"], tools=["*"], key=erin.public, admin=keys.admin)
    publisher = Publisher(store, keys.log)
    try:
        before = svc.open_frontier([call("ev-0")], actor=AGENT).reviews[0]
        svc.approve(before.id, reviewer=ALICE, signer=keys.alice)
        assert publisher.publish_once().made  # a checkpoint before the range
        clock.advance(DAY.total_seconds())
        day = _day(clock)
        ran = svc.open_frontier([call("ev-1")], actor=AGENT)
        svc.approve(ran.reviews[0].id, reviewer=ALICE, signer=keys.alice, rationale="ok")
        svc.claim_resume(ran.id, actor=AGENT)
        svc.record_execution(ran.reviews[0].id, actor=AGENT, args={"amount": 100, "to": "bob"})
        edited = svc.open_frontier([call("ev-2")], actor=AGENT).reviews[0]
        svc.edit(edited.id, reviewer=ALICE, signer=keys.alice, patch=[{"op": "replace", "path": "/amount", "value": 7}])
        rejected = svc.open_frontier([call("ev-3")], actor=AGENT).reviews[0]
        svc.reject(rejected.id, reviewer=ALICE, signer=keys.alice, reason="wrong payee")
        svc.delegate(ALICE, ERIN, until=clock.peek() + 5 * DAY, roles=["teller"], signer=keys.alice)
        lent = svc.open_frontier([call("ev-4")], actor=AGENT).reviews[0]
        svc.approve(lent.id, reviewer=ERIN, signer=erin, acting_for=ALICE)
        pending = svc.open_frontier([call("ev-5")], actor=AGENT).reviews[0]
        clock.advance(DAY.total_seconds())
        after = svc.open_frontier([call("ev-6")], actor=AGENT).reviews[0]
        svc.approve(after.id, reviewer=ALICE, signer=keys.alice)
        assert publisher.publish_once().made
    finally:
        publisher.close()
    return {
        "day": day,
        "in_range": [ran.reviews[0].id, edited.id, rejected.id, lent.id, pending.id],
        "outside": [before.id, after.id],
        "vkey": log_vkey(store.rules.origin, store.public_key),
    }


def _pack(store: Store, tmp_path: Path, history: dict[str, Any], name: str = "pack") -> Path:
    out = tmp_path / name
    build(store, out, Range.of_days(history["day"], history["day"]))
    return out


def _check(out: Path, history: dict[str, Any], witnesses: Witnesses, quorum: int = 2) -> Any:
    vkeys = [witnesses.vkey(n) for n in NAMES]
    return check_pack(out, log_vkey=history["vkey"], witnesses=vkeys, quorum=quorum)


def test_a_pack_of_one_day_holds_its_reviews_and_checks_offline(
    store: Store, tmp_path: Path, history: dict[str, Any], witnesses: Witnesses
) -> None:
    out = _pack(store, tmp_path, history)
    lines = from_csv((out / "decisions.csv").read_text())
    by_review = {line[0]: line for line in lines}
    assert list(by_review) == history["in_range"]  # the day's reviews, in order; none of the days around it
    ran, edited, rejected, lent, pending = (by_review[r] for r in history["in_range"])
    # review, tool, agent, requested_by, opened_at, opened_seq, outcome, decided_at, decided_seq, decided_by,
    # acting_for, edited, args_digest, ran, ran_at, ran_seq, ran_args_digest
    assert (ran[6], ran[9], ran[13]) == ("approved", ALICE, "yes") and ran[16] == ran[12]
    assert (edited[6], edited[11], edited[13]) == ("edited", "yes", "no")
    assert (rejected[6], rejected[9]) == ("rejected", ALICE)
    assert (lent[6], lent[9], lent[10]) == ("approved", ERIN, ALICE)  # Erin, for Alice
    assert (pending[6], pending[8], pending[9]) == ("pending", "", "")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["first_seq"] > 0 and manifest["reviews"] == 5 and manifest["decided"] == 4
    assert sorted(p.name for p in (out / "receipts").iterdir()) == sorted(
        f"{r}.tlog-proof" for r in history["in_range"][:4]
    )
    report = _check(out, history, witnesses)
    assert (report.reviews, report.receipts) == (5, 4) and len(report.witnesses) == 3
    assert report.first_seq == manifest["first_seq"] and not report.vkey_from_pack
    assert "audit verify" in (out / "README.txt").read_text()


def _tampered(out: Path, name: str, change: Any) -> None:
    path = out / name
    path.write_bytes(change(path.read_bytes()))


@pytest.mark.parametrize(
    ("what", "change", "named"),
    [
        (
            "a row removed",
            lambda b: b"\r\n".join(line for i, line in enumerate(b.split(b"\r\n")) if i != 2),
            "a row removed",
        ),
        ("an outcome changed", lambda b: b.replace(b",rejected,", b",approved,", 1), "other outcome"),
        ("a row added", lambda b: b + b"rv_00000000000000ff" + b"," * 16 + b"\r\n", "rows not in the log's range"),
    ],
)
def test_a_tampered_csv_is_named(
    store: Store, tmp_path: Path, history: dict[str, Any], witnesses: Witnesses, what: str, change: Any, named: str
) -> None:
    out = _pack(store, tmp_path, history)
    _tampered(out, "decisions.csv", change)
    with pytest.raises(VerificationFailed, match=named):
        _check(out, history, witnesses)


def test_an_entry_removed_or_changed_in_the_slice_is_named(
    store: Store, tmp_path: Path, history: dict[str, Any], witnesses: Witnesses
) -> None:
    out = _pack(store, tmp_path, history)
    clean = (out / "entries.jsonl").read_bytes()
    lines = clean.split(b"\n")
    _tampered(out, "entries.jsonl", lambda b: b"\n".join(lines[:3] + lines[4:]))  # a middle entry gone
    with pytest.raises(VerificationFailed, match="an entry removed or added"):
        _check(out, history, witnesses)
    _tampered(out, "entries.jsonl", lambda b: b"\n".join(lines[1:]))  # the boundary before the range gone
    with pytest.raises(VerificationFailed, match="slice start"):
        _check(out, history, witnesses)
    changed = clean.replace(b'"reason":"wrong payee"', b'"reason":"right payee"', 1)
    _tampered(out, "entries.jsonl", lambda b: changed)  # re-linking it would need every later hash, and the anchor
    with pytest.raises(VerificationFailed, match="prev link"):
        _check(out, history, witnesses)


def test_a_receipt_or_proof_altered_is_named(
    store: Store, tmp_path: Path, history: dict[str, Any], witnesses: Witnesses
) -> None:
    out = _pack(store, tmp_path, history)
    receipt = out / "receipts" / f"{history['in_range'][2]}.tlog-proof"
    good = receipt.read_bytes()
    lines = good.split(b"\n")
    path_line = next(i for i, line in enumerate(lines) if line.startswith(b"index ")) + 1
    lines[path_line] = base64.b64encode(b"\x00" * 32)
    receipt.write_bytes(b"\n".join(lines))
    with pytest.raises(VerificationFailed, match=f"receipts/{history['in_range'][2]}.tlog-proof"):
        _check(out, history, witnesses)
    receipt.write_bytes(good)
    shutil.copy(out / "receipts" / f"{history['in_range'][0]}.tlog-proof", receipt)  # another decision's receipt
    with pytest.raises(VerificationFailed, match="the review's decision entry"):
        _check(out, history, witnesses)
    receipt.write_bytes(good)
    _tampered(out, "consistency.txt", lambda b: base64.b64encode(b"\x01" * 32) + b"\n" + b)
    with pytest.raises(VerificationFailed, match="consistency.txt"):
        _check(out, history, witnesses)


def test_a_receipt_that_no_longer_parses_or_is_gone_is_named_with_exit_1(
    store: Store, tmp_path: Path, history: dict[str, Any], witnesses: Witnesses
) -> None:
    """Issue 34 item 3: a receipt whose lines no longer parse gave exit 2 ("tlog proof: expected a line
    'index <N>'") without naming the file. It is the pack that was altered: exit 1, naming it; a key
    the auditor gives that does not parse is still unusable input (exit 2), naming the flag."""
    out = _pack(store, tmp_path, history)
    review = history["in_range"][2]
    receipt = out / "receipts" / f"{review}.tlog-proof"
    good = receipt.read_bytes()
    receipt.write_bytes(b"\n".join(line for line in good.split(b"\n") if not line.startswith(b"index ")))
    with pytest.raises(VerificationFailed, match=rf"receipts/{review}\.tlog-proof.*expected a line 'index <N>'"):
        _check(out, history, witnesses)
    done = run_cli(None, None, "verify", str(out), "--log-vkey", history["vkey"])
    assert done.returncode == 1, done.stderr
    assert f"receipts/{review}.tlog-proof" in done.stdout + done.stderr
    receipt.unlink()
    with pytest.raises(VerificationFailed, match=rf"receipts/{review}\.tlog-proof.*no file"):
        _check(out, history, witnesses)
    receipt.write_bytes(good)
    anchor = out / "anchor.tlog-proof"
    kept = anchor.read_bytes()
    anchor.write_bytes(kept.replace(b"index ", b"indx "))
    with pytest.raises(VerificationFailed, match="anchor.tlog-proof"):
        _check(out, history, witnesses)
    anchor.write_bytes(kept)
    with pytest.raises(UnusableInput, match="--log-vkey: "):
        check_pack(out, log_vkey="not-a-vkey")
    with pytest.raises(UnusableInput, match="--witness: "):
        check_pack(out, log_vkey=history["vkey"], witnesses=["not-a-vkey"], quorum=1)


def test_the_auditors_keys_not_the_packs(
    store: Store, tmp_path: Path, history: dict[str, Any], witnesses: Witnesses
) -> None:
    out = _pack(store, tmp_path, history)
    other = Signer.generate()
    forged_vkey = log_vkey(store.rules.origin, other.public)
    with pytest.raises(VerificationFailed, match="anchor.tlog-proof"):
        check_pack(out, log_vkey=forged_vkey)
    stranger = cosigner("witness.example.org/stranger", seed="stranger").vkey()  # cosigned nothing of this log
    with pytest.raises(VerificationFailed, match="anchor.tlog-proof"):
        check_pack(out, log_vkey=history["vkey"], witnesses=[witnesses.vkey(NAMES[0]), stranger], quorum=2)
    with pytest.raises(UnusableInput, match="--quorum: expected 0..1"):
        check_pack(out, log_vkey=history["vkey"], witnesses=[witnesses.vkey(NAMES[0])], quorum=2)
    unpinned = check_pack(out)
    assert unpinned.vkey_from_pack and "pass --log-vkey" in unpinned.notes[0]
    with pytest.raises(UnusableInput, match="expected an evidence pack"):
        check_pack(tmp_path)


def test_audit_evidence_and_audit_verify_dir(
    store_url: str, tmp_path: Path, history: dict[str, Any], witnesses: Witnesses
) -> None:
    out = tmp_path / "cli-pack"
    made = run_cli(store_url, None, "evidence", "--from", history["day"], "--to", history["day"], "--out", str(out))
    assert made.returncode == 0 and "5 review(s)" in made.stdout, made.stderr
    witness_args = [a for n in NAMES for a in ("--witness", witnesses.vkey(n))]
    ok = run_cli(None, None, "verify", str(out), "--log-vkey", history["vkey"], *witness_args, "--quorum", "3")
    assert ok.returncode == 0 and "none missing from decisions.csv" in ok.stdout, ok.stdout + ok.stderr
    _tampered(out, "decisions.csv", lambda b: b"\r\n".join(b.split(b"\r\n")[:-2] + [b""]))
    bad = run_cli(None, None, "verify", str(out), "--log-vkey", history["vkey"])
    assert bad.returncode == 1 and "a row removed" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    again = run_cli(store_url, None, "evidence", "--from", history["day"], "--to", history["day"], "--out", str(out))
    assert again.returncode == 2 and "expected a new or empty directory" in again.stderr
    none = run_cli(
        store_url, None, "evidence", "--from", "2001-01-01", "--to", "2001-01-02", "--out", str(tmp_path / "x")
    )
    assert none.returncode == 2 and "found none" in none.stderr
