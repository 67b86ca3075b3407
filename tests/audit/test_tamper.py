"""Tampering: edit the database (or an export) directly, as an attacker with write access
would, and check that verification fails and names the right ``seq``.

Each test works on a private copy of the pristine log (``auditkit.build_pristine`` lists its
entries by name) on both backends. Careful forgeries (re-linked chains, rebuilt Merkle nodes)
are first shown to pass the chain checks alone, so the defence the test is about (a kept
checkpoint, a checkpoint logged or stored, a signature) is the one that catches them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from auditkit import ALICE, BOB, Case, Db, cli_argv, leaf, rebuild_tree, relink, run_cli_many, truncate

from signoff.audit import Checkpoint, ReviewService, Signer
from signoff.audit.canonical import canonical
from signoff.audit.errors import VerificationFailed
from signoff.audit.keys import fingerprint
from signoff.audit.verify import Report, verify_file, verify_store


def verify(
    case: Case, *, against: dict[str, Any] | None = None, pinned_key: str | None = None, incremental: bool = False
) -> Report:
    point = Checkpoint.from_json(against) if against is not None else None
    return verify_store(case.store, against=point, pinned_key=pinned_key, incremental=incremental)


def failure(case: Case, **kw: Any) -> VerificationFailed:
    report = verify(case, **kw)
    assert not report.ok, "tampering went unnoticed"
    assert report.failure is not None
    return report.failure


def S(case: Case, name: str) -> int:  # noqa: N802 - reads like the table in build_pristine
    seq: int = case.meta["seq"][name]
    return seq


def test_pristine_copy_verifies(case: Case) -> None:
    report = verify(case)
    assert report.ok, report.failure
    assert report.size == case.meta["size"] == 31
    assert report.checkpoints == 3  # every checkpoint the log made is stored
    assert verify(case, against=case.meta["kept_end"]).ok
    mid = verify(case, against=case.meta["kept_mid"], incremental=True)
    assert mid.ok and mid.checked_from == case.meta["kept_mid"]["size"]


# -- one entry's bytes --------------------------------------------------------------------


def _flip(raw: bytes, index: int) -> bytes:
    return raw[:index] + bytes([raw[index] ^ 0x01]) + raw[index + 1 :]


def test_flipped_byte_is_named(case: Case) -> None:
    """One bit flipped at the first, middle and last byte of several entries, one at a time."""
    with case.db() as db:
        for name in ("log_key", "log_configured", "approve_r1", "edit_r2", "resume_F1", "disable_bob", "tail_1"):
            seq = S(case, name)
            raw = db.raw(seq)
            for index in (0, len(raw) // 2, len(raw) - 1):
                db.run(("UPDATE signoff_entry SET raw = ? WHERE seq = ?", (_flip(raw, index), seq)))
                found = failure(case)
                assert (found.seq, found.rule) == (seq, "entry hash"), (name, index)
                db.run(("UPDATE signoff_entry SET raw = ? WHERE seq = ?", (raw, seq)))
    assert verify(case).ok


def test_flipped_byte_with_its_hash_column_recomputed_is_named(case: Case) -> None:
    """The forger fixes the hash column of the edited entry but does not re-link the chain."""
    with case.db() as db:
        for name in ("opened_r1", "reject_r3", "opened_r6"):
            seq = S(case, name)
            with db.saved():
                raw = db.raw(seq)
                index = raw.index(b'"actor":"') + len(b'"actor":"') + 3  # a letter of the actor: still valid JSON
                edited = _flip(raw, index)
                json.loads(edited)
                db.run(("UPDATE signoff_entry SET raw = ?, hash = ? WHERE seq = ?", (edited, leaf(edited), seq)))
                found = failure(case)
                # the entry itself breaks a rule or a signature, or else the next entry's prev link shows it
                assert found.seq in (seq, seq + 1), (name, str(found))


def test_edited_hash_column_is_named(case: Case) -> None:
    seq = S(case, "resume_F1")
    with case.db() as db:
        db.run(("UPDATE signoff_entry SET hash = ? WHERE seq = ?", ("sha256:" + "ab" * 32, seq)))
    found = failure(case)
    assert (found.seq, found.rule) == (seq, "entry hash")


def _rewrite_last_bytes(case: Case, rewrite: Callable[[int, bytes], bytes]) -> int:
    """Replace the last entry's bytes with ``rewrite(seq, raw)``, recomputing its hash and the Merkle nodes."""
    with case.db() as db:
        rows = db.entries()
        seq, _h, raw = rows[-1]
        changed = rewrite(seq, raw)
        assert changed != raw
        hashes = [h for _s, h, _r in rows]
        hashes[seq] = leaf(changed)
        rebuild_tree(
            db, hashes, [("UPDATE signoff_entry SET raw = ?, hash = ? WHERE seq = ?", (changed, hashes[seq], seq))]
        )
    return int(seq)


def test_non_canonical_bytes_with_a_matching_hash_are_named(case: Case) -> None:
    """The last entry re-serialised non-canonically (spaces); hash and Merkle nodes recomputed."""
    seq = _rewrite_last_bytes(case, lambda _seq, raw: json.dumps(json.loads(raw), indent=1).encode())
    found = failure(case)
    assert found.seq == seq
    assert "canonical" in found.rule


def test_a_whole_number_written_as_a_float_is_named(case: Case) -> None:
    """``"seq":30.0`` reads as the right seq and is compact, sorted and free of backslashes, exactly as
    orjson writes it; RFC 8785 writes ``30``. The fast reader must leave it to the strict one."""
    seq = _rewrite_last_bytes(case, lambda seq, raw: raw.replace(b'"seq":%d' % seq, b'"seq":%d.0' % seq, 1))
    found = failure(case)
    assert (found.seq, found.rule) == (seq, "canonical form (RFC 8785)")


# -- rows deleted or swapped --------------------------------------------------------------


def test_deleted_row_is_named(case: Case) -> None:
    with case.db() as db:
        for name in ("log_key", "log_configured", "service_key", "resume_F2", "checkpoint_first", "tail_0"):
            seq = S(case, name)
            with db.saved():
                db.run(("DELETE FROM signoff_entry WHERE seq = ?", (seq,)))
                found = failure(case)
                assert found.seq == seq and "seq" in found.rule, (name, str(found))


def test_deleted_last_row_is_caught_by_a_kept_checkpoint(case: Case) -> None:
    """Deleting the newest entry a checkpoint covers is a truncation by one: with the log's record
    of that checkpoint (the entry after it) and its stored row gone too, only the checkpoint kept
    elsewhere shows it."""
    last = S(case, "tail_1")
    assert case.meta["kept_end"]["size"] == last + 1 == case.meta["size"] - 1
    with case.db() as db:
        db.run(
            ("DELETE FROM signoff_entry WHERE seq >= ?", (last,)),
            ("DELETE FROM signoff_checkpoint WHERE size > ?", (last,)),
        )
    found = failure(case, against=case.meta["kept_end"])
    assert found.seq == last
    assert "truncation" in found.rule


def test_swapped_rows_are_named(case: Case) -> None:
    """Two rows' bytes swapped, with their hash columns (a consistent swap) and without."""
    with case.db() as db:
        for pair in (("opened_r1", "opened_r2"), ("opened_r3", "opened_r5"), ("tail_0", "tail_1")):
            a, b = S(case, pair[0]), S(case, pair[1])
            with db.saved():
                (ha, ra), (hb, rb) = (db.one("SELECT hash, raw FROM signoff_entry WHERE seq = ?", (s,)) for s in (a, b))
                db.run(
                    ("UPDATE signoff_entry SET raw = ?, hash = ? WHERE seq = ?", (rb, hb, a)),
                    ("UPDATE signoff_entry SET raw = ?, hash = ? WHERE seq = ?", (ra, ha, b)),
                )
                assert failure(case).seq == a, pair
                db.run(
                    ("UPDATE signoff_entry SET hash = ? WHERE seq = ?", (ha, a)),
                    ("UPDATE signoff_entry SET hash = ? WHERE seq = ?", (hb, b)),
                )
                assert failure(case).seq == a, pair


# -- truncation ---------------------------------------------------------------------------


def _truncate(db: Db, new_size: int, *, keep_checkpoints: bool = False) -> None:
    """Cut the log back to ``new_size`` entries the careful way: entries, the key rows they made,
    checkpoints recorded past the cut and the Merkle nodes all made consistent."""
    rows = db.entries()
    dropped = [json.loads(raw) for _seq, _h, raw in rows[new_size:]]
    enrolled = {data["body"]["key"] for data in dropped if data["kind"] == "key.enrolled"}
    revoked = {data["body"]["key"] for data in dropped if data["kind"] == "key.revoked"}
    assert revoked <= {fingerprint(key) for key in enrolled}, "this cut would have to bring a revoked key row back"
    statements: list[tuple[str, Any]] = [("DELETE FROM signoff_entry WHERE seq >= ?", (new_size,))]
    statements += [("DELETE FROM signoff_key WHERE public_key = ?", (key,)) for key in sorted(enrolled)]
    if not keep_checkpoints:  # a checkpoint of size n is recorded at seq n
        statements.append(("DELETE FROM signoff_checkpoint WHERE size >= ?", (new_size,)))
    rebuild_tree(db, [h for _s, h, _r in rows[:new_size]], statements)


def test_truncated_tail_is_caught_by_a_kept_checkpoint(case: Case) -> None:
    with case.db() as db:
        for cut in ("tail_0", "tail_1"):
            new_size = S(case, cut)
            with db.saved():
                _truncate(db, new_size)
                assert verify(case).ok, "the truncation should be careful enough to pass the chain checks alone"
                assert verify(case, against=case.meta["kept_mid"]).ok, "the log still extends the older checkpoint"
                found = failure(case, against=case.meta["kept_end"])
                assert found.seq == new_size and "truncation" in found.rule, (cut, str(found))


def test_stored_checkpoint_beyond_the_head_is_evidence_of_truncation(case: Case) -> None:
    case.store.checkpoint(case.key)  # stored, size 31
    new_size = S(case, "tail_0")
    with case.db() as db:
        _truncate(db, new_size, keep_checkpoints=True)
    found = failure(case)
    assert found.seq == new_size


# -- rewrites with every later entry re-linked -------------------------------------------


def _invocation(data: dict[str, Any]) -> None:
    data["body"]["invocation"] = "inv-forged"


def test_relinked_rewrite_is_caught_by_a_logged_checkpoint(case: Case) -> None:
    """An unsigned entry rewritten and every later entry re-linked, the stored checkpoints it
    contradicts dropped: the log's own record of the next checkpoint, signed by the log key
    (which the forger does not hold), names it."""
    seq = S(case, "resume_F1")  # an agent's entry: unsigned, and no projection holds its body
    with case.db() as db:
        relink(db, seq, _invocation)
        assert json.loads(db.raw(seq))["body"]["invocation"] == "inv-forged"
    for kept in (None, "kept_mid", "kept_end"):
        found = failure(case, against=case.meta[kept] if kept else None)
        assert (found.seq, found.rule) == (S(case, "checkpoint_first"), "logged checkpoint (RFC 9162 tree head)"), (
            kept,
            str(found),
        )


def test_relinked_rewrite_is_caught_by_a_kept_checkpoint(case: Case) -> None:
    """The same rewrite after the last checkpoint but one, the log's record of the newest checkpoint
    (the last entry) dropped too: the log alone passes, the checkpoint the auditor kept does not."""
    seq = S(case, "resume_F6")  # unsigned, after kept_mid
    with case.db() as db:
        relink(db, seq, _invocation)
        truncate(db, S(case, "checkpoint_end"))
        assert json.loads(db.raw(seq))["body"]["invocation"] == "inv-forged"
    assert verify(case).ok, "a re-linked rewrite after the last logged checkpoint passes the chain checks alone"
    assert verify(case, against=case.meta["kept_mid"]).ok, "the older kept checkpoint says nothing of later entries"
    size = case.meta["kept_end"]["size"]
    for incremental in (False, True):
        found = failure(case, against=case.meta["kept_end"], incremental=incremental)
        assert found.seq is not None and seq <= found.seq <= size - 1, (incremental, str(found))
        assert "kept checkpoint" in found.rule


def test_relinked_rewrite_is_caught_by_a_stored_checkpoint(case: Case) -> None:
    with case.db() as db:
        relink(db, S(case, "resume_F1"), _invocation, drop_checkpoints=False)
    found = failure(case)
    assert found.seq == case.meta["stored_checkpoints"][0] - 1  # the first stored checkpoint to disagree
    assert "stored checkpoint" in found.rule


def _set(path: tuple[str, ...], value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        target = data
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return mutate


def _strip(path: tuple[str, ...], value: Any) -> Any:
    change = _set(path, value)

    def mutate(data: dict[str, Any]) -> None:
        change(data)
        del data["sig"]

    return mutate


SIGNED_REWRITES = {
    "log_key": _set(("body", "note"), "rotated"),  # the log's own key entry, signed by the log key
    "log_configured": _set(("body", "decisions"), "unsigned-allowed"),  # the rules, signed by the log key
    "service_key": _set(("body", "actor"), "service:evil"),  # the admin, with the admin key
    "alice_enrolled": _set(("body", "roles"), ["teller", "admin"]),
    "approve_r1": _set(("body", "rationale"), "boss said so"),  # alice, with her key file
    "edit_r2": _set(("body", "rationale"), "boss said so"),  # bob, with his passkey
    "reject_r3": _set(("body", "reason"), "approved by phone"),
    "checkpoint_first": _set(("body", "at"), "2030-01-01T00:00:00.000000Z"),  # the log key
    "expire_r4": _set(("body", "note"), "never mind"),  # the service, with its key
    "disable_bob": _set(("body", "reason"), "promoted"),
    "tail_0": _set(("body", "actor"), "agent:evil"),  # after the last stored checkpoint but one
    "revoke_tail_0": _set(("body", "reason"), "never mind"),
    # the forger drops the signature it cannot remake: an actor with a key signs every entry
    "approve_r7-sig-dropped": _strip(("body", "rationale"), "fine"),
    "edit_r2-sig-dropped": _strip(("body", "rationale"), "fine"),
    "expire_r4-sig-dropped": _strip(("body", "note"), "never mind"),
    "disable_bob-sig-dropped": _strip(("body", "reason"), "promoted"),
    "tail_1-sig-dropped": _strip(("body", "actor"), "agent:evil"),
}


def test_relinked_rewrite_of_a_signed_entry_is_caught_by_its_signature(case: Case) -> None:
    failures = []
    with case.db() as db:
        for name, mutate in SIGNED_REWRITES.items():
            seq = S(case, name.split("-")[0])
            with db.saved():
                assert db.entry_json(seq).get("sig"), f"{name}: the pristine entry should be signed"
                relink(db, seq, mutate)
                found = failure(case)
                if (found.seq, found.rule) != (seq, "signature"):
                    failures.append(f"{name}: expected seq {seq} signature, found {found}")
    assert not failures, "\n".join(failures)


def test_relinked_swap_of_a_passkey_enrolment_is_caught_at_the_enrolment(case: Case) -> None:
    """Bob enrolled his passkey himself, signed with the key derived from his one-time code (whose
    public half the admin put on the log; the code itself never is). A forger who swaps in a passkey of
    their own (and re-links the chain) is caught at that entry: without the code, no valid signature."""
    from passkeys import SoftPasskey

    mallory = SoftPasskey("ES256")
    with case.db() as db:
        relink(db, S(case, "bob_passkey"), lambda data: data["body"].update(mallory.passkey.to_body()))
    found = failure(case)
    assert (found.seq, found.rule) == (S(case, "bob_passkey"), "signature"), str(found)


def test_rewritten_log_key_is_caught_by_a_pinned_key_or_kept_checkpoint(case: Case) -> None:
    """The forger replaces the log key itself and re-signs entry 0 and every log-signed entry."""
    from signoff.audit import c2sp, merkle
    from signoff.audit.entry import format_hash, statement

    forger = Signer.generate()
    with case.db() as db:
        log_id = db.log_id()
        rows = db.entries()
        statements: list[tuple[str, Any]] = []
        prev = "sha256:" + "0" * 64
        hashes = []
        compact = merkle.CompactRange()
        for seq, _h, raw in rows:
            data = json.loads(raw)
            if data["actor"] == f"log:{log_id}":  # entry 0, the rules, and every checkpoint's record
                if seq == 0:
                    data["body"]["key"] = forger.public
                if data["kind"] == "log.checkpoint":
                    point = {"log": log_id, "size": seq, "root": format_hash(compact.root()), "at": data["body"]["at"]}
                    if "note" in data["body"]:  # a C2SP note, signed again by the forger under the log's origin
                        note = c2sp.sign_checkpoint(f"signoff.invalid/{log_id}", seq, point["root"], forger)
                        data["body"].update(root=point["root"], note=note)
                        signed = json.dumps({**point, "note": note})
                    else:
                        data["body"].update(root=point["root"], sig=forger.sign(canonical(point)))
                        signed = json.dumps({**point, "sig": data["body"]["sig"]})
                    statements.append(
                        (
                            "UPDATE signoff_checkpoint SET root = ?, signed = ? WHERE size = ?",
                            (point["root"], signed, seq),
                        )
                    )
                # entries 0 and 1 are signed as before any rules (no log id in the statement)
                data["sig"] = forger.sign(
                    statement(data["kind"], data["actor"], data["body"], log_id if seq > 1 else None)
                )
            data["prev"] = prev
            new_raw = canonical(data)
            prev = leaf(new_raw)
            hashes.append(prev)
            compact.append(bytes.fromhex(prev[7:]))
            statements.append(("UPDATE signoff_entry SET raw = ?, hash = ? WHERE seq = ?", (new_raw, prev, seq)))
        statements.append(("UPDATE signoff_log SET public_key = ?", (forger.public,)))
        statements.append(
            (
                "UPDATE signoff_key SET public_key = ?, fingerprint = ? WHERE enrolled_seq = 0",
                (forger.public, forger.fingerprint),
            )
        )
        rebuild_tree(db, hashes, statements)
    case.close()
    assert verify(case).ok, "a whole-log forgery passes when nothing outside the log is trusted"
    pinned = failure(case, pinned_key=case.meta["log_public_key"])
    assert pinned.seq == 0 and pinned.rule == "log key"
    kept = failure(case, against=case.meta["kept_end"])
    assert "kept checkpoint" in kept.rule


def test_altered_bytes_before_a_kept_checkpoint_are_caught(case: Case) -> None:
    """``--against`` rereads the whole log by default; only ``--incremental`` trusts the prefix."""
    seq = S(case, "reject_r3")
    with case.db() as db:
        raw = db.raw(seq)
        db.run(("UPDATE signoff_entry SET raw = ? WHERE seq = ?", (raw.replace(b"watch list", b"watch lisT"), seq)))
    found = failure(case, against=case.meta["kept_mid"])
    assert found.seq == seq


# -- Merkle nodes -----------------------------------------------------------------------------


def test_edited_merkle_node_is_named(case: Case) -> None:
    """The stored subtree hashes serve proofs; a forged one is caught at the entry that stores it."""
    seq = 7  # the eighth leaf completes the subtrees of levels 1, 2 and 3
    with case.db() as db:
        if db.has_table("signoff_node"):
            db.run(("UPDATE signoff_node SET hash = ? WHERE level = 2 AND idx = 1", (b"\x11" * 32,)))
        else:
            nodes = bytes(db.one("SELECT nodes FROM signoff_entry WHERE seq = ?", (seq,))[0])
            assert len(nodes) == 96
            db.run(("UPDATE signoff_entry SET nodes = ? WHERE seq = ?", (nodes[:32] + b"\x11" * 32 + nodes[64:], seq)))
    from signoff.audit import merkle

    leaves = [bytes.fromhex(h[7:]) for _s, h, _r in case.store.iter_raw()]
    served = case.store.inclusion_proof(0, len(leaves))  # its path passes through the forged node
    assert served != merkle.inclusion_proof(leaves, 0, len(leaves))
    found = failure(case)
    assert found.seq == seq and "Merkle" in found.rule


# -- checkpoints --------------------------------------------------------------------------


def test_edited_stored_checkpoint_is_caught(case: Case) -> None:
    """A stored checkpoint (a C2SP note) edited behind the log's back: its size, root or time in the row, a
    byte of the log's note signature, or a whole note re-signed by another key."""
    from signoff.audit import c2sp

    size = case.meta["stored_checkpoints"][0]
    with case.db() as db:
        original = db.one("SELECT signed FROM signoff_checkpoint WHERE size = ?", (size,))[0]
        for edit in ("root", "size", "at", "sig", "other-key"):
            signed = json.loads(original)
            assert "note" in signed
            if edit == "root":
                signed["root"] = "sha256:" + "00" * 32
            elif edit == "size":
                signed["size"] = size - 1
            elif edit == "at":
                signed["at"] = "2030-01-01T00:00:00.000000Z"
            elif edit == "sig":
                text, _blank, line = signed["note"].partition("\n\n")
                head, value = line.rsplit(" ", 1)
                flipped = value[:10] + ("A" if value[10] != "A" else "B") + value[11:]
                signed["note"] = f"{text}\n\n{head} {flipped}"
            else:  # a new root, signed by somebody else's key under the same origin
                signed["root"] = "sha256:" + "00" * 32
                origin = signed["note"].split("\n", 1)[0]
                signed["note"] = c2sp.sign_checkpoint(origin, size, signed["root"], Signer.generate())
            db.run(("UPDATE signoff_checkpoint SET signed = ? WHERE size = ?", (json.dumps(signed), size)))
            found = failure(case)
            assert "checkpoint" in found.rule, edit
            assert found.seq in (None, size - 1, size), edit
        db.run(("UPDATE signoff_checkpoint SET signed = ? WHERE size = ?", (original, size)))
    assert verify(case).ok


def test_edited_kept_checkpoint_is_caught(case: Case) -> None:
    kept = dict(case.meta["kept_end"])
    kept["size"] = kept["size"] - 1
    found = failure(case, against=kept)
    assert "kept checkpoint" in found.rule


# -- projections --------------------------------------------------------------------------

# (statement, subject, the entry the row follows from)
PROJECTION_EDITS = {
    "review-status-decided": ("UPDATE signoff_review SET status = 'rejected' WHERE id = ?", "r1", "approve_r1"),
    "review-status-pending": ("UPDATE signoff_review SET status = 'approved' WHERE id = ?", "r6", "opened_r6"),
    "review-not-executed": ("UPDATE signoff_review SET executed_seq = NULL WHERE id = ?", "r1", "approve_r1"),
    "review-final-digest": (
        f"UPDATE signoff_review SET final_digest = '{'sha256:' + '00' * 32}' WHERE id = ?",
        "r7",
        "approve_r7",
    ),
    "review-decided-seq": ("UPDATE signoff_review SET decided_seq = 3 WHERE id = ?", "r7", "approve_r7"),
    "review-deadline": (
        "UPDATE signoff_review SET deadline = '2099-01-01T00:00:00.000000Z' WHERE id = ?",
        "r6",
        "opened_r6",
    ),
    "review-decided-by": (
        "UPDATE signoff_review SET decided_by = 'human:mallory@example.org' WHERE id = ?",
        "r7",
        "approve_r7",
    ),
    "review-args-digest": (
        f"UPDATE signoff_review SET args_digest = '{'sha256:' + '11' * 32}' WHERE id = ?",
        "r6",
        "opened_r6",
    ),
    "frontier-not-resumed": ("UPDATE signoff_frontier SET resumed_seq = NULL WHERE id = ?", "F1", "resume_F1"),
    "frontier-open-count": ("UPDATE signoff_frontier SET open_count = 0 WHERE id = ?", "F5", "opened_r6"),
    "reviewer-re-enabled": ("UPDATE signoff_reviewer SET enabled = TRUE WHERE id = ?", BOB, "bob_enrolled"),
    "reviewer-roles": (
        'UPDATE signoff_reviewer SET roles = \'["teller", "admin"]\' WHERE id = ?',
        ALICE,
        "alice_enrolled",
    ),
    "reviewer-tools": ("UPDATE signoff_reviewer SET tools = '[\"*\"]' WHERE id = ?", BOB, "bob_enrolled"),
    "key-row-deleted": ("DELETE FROM signoff_key WHERE actor = ?", ALICE, "alice_enrolled"),
    "passkey-row-deleted": ("DELETE FROM signoff_key WHERE actor = ?", BOB, "bob_passkey"),
    "key-row-swapped": (
        f"UPDATE signoff_key SET public_key = '{Signer.generate().public}' WHERE actor = ?",
        ALICE,
        "alice_enrolled",
    ),
}


def test_edited_projection_row_is_named(case: Case) -> None:
    """Each edit alone (the rows restored in between), named at the entry the row follows from."""
    failures = []
    with case.db() as db:
        for name, (sql, subject, entry) in PROJECTION_EDITS.items():
            ident = case.meta["reviews"].get(subject) or case.meta["frontiers"].get(subject) or subject
            with db.saved():
                db.run((sql, (ident,)))
                report = verify(case)
                found = report.failure
                if report.ok or found is None or found.seq != S(case, entry) or "projection" not in found.rule:
                    failures.append(f"{name}: expected seq {S(case, entry)} projection, found {found}")
    assert not failures, "\n".join(failures)
    assert verify(case).ok


def test_deleted_projection_row_is_caught(case: Case) -> None:
    rows = {
        "signoff_review": case.meta["reviews"]["r6"],
        "signoff_frontier": case.meta["frontiers"]["F5"],
        "signoff_reviewer": BOB,
    }
    with case.db() as db:
        for table, key in rows.items():
            with db.saved():
                db.run((f"DELETE FROM {table} WHERE id = ?", (key,)))
                found = failure(case)
                assert "projection" in found.rule, (table, str(found))


def _edit_data(case: Case, review: str, change: Any) -> None:
    with case.db() as db:
        rid = case.meta["reviews"][review]
        data = json.loads(db.one("SELECT data FROM signoff_review WHERE id = ?", (rid,))[0])
        change(data)
        db.run(("UPDATE signoff_review SET data = ? WHERE id = ?", (json.dumps(data), rid)))


def test_edited_args_in_the_projection_are_caught_and_never_served(case: Case) -> None:
    """The queue's ``data`` holds the args a tool will run with: an edit there is named by the
    verifier, and the service never hands them out: it reads the review from its own log entries."""

    def change(data: dict[str, Any]) -> None:
        data["final_args"] = {"amount": 7000, "to": "mallory"}

    _edit_data(case, "r7", change)
    found = failure(case)
    assert found.seq == S(case, "approve_r7") and "projection" in found.rule
    served = ReviewService(case.store).get(case.meta["reviews"]["r7"])
    assert (served.status, served.final_args) == ("approved", {"amount": 7, "to": "erin"})
    assert served.decision_seq == S(case, "approve_r7")


def test_edited_pending_args_in_the_projection_are_caught(case: Case) -> None:
    def change(data: dict[str, Any]) -> None:
        data["call"]["args"] = {"amount": 5000, "to": "dave"}

    _edit_data(case, "r6", change)
    found = failure(case)
    assert found.seq == S(case, "opened_r6") and "projection" in found.rule


# -- the JSONL export, verified offline -------------------------------------------------


def test_export_holds_the_exact_canonical_bytes(case: Case) -> None:
    from signoff.audit.cli import main

    export = case.tmp / "log.jsonl"
    assert main(["--store", case.url, "export", "-o", str(export)]) == 0
    with case.db() as db:
        assert export.read_bytes().splitlines() == [raw for _s, _h, raw in db.entries()]
    report = verify_file(export, against=Checkpoint.from_json(case.meta["kept_end"]))
    assert report.ok, report.failure
    assert report.size == case.meta["size"] == case.meta["kept_end"]["size"] + 1  # and the checkpoint's record
    assert report.root == "sha256:" + case.store.root().hex()


@pytest.fixture
def exported(pristines: Any, tmp_path: Path) -> tuple[list[bytes], dict[str, Any], Path]:
    """The pristine log as ``audit export`` writes it (one entry's bytes per line) and its kept checkpoint."""
    source, _key, meta = pristines.get("sqlite")
    with Db(source) as db:
        lines = [raw for _s, _h, raw in db.entries()]
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps(meta["kept_end"]), encoding="utf-8")
    return lines, meta, kept


def _write(path: Path, lines: list[bytes]) -> str:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return str(path)


def test_offline_verify_exit_codes_through_the_cli(exported: Any, tmp_path: Path) -> None:
    """``audit verify FILE.jsonl`` as a real subprocess: 0 intact, 1 tampered, 2 unusable input."""
    lines, meta, kept = exported
    flipped = list(lines)
    edit = meta["seq"]["edit_r2"]
    flipped[edit] = flipped[edit].replace(b"typo", b"typp")
    not_json = tmp_path / "not-a-checkpoint.json"
    not_json.write_text("this is not JSON\n", encoding="utf-8")
    jobs = {
        "intact": (["verify", _write(tmp_path / "ok.jsonl", lines), "--against", str(kept)], 0),
        "flipped": (["verify", _write(tmp_path / "flipped.jsonl", flipped)], 1),
        "missing-file": (["verify", str(tmp_path / "nope.jsonl")], 2),
        "not-json-checkpoint": (["verify", _write(tmp_path / "ok2.jsonl", lines), "--against", str(not_json)], 2),
        "empty-file": (["verify", _write(tmp_path / "empty.jsonl", [])], 2),
    }
    names = list(jobs)
    results = dict(
        zip(names, run_cli_many([cli_argv(None, None, *jobs[n][0]) for n in names], cwd=tmp_path), strict=True)
    )
    for name in names:
        assert results[name].returncode == jobs[name][1], (name, results[name].stdout, results[name].stderr)
    assert "TAMPERED" in results["flipped"].stderr
    for name in ("missing-file", "not-json-checkpoint", "empty-file"):
        assert "expected" in results[name].stderr and "found" in results[name].stderr, results[name].stderr
    assert "expected a checkpoint" in results["not-json-checkpoint"].stderr
    assert "expected at least one entry" in results["empty-file"].stderr


@pytest.mark.parametrize("variant", ["flipped", "dropped", "swapped", "tail-cut", "last-flipped", "non-canonical"])
def test_offline_verify_names_the_seq(exported: Any, tmp_path: Path, capsys: Any, variant: str) -> None:
    from signoff.audit.cli import main

    lines, meta, kept = exported
    seq = meta["seq"]
    last = len(lines) - 1
    edited = list(lines)
    if variant == "flipped":  # bob's edit: its passkey signature shows it
        edited[seq["edit_r2"]] = edited[seq["edit_r2"]].replace(b"typo", b"typp")
        expected = (seq["edit_r2"],)
    elif variant == "dropped":
        del edited[seq["exec_r2"]]
        expected = (seq["exec_r2"],)
    elif variant == "swapped":
        a, b = seq["opened_r1"], seq["opened_r2"]
        edited[a], edited[b] = edited[b], edited[a]
        expected = (a,)
    elif variant == "tail-cut":  # only the kept checkpoint of 30 entries shows it
        edited = edited[: seq["tail_1"]]
        expected = (seq["tail_1"],)
    elif variant == "last-flipped":  # no next entry: the log key's signature on it shows it
        start = edited[last].index(b'"root":"sha256:') + len(b'"root":"sha256:')
        digit = b"1" if edited[last][start : start + 1] != b"1" else b"2"
        edited[last] = edited[last][:start] + digit + edited[last][start + 1 :]
        expected = (last,)
    else:
        edited[seq["resume_F2"]] = edited[seq["resume_F2"]].replace(b'"kind":"', b'"kind": "')
        expected = (seq["resume_F2"],)
    path = _write(tmp_path / f"{variant}.jsonl", edited)
    assert main(["verify", path, "--against", str(kept), "--json"]) == 1
    failure_json = json.loads(capsys.readouterr().out)["failure"]
    assert failure_json["seq"] in expected, failure_json
    plain = main(["verify", path, "--json"])
    capsys.readouterr()
    assert plain == (0 if variant == "tail-cut" else 1)


def test_relinked_rewrite_is_caught_through_the_cli(case: Case, capsys: Any) -> None:
    from signoff.audit.cli import main

    with case.db() as db:
        relink(db, S(case, "resume_F1"), _invocation)
    kept_end, kept_mid = case.kept("kept_end"), case.kept("kept_mid")
    (against,) = run_cli_many([cli_argv(case.url, case.key, "verify", "--against", str(kept_end))], cwd=case.tmp)
    assert against.returncode == 1, against.stdout + against.stderr
    assert "TAMPERED" in against.stderr and "checkpoint" in against.stderr
    assert main(["--store", case.url, "consistency", str(kept_mid)]) == 1
    assert "not an extension" in capsys.readouterr().err
