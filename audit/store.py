"""The store: one URL selects SQLite (the default) or PostgreSQL; the same code runs on both.

Append is a compare-and-swap on the head row inside one transaction. The head row is
locked first (``BEGIN IMMEDIATE`` on SQLite, ``SELECT … FOR UPDATE`` on PostgreSQL), every
rule check runs against state read after that lock, and the head is then moved from
``size`` to ``size + n`` only if it still reads ``size``. A unique ``(log, seq)`` key backs
this up. Concurrent appenders in threads, processes or hosts queue on the lock: the chain
never forks and never has a gap. A write that fails raises; it is never reported done.

:class:`Store` opens the engines and writes; its bases read (:mod:`signoff.audit.reader`) and
serve the Merkle tree and checkpoints (:mod:`signoff.audit.tree`); a write is a :class:`Tx`.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, create_engine, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlmodel import SQLModel

from signoff.audit import entry as entries
from signoff.audit.canonical import check
from signoff.audit.driver import SQL, dbapi_cursor, fetch, notify_channel, safe_url, sqlite_engine
from signoff.audit.entry import Entry, format_time
from signoff.audit.errors import AppendConflict, InvalidEntry, LogExists, LogNotFound, NotAllowed, StoreError
from signoff.audit.keys import Signer, write_private_key
from signoff.audit.notify import ChangeFeed, sqlite_watcher
from signoff.audit.reader import READ_CHUNK, LogInfo, parse_entry
from signoff.audit.tables import KeyRow, LogRow
from signoff.audit.tree import Checkpoint, LogTree
from signoff.audit.tx import Tx

__all__ = [
    "READ_CHUNK",
    "SERVICE_KINDS",
    "Checkpoint",
    "Draft",
    "LogInfo",
    "Store",
    "Tx",
    "fetch",
    "open_store",
    "parse_entry",
]

T = TypeVar("T")
APPEND_ATTEMPTS = 8
# Kinds that only ReviewService may write: their rules need the review projection.
SERVICE_KINDS = frozenset(entries.KINDS - {"key.enrolled"})


class Store(LogTree):
    """A log in a database named by one URL (``sqlite:///file.db`` or ``postgresql://…``)."""

    def __init__(self, url: str, *, clock: Callable[[], datetime] | None = None, create: bool = True) -> None:
        self.url = url
        self.clock = clock or (lambda: datetime.now(UTC))
        parsed = make_url(url)
        self.backend = parsed.get_backend_name()
        if self.backend == "sqlite":
            database = parsed.database or ""
            if not database or database == ":memory:":
                raise StoreError(f"store URL: expected a SQLite file (sqlite:///path.db), found {url!r}")
            if not create and not Path(database).exists():
                raise LogNotFound(f"store {url}: expected a SQLite file at {database}, found none (run `audit init`)")
            Path(database).parent.mkdir(parents=True, exist_ok=True)
            self.write_engine = sqlite_engine(url, write=True)
            self.read_engine = sqlite_engine(url, write=False)
            self.feed = ChangeFeed(sqlite_watcher(database))
        elif self.backend == "postgresql":
            sa_url = parsed.set(drivername="postgresql+psycopg")
            self.write_engine = create_engine(sa_url, pool_size=10, max_overflow=20)
            self.read_engine = self.write_engine
            self.feed = ChangeFeed(None)  # the LISTEN watcher needs the log id: set in info()
            self._pg_conninfo = sa_url.set(drivername="postgresql").render_as_string(hide_password=False)
        else:
            raise StoreError(f"store URL: expected sqlite:/// or postgresql://, found {url!r}")
        try:
            with self.write_engine.begin() as conn:
                if self.backend == "postgresql":  # processes opening a new database at once take turns
                    conn.execute(text("SELECT pg_advisory_xact_lock(727001)"))
                SQLModel.metadata.create_all(conn)
        except OperationalError as exc:
            raise StoreError(f"store {safe_url(url)}: expected a reachable database, found {exc.orig}") from None
        self._sql = SQL[self.backend]
        self._write_lock = threading.RLock()
        self._kept: Connection | None = None
        self._log = None
        self._compact_cache = None

    # -- the log itself ---------------------------------------------------------------

    def init_log(self, key_path: str | Path) -> LogInfo:
        """Create the log and its Ed25519 key (PEM, mode 0600, never in the database)."""
        with self.read_engine.connect() as conn:
            if conn.execute(select(LogRow.id)).first() is not None:  # type: ignore[call-overload]
                raise LogExists(f"store {safe_url(self.url)}: expected an empty store, found a log already")
        signer = Signer.generate()
        log_id = "log_" + secrets.token_hex(8)
        write_private_key(signer, key_path)
        try:
            created = format_time(self.clock())
            body = {"actor": f"log:{log_id}", "key": signer.public, "alg": "Ed25519"}
            first = entries.build(
                log=log_id,
                seq=0,
                prev=entries.ZERO_HASH,
                at=created,
                actor=f"log:{log_id}",
                kind="key.enrolled",
                body=body,
                sig=signer.sign(entries.statement("key.enrolled", f"log:{log_id}", body)),
            )
            with self.write_engine.begin() as conn:
                if self.backend == "postgresql":  # two racing inits: the second waits, then sees the first log
                    conn.execute(text("LOCK TABLE signoff_log IN EXCLUSIVE MODE"))
                if conn.execute(select(LogRow.id)).first() is not None:  # type: ignore[call-overload]
                    raise LogExists(f"store {safe_url(self.url)}: expected an empty store, found a log already")
                conn.execute(insert(LogRow), {"id": log_id, "created_at": created, "public_key": signer.public})
                conn.exec_driver_sql(
                    self._sql["insert"], (log_id, 0, first.hash, first.kind, first.actor, first.actor, first.raw, b"")
                )
                conn.execute(
                    insert(KeyRow),
                    {
                        "log": log_id,
                        "fingerprint": signer.fingerprint,
                        "actor": f"log:{log_id}",
                        "public_key": signer.public,
                        "enrolled_seq": 0,
                    },
                )
        except BaseException:
            Path(key_path).unlink(missing_ok=True)
            raise
        self._log = None
        self.feed.bump()
        return self.info()

    # -- writing ---------------------------------------------------------------------

    def transact(self, work: Callable[[Tx], T]) -> T:
        """Run ``work`` in one write transaction at the locked head, then move the head.

        ``work`` appends entries with ``tx.append`` and may write projection rows through
        ``tx.conn``. If it raises, nothing is written. The head moves by compare-and-swap;
        a lost race reruns ``work`` on the new head.
        """
        log_id = self.log_id
        last: Exception | None = None
        for _ in range(APPEND_ATTEMPTS):
            try:
                with self._writer() as conn, conn.begin():
                    if self.backend == "postgresql":  # SQLite's BEGIN IMMEDIATE already holds the write lock
                        dbapi_cursor(conn).execute(self._sql["lock"], (log_id,))
                    size, head = self._head(conn)
                    tx = Tx(self, conn, log_id, self.clock(), size, head, self._compact_at(conn, size, head))
                    result = work(tx)
                    if tx.appended:
                        dbapi_cursor(conn).executemany(self._sql["insert"], tx._entries)
                        if self.backend == "postgresql":
                            conn.execute(
                                text("SELECT pg_notify(:channel, :size)"),
                                {"channel": notify_channel(log_id), "size": str(tx.size)},
                            )
                if tx.appended:
                    self._compact_cache = (tx.size, tx.head, tx.compact)
                    self.feed.bump()
                return result
            except DBAPIError as exc:
                self._drop_writer()
                if not isinstance(exc, IntegrityError):
                    raise
                # The (log, seq) key refused a second entry at this seq: another writer won the
                # compare-and-swap. Rerun the work on the new head.
                if "signoff_entry" not in str(exc):
                    raise
                self._compact_cache = None
                last = exc
        raise AppendConflict(f"append: expected to move the head within {APPEND_ATTEMPTS} tries, found {last}")

    @contextlib.contextmanager
    def _writer(self) -> Iterator[Connection]:
        """A write connection. SQLite lets one writer in at a time anyway, so a process keeps a
        single write connection open and threads take turns on it (a pool checkout per append
        costs more than the insert). PostgreSQL checks one out of its pool per transaction."""
        if self.backend != "sqlite":
            with self.write_engine.connect() as pooled:
                yield pooled
            return
        with self._write_lock:
            if self._kept is None or self._kept.closed or self._kept.invalidated:
                self._kept = self.write_engine.connect()
            yield self._kept

    def _drop_writer(self) -> None:
        with self._write_lock:
            kept, self._kept = self._kept, None
        if kept is not None:
            with contextlib.suppress(Exception):
                kept.close()

    def append(self, actor: str, kind: str, body: dict[str, Any], sig: dict[str, str] | None = None) -> Entry:
        """Append one entry durably and return it (with its ``seq`` and hash).

        Only kinds whose rules the store itself can check go through here (``key.enrolled``);
        the review lifecycle is written by :class:`audit.reviews.ReviewService`.
        """
        return self.append_many([(actor, kind, body, sig)])[0]

    def append_many(self, drafts: Sequence[tuple[str, str, dict[str, Any]] | Draft]) -> list[Entry]:
        """Group commit: append ``(actor, kind, body[, sig])`` drafts in one transaction, all or none."""
        checked = [_draft(index, draft) for index, draft in enumerate(drafts)]

        def work(tx: Tx) -> list[Entry]:
            out = []
            for actor, _kind, body, sig in checked:
                owner, key = body.get("actor"), body.get("key")
                if not isinstance(owner, str) or not isinstance(key, str):
                    raise InvalidEntry("body: expected a key.enrolled body with 'actor' and 'key' strings")
                if actor != owner and not actor.startswith("service:"):
                    raise NotAllowed(f"actor: expected {owner} itself or a service: actor, found {actor!r}")
                out.append(tx.enroll_key(actor, owner, key, sig, body=body))
            return out

        return self.transact(work)

    # -- waiting ---------------------------------------------------------------------

    def wait_for_change(self, after_size: int, timeout: float) -> int:
        """Block until the log holds more than ``after_size`` entries (or timeout); return its size."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            seen = self.feed.version
            size = self.size()
            remaining = deadline - time.monotonic()
            if size > after_size or remaining <= 0:
                return size
            self.feed.wait(seen, remaining)

    def close(self) -> None:
        self._drop_writer()
        self.feed.close()
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()


Draft = tuple[str, str, dict[str, Any], dict[str, str] | None]


def _draft(index: int, draft: Sequence[Any]) -> Draft:
    if len(draft) not in (3, 4):
        raise InvalidEntry(f"drafts[{index}]: expected (actor, kind, body[, sig]), found {len(draft)} fields")
    actor, kind, body = draft[0], draft[1], draft[2]
    sig = draft[3] if len(draft) == 4 else None
    entries.check_actor(actor)
    check(body, f"$.drafts[{index}].body")
    if kind in SERVICE_KINDS:
        raise InvalidEntry(
            f"drafts[{index}].kind: expected a kind the store checks itself (key.enrolled), found {kind!r}: "
            "review lifecycle entries are written through ReviewService, which enforces their rules"
        )
    if kind != "key.enrolled":
        raise InvalidEntry(f"drafts[{index}].kind: expected one of {sorted(entries.KINDS)}, found {kind!r}")
    if not isinstance(body, dict):
        raise InvalidEntry(f"drafts[{index}].body: expected a JSON object, found {type(body).__name__}")
    return actor, kind, body, sig


def open_store(url: str, *, clock: Callable[[], datetime] | None = None, create: bool = True) -> Store:
    """Open the store named by ``url``; ``postgres://`` and ``postgresql://`` use psycopg 3."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    return Store(url, clock=clock, create=create)
