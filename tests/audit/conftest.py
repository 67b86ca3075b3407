"""Fixtures for the audit tests: an initialised store on each backend, the keys of its admin and
reviewers, a review service with enrolled reviewers, and a pristine log cloned per test for the
tampering tests.

``store_url`` (tests/conftest.py) gives a SQLite file and a fresh PostgreSQL schema.
"""

from __future__ import annotations

import secrets
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from auditkit import (  # noqa: E402
    ALICE,
    BOB,
    CAROL,
    PG_BASE,
    Case,
    Db,
    FakeClock,
    Keys,
    backend_of,
    build_pristine,
    pg_schema,
    sqlite_path,
)
from c2spkit import Witnesses  # noqa: E402

from signoff.audit import ReviewService, Store, open_store  # noqa: E402
from signoff.audit.c2sp import log_vkey  # noqa: E402
from signoff.audit.keys import Signer  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def key_path(tmp_path: Path) -> Path:
    return tmp_path / "keys" / "log-key.pem"


@pytest.fixture
def store(request: pytest.FixtureRequest, store_url: str, key_path: Path, clock: FakeClock) -> Iterator[Store]:
    """A store with a fresh log (rules 2, signed decisions; its admin key beside the log key; values
    sealed beside the log unless the test is marked ``in_entries``), on the clock the test controls."""
    st = open_store(store_url, clock=clock)
    st.init_log(key_path, sealed_values=request.node.get_closest_marker("in_entries") is None)
    yield st
    st.close()


@pytest.fixture
def keys(store: Store, key_path: Path) -> Keys:
    """The admin's key (written by ``init_log``) and a key for each of alice, bob and carol."""
    return Keys.for_log(key_path)


@pytest.fixture
def admin(keys: Keys) -> Signer:
    return keys.admin


@pytest.fixture
def svc(store: Store, keys: Keys) -> ReviewService:
    """A review service (no key of its own: the agent host's) with alice (teller, every tool), bob
    (intern, lookup*) and carol (disabled), each enrolled by the admin with their own key."""
    service = ReviewService(store)
    service.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
    service.enroll_reviewer(BOB, roles=["intern"], tools=["lookup*"], key=keys.bob.public, admin=keys.admin)
    service.enroll_reviewer(CAROL, roles=["teller"], tools=["*"], key=keys.carol.public, admin=keys.admin)
    service.disable_reviewer(CAROL, reason="on leave", admin=keys.admin)
    return service


class _Pristines:
    """Builds the pristine log once per backend (per session) and clones it on demand."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.built: dict[str, tuple[str, Path, dict[str, Any]]] = {}
        self.schemas: list[str] = []

    def get(self, backend: str) -> tuple[str, Path, dict[str, Any]]:
        if backend not in self.built:
            key = self.tmp / f"pristine-{backend}.pem"
            if backend == "sqlite":
                url = f"sqlite:///{self.tmp / 'pristine.db'}"
            else:
                import psycopg

                schema = "pristine_" + secrets.token_hex(5)
                with psycopg.connect(PG_BASE, autocommit=True) as conn:
                    conn.execute(f'CREATE SCHEMA "{schema}"')
                self.schemas.append(schema)
                url = f"{PG_BASE}{'&' if '?' in PG_BASE else '?'}options=-csearch_path%3D{schema}"
            meta = build_pristine(url, key)
            self.built[backend] = (url, key, meta)
        return self.built[backend]

    def clone(self, target_url: str) -> tuple[Path, dict[str, Any]]:
        backend = backend_of(target_url)
        source, key, meta = self.get(backend)
        if backend == "sqlite":
            src = sqlite3.connect(sqlite_path(source))
            dst = sqlite3.connect(sqlite_path(target_url))
            src.backup(dst)
            dst.close()
            src.close()
        else:
            import psycopg

            src_schema, dst_schema = pg_schema(source), pg_schema(target_url)
            with Db(source) as db:
                tables = db.tables()
            with psycopg.connect(PG_BASE, autocommit=True) as conn, conn.transaction():
                for table in tables:
                    conn.execute(f'CREATE TABLE "{dst_schema}".{table} (LIKE "{src_schema}".{table} INCLUDING ALL)')
                    conn.execute(f'INSERT INTO "{dst_schema}".{table} SELECT * FROM "{src_schema}".{table}')
        return key, meta

    def drop(self) -> None:
        if not self.schemas:
            return
        import psycopg

        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="session")
def pristines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Pristines]:
    holder = _Pristines(tmp_path_factory.mktemp("pristine"))
    yield holder
    holder.drop()


@pytest.fixture
def case(store_url: str, pristines: _Pristines, tmp_path: Path) -> Iterator[Case]:
    key, meta = pristines.clone(store_url)
    local_key = tmp_path / "log-key.pem"
    shutil.copy(key, local_key)
    shutil.copy(default_admin_key(key), default_admin_key(local_key))
    found = Case(store_url, local_key, meta, tmp_path)
    yield found
    found.close()


@pytest.fixture
def witnesses(store: Store, tmp_path: Path) -> Iterator[Witnesses]:
    """Local witnesses of ``store``'s log (test_witnessing, test_tlog_store, test_evidence)."""
    (tmp_path / "witnesses").mkdir()
    found = Witnesses(tmp_path / "witnesses", log_vkey(store.rules.origin, store.public_key))
    yield found
    found.close()
