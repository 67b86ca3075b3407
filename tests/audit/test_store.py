"""The store: one URL per backend, durable compare-and-swap appends, group commit, failed
writes that raise and write nothing, streaming reads, and Merkle proofs from stored nodes."""

from __future__ import annotations

import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from auditkit import ADMIN, AGENT, ALICE, PG_BASE, Db, Keys, admin_draft, backend_of, call, key_body, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.exc import SQLAlchemyError

from signoff.audit import (
    AuditError,
    CanonicalFormError,
    InvalidEntry,
    LogExists,
    LogNotFound,
    NotAllowed,
    ReviewError,
    ReviewService,
    Store,
    StoreError,
    merkle,
    open_store,
)
from signoff.audit.keys import read_private_key
from signoff.audit.store import default_admin_key
from signoff.audit.verify import verify_store

STORAGE_ERRORS = (AuditError, SQLAlchemyError, sqlite3.Error, psycopg.Error)
Draft = tuple[str, str, dict[str, Any], dict[str, str]]


@pytest.fixture
def draft(store: Store, keys: Keys) -> Callable[[int | str], Draft]:
    """A ``key.enrolled`` draft the store may append itself: by the admin, signed with the admin key."""
    return lambda n: admin_draft(store, keys.admin, key_body(n))


# -- opening ------------------------------------------------------------------------------


def test_sqlite_store_uses_wal_and_synchronous_full(tmp_path: Path, key_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        store.init_log(key_path)
        for engine in (store.write_engine, store.read_engine):
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
                assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    finally:
        store.close()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("sqlite:///:memory:", "expected a SQLite file"),
        ("sqlite://", "expected a SQLite file"),
        ("mysql://root@localhost/x", "expected sqlite:/// or postgresql://"),
        ("postgresql://postgres@127.0.0.1:1/test", "expected a reachable database"),
    ],
)
def test_unusable_store_urls_are_refused_clearly(url: str, words: str) -> None:
    with pytest.raises(StoreError) as caught:
        open_store(url)
    assert words in str(caught.value)


def test_postgres_scheme_alias(pg_url: str, key_path: Path) -> None:
    alias = "postgres://" + pg_url[len("postgresql://") :]
    store = open_store(alias)
    try:
        assert store.init_log(key_path).size == 2
    finally:
        store.close()


def test_empty_store_has_no_log(store_url: str) -> None:
    store = open_store(store_url)
    try:
        with pytest.raises(LogNotFound, match="run `audit init`"):
            store.info()
        with pytest.raises(LogNotFound):
            store.size()
    finally:
        store.close()


def test_init_creates_entry_zero_and_the_rules(store: Store, key_path: Path, tmp_path: Path) -> None:
    info = store.info()
    assert info.size == 2 and info.id.startswith("log_") and info.public_key.startswith("ed25519:")
    first = store.entry(0)
    assert first.kind == "key.enrolled" and first.actor == f"log:{info.id}" and first.body["key"] == info.public_key
    # entry 1 states the rules (version 2, signed decisions) and the first admin's key, a key of its own
    admin_file = default_admin_key(key_path)
    assert admin_file.name == "log-key.admin.pem" and stat.S_IMODE(admin_file.stat().st_mode) == 0o600
    admin = read_private_key(admin_file)
    rules = store.entry(1)
    assert (rules.kind, rules.actor) == ("log.configured", f"log:{info.id}")
    assert rules.body == {
        "rules": 2,
        "decisions": "signed",
        "admin": {"actor": ADMIN, "key": admin.public, "alg": "Ed25519"},
        "values": "sealed",  # a new log keeps its values beside it (SPEC.md §10)
    }
    assert admin.public != info.public_key
    assert (store.rules.version, store.rules.signed_decisions, store.rules.sealed_values) == (2, True, True)
    with pytest.raises(LogExists):
        store.init_log(tmp_path / "other.pem")
    assert not (tmp_path / "other.pem").exists() and not default_admin_key(tmp_path / "other.pem").exists()


@pytest.mark.parametrize(("admin", "signed"), [("admin:ops", False), ("human:root@example.org", True), ("admin", True)])
def test_init_names_its_admin_and_the_decision_rule(tmp_path: Path, admin: str, signed: bool) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        if not admin.startswith("admin:"):
            with pytest.raises(InvalidEntry, match="admin:"):
                store.init_log(tmp_path / "k.pem", admin=admin, signed_decisions=signed)
            assert not (tmp_path / "k.pem").exists() and not (tmp_path / "k.admin.pem").exists()
            return
        store.init_log(tmp_path / "k.pem", tmp_path / "elsewhere" / "ops.pem", admin=admin, signed_decisions=signed)
        body = store.entry(1).body
        assert body["decisions"] == "unsigned-allowed" and body["admin"]["actor"] == admin
        assert body["admin"]["key"] == read_private_key(tmp_path / "elsewhere" / "ops.pem").public
        assert not (tmp_path / "k.admin.pem").exists()
        assert store.rules.signed_decisions is False
        assert verify_store(store).ok
    finally:
        store.close()


def test_concurrent_init_creates_exactly_one_log(pg_url: str, tmp_path: Path) -> None:
    for round_ in range(3):
        stores = [open_store(pg_url) for _ in range(3)]
        if round_:
            with Db(pg_url) as db:
                db.run("DELETE FROM signoff_key", "DELETE FROM signoff_entry", "DELETE FROM signoff_log")
        barrier = threading.Barrier(len(stores))
        outcome: list[str] = []

        def init(
            index: int, store: Store, r: int = round_, barrier: Any = barrier, outcome: list[str] = outcome
        ) -> None:
            barrier.wait()
            try:
                store.init_log(tmp_path / f"k{r}-{index}.pem")
                outcome.append("ok")
            except LogExists:
                outcome.append("exists")

        threads = [threading.Thread(target=init, args=(i, s)) for i, s in enumerate(stores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in stores:
            s.close()
        with Db(pg_url) as db:
            logs = db.one("SELECT count(*) FROM signoff_log")[0]
        assert sorted(outcome) == ["exists", "exists", "ok"] and logs == 1, (round_, outcome, logs)


def test_first_open_by_several_processes_at_once(pg_server: str) -> None:
    import secrets

    import psycopg

    for _ in range(3):
        schema = "race_" + secrets.token_hex(5)
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = f"{PG_BASE}{'&' if '?' in PG_BASE else '?'}options=-csearch_path%3D{schema}"
        barrier = threading.Barrier(6)
        errors: list[str] = []

        def open_one(target: str = url, barrier: Any = barrier, errors: list[str] = errors) -> None:
            barrier.wait()
            try:
                open_store(target).close()
            except Exception as exc:  # noqa: BLE001 - recording whatever escapes
                errors.append(type(exc).__name__)

        threads = [threading.Thread(target=open_one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        assert errors == []


# -- appending ----------------------------------------------------------------------------


def test_append_moves_the_head_one_at_a_time(store: Store, draft: Callable[[int | str], Draft]) -> None:
    seen = []
    for n in range(5):
        before = store.info()
        item = store.append(*draft(n))
        assert (item.seq, item.prev) == (before.size, before.head)
        seen.append(item)
    assert store.size() == 7
    assert [e.hash for e in store.entries(2)] == [e.hash for e in seen]
    assert verify_store(store).ok


def test_append_many_is_one_group_commit(store: Store, draft: Callable[[int | str], Draft]) -> None:
    items = store.append_many([draft(n) for n in range(50)])
    assert [e.seq for e in items] == list(range(2, 52))
    assert all(b.prev == a.hash for a, b in zip(items, items[1:], strict=False))
    assert store.info().head == items[-1].hash
    assert verify_store(store).ok


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ((ADMIN, "key.enrolled", {"actor": "agent:x", "n": float("nan")}), CanonicalFormError),
        ((ADMIN, "key.enrolled", {"actor": "agent:x", "n": 2**53}), CanonicalFormError),
        ((ADMIN, "key.teleported", {}), InvalidEntry),
        (("nobody", "key.enrolled", {}), InvalidEntry),
        # well formed, but not the admin's: a service, or the admin without the admin key's signature
        (("service:bulk", "key.enrolled", key_body("svc")), NotAllowed),
        ((ADMIN, "key.enrolled", key_body("unsigned")), NotAllowed),
    ],
    ids=["nan", "big-int", "bad-kind", "bad-actor", "service-enrolls", "unsigned-admin"],
)
def test_a_bad_draft_fails_the_whole_batch_and_writes_nothing(
    store: Store, store_url: str, draft: Callable[[int | str], Draft], bad: Any, error: type
) -> None:
    store.append(*draft("first"))
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(error) as caught:
        store.append_many([draft(1), draft(2), bad, draft(3)])
    assert "expected" in str(caught.value) and "found" in str(caught.value)
    with pytest.raises(error):
        store.append(*bad)
    assert store.size() == size and snapshot(store_url) == before
    if isinstance(caught.value, CanonicalFormError):
        assert caught.value.path == "$.drafts[2].body.n"


def _failing_trigger(url: str, table: str) -> None:
    """Make the database refuse writes to ``table`` (a full disk, a revoked grant...)."""
    with Db(url) as db:
        if backend_of(url) == "sqlite":
            db.run(
                f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} "
                "BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END"
            )
        else:
            db.run(
                "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'simulated storage failure'; END $$ LANGUAGE plpgsql",
                f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION refuse()",
            )


def test_a_failed_write_raises_and_is_never_reported_done(
    store: Store, store_url: str, draft: Callable[[int | str], Draft]
) -> None:
    store.append(*draft("first"))
    _failing_trigger(store_url, "signoff_entry")
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(STORAGE_ERRORS) as caught:
        store.append(*draft(1))
    assert "simulated storage failure" in str(caught.value)
    with pytest.raises(STORAGE_ERRORS):
        store.append_many([draft(2), draft(3)])
    assert store.size() == size and snapshot(store_url) == before


def test_a_failed_projection_write_rolls_back_the_entry(store: Store, store_url: str, keys: Keys) -> None:
    svc = ReviewService(store)
    svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
    _failing_trigger(store_url, "signoff_review")
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(STORAGE_ERRORS) as caught:
        svc.open_frontier([call("p1")], actor=AGENT)
    assert "simulated storage failure" in str(caught.value)
    assert store.size() == size and snapshot(store_url) == before
    assert verify_store(store).ok


def test_store_append_refuses_lifecycle_entries_that_break_the_rules(store: Store, store_url: str) -> None:
    svc = ReviewService(store)
    review = svc.open_frontier([call("raw")], actor=AGENT).reviews[0]
    size, before = store.size(), snapshot(store_url)
    with pytest.raises((ReviewError, InvalidEntry)):
        store.append(
            AGENT, "review.approved", {"review": review.id, "args_digest": review.args_digest, "rationale": ""}
        )
    assert store.size() == size and snapshot(store_url) == before


# -- reading ------------------------------------------------------------------------------


def test_streaming_reads_cross_chunk_boundaries(store: Store, draft: Callable[[int | str], Draft]) -> None:
    import signoff.audit.store as store_module

    total = store_module.READ_CHUNK + 150
    store.append_many([draft(n) for n in range(total - store.size())])
    assert store.size() == total
    seqs = [seq for seq, _h, _r in store.iter_raw()]
    assert seqs == list(range(total))
    assert [seq for seq, _h, _r in store.iter_raw(1995, 2010)] == list(range(1995, 2010))
    newest = list(store.entries(newest_first=True, limit=store_module.READ_CHUNK + 5))
    assert [e.seq for e in newest] == list(range(total - 1, total - 1 - store_module.READ_CHUNK - 5, -1))
    assert [e.seq for e in store.entries(start=total - 3)] == [total - 3, total - 2, total - 1]
    assert verify_store(store).ok


def test_entry_filters(store: Store, keys: Keys) -> None:
    svc = ReviewService(store)
    svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
    front = svc.open_frontier([call("f1"), call("f2")], actor=AGENT)
    first, second = front.reviews
    svc.approve(first.id, reviewer=ALICE, signer=keys.alice)
    svc.reject(second.id, reviewer=ALICE, reason="no", signer=keys.alice)
    assert [e.kind for e in store.entries(review=first.id)] == ["review.opened", "review.approved"]
    assert [e.body["review"] for e in store.entries(kind="review.opened")] == [first.id, second.id]
    assert [e.kind for e in store.entries(actor=ALICE)] == ["review.approved", "review.rejected"]
    assert [e.kind for e in store.entries(kind="review.opened", newest_first=True, limit=1)] == ["review.opened"]
    assert next(store.entries(kind="review.opened", newest_first=True)).body["review"] == second.id


def test_missing_entry_says_what_it_expected(store: Store) -> None:
    with pytest.raises(StoreError) as caught:
        store.entry(99)
    assert "seq 99: expected an entry, found none" in str(caught.value)


# -- Merkle tree from stored nodes -------------------------------------------------------


def test_roots_and_proofs_from_the_store_match_the_rfc9162_definitions(
    store: Store, draft: Callable[[int | str], Draft]
) -> None:
    store.append_many([draft(n) for n in range(37 - store.size())])  # 37 leaves: several perfect subtrees
    leaves = [bytes.fromhex(h[7:]) for _s, h, _r in store.iter_raw()]
    n = len(leaves)
    for size in range(1, n + 1):
        root = store.root(size)
        assert root == merkle.root_from_leaves(leaves[:size]), size
        for seq in {0, size // 2, size - 1}:
            proof = store.inclusion_proof(seq, size)
            assert proof == merkle.inclusion_proof(leaves, seq, size)
            merkle.verify_inclusion(leaves[seq], seq, size, proof, root)
        if size < n:
            proof = store.consistency_proof(size, n)
            assert proof == merkle.consistency_proof(leaves, size, n)
            merkle.verify_consistency(size, n, root, store.root(n), proof)
    with pytest.raises(StoreError, match="expected"):
        store.inclusion_proof(n, n)
    with pytest.raises(StoreError, match="expected"):
        store.consistency_proof(0, n)
    with pytest.raises(StoreError, match="expected"):
        store.root(n + 1)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=6))
def test_checkpoints_taken_between_batches_stay_consistent(tmp_path_factory: Any, batches: list[int]) -> None:
    """Checkpoints after batches of any sizes: each root is the tree head at its size and every
    older checkpoint is provably a prefix of every newer one (SQLite; the PG path is shared)."""
    tmp = tmp_path_factory.mktemp("cp")
    store = open_store(f"sqlite:///{tmp / 'cp.db'}")
    try:
        store.init_log(tmp / "k.pem")
        admin = read_private_key(default_admin_key(tmp / "k.pem"))
        points = []
        for count in batches:
            store.append_many([admin_draft(store, admin, key_body(i)) for i in range(count)])
            points.append(store.checkpoint(tmp / "k.pem"))
            assert store.size() == points[-1].size + 1  # the log records its checkpoint
        leaves = [bytes.fromhex(h[7:]) for _s, h, _r in store.iter_raw()]
        for point in points:
            assert point.verify(store.public_key)
            assert point.root == "sha256:" + merkle.root_from_leaves(leaves[: point.size]).hex()
            recorded = store.entry(point.size)
            assert (recorded.kind, recorded.body["root"], recorded.body["note"]) == (
                "log.checkpoint",
                point.root,
                point.note,
            )
        for old, new in zip(points, points[1:], strict=False):
            proof = store.consistency_proof(old.size, new.size)
            merkle.verify_consistency(
                old.size, new.size, bytes.fromhex(old.root[7:]), bytes.fromhex(new.root[7:]), proof
            )
        assert [c.size for c in store.checkpoints()] == [p.size for p in points]
        assert verify_store(store).ok
    finally:
        store.close()


def test_writes_do_not_keep_a_connection_per_thread(store: Store, draft: Callable[[int | str], Draft]) -> None:
    threads = 12
    appended = threading.Barrier(threads + 1)
    release = threading.Event()

    def write(n: int) -> None:
        store.append(*draft(f"t{n}"))
        appended.wait()
        release.wait(10)

    pool = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    try:
        appended.wait(30)
        held = store.write_engine.pool.checkedout()  # type: ignore[attr-defined]
    finally:
        release.set()
        for thread in pool:
            thread.join()
    assert held <= 2, f"{held} connections stay checked out by {threads} threads whose writes all returned"
