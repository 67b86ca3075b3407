"""The read side of the store: the log's identity and head, and its entries in ``seq`` order.

:class:`LogReader` is a base of :class:`signoff.audit.store.Store`, which opens the
engines and sets the attributes declared here. Reads stream in chunks, with flat memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, select

from signoff.audit import entry as entries
from signoff.audit.canonical import decode, parse_canonical
from signoff.audit.driver import dbapi_cursor, fetch, notify_channel, safe_url
from signoff.audit.entry import Entry
from signoff.audit.errors import CanonicalFormError, LogNotFound, ManyLogs, StoreError
from signoff.audit.notify import ChangeFeed, postgres_watcher
from signoff.audit.tables import EntryRow, KeyRow, LogRow
from signoff.audit.trust import LogRules

READ_CHUNK = 2000
# The verifier's read, driver-level (SQLAlchemy's row machinery cost ~2 µs an entry).
_ROWS_SQL = (
    "SELECT seq, hash, raw, nodes, kind, actor, subject FROM signoff_entry WHERE log = ? AND seq >= ? "
    "ORDER BY seq LIMIT ?"
)
_ROWS_UNTIL_SQL = (
    "SELECT seq, hash, raw, nodes, kind, actor, subject FROM signoff_entry WHERE log = ? AND seq >= ? AND seq < ? "
    "ORDER BY seq LIMIT ?"
)


@dataclass(frozen=True)
class LogInfo:
    id: str
    public_key: str
    created_at: str
    size: int
    head: str


@dataclass(frozen=True)
class LogSummary:
    """One of the store's logs, as ``audit logs`` lists it."""

    id: str
    created_at: str
    size: int
    origin: str

    def to_json(self) -> dict[str, Any]:
        return {"log": self.id, "created_at": self.created_at, "size": self.size, "origin": self.origin}


def log_ids(conn: Connection) -> list[str]:
    """Every log in the store, oldest first."""
    query = select(LogRow.id).order_by(LogRow.created_at, LogRow.id)  # type: ignore[call-overload]
    return [str(row[0]) for row in conn.execute(query)]


class LogReader:
    """Reads of one log; the attributes below are set by :class:`signoff.audit.store.Store`."""

    url: str
    wanted_log: str | None
    backend: str
    clock: Callable[[], datetime]
    read_engine: Engine
    feed: ChangeFeed
    _sql: dict[str, str]
    _log: LogInfo | None
    _rules: LogRules | None
    _pg_conninfo: str

    # -- the log itself ---------------------------------------------------------------

    def info(self) -> LogInfo:
        if self._log is None:
            row = self._log_row()
            self._log = LogInfo(row[0], row[1], row[2], 0, "")
            if self.backend == "postgresql" and self.feed._watcher is None:
                self.feed._watcher = postgres_watcher(self._pg_conninfo, notify_channel(row[0]))
        size, head = self._head()
        return LogInfo(self._log.id, self._log.public_key, self._log.created_at, size, head)

    def _log_row(self) -> Any:
        """The ``signoff_log`` row of the log this object is bound to (``wanted_log``), else of the only one."""
        query = select(LogRow.id, LogRow.public_key, LogRow.created_at)  # type: ignore[call-overload]
        with self.read_engine.connect() as conn:
            if self.wanted_log is not None:
                row = conn.execute(query.where(LogRow.id == self.wanted_log)).first()
                if row is None:
                    held = ", ".join(log_ids(conn)) or "none"
                    raise LogNotFound(
                        f"store {safe_url(self.url)}: expected log {self.wanted_log}, found no such log "
                        f"(it holds: {held})"
                    )
                return row
            rows = conn.execute(query.order_by(LogRow.created_at, LogRow.id).limit(2)).all()
            if not rows:
                raise LogNotFound(f"store {safe_url(self.url)}: expected a log, found none (run `audit init`)")
            if len(rows) > 1:
                raise ManyLogs(
                    f"store {safe_url(self.url)}: expected one log, found {len(log_ids(conn))} "
                    f"({', '.join(log_ids(conn))}); name one with --log ID (or $SIGNOFF_LOG)"
                )
            return rows[0]

    def logs(self) -> list[LogSummary]:
        """Every log the store holds, oldest first: its size and its C2SP origin (from its entry 1)."""
        with self.read_engine.connect() as conn:
            held = conn.execute(
                select(LogRow.id, LogRow.created_at).order_by(LogRow.created_at, LogRow.id)  # type: ignore[call-overload]
            ).all()
        found = []
        for log_id, created in held:
            sizes = self.read_rows("SELECT MAX(seq) AS top FROM signoff_entry WHERE log = ?", log_id)
            top = sizes[0].top if sizes and sizes[0].top is not None else -1
            first = self.read_rows("SELECT raw FROM signoff_entry WHERE log = ? AND seq = 1", log_id)
            entry = parse_entry(bytes(first[0].raw)) if first else None
            rules = (
                LogRules.configured(log_id, entry.body)
                if entry is not None and entry.kind == "log.configured"
                else LogRules(log_id)
            )
            found.append(LogSummary(str(log_id), str(created), int(top) + 1, rules.origin))
        return found

    @property
    def log_id(self) -> str:
        if self._log is None:
            self.info()
        assert self._log is not None
        return self._log.id

    @property
    def rules(self) -> LogRules:
        """The rules this log lives by: its ``log.configured`` entry 1, or rules version 1 without one.

        Read once: entry 1 never changes (``audit verify`` checks that it did not)."""
        if self._rules is None:
            found = self.read_rows("SELECT raw FROM signoff_entry WHERE log = ? AND seq = 1", self.log_id)
            first = parse_entry(bytes(found[0].raw)) if found else None
            if first is not None and first.kind == "log.configured":
                self._rules = LogRules.configured(self.log_id, first.body)
            else:
                self._rules = LogRules(self.log_id)
        return self._rules

    @property
    def public_key(self) -> str:
        if self._log is None:
            self.info()
        assert self._log is not None
        return self._log.public_key

    def _head(self, conn: Connection | None = None) -> tuple[int, str]:
        if conn is None:
            with self.read_engine.connect() as own:
                return self._head(own)
        cursor = dbapi_cursor(conn)
        cursor.execute(self._sql["last"], (self.log_id,))
        row = cursor.fetchone()
        if row is None:
            raise LogNotFound(f"store {safe_url(self.url)}: expected a log, found none (run `audit init`)")
        return int(row[0]) + 1, str(row[1])

    def size(self) -> int:
        return self._head()[0]

    def read_rows(self, sql: str, *params: Any) -> list[Any]:
        """Run driver-level read SQL (``?`` placeholders) outside a write; rows with named fields."""
        with self.read_engine.connect() as conn:
            return fetch(dbapi_cursor(conn), self.backend, sql, params)

    # -- reading ---------------------------------------------------------------------

    def iter_rows(
        self, start: int = 0, stop: int | None = None
    ) -> Iterator[tuple[int, str, bytes, bytes, tuple[str, str, str | None]]]:
        """Stream ``(seq, hash, raw bytes, stored Merkle nodes, (kind, actor, subject))`` in seq order,
        for the verifier: everything the store keeps of an entry."""
        log_id = self.log_id
        cursor = start
        sql = _ROWS_SQL if stop is None else _ROWS_UNTIL_SQL
        while True:
            params = (log_id, cursor, READ_CHUNK) if stop is None else (log_id, cursor, stop, READ_CHUNK)
            with self.read_engine.connect() as conn:
                db = dbapi_cursor(conn)
                db.execute(sql if self.backend == "sqlite" else sql.replace("?", "%s"), params)
                rows = db.fetchall()
                conn.rollback()
            if not rows:
                return
            for seq, digest, raw, nodes, kind, actor, subject in rows:
                yield seq, digest, bytes(raw), bytes(nodes), (kind, actor, subject)
            cursor = int(rows[-1][0]) + 1

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """One read transaction whose every read sees the same committed state of the store: PostgreSQL
        ``REPEATABLE READ``, SQLite's read transaction in WAL mode. ``audit verify`` checks the projection
        in one, so that a write committing meanwhile (a live desk) is seen whole or not at all."""
        with self.read_engine.connect() as conn:
            if self.backend == "postgresql":
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    def rows_in(
        self, conn: Connection, start: int
    ) -> Iterator[tuple[int, str, bytes, bytes, tuple[str, str, str | None]]]:
        """:meth:`iter_rows` from ``start`` to the head, read in ``conn`` (a :meth:`snapshot`)."""
        cursor = start
        while True:
            db = dbapi_cursor(conn)
            db.execute(
                _ROWS_SQL if self.backend == "sqlite" else _ROWS_SQL.replace("?", "%s"),
                (self.log_id, cursor, READ_CHUNK),
            )
            rows = db.fetchall()
            if not rows:
                return
            for seq, digest, raw, nodes, kind, actor, subject in rows:
                yield seq, digest, bytes(raw), bytes(nodes), (kind, actor, subject)
            cursor = int(rows[-1][0]) + 1

    def iter_raw(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, str, bytes]]:
        """Stream ``(seq, hash, raw bytes)`` in seq order, in chunks; flat memory."""
        for seq, digest, raw, _nodes, _columns in self.iter_rows(start, stop):
            yield seq, digest, raw

    def entries(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        kind: str | None = None,
        review: str | None = None,
        actor: str | None = None,
        newest_first: bool = False,
        limit: int | None = None,
    ) -> Iterator[Entry]:
        """Stream entries, optionally filtered, oldest (or newest) first."""
        log_id = self.log_id
        yielded = 0
        cursor: int | None = None
        while limit is None or yielded < limit:
            query = select(EntryRow.seq, EntryRow.raw).where(EntryRow.log == log_id)  # type: ignore[call-overload]
            if kind is not None:
                query = query.where(EntryRow.kind == kind)
            if review is not None:
                query = query.where(EntryRow.subject == review)
            if actor is not None:
                query = query.where(EntryRow.actor == actor)
            # One bound on each side (the page's cursor folded in): with two lower bounds SQLite walks the
            # primary key instead of the (log, kind, seq) or subject index, a scan of the whole log.
            low, high = start, stop
            if cursor is not None and newest_first:
                high = cursor if high is None else min(high, cursor)
            elif cursor is not None:
                low = max(low, cursor + 1)
            if high is not None:
                query = query.where(EntryRow.seq < high)
            query = query.where(EntryRow.seq >= low)
            order = EntryRow.seq.desc() if newest_first else EntryRow.seq  # type: ignore[attr-defined]
            query = query.order_by(order)
            chunk = READ_CHUNK if limit is None else min(READ_CHUNK, limit - yielded)
            with self.read_engine.connect() as conn:
                rows = conn.execute(query.limit(chunk)).all()
            if not rows:
                return
            for _seq, raw in rows:
                yield parse_entry(bytes(raw))
                yielded += 1
            cursor = int(rows[-1][0])

    def entry(self, seq: int) -> Entry:
        with self.read_engine.connect() as conn:
            row = conn.execute(
                select(EntryRow.raw).where(EntryRow.log == self.log_id, EntryRow.seq == seq)  # type: ignore[call-overload]
            ).first()
        if row is None:
            raise StoreError(f"seq {seq}: expected an entry, found none (log size {self.size()})")
        return parse_entry(bytes(row[0]))

    def key_owners(self) -> list[tuple[str, str]]:
        """Enrolled keys as ``(fingerprint, actor)`` pairs."""
        with self.read_engine.connect() as conn:
            rows = conn.execute(
                select(KeyRow.fingerprint, KeyRow.actor).where(KeyRow.log == self.log_id)  # type: ignore[call-overload]
            ).all()
        return [(str(fp), str(actor)) for fp, actor in rows]

    def admin_actor(self, admin: Any) -> str:
        """The ``admin:`` actor ``admin`` (a :class:`~signoff.audit.keys.Signer`) holds a key of, per the key
        table (the write then checks the key against its enrolment on the log, in its transaction)."""
        owners = [actor for fingerprint, actor in self.key_owners() if fingerprint == admin.fingerprint]
        admins = [actor for actor in owners if actor.startswith("admin:")]
        if not admins:
            from signoff.audit.errors import NotAllowed

            raise NotAllowed(f"admin key: expected a key enrolled for an admin: actor, found {admin.fingerprint}")
        return admins[0]


def parse_entry(raw: bytes) -> Entry:
    try:
        data = decode(raw, "entry")
    except CanonicalFormError as exc:
        # RFC 8785 §3.2.2.3 writes a whole double beyond 2^53 (args of 1e16) as an integer literal, which
        # strict reading refuses: read such a stored entry as the verifier does, as doubles.
        try:
            data, _fast = parse_canonical(raw)
        except ValueError:
            raise exc from None
    return entries.from_json(data, raw)
