from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the repository root, when pytest is not run as ``python -m pytest``
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
from _support import REVIEWER, REVIEWER_KEY, RUNS_ENV, key_of  # noqa: E402

from signoff import bridge  # noqa: E402
from signoff.audit import ReviewService, Store, open_store  # noqa: E402
from signoff.audit.keys import read_private_key  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402
from signoff.audit.verify import verify_store  # noqa: E402

PG_URL = os.environ.get("SIGNOFF_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _init(url: str, key: Path) -> str:
    store = open_store(url)
    try:
        store.init_log(key)
        admin = read_private_key(default_admin_key(key))
        svc = ReviewService(store)
        svc.enroll_reviewer(REVIEWER, roles=["teller"], tools=["*"], key=REVIEWER_KEY.public, admin=admin)
        bob = "human:bob@example.org"
        svc.enroll_reviewer(bob, roles=["intern"], tools=["lookup"], key=key_of(bob).public, admin=admin)
    finally:
        store.close()
    return url


@pytest.fixture
def runs_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "runs.jsonl"
    monkeypatch.setenv(RUNS_ENV, str(path))
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return _init(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path / "log.key")


def _pg_schema_url() -> Iterator[str]:
    try:
        import psycopg

        conn = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL at {PG_URL} is required when CI=true, but connecting failed: {exc}")
        pytest.skip(f"PostgreSQL at {PG_URL} is not reachable ({exc}); set SIGNOFF_PG_URL or start it")
    schema = "bridge_" + secrets.token_hex(6)
    conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        conn.close()


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    for url in _pg_schema_url():
        yield _init(url, tmp_path / "log.key")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield _init(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path / "log.key")
    else:
        for url in _pg_schema_url():
            yield _init(url, tmp_path / "log.key")


@pytest.fixture
def signoff(sqlite_url: str) -> Iterator[bridge.Signoff]:
    s = bridge.Signoff(sqlite_url)
    yield s
    assert_bound(s.store)
    s.close()


def assert_bound(store: Store) -> None:
    """The binding: the log verifies, and every tool.executed digest is the approved digest."""
    report = verify_store(store)
    assert report.ok, report.to_json()
    approved: dict[str, str] = {}
    for entry in store.entries():
        if entry.kind in ("review.approved", "review.edited"):  # a quorum's last approval names the final args
            approved[entry.body["review"]] = entry.body["args_digest"]
        elif entry.kind == "review.auto_approved":
            approved[entry.body["review"]] = entry.body["call"]["args_digest"]
        elif entry.kind == "tool.executed":
            assert entry.body["args_digest"] == approved[entry.body["review"]], entry.body
