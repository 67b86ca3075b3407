"""Shared fixtures: a real store on a SQLite file and on the real PostgreSQL server.

PostgreSQL tests use ``SIGNOFF_PG_URL`` (default: the local server's ``test`` database),
each in a fresh schema. Without a server they skip with the reason; under ``CI=true`` a
missing server is a failure, not a skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

PG_URL = os.environ.get("SIGNOFF_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_unavailable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # any failure to connect means: no server here
        return f"PostgreSQL at {PG_URL} is not reachable ({type(exc).__name__}: {exc})".strip()
    return None


@pytest.fixture(scope="session")
def pg_server() -> str:
    reason = _pg_unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}")
        pytest.skip(reason)
    return PG_URL


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A store URL on a fresh PostgreSQL schema, dropped afterwards."""
    import psycopg

    schema = "t_" + secrets.token_hex(6)
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in pg_server else "?"
    yield f"{pg_server}{sep}options={quote(f'-csearch_path={schema}')}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL on each backend in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'signoff.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url
