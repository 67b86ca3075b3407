"""SPEC.md's test vectors (tests/vectors/, made by make_vectors.py), reproduced byte for byte from the
published seeds with as little of the project's code as possible: RFC 8785 through the ``rfc8785``
library, hashes through ``hashlib``, Ed25519 through ``cryptography`` (RFC 8032 signatures are
deterministic, so a re-made signature must equal the recorded one), the Merkle tree from RFC 6962 as
written in c2spkit. An outsider's verifier written from SPEC.md would do the same."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from c2spkit import rfc6962_verify_consistency, rfc6962_verify_inclusion
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.audit.proofs import check_tlog_proof
from signoff.audit.verify import verify_file

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
KEYS = json.loads((VECTORS / "keys.json").read_text())
ENTRIES = (VECTORS / "log.jsonl").read_bytes().splitlines()
HASHES = json.loads((VECTORS / "hashes.json").read_text())


def key(name: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(KEYS["seeds"][name].encode()).digest())


def raw_public(k: Ed25519PrivateKey) -> bytes:
    return k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH, recursively."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def test_each_entry_is_its_rfc8785_form_and_the_chain_links() -> None:
    prev = "sha256:" + "0" * 64
    for seq, line in enumerate(ENTRIES):
        entry = json.loads(line)
        assert rfc8785.dumps(entry) == line, seq  # SPEC "Entries": stored as the exact RFC 8785 bytes
        assert (entry["seq"], entry["prev"], entry["v"]) == (seq, prev, 1)
        leaf = hashlib.sha256(b"\x00" + line).hexdigest()  # SPEC "Hashes": RFC 6962 leaf hash
        assert HASHES["leaves"][seq] == "sha256:" + leaf
        prev = "sha256:" + leaf


def test_the_tree_roots_are_rfc6962() -> None:
    leaves = [bytes.fromhex(h[7:]) for h in HASHES["leaves"]]
    for size, root in HASHES["roots"].items():
        assert "sha256:" + mth(leaves[: int(size)]).hex() == root


def _statement(entry: dict[str, Any]) -> bytes:
    """SPEC "Signed statements": RFC 8785 of {kind, actor, body}, with "log" from seq 2 on (rules version 2)."""
    value: dict[str, Any] = {"kind": entry["kind"], "actor": entry["actor"], "body": entry["body"]}
    if entry["seq"] > 1:
        value["log"] = entry["log"]
    return rfc8785.dumps(value)


def test_every_signature_is_reproduced_from_the_seeds() -> None:
    by_actor = {
        f"log:{json.loads(ENTRIES[0])['log']}": key("log"),
        "admin:root": key("admin"),
        "human:alice@example.org": key("alice"),
    }
    signed = 0
    for line in ENTRIES:
        entry = json.loads(line)
        if "sig" not in entry:
            continue
        signer = by_actor[entry["actor"]]
        public = raw_public(signer)
        assert entry["sig"]["key"] == "ed25519:" + hashlib.sha256(public).hexdigest()  # SPEC "Keys": the fingerprint
        assert entry["sig"]["alg"] == "Ed25519"
        assert base64.b64decode(entry["sig"]["value"]) == signer.sign(_statement(entry)), entry["seq"]
        signed += 1
    assert signed >= 6
    enrolled = json.loads(ENTRIES[0])["body"]["key"]
    assert enrolled == "ed25519:" + base64.b64encode(raw_public(key("log"))).decode()  # keys in bodies: base64


def test_the_args_digest_is_sha256_of_the_canonical_args() -> None:
    opened = next(json.loads(x) for x in ENTRIES if json.loads(x)["kind"] == "review.opened")
    args = opened["body"]["call"]["args"]
    assert opened["body"]["call"]["args_digest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(args)).hexdigest()
    edited = {**args, "amount": 50}
    assert HASHES["args_digest"]["edited"] == "sha256:" + hashlib.sha256(rfc8785.dumps(edited)).hexdigest()


def test_the_checkpoint_and_its_cosignatures_are_reproduced() -> None:
    note = (VECTORS / "checkpoint.txt").read_text()
    text, _blank, signatures = note.partition("\n\n")
    origin, size, root = text.split("\n")
    assert origin == KEYS["origin"] and HASHES["roots"][size] == "sha256:" + base64.b64decode(root).hex()
    body = (text + "\n").encode()
    lines = signatures.splitlines()
    log_pub = raw_public(key("log"))
    key_id = hashlib.sha256(origin.encode() + b"\n\x01" + log_pub).digest()[:4]  # signed-note key ID, type 0x01
    assert lines[0] == f"\u2014 {origin} " + base64.b64encode(key_id + key("log").sign(body)).decode()
    vkey = f"{origin}+{key_id.hex()}+" + base64.b64encode(b"\x01" + log_pub).decode()
    assert vkey == KEYS["log_vkey"]
    stamp = KEYS["cosigned_at"]
    for name, line in zip(("witness.example.org/w1", "witness.example.org/w2"), lines[1:], strict=True):
        pub = raw_public(key(name))
        wid = hashlib.sha256(name.encode() + b"\n\x04" + pub).digest()[:4]  # tlog-cosignature key ID, type 0x04
        message = f"cosignature/v1\ntime {stamp}\n".encode() + body
        sig = wid + stamp.to_bytes(8, "big") + key(name).sign(message)
        assert line == f"\u2014 {name} " + base64.b64encode(sig).decode()
        assert KEYS["witness_vkeys"][name] == f"{name}+{wid.hex()}+" + base64.b64encode(b"\x04" + pub).decode()


def test_the_proofs_check_against_rfc6962() -> None:
    leaves = [bytes.fromhex(h[7:]) for h in HASHES["leaves"]]
    inc = json.loads((VECTORS / "inclusion.json").read_text())
    path = [base64.b64decode(p) for p in inc["path"]]
    root = bytes.fromhex(inc["root"][7:])
    assert rfc6962_verify_inclusion(leaves[inc["seq"]], inc["seq"], inc["size"], path, root)
    con = json.loads((VECTORS / "consistency.json").read_text())
    assert rfc6962_verify_consistency(
        con["old_size"], con["new_size"], bytes.fromhex(con["old_root"][7:]), bytes.fromhex(con["new_root"][7:]),
        [base64.b64decode(p) for p in con["path"]],
    )  # fmt: skip


def test_the_receipt_is_reproduced_and_checks() -> None:
    receipt = (VECTORS / "receipt.tlog-proof").read_bytes()
    inc = json.loads((VECTORS / "inclusion.json").read_text())
    extra = ENTRIES[inc["seq"]]
    rebuilt = (
        f"c2sp.org/tlog-proof@v1\nextra {base64.b64encode(extra).decode()}\nindex {inc['seq']}\n"
        + "".join(p + "\n" for p in inc["path"])
        + "\n"
        + (VECTORS / "checkpoint.txt").read_text()
    ).encode()
    assert receipt == rebuilt
    checked = check_tlog_proof(receipt, KEYS["log_vkey"], list(KEYS["witness_vkeys"].values()), 2)
    assert checked.entry["kind"] == "review.edited"


def test_the_whole_log_verifies_offline() -> None:
    report = verify_file(VECTORS / "log.jsonl")
    assert report.ok, report.failure
    assert report.size == len(ENTRIES) and report.root == HASHES["roots"][str(len(ENTRIES))]


@pytest.mark.parametrize("seq", [3, 7])
def test_a_changed_byte_is_named(tmp_path: Path, seq: int) -> None:
    lines = list(ENTRIES)
    assert b'"at":"2026-12-01T' in lines[seq]
    lines[seq] = lines[seq].replace(b'"at":"2026-12-01T', b'"at":"2026-12-02T', 1)  # one byte: the day
    (tmp_path / "bad.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    report = verify_file(tmp_path / "bad.jsonl")
    assert not report.ok and report.failure is not None and report.failure.seq in (seq, seq + 1)
