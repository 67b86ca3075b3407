"""The log as C2SP tiles and receipts (issue 18): ``audit tiles`` writes the tree and entries as static
files that any HTTP client can mirror, the mirror verifies with nothing but the log's vkey and the
witnesses' (no database), and ``audit prove --tlog-proof`` gives one decision's receipt, checked offline."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pytest
from auditkit import AGENT, ALICE, Keys, admin_draft, call, key_body, legacy_checkpoint
from c2spkit import NAMES, Witnesses, static_server

from signoff.audit import ReviewService, Signer, Store, tlog_store, witnessing
from signoff.audit.c2sp import log_vkey
from signoff.audit.c2sp_errors import C2SPVerificationError
from signoff.audit.merkle import ProofError
from signoff.audit.proofs import build_tlog_proof, check_tlog_proof
from signoff.audit.publisher import Publisher
from signoff.audit.tlog_cosignature import Cosigner
from signoff.audit.tlog_tiles import tiles_for_size
from signoff.audit.verify import verify_tiles


def _decided_log(store: Store, keys: Keys, reviews: int) -> list[str]:
    """A log with ``reviews`` reviews, each approved by Alice (signed), and some padding entries."""
    svc = ReviewService(store)
    svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
    ids = []
    for i in range(reviews):
        review = svc.open_frontier([call(f"t{i}")], actor=AGENT).reviews[0]
        svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
        ids.append(review.id)
    return ids


def test_tiles_are_written_incrementally_served_over_http_and_verified_without_the_database(
    store: Store, keys: Keys, tmp_path: Path, witnesses: Witnesses
) -> None:
    for name in NAMES:
        witnessing.add_witness(store, witnesses.procs[name].url, witnesses.vkey(name), admin=keys.admin)
    witnessing.set_quorum(store, 2, admin=keys.admin)
    _decided_log(store, keys, 150)  # past one full tile (256 entries) of level 0
    publisher = Publisher(store, keys.log)
    out = tmp_path / "tiles"
    try:
        publisher.publish_once()
        first = tlog_store.write_store_tiles(store, out)
        assert first.old_size == 0 and "checkpoint" in first.written
        for i in range(300):  # into a second full tile
            store.append(*admin_draft(store, keys.admin, key_body(10_000 + i)))
        point = publisher.publish_once().checkpoint
        assert point is not None and point.size > 512
        again = tlog_store.write_store_tiles(store, out)
        full_before = {p for p in first.written if p.startswith("tile/") and ".p/" not in p}
        assert again.old_size == first.size and not full_before & set(again.written)  # full tiles: written once
    finally:
        publisher.close()
    vkey = log_vkey(store.rules.origin, store.public_key)
    # Every resource the desk serves from the store is byte for byte what the directory holds.
    for tile in tiles_for_size(point.size):
        served = tlog_store.serve(store, tile.path)
        assert served is not None and served.body == (out / tile.path).read_bytes(), tile.path
    served = tlog_store.serve(store, "checkpoint")
    assert served is not None and served.body == (out / "checkpoint").read_bytes()
    assert tlog_store.serve(store, "tile/0/999") is None and tlog_store.serve(store, "../../etc/passwd") is None
    with static_server(out) as url:  # any HTTP client: here the project's reader over real HTTP
        report = verify_tiles(url, log_vkey=vkey, witnesses=witnesses.verifiers(), quorum=2)
    assert report.ok, report.failure
    assert report.size == point.size and report.witnessed is not None and len(report.witnessed.by) == 3
    # Tampered mirrors: an entry in a bundle, a tile hash, a missing cosignature quorum.
    bundle = out / "tile/entries/000"
    data = bytearray(bundle.read_bytes())
    original = bytes(data)
    data[10] ^= 1
    bundle.write_bytes(bytes(data))
    bad = verify_tiles(str(out), log_vkey=vkey, witnesses=witnesses.verifiers(), quorum=2)
    assert not bad.ok and bad.failure is not None and "hash" in str(bad.failure)
    bundle.write_bytes(original)
    stranger = Cosigner("witness.example.org/never-asked", Signer.generate().private).verifier()
    short = verify_tiles(str(out), log_vkey=vkey, witnesses=[*witnesses.verifiers(NAMES[0]), stranger], quorum=2)
    assert not short.ok and "cosignatures by 2" in str(short.failure)


def test_a_mirror_of_another_log_under_the_same_vkey_name_is_refused(store: Store, keys: Keys, tmp_path: Path) -> None:
    _decided_log(store, keys, 2)
    store.checkpoint(keys.log)
    out = tmp_path / "tiles"
    tlog_store.write_store_tiles(store, out)
    vkey = log_vkey(store.rules.origin, store.public_key)
    assert verify_tiles(str(out), log_vkey=vkey).ok
    other = log_vkey(store.rules.origin, keys.admin.public)  # the same name, another key
    refused = verify_tiles(str(out), log_vkey=other)
    assert not refused.ok and refused.failure is not None and refused.failure.rule == "tiles checkpoint"


@pytest.mark.in_entries  # on a sealed log no entry gets this large (test_values.py)
def test_an_entry_over_65535_bytes_is_served_at_the_other_path(store: Store, keys: Keys, tmp_path: Path) -> None:
    """A log made before values moved out of its entries (issue 20) may hold entries larger than a uint16."""
    svc = ReviewService(store)
    svc.open_frontier([call("big", args={"memo": "x" * 70_000, "to": "bob"})], actor=AGENT)
    width = store.checkpoint(keys.log).size
    assert len(store.entry(width - 1).raw) > 65_535
    out = tmp_path / "tiles"
    tlog_store.write_store_tiles(store, out)
    standard, other = f"tile/entries/000.p/{width}", f"signoff/entries/000.p/{width}"
    assert not (out / standard).exists() and (out / other).exists()
    assert tlog_store.serve(store, standard) is None and tlog_store.serve(store, other) is not None
    assert verify_tiles(str(out), log_vkey=log_vkey(store.rules.origin, store.public_key)).ok


def test_a_decisions_receipt_travels_alone_and_is_checked_offline(
    store: Store, keys: Keys, witnesses: Witnesses, tmp_path: Path
) -> None:
    for name in NAMES:
        witnessing.add_witness(store, witnesses.procs[name].url, witnesses.vkey(name), admin=keys.admin)
    [review_id] = _decided_log(store, keys, 1)
    decision = ReviewService(store).get(review_id).decision_seq
    assert decision is not None
    publisher = Publisher(store, keys.log)
    try:
        publisher.publish_once()
    finally:
        publisher.close()
    receipt = build_tlog_proof(store, decision)
    assert receipt.startswith(b"c2sp.org/tlog-proof@v1\nextra ") and f"\nindex {decision}\n".encode() in receipt
    vkey = log_vkey(store.rules.origin, store.public_key)
    w = [witnesses.vkey(n) for n in NAMES]
    checked = check_tlog_proof(receipt, vkey, w, 3)
    assert (checked.index, checked.entry["kind"], checked.entry["body"]["review"]) == (
        decision, "review.approved", review_id,
    )  # fmt: skip
    assert sorted(checked.witnesses) == sorted(NAMES)
    (tmp_path / "r.tlog-proof").write_bytes(receipt)  # it is a file: a copy checks the same
    shutil.copy(tmp_path / "r.tlog-proof", tmp_path / "copy.tlog-proof")
    assert check_tlog_proof((tmp_path / "copy.tlog-proof").read_bytes(), vkey, w, 3).index == decision
    # Lies: another entry's bytes in the extra line, a path element, a quorum the cosignatures do not meet.
    lines = receipt.split(b"\n")
    other = store.entry(decision - 1).raw
    swapped = b"\n".join([lines[0], b"extra " + base64.b64encode(other), *lines[2:]])
    with pytest.raises((ProofError, C2SPVerificationError)):
        check_tlog_proof(swapped, vkey, w, 3)
    path_line = next(i for i, line in enumerate(lines) if line.startswith(b"index ")) + 1
    flipped = list(lines)
    flipped[path_line] = base64.b64encode(b"\x00" * 32)
    with pytest.raises(C2SPVerificationError):
        check_tlog_proof(b"\n".join(flipped), vkey, w, 3)
    stranger = Cosigner("witness.example.org/never-asked", Signer.generate().private).vkey()
    with pytest.raises(C2SPVerificationError, match="at least 3"):
        check_tlog_proof(receipt, vkey, [*w[:2], stranger], 3)


def test_tiles_need_a_note_checkpoint_and_take_a_log_of_json_checkpoints_after_one(
    store: Store, keys: Keys, tmp_path: Path
) -> None:
    _decided_log(store, keys, 1)
    legacy_checkpoint(store, keys.log)
    with pytest.raises(Exception, match="C2SP note checkpoint"):
        tlog_store.write_store_tiles(store, tmp_path / "t")
    store.checkpoint(keys.log)
    tlog_store.write_store_tiles(store, tmp_path / "t")
    assert verify_tiles(str(tmp_path / "t"), log_vkey=log_vkey(store.rules.origin, store.public_key)).ok
