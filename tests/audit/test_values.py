"""Values beside the log (issue 20, SPEC.md "Values beside the log"), on SQLite and PostgreSQL.

A sealed log's entries hold salted SHA-256 commitments; the values live in ``signoff_value``. These
tests write through the service, then attack the values table behind its back, erase on request and
by retention, and check what the gate, ``ReviewService.get`` and ``audit verify`` say each time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from auditkit import (
    ADMIN,
    AGENT,
    ALICE,
    Db,
    FakeClock,
    Keys,
    backend_of,
    call,
    forge_append,
    run_cli,
    snapshot,
    sqlite_path,
)

from signoff.audit import ReviewService, Store, decision, erasure, sealing
from signoff.audit.canonical import canonical, digest
from signoff.audit.decided import DecisionNotProven, prove_decision
from signoff.audit.errors import ExecutionMismatch, NotAllowed
from signoff.audit.policies import policy_digest
from signoff.audit.proofs import build_inclusion, check_inclusion
from signoff.audit.verify import verify_file, verify_store

PERSONAL = {"to": "Alice Smith", "iban": "DE89370400440532013000", "amount": 50}
SECRETS = (b"Alice Smith", b"DE89370400440532013000", b"pay Alice please", b"sent to Alice")


def _raw(store: Store, seq: int) -> bytes:
    return bytes(store.read_rows("SELECT raw FROM signoff_entry WHERE log = ? AND seq = ?", store.log_id, seq)[0].raw)


def _run_one(
    svc: ReviewService, keys: Keys, *, args: dict[str, Any] | None = None, user: str = "cust-7", cid: str = "c1"
) -> str:
    """Open, edit (signed by alice ahead, as a script does), resume, run and reply: one review done."""
    front = svc.open_frontier(
        [
            call(
                cid,
                args=dict(args or PERSONAL),
                session=f"s-{cid}",
                hint="pay Alice please",
                context={"said": "pay Alice please"},
            )
        ],
        actor=AGENT,
    )
    review = svc.get(front.reviews[0].id)
    patch = [{"op": "replace", "path": "/amount", "value": 40}]
    prepared = decision.prepare_edit(review, patch, "lower")
    svc.edit(
        review.id,
        reviewer=ALICE,
        patch=patch,
        rationale="lower",
        sig=prepared.sign(keys.alice, svc.store.log_id, ALICE),
        salts=prepared.salts,
    )
    svc.claim_resume(front.id, actor=AGENT)
    proven = prove_decision(svc.store, review.id)
    assert proven.review.final_args == {**(args or PERSONAL), "amount": 40}
    svc.record_execution(review.id, actor=AGENT, args=proven.review.final_args, result={"ok": "sent to Alice"})
    svc.record_reply(front.id, actor=AGENT, text="sent to Alice")
    return review.id


def test_entries_hold_commitments_and_readers_get_the_values(svc: ReviewService, store: Store, keys: Keys) -> None:
    review_id = _run_one(svc, keys)
    for seq in range(store.size()):
        raw = _raw(store, seq)
        assert not any(secret in raw for secret in SECRETS), (seq, raw[:300])
    review = svc.get(review_id)
    assert review.call.args == PERSONAL and review.call.hint == "pay Alice please"
    assert review.final_args == {**PERSONAL, "amount": 40} and review.status == "edited" and not review.problem
    opened = json.loads(_raw(store, review.opened_seq))["body"]["call"]
    assert all(sealing.is_commitment(v) for v in opened["args"].values())
    assert opened["args_digest"] == digest(opened["args"])  # over the sealed form: checks without the values
    salt, value = store.read_rows("SELECT salt, value FROM signoff_value WHERE commitment = ?", opened["args"]["to"])[0]
    assert len(bytes.fromhex(salt)) == 32 and json.loads(value) == "Alice Smith"
    expected = (
        "sealed:sha256:" + __import__("hashlib").sha256(bytes.fromhex(salt) + canonical("Alice Smith")).hexdigest()
    )
    assert opened["args"]["to"] == expected
    report = verify_store(store)
    assert report.ok, report.failure
    assert any("value(s) beside the log checked" in note for note in report.notes)


def test_a_private_list_keeps_the_other_members_in_clear(svc: ReviewService, store: Store, keys: Keys) -> None:
    svc.set_policy({"policy": "pay", "tools": "transfer", "private": ["to", "iban"]}, admin=keys.admin)
    front = svc.open_frontier([call("p1", args=dict(PERSONAL))], actor=AGENT)
    args = json.loads(_raw(store, front.reviews[0].opened_seq))["body"]["call"]["args"]
    assert args["amount"] == 50 and sealing.is_commitment(args["to"]) and sealing.is_commitment(args["iban"])
    assert svc.get(front.reviews[0].id).call.args == PERSONAL
    assert verify_store(store).ok


def test_every_entry_fits_a_tile_bundle_at_the_args_limit(svc: ReviewService, store: Store, keys: Keys) -> None:
    many = {f"k{i:05d}": "x" * 40 for i in range(5000)}  # ~250 KiB in canonical form: sealed whole
    one_big = {"memo": "y" * (255 * 1024)}
    assert len(canonical(many)) <= 256 * 1024
    for index, args in enumerate((many, one_big)):
        front = svc.open_frontier([call(f"big-{index}", args=args, session=f"big-{index}")], actor=AGENT)
        review = svc.get(front.reviews[0].id)
        assert review.call.args == args
        prepared = decision.prepare_approve(review)
        svc.approve(review.id, reviewer=ALICE, sig=prepared.sign(keys.alice, store.log_id, ALICE))
    sizes = [len(_raw(store, seq)) for seq in range(store.size())]
    assert max(sizes) <= 65_535, max(sizes)
    assert verify_store(store).ok


def test_a_value_changed_behind_the_service_is_refused_everywhere(
    svc: ReviewService, store: Store, store_url: str, keys: Keys
) -> None:
    front = svc.open_frontier([call("t1", args=dict(PERSONAL))], actor=AGENT)
    review = svc.get(front.reviews[0].id)
    svc.approve(review.id, reviewer=ALICE, sig=decision.prepare_approve(review).sign(keys.alice, store.log_id, ALICE))
    commitment = json.loads(_raw(store, review.opened_seq))["body"]["call"]["args"]["to"]
    with Db(store_url) as db:
        db.run(("UPDATE signoff_value SET value = ? WHERE commitment = ?", (json.dumps("Mallory"), commitment)))
    with pytest.raises(DecisionNotProven, match=f"review {review.id}: call.args.to"):
        prove_decision(store, review.id)
    assert "call.args.to" in svc.get(review.id).problem
    report = verify_store(store)
    assert not report.ok and review.id in str(report.failure) and "value beside the log" in str(report.failure)


def test_an_approval_of_values_changed_behind_the_service_is_refused_in_its_transaction(
    svc: ReviewService, store: Store, store_url: str, keys: Keys
) -> None:
    """The gap issue 20's note named: approve re-reads the round's values beside the log in its own
    transaction (as edit does), so a value changed there since the page was shown is refused and
    nothing is written."""
    front = svc.open_frontier([call("t9", args=dict(PERSONAL))], actor=AGENT)
    review = svc.get(front.reviews[0].id)
    sig = decision.prepare_approve(review).sign(keys.alice, store.log_id, ALICE)
    commitment = json.loads(_raw(store, review.opened_seq))["body"]["call"]["args"]["to"]
    with Db(store_url) as db:
        db.run(("UPDATE signoff_value SET value = ? WHERE commitment = ?", (json.dumps("Mallory"), commitment)))
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(ExecutionMismatch, match=f"review {review.id}: args"):
        svc.approve(review.id, reviewer=ALICE, sig=sig)
    assert store.size() == size and snapshot(store_url) == before


def test_a_value_deleted_without_an_erasure_is_named(
    svc: ReviewService, store: Store, store_url: str, keys: Keys
) -> None:
    review_id = _run_one(svc, keys)
    with Db(store_url) as db:
        db.run(("DELETE FROM signoff_value WHERE owner = ? AND value = ?", (review_id, json.dumps("Alice Smith"))))
    report = verify_store(store)
    assert not report.ok
    assert f"review {review_id}" in str(report.failure) and "no data.erased" in str(report.failure)


def test_a_salt_swapped_or_a_row_moved_is_refused(svc: ReviewService, store: Store, store_url: str, keys: Keys) -> None:
    first, second = _run_one(svc, keys, cid="a"), _run_one(svc, keys, cid="b")
    with Db(store_url) as db:
        rows = db.rows("SELECT commitment, salt FROM signoff_value WHERE owner = ? ORDER BY commitment", (first,))
        (c1, s1), (c2, s2) = rows[0], rows[1]
        db.run(
            ("UPDATE signoff_value SET salt = ? WHERE commitment = ?", (s2, c1)),
            ("UPDATE signoff_value SET salt = ? WHERE commitment = ?", (s1, c2)),
        )
    report = verify_store(store)
    assert not report.ok and first in str(report.failure)
    with Db(store_url) as db:  # put the salts back, then move one value to the other review
        db.run(
            ("UPDATE signoff_value SET salt = ? WHERE commitment = ?", (s1, c1)),
            ("UPDATE signoff_value SET salt = ? WHERE commitment = ?", (s2, c2)),
        )
        assert verify_store(store).ok
        db.run(("UPDATE signoff_value SET owner = ? WHERE commitment = ?", (second, c1)))
    report = verify_store(store)
    assert not report.ok and "value beside the log" in str(report.failure)


def _secrets_in_store(store_url: str) -> list[bytes]:
    """The personal strings still anywhere in the store's bytes: SQLite's file and WAL, or the
    PostgreSQL relation files of signoff_value (after VACUUM FULL and a checkpoint)."""
    if backend_of(store_url) == "sqlite":
        path = Path(sqlite_path(store_url))
        data = b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    else:
        with Db(store_url) as db:
            data = b""
            for table in ("signoff_value", "signoff_entry", "signoff_review"):
                (relpath,) = db.one(f"SELECT pg_relation_filepath('{table}')")
                try:
                    (blob,) = db.one(f"SELECT pg_read_binary_file('{relpath}')")
                except Exception as exc:  # noqa: BLE001 - needs superuser or pg_read_server_files
                    pytest.skip(f"cannot read the relation's file: {exc}")
                data += bytes(blob)
    return [secret for secret in SECRETS if secret in data]


def test_erase_by_requester_end_to_end(
    svc: ReviewService, store: Store, store_url: str, keys: Keys, key_path: Path
) -> None:
    review_id = _run_one(svc, keys)
    other = _run_one(svc, keys, user="cust-7", cid="c2")
    before = verify_store(store)
    assert before.ok
    point = store.checkpoint(key_path)  # a checkpoint, and a proof of the opening under it, made before
    proof = build_inclusion(store, svc.get(review_id).opened_seq, point.size)
    admin_key = str(key_path.with_name(key_path.stem + ".admin" + key_path.suffix))
    done = run_cli(
        store_url,
        None,
        "erase",
        "--requester",
        "user-1",
        "--reason",
        "GDPR art. 17 #12",
        "--admin-key",
        admin_key,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    erased = json.loads(done.stdout)["erased"]
    assert sorted(row["review"] for row in erased) == sorted([review_id, other])
    assert all(row["erased"] >= 6 for row in erased)
    # the entries before the erasure are unchanged: the tree they made has the same root
    after = verify_store(store)
    assert after.ok, after.failure
    assert check_inclusion(json.loads(json.dumps(proof)))["seq"] == svc.get(review_id).opened_seq
    assert store.root(point.size) == bytes.fromhex(point.root.removeprefix("sha256:"))
    assert verify_store(store, against=point).ok  # the log after the erasure extends the one before
    assert any(
        "2 review(s) with erased values: rules that need them were checked at write time" in n for n in after.notes
    )
    shown = run_cli(store_url, None, "show", review_id)
    assert shown.returncode == 0, shown.stderr
    assert "Alice" not in shown.stdout and "DE8937" not in shown.stdout and "GDPR art. 17 #12" in shown.stdout
    review = svc.get(review_id)
    assert review.erasures and review.erasures[0][1:] == (ADMIN, "GDPR art. 17 #12") and not review.problem
    if backend_of(store_url) == "postgresql":
        from signoff.audit.erasure import vacuum

        vacuum(store)
    else:
        store.close()
    assert _secrets_in_store(store_url) == []


def test_erasure_refusals(svc: ReviewService, store: Store, keys: Keys) -> None:
    front = svc.open_frontier([call("r1", args=dict(PERSONAL))], actor=AGENT)
    pending = front.reviews[0].id
    with pytest.raises(NotAllowed, match="found it pending"):
        erasure.erase(store, pending, reason="asked", admin=keys.admin)
    review = svc.get(pending)
    svc.approve(pending, reviewer=ALICE, sig=decision.prepare_approve(review).sign(keys.alice, store.log_id, ALICE))
    with pytest.raises(NotAllowed, match="approved and not yet run"):
        erasure.erase(store, pending, reason="asked", admin=keys.admin)
    with pytest.raises(NotAllowed, match="reason"):
        erasure.erase(store, pending, reason=" ", admin=keys.admin)
    with pytest.raises(NotAllowed, match="admin"):
        erasure.erase(store, pending, reason="asked", admin=keys.alice)
    done = _run_one(svc, keys, cid="r2")
    erasure.erase(store, done, reason="asked", admin=keys.admin, fields=["iban"])
    assert svc.get(done).call.args["to"] == "Alice Smith"  # only the field asked for
    assert sealing.is_commitment(svc.get(done).call.args["iban"])
    erasure.erase(store, done, reason="asked", admin=keys.admin)
    with pytest.raises(erasure.NothingToErase):
        erasure.erase(store, done, reason="asked again", admin=keys.admin)
    assert verify_store(store).ok


def test_erase_refuses_on_a_log_that_keeps_values_in_entries(tmp_path: Path) -> None:
    from signoff.audit import open_store
    from signoff.audit.keys import read_private_key

    store = open_store(f"sqlite:///{tmp_path / 'old.db'}")
    store.init_log(tmp_path / "log.key", sealed_values=False)
    with pytest.raises(NotAllowed, match="keeps values in its entries"):
        erasure.erase(store, "rv_0000000000000000", reason="asked", admin=read_private_key(tmp_path / "log.admin.key"))


def test_a_forged_erasure_is_named_by_verify(svc: ReviewService, store: Store, store_url: str, keys: Keys) -> None:
    review_id = _run_one(svc, keys)
    commitments = [
        r.commitment for r in store.read_rows("SELECT commitment FROM signoff_value WHERE owner = ?", review_id)
    ]
    with Db(store_url) as db:  # an unsigned data.erased by a service, not for retention
        forge_append(
            db,
            "service:signoff",
            "data.erased",
            {"review": review_id, "commitments": {review_id: commitments}, "reason": "oops"},
        )
        db.run(("DELETE FROM signoff_value WHERE owner = ?", (review_id,)))
    report = verify_store(store)
    assert not report.ok and "data.erased" in str(report.failure)


def test_retention_runs_on_the_log_clock(svc: ReviewService, store: Store, keys: Keys, clock: FakeClock) -> None:
    svc.set_policy({"policy": "keep", "tools": "*", "retain_values": "2d"}, admin=keys.admin)
    old = _run_one(svc, keys, cid="old")
    clock.advance(86400)
    young = _run_one(svc, keys, cid="young")
    front = svc.open_frontier([call("open", args=dict(PERSONAL), session="s-open")], actor=AGENT)
    clock.advance(86400 + 1)
    done = [item for item in erasure.retention_run(store) if item.entry is not None]
    assert [item.review for item in done] == [old]
    assert sealing.is_commitment(svc.get(old).call.args["to"])
    assert svc.get(young).call.args["to"] == "Alice Smith"
    assert svc.get(front.reviews[0].id).call.args["to"] == "Alice Smith"
    report = verify_store(store)
    assert report.ok, report.failure
    clock.advance(86400)  # the young one is due now; the open one is not done, so it waits
    assert [item.review for item in erasure.retention_run(store) if item.entry is not None] == [young]
    assert verify_store(store).ok


def test_retention_erasure_before_its_time_is_named(
    svc: ReviewService, store: Store, store_url: str, keys: Keys
) -> None:
    svc.set_policy({"policy": "keep", "tools": "*", "retain_values": "30d"}, admin=keys.admin)
    review_id = _run_one(svc, keys)
    commitments = [
        r.commitment for r in store.read_rows("SELECT commitment FROM signoff_value WHERE owner = ?", review_id)
    ]
    with Db(store_url) as db:
        forge_append(
            db,
            "service:signoff",
            "data.erased",
            {"review": review_id, "commitments": {review_id: commitments}, "reason": "retention"},
        )
        db.run(("DELETE FROM signoff_value WHERE owner = ?", (review_id,)))
    report = verify_store(store)
    assert not report.ok and "retention" in str(report.failure)


def test_export_with_and_without_values(
    svc: ReviewService, store: Store, store_url: str, keys: Keys, tmp_path: Path
) -> None:
    _run_one(svc, keys)
    out = tmp_path / "log.jsonl"
    done = run_cli(store_url, None, "export", "-o", str(out))
    assert done.returncode == 0, done.stderr
    values = out.with_name("log.jsonl.values.jsonl")
    assert values.exists() and (values.stat().st_mode & 0o777) == 0o600
    report = verify_file(out)
    assert report.ok and any("checked against their commitments" in n for n in report.notes), report
    bare = tmp_path / "bare.jsonl"
    assert run_cli(store_url, None, "export", "-o", str(bare), "--without-values").returncode == 0
    assert not bare.with_name("bare.jsonl.values.jsonl").exists()
    assert not any(secret in bare.read_bytes() for secret in SECRETS)
    report = verify_file(bare)
    assert report.ok and any("values not at hand" in n for n in report.notes)
    lines = values.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if json.loads(line)["owner"].startswith("rv_"))
    row = json.loads(lines[at])
    row["value"] = "forged"
    lines[at] = json.dumps(row)
    values.write_text("\n".join(lines) + "\n")
    report = verify_file(out)
    assert not report.ok and re.search(r"review rv_[0-9a-f]{16}", str(report.failure))


SMALL = {
    "policy": "small-transfers",
    "tools": "transfer",
    "review_when": "args.amount > vars.limit || !(args.to in vars.known)",
    "vars": {"limit": 1000, "known": ["bob", "ann"]},
}


def test_auto_approval_on_a_sealed_log_and_a_forged_one(
    svc: ReviewService, store: Store, store_url: str, keys: Keys
) -> None:
    """The rule is evaluated on the values (at write, by the gate, by verify); a forged auto-approval of
    5000, its sealed values slipped into the values table too, runs nothing and verify names it."""
    policy = svc.set_policy(SMALL, admin=keys.admin)
    review, why = svc.auto_approve(call("small", args={"amount": 10, "to": "bob"}), actor=AGENT)
    assert review is not None and review.final_args == {"amount": 10, "to": "bob"}, why
    assert prove_decision(store, review.id).review.final_args == {"amount": 10, "to": "bob"}
    assert verify_store(store).ok
    spec = call("big", args={"amount": 5000, "to": "bob"}).to_json()
    sealed, kept = sealing.seal_call(spec, None)
    inputs = {
        "args": sealed["args"],
        "tool": "transfer",
        "agent": "",
        "app": "bank",
        "user": "user-1",
        "vars": SMALL["vars"],
    }
    forged_id = "rv_00000000000000bb"
    body = {
        "review": forged_id,
        "call": sealed,
        "policy": {"name": SMALL["policy"], "seq": policy.seq, "digest": policy_digest(SMALL)},
        "inputs": inputs,
    }
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "review.auto_approved", body)
        for item in kept:
            db.run(
                (
                    "INSERT INTO signoff_value (log, commitment, owner, salt, value) VALUES (?, ?, ?, ?, ?)",
                    (store.log_id, item.commitment, forged_id, item.salt.hex(), sealing.value_json(item.value)),
                )
            )
    with pytest.raises(DecisionNotProven, match="rule"):
        prove_decision(store, forged_id)
    report = verify_store(store)
    assert not report.ok and report.failure is not None and report.failure.seq == forged.seq
    assert "a person must review" in str(report.failure)


def test_the_same_args_give_other_digests(svc: ReviewService, store: Store) -> None:
    """Salted: the digest a person signs tells nothing about the args, even to someone who guesses them."""
    a, b = svc.open_frontier([call("same-a"), call("same-b")], actor=AGENT).reviews
    assert a.call.args == b.call.args and a.args_digest != b.args_digest
    assert a.args_digest != digest(a.call.args)


def test_a_private_value_in_clear_is_named(svc: ReviewService, store: Store, store_url: str) -> None:
    spec = call("clear", args={"amount": 5, "to": "bob"}).to_json()  # written behind the service, unsealed
    body = {
        "review": "rv_00000000000000cc",
        "frontier": "fr_00000000000000cc",
        "call": spec,
        "policy": {"role": None, "deadline_seconds": None},
        "deadline": None,
    }
    with Db(store_url) as db:
        forged = forge_append(db, AGENT, "review.opened", body)
    report = verify_store(store)
    assert not report.ok and report.failure is not None and report.failure.seq == forged.seq
    assert report.failure.rule == "sealed values"


def test_an_erased_log_with_a_forged_row_names_the_row(
    svc: ReviewService, store: Store, store_url: str, keys: Keys
) -> None:
    """verify's second, full-memory pass (made to name a projection row) holds erasures to the same rules."""
    review_id = _run_one(svc, keys)
    erasure.erase(store, review_id, reason="asked", admin=keys.admin)
    with Db(store_url) as db:
        db.run(("UPDATE signoff_review SET decided_by = ? WHERE id = ?", ("human:mallory@example.org", review_id)))
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert "projection" in str(report.failure) and "data.erased" not in str(report.failure), report.failure


def test_a_quorum_on_a_sealed_log(svc: ReviewService, store: Store, keys: Keys) -> None:
    """Two people: an edit starts a round on sealed args; both approvals carry the same sealed answer."""
    from signoff.audit import Signer

    dave = Signer.generate()
    svc.enroll_reviewer("human:dave@example.org", roles=["teller"], tools=["*"], key=dave.public, admin=keys.admin)
    svc.set_policy({"policy": "four-eyes", "tools": "transfer", "approvals": 2}, admin=keys.admin)
    front = svc.open_frontier([call("q1", args=dict(PERSONAL), payload={"question": "which account?"})], actor=AGENT)
    review = svc.get(front.reviews[0].id)
    patch = [{"op": "replace", "path": "/to", "value": "Bob Jones"}]
    edit = decision.prepare_edit(review, patch, "", {"account": "main"})
    sig = edit.sign(keys.alice, store.log_id, ALICE)
    svc.edit(review.id, reviewer=ALICE, patch=patch, payload={"account": "main"}, round=0, sig=sig,
             salts=edit.salts, payload_salt=edit.payload_salt)  # fmt: skip
    review = svc.get(review.id)
    assert review.status == "pending" and review.round_args == {**PERSONAL, "to": "Bob Jones"}
    assert review.round_payload == {"account": "main"} and review.round_payload_salt == edit.payload_salt
    second = decision.prepare_approve(review, "", {"account": "main"})
    assert second.body["payload"] == store.entry(review.approvals[0][1]).body["payload"]  # the same commitment
    done = svc.approve(review.id, reviewer="human:dave@example.org", payload={"account": "main"}, round=1,
                       sig=second.sign(dave, store.log_id, "human:dave@example.org"))  # fmt: skip
    assert done.status == "edited" and done.final_args == {**PERSONAL, "to": "Bob Jones"}
    assert done.answer_payload == {"account": "main"}
    assert prove_decision(store, review.id).review.final_args == {**PERSONAL, "to": "Bob Jones"}
    assert verify_store(store).ok


def test_witness_cosignatures_made_before_an_erasure_still_check(
    svc: ReviewService, store: Store, keys: Keys, tmp_path: Path
) -> None:
    """Three real witnesses cosign the log with a done review in it; its values are then erased. The
    witnesses cosign the grown log (consistent with what they saw), and verify against them passes."""
    from c2spkit import NAMES, Witnesses

    from signoff.audit import witnessing
    from signoff.audit.c2sp import log_vkey
    from signoff.audit.publisher import Publisher

    (tmp_path / "witnesses").mkdir()
    witnesses = Witnesses(tmp_path / "witnesses", log_vkey(store.rules.origin, store.public_key))
    publisher = Publisher(store, keys.log)
    try:
        for name in NAMES:
            witnessing.add_witness(store, witnesses.procs[name].url, witnesses.vkey(name), admin=keys.admin)
        witnessing.set_quorum(store, 3, admin=keys.admin)
        review_id = _run_one(svc, keys)
        before = publisher.publish_once()
        assert before.checkpoint is not None and [p.outcome for p in before.pushed] == ["cosigned"] * 3
        erasure.erase(store, review_id, reason="asked", admin=keys.admin)
        after = publisher.publish_once()  # each witness checks a consistency proof from what it cosigned
        assert [p.outcome for p in after.pushed] == ["cosigned"] * 3
        report = verify_store(store, witnesses=witnesses.verifiers(), quorum=3)
        assert report.ok, report.failure
        assert report.witnessed is not None and report.witnessed.size == after.checkpoint.size  # type: ignore[union-attr]
        assert verify_store(store, against=before.checkpoint).ok  # the checkpoint cosigned before still checks
    finally:
        publisher.close()
        witnesses.close()


def test_retention_run_through_the_cli_signs_as_the_log_asks(
    svc: ReviewService, store: Store, store_url: str, keys: Keys, tmp_path: Path, key_path: Path
) -> None:
    """A service with an enrolled key must sign its data.erased: unsigned, the run says why (exit 2) and
    erases nothing; with its key file it erases what is due (the CLI runs on today's clock, two days
    after the test clock's reviews, past their one-day retention)."""
    from signoff.audit import Signer
    from signoff.audit.keys import write_private_key

    svc.set_policy({"policy": "keep", "tools": "*", "retain_values": "1d"}, admin=keys.admin)
    service = Signer.generate()
    svc.enroll_key("service:signoff", service.public, admin=keys.admin)
    write_private_key(service, tmp_path / "service.pem")
    first, second = _run_one(svc, keys, cid="r1"), _run_one(svc, keys, cid="r2")
    unsigned = run_cli(store_url, None, "retention", "run", "--json")
    assert unsigned.returncode == 2, unsigned.stderr
    out = json.loads(unsigned.stdout)
    assert out["erased"] == [] and len(out["refused"]) == 2 and all("sig" in r["refused"] for r in out["refused"])
    signed = run_cli(store_url, None, "retention", "run", "--service-key", str(tmp_path / "service.pem"), "--json")
    assert signed.returncode == 0, signed.stderr
    assert sorted(r["review"] for r in json.loads(signed.stdout)["erased"]) == sorted([first, second])
    assert all(e.sig is not None for e in store.entries(kind="data.erased"))
    assert verify_store(store).ok
    assert erasure.retention_run(store, signer=service) == []  # erased reviews are not looked at again
    admin_key = str(key_path.with_name(key_path.stem + ".admin" + key_path.suffix))
    both = run_cli(store_url, None, "retention", "run", "--admin-key", admin_key, "--service-key", "x.pem")
    assert both.returncode == 2 and "one of them" in both.stderr


def _erase_cli(store_url: str, key_path: Path, review_id: str, *extra: str) -> Any:
    admin_key = str(key_path.with_name(key_path.stem + ".admin" + key_path.suffix))
    return run_cli(
        store_url, None, "erase", review_id, "--reason", "GDPR art. 17 #13", "--admin-key", admin_key, *extra
    )


def test_erase_vacuum_gives_the_bytes_back_while_another_process_holds_the_store_open(
    svc: ReviewService, store: Store, store_url: str, keys: Keys, key_path: Path
) -> None:
    """Issue 34 item 1: ``audit erase --vacuum`` exited 2 ("database table is locked") after committing the
    erasure, and the values stayed in the file. This process keeps the store open (its pool's connections)
    while the CLI erases and vacuums in another."""
    review_id = _run_one(svc, keys)
    assert svc.get(review_id).call.args["iban"] == PERSONAL["iban"]  # this process has read through the store
    done = _erase_cli(store_url, key_path, review_id, "--vacuum")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(rf"{review_id}: erased \d+ value\(s\), data\.erased at seq \d+", lines[0]), lines
    assert lines[1:] == ["vacuum: done"]
    assert _secrets_in_store(store_url) == []  # with this process's store still open
    assert verify_store(store).ok


def test_erase_vacuum_says_what_it_could_not_do_after_the_erasure(
    svc: ReviewService, store: Store, store_url: str, keys: Keys, key_path: Path
) -> None:
    """A reader that keeps an old snapshot for the whole wait: the erasure's outcome comes first, then what
    the vacuum could not do and why, exit 2; the erasure itself stands."""
    if backend_of(store_url) != "sqlite":
        pytest.skip("a WAL checkpoint is SQLite's; PostgreSQL's VACUUM FULL waits for its lock")
    import sqlite3

    review_id = _run_one(svc, keys)
    reader = sqlite3.connect(sqlite_path(store_url), isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM signoff_value").fetchone()  # an old snapshot, held
        done = _erase_cli(store_url, key_path, review_id, "--vacuum", "--json")
    finally:
        reader.close()
    assert done.returncode == 2, done.stderr
    out = json.loads(done.stdout)
    [row] = out["erased"]
    assert row["review"] == review_id and row["erased"] >= 6
    assert out["vacuum"]["done"] is False
    assert "the WAL checkpoint could not finish" in out["vacuum"]["why"]
    assert "another connection kept reading the store for 5 s" in out["vacuum"]["why"]
    assert svc.get(review_id).erasures  # committed, whatever the vacuum said
