"""The log vouched for outside the operator (issue 18): C2SP checkpoints pushed to real witnesses
(``python -m signoff.audit.cli_witness serve`` processes on 127.0.0.1), their cosignatures recorded on the
log, and the log verified against the witnesses an auditor trusts. On SQLite and PostgreSQL.

The attacks: a cosignature deleted or forged behind the log's back; a witness down while decisions go
on; a log forked (the whole database rewritten with another consistent history, with the same keys and
with new ones), truncated or rolled back, with the witnesses running.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from auditkit import ADMIN, AGENT, ALICE, Db, Keys, admin_draft, call, key_body
from c2spkit import NAMES, Witnesses

from signoff.audit import ReviewService, Signer, Store, open_store, witnessing
from signoff.audit.c2sp import log_vkey
from signoff.audit.errors import InvalidEntry, NotAllowed
from signoff.audit.keys import read_private_key
from signoff.audit.publisher import Publisher
from signoff.audit.signed_note import parse_note
from signoff.audit.tlog_cosignature import Cosigner
from signoff.audit.verify import verify_store


def _enroll(store: Store, keys: Keys, witnesses: Witnesses, quorum: int = 2) -> None:
    for name in NAMES:
        witnessing.add_witness(store, witnesses.procs[name].url, witnesses.vkey(name), admin=keys.admin)
    witnessing.set_quorum(store, quorum, admin=keys.admin)


def _grow(store: Store, keys: Keys, n: int = 3) -> None:
    for i in range(n):
        store.append(*admin_draft(store, keys.admin, key_body(store.size() * 100 + i)))


def test_the_origin_names_the_log_in_its_checkpoints_and_vkey(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url.replace("signoff.db", "origin.db")) if store_url.startswith("sqlite") else None
    if store is None:
        pytest.skip("one backend is enough for the origin's format (the store code is shared)")
    try:
        store.init_log(tmp_path / "o.key", origin="audit.example.org/payments")
        assert store.rules.origin == "audit.example.org/payments"
        point = store.checkpoint(tmp_path / "o.key")
        assert point.note.startswith("audit.example.org/payments\n2\n")
        vkey = log_vkey(store.rules.origin, store.public_key)
        name, key_id, material = vkey.split("+", 2)
        assert name == "audit.example.org/payments" and len(key_id) == 8
        assert base64.b64decode(material)[0] == 0x01
        assert verify_store(store).ok
    finally:
        store.close()
    with pytest.raises(ValueError, match="found a URL scheme"):
        open_store(f"sqlite:///{tmp_path / 'bad.db'}").init_log(tmp_path / "b.key", origin="https://x.org/log")
    with pytest.raises(ValueError, match="plus sign"):
        open_store(f"sqlite:///{tmp_path / 'bad2.db'}").init_log(tmp_path / "c.key", origin="x.org/a+b")


def test_witnesses_are_named_by_an_admin_only_and_checked(store: Store, keys: Keys, witnesses: Witnesses) -> None:
    url, vkey = witnesses.procs[NAMES[0]].url, witnesses.vkey(NAMES[0])
    service = ReviewService(store)
    service.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
    with pytest.raises(NotAllowed, match="admin key"):
        witnessing.add_witness(store, url, vkey, admin=keys.alice)
    with pytest.raises(InvalidEntry, match="type 0x04"):
        witnessing.add_witness(store, url, log_vkey(store.rules.origin, store.public_key), admin=keys.admin)
    with pytest.raises(InvalidEntry, match="body.url"):
        witnessing.add_witness(store, "ftp://nowhere", vkey, admin=keys.admin)
    with pytest.raises(InvalidEntry, match=r"body.quorum: expected 0\.\.0"):
        witnessing.set_quorum(store, 1, admin=keys.admin)
    witnessing.add_witness(store, url, vkey, admin=keys.admin)
    with pytest.raises(InvalidEntry, match="not yet on the log"):
        witnessing.add_witness(store, url, vkey, admin=keys.admin)
    witnessing.set_quorum(store, 1, admin=keys.admin)
    with pytest.raises(InvalidEntry, match="lower the quorum first"):
        witnessing.remove_witness(store, NAMES[0], reason="retired", admin=keys.admin)
    assert witnessing.config(store).quorum == 1 and list(witnessing.config(store).witnesses) == [NAMES[0]]
    assert verify_store(store).ok


def test_checkpoints_are_cosigned_by_real_witnesses_and_recorded_on_the_log(
    store: Store, keys: Keys, key_path: Path, witnesses: Witnesses
) -> None:
    _enroll(store, keys, witnesses)
    publisher = Publisher(store, keys.log)
    try:
        report = publisher.publish_once()
        assert report.made and [p.outcome for p in report.pushed] == ["cosigned"] * 3
        first = report.checkpoint
        assert first is not None
        note = store.latest_checkpoint().note  # type: ignore[union-attr]
        assert len(parse_note(note.encode()).signatures) == 4  # the log's and three cosignatures
        cosigned = list(store.entries(kind="log.cosigned"))
        assert sorted(e.body["witness"] for e in cosigned) == sorted(NAMES)
        assert {e.body["size"] for e in cosigned} == {first.size} and all(e.actor.startswith("log:") for e in cosigned)
        # An idle log is not checkpointed again; a grown one is, and each witness takes a consistency proof.
        again = publisher.publish_once()
        assert not again.made and [p.outcome for p in again.pushed] == ["skipped"] * 3
        _grow(store, keys)
        later = publisher.publish_once()
        assert later.made and [p.outcome for p in later.pushed] == ["cosigned"] * 3
        assert witnessing.coverage(store).covered == later.checkpoint.size  # type: ignore[union-attr]
        report_v = verify_store(store, witnesses=witnesses.verifiers(), quorum=3)
        assert report_v.ok, report_v.failure
        assert report_v.witnessed is not None and report_v.witnessed.size == later.checkpoint.size  # type: ignore[union-attr]
        assert report_v.witnessed.after == store.size() - later.checkpoint.size  # type: ignore[union-attr]
        assert set(report_v.witnessed.online.values()) == {f"agrees at size {later.checkpoint.size}"}  # type: ignore[union-attr]
    finally:
        publisher.close()


def test_a_cosignature_deleted_or_forged_behind_the_logs_back_is_named(
    store: Store, store_url: str, keys: Keys, witnesses: Witnesses
) -> None:
    _enroll(store, keys, witnesses)
    publisher = Publisher(store, keys.log)
    try:
        point = publisher.publish_once().checkpoint
    finally:
        publisher.close()
    assert point is not None
    with Db(store_url) as db:
        (original,) = db.one("SELECT signed FROM signoff_checkpoint WHERE size = ?", (point.size,))
        row = json.loads(original)
        lines = row["note"].splitlines(keepends=True)
        shorter = json.dumps({**row, "note": "".join(lines[:-1])})
        db.run(("UPDATE signoff_checkpoint SET signed = ? WHERE size = ?", (shorter, point.size)))
    found = verify_store(store).failure
    assert found is not None and found.rule == f"stored checkpoint of size {point.size} (its note)"
    with Db(store_url) as db:  # a cosignature by a witness key nobody trusts, added behind the log's back
        stranger = Cosigner("witness.example.org/evil", Signer.generate().private)
        extra = stranger.cosign(parse_note(row["note"].encode()).text).line() + "\n"
        longer = json.dumps({**row, "note": row["note"] + extra})
        db.run(("UPDATE signoff_checkpoint SET signed = ? WHERE size = ?", (longer, point.size)))
    found = verify_store(store).failure
    assert found is not None and "its note" in found.rule


def test_a_witness_that_is_down_delays_only_its_own_cosignature(store: Store, keys: Keys, witnesses: Witnesses) -> None:
    _enroll(store, keys, witnesses)
    clock = [0.0]
    publisher = Publisher(store, keys.log, timeout=1.0, clock=lambda: clock[0])
    service = ReviewService(store)
    service.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
    try:
        witnesses.stop(NAMES[2])
        report = publisher.publish_once()
        assert [p.outcome for p in report.pushed] == ["cosigned", "cosigned", "failed"]
        # Decisions go on meanwhile: nothing on the decision path waits for a witness.
        review = service.open_frontier([call("w1")], actor=AGENT).reviews[0]
        assert service.approve(review.id, reviewer=ALICE, signer=keys.alice).status == "approved"
        coverage = witnessing.coverage(store)
        assert coverage.witnesses[NAMES[2]] is None
        assert coverage.covered == report.checkpoint.size  # type: ignore[union-attr]  # quorum 2 held
        skipped = publisher.publish_once()  # within its backoff: not even tried
        assert [p.outcome for p in skipped.pushed][2] == "skipped" and "backing off" in skipped.pushed[2].detail
        witnesses.start(NAMES[2])  # back, with its state: it never cosigned this log, so old size 0 works
        # Log stored the new URL? The witness restarted on another port: the admin names it again.
        witnessing.remove_witness(store, NAMES[2], reason="moved", admin=keys.admin)
        witnessing.add_witness(store, witnesses.procs[NAMES[2]].url, witnesses.vkey(NAMES[2]), admin=keys.admin)
        clock[0] += 1000
        back = publisher.publish_once()
        assert back.pushed[2].outcome == "cosigned" and publisher.errors == {}
        assert verify_store(store, witnesses=witnesses.verifiers(), quorum=3).ok
    finally:
        publisher.close()


def test_a_witness_ahead_of_the_logs_record_is_caught_up_from_the_size_it_reports(
    store: Store, keys: Keys, witnesses: Witnesses
) -> None:
    """The witness cosigned a checkpoint whose cosignature never reached the log (a crash between its answer
    and the record): the next push from size 0 gets a 409 naming its size, and one retry from it works."""
    from signoff.audit.tlog_witness import add_checkpoint

    _enroll(store, keys, witnesses)
    _grow(store, keys)
    point = store.checkpoint(keys.log)
    for name in NAMES:  # cosigned, but not recorded
        add_checkpoint(witnesses.procs[name].url, point.note.encode(), 0, [])
    _grow(store, keys)
    publisher = Publisher(store, keys.log)
    try:
        report = publisher.publish_once()
    finally:
        publisher.close()
    assert [p.outcome for p in report.pushed] == ["cosigned"] * 3
    assert verify_store(store, witnesses=witnesses.verifiers(), quorum=2).ok


@pytest.mark.parametrize("keys_too", [False, True], ids=["same-keys", "new-keys"])
def test_a_forked_log_is_refused_by_the_witnesses_and_by_verify(
    store: Store, store_url: str, keys: Keys, witnesses: Witnesses, tmp_path: Path, keys_too: bool
) -> None:
    """The operator rewrites the whole database with another consistent history from an earlier point
    (same keys: restored from a backup and written on; new keys: a log of their own under the same origin).
    The witnesses refuse its checkpoints; `audit verify --witness … --quorum 1` exits 1 with a clear message."""
    if not store_url.startswith("sqlite"):
        pytest.skip("the fork is made by copying the SQLite file; the PostgreSQL path is the same code")
    _enroll(store, keys, witnesses, quorum=1)
    store_origin = store.rules.origin
    publisher = Publisher(store, keys.log)
    try:
        publisher.publish_once()
        fork_size_at_backup = store.size()
        backup = tmp_path / "backup.db"
        store.close()
        shutil.copy(store_url.removeprefix("sqlite:///"), backup)
        store = open_store(store_url)
        _grow(store, keys)
        publisher.store = store
        publisher.publish_once()  # the real history goes on, cosigned
        real_size = store.size()
    finally:
        publisher.close()
    store.close()
    fork_url = f"sqlite:///{tmp_path / 'fork.db'}"
    if keys_too:
        fork = open_store(fork_url)
        fork_key = tmp_path / "fork.key"
        fork.init_log(fork_key, origin=store_origin)
        fork_log_key = read_private_key(fork_key)
        fork_admin = read_private_key(tmp_path / "fork.admin.key")
        for name in NAMES:
            witnessing.add_witness(fork, witnesses.procs[name].url, witnesses.vkey(name), admin=fork_admin)
    else:
        shutil.copy(backup, fork_url.removeprefix("sqlite:///"))
        fork = open_store(fork_url)
        fork_log_key, fork_admin = keys.log, keys.admin
    for i in range(5):  # another history: different entries where the real log has its own
        fork.append(*admin_draft(fork, fork_admin, key_body(9000 + i)))
    fork_publisher = Publisher(fork, fork_log_key)
    try:
        refused = fork_publisher.publish_once()
    finally:
        fork_publisher.close()
    assert [p.outcome for p in refused.pushed] == ["failed"] * 3
    assert all("another history" in p.detail or "403" in p.detail or "422" in p.detail for p in refused.pushed), refused
    report = verify_store(fork, witnesses=witnesses.verifiers(NAMES[0]), quorum=1)
    assert not report.ok and report.failure is not None
    message = str(report.failure)
    assert "witness" in message, message
    if not keys_too:
        assert "fork" in report.failure.rule or "truncation" in report.failure.rule
    fork.close()
    assert real_size > fork_size_at_backup


def test_a_rolled_back_log_is_named_by_the_witnesses_newest_checkpoints(
    store: Store, store_url: str, keys: Keys, witnesses: Witnesses, tmp_path: Path
) -> None:
    """Restored from an older backup (its stored, genuinely cosigned checkpoints still prove a prefix): the
    offline check alone passes on that prefix, the witnesses' newest checkpoints show the truncation."""
    if not store_url.startswith("sqlite"):
        pytest.skip("the rollback is made by copying the SQLite file; the PostgreSQL path is the same code")
    _enroll(store, keys, witnesses, quorum=2)
    publisher = Publisher(store, keys.log)
    try:
        publisher.publish_once()
        store.close()
        backup = tmp_path / "backup.db"
        shutil.copy(store_url.removeprefix("sqlite:///"), backup)
        store = open_store(store_url)
        publisher.store = store
        _grow(store, keys)
        publisher.publish_once()
    finally:
        publisher.close()
    store.close()
    shutil.copy(backup, store_url.removeprefix("sqlite:///"))
    for suffix in ("-wal", "-shm"):
        Path(store_url.removeprefix("sqlite:///") + suffix).unlink(missing_ok=True)
    rolled = open_store(store_url)
    try:
        offline = verify_store(rolled, witnesses=witnesses.verifiers(), quorum=2, online=False)
        assert offline.ok and offline.witnessed is not None  # what the backup holds is genuine, as far as it goes
        report = verify_store(rolled, witnesses=witnesses.verifiers(), quorum=2)
        assert not report.ok and report.failure is not None
        assert "truncation or rollback" in report.failure.rule, report.failure
    finally:
        rolled.close()


def test_the_whole_flow_from_a_terminal(
    store: Store, store_url: str, keys: Keys, key_path: Path, witnesses: Witnesses, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The admin names the witnesses, the log pushes to them, the auditor verifies against them and mirrors
    the log as tiles: `audit witness add|quorum|push|status`, `audit verify --witness`, `audit tiles`."""
    from signoff.audit.cli import main

    admin_key = tmp_path / "admin.pem"
    keys.write(ADMIN, admin_key)
    s = ["--store", store_url]
    for name in NAMES:
        url, vkey = witnesses.procs[name].url, witnesses.vkey(name)
        assert main([*s, "witness", "add", url, vkey, "--admin-key", str(admin_key)]) == 0
    assert main([*s, "witness", "quorum", "2", "--admin-key", str(admin_key)]) == 0
    _grow(store, keys)
    capsys.readouterr()
    assert main([*s, "--key", str(key_path), "witness", "push"]) == 0
    out = capsys.readouterr().out
    assert "(made now)" in out and out.count(": cosigned") == 3, out
    assert main([*s, "witness", "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["covered"] is not None and status["unwitnessed"] == status["size"] - status["covered"]
    assert {w["witness"] for w in status["witnesses"]} == set(NAMES)
    flags = [x for name in NAMES for x in ("--witness", witnesses.vkey(name))]
    assert main([*s, "verify", *flags, "--quorum", "3"]) == 0
    out = capsys.readouterr().out
    assert "witnessed: the checkpoint of size" in out and "cosigned by 3 of the witnesses" in out
    assert "agrees at size" in out
    stranger = Cosigner("witness.example.org/stranger", Signer.generate().private).vkey()
    assert main([*s, "verify", "--witness", stranger, "--quorum", "1"]) == 1
    assert "expected a stored checkpoint cosigned by 1" in capsys.readouterr().err
    assert main([*s, "verify", "--witness", "nonsense", "--quorum", "1"]) == 2
    tiles = tmp_path / "tiles"
    assert main([*s, "tiles", str(tiles)]) == 0
    capsys.readouterr()
    assert main([*s, "vkey"]) == 0
    vkey = capsys.readouterr().out.strip()
    assert main(["verify", "--tiles", str(tiles), "--log-vkey", vkey, *flags, "--quorum", "2"]) == 0
    assert main(["verify", "--tiles", str(tiles), "--log-vkey", vkey, "--witness", stranger, "--quorum", "1"]) == 1
