"""Driver-level SQL on the DBAPI cursor, below SQLAlchemy, and the engines it runs on.

SQLite engines use WAL with ``synchronous=FULL`` (DESIGN.md "Three rooms around one heart");
a SQLite writer begins with ``BEGIN IMMEDIATE``, so it holds the write lock from the start.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

# The append hot path speaks the driver's own SQL on the transaction's DBAPI cursor:
# building, compiling and wrapping SQLAlchemy statements cost more than the statements.
_ENTRY_COLUMNS = ("log", "seq", "hash", "kind", "actor", "subject", "raw", "nodes")
SQL = {
    "sqlite": {
        "last": "SELECT seq, hash FROM signoff_entry WHERE log = ? ORDER BY seq DESC LIMIT 1",
        "insert": f"INSERT INTO signoff_entry ({', '.join(_ENTRY_COLUMNS)}) VALUES ({', '.join('?' * 8)})",
        "node": "SELECT hash, nodes FROM signoff_entry WHERE log = ? AND seq = ?",
    },
    "postgresql": {
        "last": "SELECT seq, hash FROM signoff_entry WHERE log = %s ORDER BY seq DESC LIMIT 1",
        "lock": "SELECT id FROM signoff_log WHERE id = %s FOR UPDATE",
        "insert": f"INSERT INTO signoff_entry ({', '.join(_ENTRY_COLUMNS)}) VALUES ({', '.join(['%s'] * 8)})",
        "node": "SELECT hash, nodes FROM signoff_entry WHERE log = %s AND seq = %s",
        "notify": "SELECT pg_notify(%s, %s)",
    },
}


def dbapi_cursor(conn: Connection) -> Any:
    """The DBAPI cursor of this transaction's connection, made once per transaction."""
    info = conn.info
    cursor = info.get("signoff_cursor")
    if cursor is None or info.get("signoff_cursor_of") is not conn:
        cursor = conn.connection.cursor()
        info["signoff_cursor"] = cursor
        info["signoff_cursor_of"] = conn
    return cursor


@functools.lru_cache(maxsize=64)
def _row_type(names: tuple[str, ...]) -> Any:
    return collections.namedtuple("Row", names)


def _driver_sql(backend: str, sql: str) -> str:
    """``?`` placeholders (sqlite3's paramstyle) as the backend's driver wants them."""
    return sql if backend == "sqlite" else sql.replace("?", "%s")


def fetch(cursor: Any, backend: str, sql: str, params: Sequence[Any]) -> list[Any]:
    """Rows of a driver-level query, with attribute access by column name.

    The hot paths (a decision, an API token check) use this instead of SQLAlchemy's
    statement machinery, which costs ~0.1 ms of Python per statement."""
    cursor.execute(_driver_sql(backend, sql), tuple(params))
    if cursor.description is None:
        return []
    make = _row_type(tuple(column[0] for column in cursor.description))
    return [make._make(values) for values in cursor.fetchall()]


def notify_channel(log_id: str) -> str:
    return f"signoff_{log_id}"


def safe_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<store>"


BUSY_TIMEOUT_MS = 60000  # how long a SQLite connection waits for another's lock


def sqlite_engine(
    url: str, *, write: bool, synchronous: str = "FULL", pool_size: int = 16, max_overflow: int = 32
) -> Engine:
    """A SQLite engine in WAL mode that issues its own ``BEGIN``: ``BEGIN IMMEDIATE`` for a writer (no
    lock upgrade that could fail), a plain ``BEGIN`` for a reader. The log's commits use
    ``synchronous=FULL``; other tables in the same file may choose ``NORMAL``."""
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous: expected FULL or NORMAL, found {synchronous!r}")
    engine = create_engine(
        url, connect_args={"timeout": 60, "check_same_thread": False}, pool_size=pool_size, max_overflow=max_overflow
    )

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # Erased values (audit erase) are overwritten with zeros in the file, not only unlinked
        # from its b-tree (https://sqlite.org/pragma.html#pragma_secure_delete).
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.connection.driver_connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")  # type: ignore[union-attr]

    return engine
