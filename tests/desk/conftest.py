"""Desk fixtures: an app on each backend (``store_url`` from tests/conftest.py) and a client.
The helpers live in ``deskkit``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for p in (HERE, HERE.parents[1]):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import pytest  # noqa: E402
from deskkit import BrowserClient, Env, make_env  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from notifykit import Log, make_log  # noqa: E402


@pytest.fixture(autouse=True)
def _cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests hash with N=2^10 (the stored hash records N, so checks stay exact); production uses 2^14."""
    import signoff.desk.auth

    monkeypatch.setattr(signoff.desk.auth, "SCRYPT_N", 2**10)


@pytest.fixture
def log(store_url: str, tmp_path: Path) -> Iterator[Log]:
    """A notifier's log on each backend (notifykit), with alice enrolled; a module may define its own."""
    lg = make_log(store_url, tmp_path)
    yield lg
    lg.close()


@pytest.fixture
def env(store_url: str, tmp_path: Path) -> Iterator[Env]:
    e = make_env(store_url, tmp_path)
    yield e
    e.desk.store.close()


@pytest.fixture
def sqlite_env(tmp_path: Path) -> Iterator[Env]:
    e = make_env(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path)
    yield e
    e.desk.store.close()


@pytest.fixture
def open_env(tmp_path: Path) -> Iterator[Env]:
    """A SQLite log that allows unsigned decisions (as ``desk demo`` makes), reviewers without keys."""
    e = make_env(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path, signed=False)
    yield e
    e.desk.store.close()


@pytest.fixture
def client(env: Env) -> Iterator[TestClient]:
    with BrowserClient(env.app) as c:
        yield c


@pytest.fixture
def sclient(sqlite_env: Env) -> Iterator[TestClient]:
    with BrowserClient(sqlite_env.app) as c:
        yield c


@pytest.fixture
def oclient(open_env: Env) -> Iterator[TestClient]:
    with BrowserClient(open_env.app) as c:
        yield c


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for a module of browser tests (``browserkit.launch``); skipped without
    Chromium, a failure under CI=true."""
    from browserkit import chromium_or_skip, launch

    chromium_or_skip()
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()
