"""The store: one URL selects SQLite (the default) or PostgreSQL; the same code runs on both.

Append is a compare-and-swap on the head row inside one transaction. The head row is
locked first (``BEGIN IMMEDIATE`` on SQLite, ``SELECT … FOR UPDATE`` on PostgreSQL), every
rule check runs against state read after that lock, and the head is then moved from
``size`` to ``size + n`` only if it still reads ``size``. A unique ``(log, seq)`` key backs
this up. Concurrent appenders in threads, processes or hosts queue on the lock: the chain
never forks and never has a gap. A write that fails raises; it is never reported done.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import SQLModel

from audit import entry as entries
from audit import merkle
from audit.canonical import canonical, decode
from audit.entry import Entry, format_hash, format_time, parse_hash
from audit.errors import AppendConflict, LogExists, LogNotFound, StoreError
from audit.keys import Signer, read_private_key, verify_signature, write_private_key
from audit.notify import ChangeFeed, postgres_watcher, sqlite_watcher
from audit.tables import CheckpointRow, EntryRow, KeyRow, LogRow, NodeRow

T = TypeVar("T")
READ_CHUNK = 2000
APPEND_ATTEMPTS = 8


@dataclass(frozen=True)
class Checkpoint:
    """A signed tree head, ``{"log", "size", "root", "at"}`` plus the log's ``sig``."""

    log: str
    size: int
    root: str
    at: str
    sig: dict[str, str]

    def body(self) -> dict[str, Any]:
        return {"log": self.log, "size": self.size, "root": self.root, "at": self.at}

    def to_json(self) -> dict[str, Any]:
        return {**self.body(), "sig": self.sig}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        try:
            return cls(str(data["log"]), int(data["size"]), str(data["root"]), str(data["at"]), dict(data["sig"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"expected a checkpoint with log, size, root, at and sig, found {exc}") from None

    def verify(self, public_key: str) -> bool:
        return verify_signature(public_key, self.sig, canonical(self.body()))


@dataclass(frozen=True)
class LogInfo:
    id: str
    public_key: str
    created_at: str
    size: int
    head: str


@dataclass
class Tx:
    """One write transaction on the log. ``append`` places an entry at the head."""

    store: Store
    conn: Connection
    log: str
    now: datetime
    size: int
    head: str
    compact: merkle.CompactRange
    _entries: list[dict[str, Any]] = field(default_factory=list)
    _nodes: list[dict[str, Any]] = field(default_factory=list)
    appended: list[Entry] = field(default_factory=list)

    @property
    def at(self) -> str:
        return format_time(self.now)

    def append(self, actor: str, kind: str, body: dict[str, Any], sig: dict[str, str] | None = None) -> Entry:
        item = entries.build(
            log=self.log, seq=self.size, prev=self.head, at=self.at, actor=actor, kind=kind, body=body, sig=sig
        )
        for level, index, digest in self.compact.append(parse_hash(item.hash)):
            self._nodes.append({"log": self.log, "level": level, "idx": index, "hash": digest})
        self._entries.append(
            {
                "log": self.log,
                "seq": item.seq,
                "hash": item.hash,
                "kind": kind,
                "actor": actor,
                "review": item.review,
                "raw": item.raw,
            }
        )
        self.size += 1
        self.head = item.hash
        self.appended.append(item)
        return item


class Store:
    """A log in a database named by one URL (``sqlite:///file.db`` or ``postgresql://…``)."""

    def __init__(self, url: str, *, clock: Callable[[], datetime] | None = None) -> None:
        self.url = url
        self.clock = clock or (lambda: datetime.now(UTC))
        parsed = make_url(url)
        self.backend = parsed.get_backend_name()
        if self.backend == "sqlite":
            database = parsed.database or ""
            if not database or database == ":memory:":
                raise StoreError(f"store URL: expected a SQLite file (sqlite:///path.db), found {url!r}")
            Path(database).parent.mkdir(parents=True, exist_ok=True)
            self.write_engine = _sqlite_engine(url, write=True)
            self.read_engine = _sqlite_engine(url, write=False)
            self.feed = ChangeFeed(sqlite_watcher(database))
        elif self.backend == "postgresql":
            sa_url = parsed.set(drivername="postgresql+psycopg")
            self.write_engine = create_engine(sa_url, pool_size=10, max_overflow=20)
            self.read_engine = self.write_engine
            self.feed = ChangeFeed(None)  # the watcher needs the log id; set in _log_row
            self._pg_conninfo = sa_url.set(drivername="postgresql").render_as_string(hide_password=False)
        else:
            raise StoreError(f"store URL: expected sqlite:/// or postgresql://, found {url!r}")
        try:
            SQLModel.metadata.create_all(self.write_engine)
        except OperationalError as exc:
            raise StoreError(f"store {_safe(url)}: expected a reachable database, found {exc.orig}") from None
        self._log: LogInfo | None = None
        self._public_keys: dict[str, tuple[str, str]] = {}

    # -- the log itself ---------------------------------------------------------------

    def init_log(self, key_path: str | Path) -> LogInfo:
        """Create the log and its Ed25519 key (PEM, mode 0600, never in the database)."""
        with self.read_engine.connect() as conn:
            if conn.execute(select(LogRow.id)).first() is not None:  # type: ignore[call-overload]
                raise LogExists(f"store {_safe(self.url)}: expected an empty store, found a log already")
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
            compact = merkle.CompactRange()
            compact.append(parse_hash(first.hash))
            with self.write_engine.begin() as conn:
                if conn.execute(select(LogRow.id)).first() is not None:  # type: ignore[call-overload]
                    raise LogExists(f"store {_safe(self.url)}: expected an empty store, found a log already")
                conn.execute(
                    insert(LogRow),
                    {
                        "id": log_id,
                        "created_at": created,
                        "public_key": signer.public,
                        "size": 1,
                        "head": first.hash,
                        "compact": json.dumps([h.hex() for h in compact.hashes]),
                    },
                )
                conn.execute(
                    insert(EntryRow),
                    {
                        "log": log_id,
                        "seq": 0,
                        "hash": first.hash,
                        "kind": first.kind,
                        "actor": first.actor,
                        "review": None,
                        "raw": first.raw,
                    },
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

    def info(self) -> LogInfo:
        if self._log is None:
            with self.read_engine.connect() as conn:
                row = conn.execute(
                    select(LogRow.id, LogRow.public_key, LogRow.created_at)  # type: ignore[call-overload]
                ).first()
            if row is None:
                raise LogNotFound(f"store {_safe(self.url)}: expected a log, found none (run `audit init`)")
            self._log = LogInfo(row[0], row[1], row[2], 0, "")
            if self.backend == "postgresql" and self.feed._watcher is None:
                self.feed._watcher = postgres_watcher(self._pg_conninfo, _channel(row[0]))
        size, head = self._head()
        return LogInfo(self._log.id, self._log.public_key, self._log.created_at, size, head)

    @property
    def log_id(self) -> str:
        if self._log is None:
            self.info()
        assert self._log is not None
        return self._log.id

    @property
    def public_key(self) -> str:
        if self._log is None:
            self.info()
        assert self._log is not None
        return self._log.public_key

    def _head(self) -> tuple[int, str]:
        with self.read_engine.connect() as conn:
            row = conn.execute(select(LogRow.size, LogRow.head)).first()  # type: ignore[call-overload]
        if row is None:
            raise LogNotFound(f"store {_safe(self.url)}: expected a log, found none (run `audit init`)")
        return int(row[0]), str(row[1])

    def size(self) -> int:
        return self._head()[0]

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
                with self.write_engine.begin() as conn:
                    query = select(LogRow.size, LogRow.head, LogRow.compact).where(LogRow.id == log_id)  # type: ignore[call-overload]
                    if self.backend == "postgresql":
                        query = query.with_for_update()
                    size, head, compact = conn.execute(query).one()
                    hashes = [bytes.fromhex(h) for h in json.loads(compact)]
                    tx = Tx(self, conn, log_id, self.clock(), size, head, merkle.CompactRange(size, hashes))
                    result = work(tx)
                    if tx.appended:
                        self._flush(tx, size)
                if tx.appended:
                    self.feed.bump()
                return result
            except IntegrityError as exc:
                if "signoff_entry" not in str(exc) and "seq" not in str(exc):
                    raise
                last = exc
            except AppendConflict as exc:
                last = exc
        raise AppendConflict(f"append: expected to move the head within {APPEND_ATTEMPTS} tries, found {last}")

    def _flush(self, tx: Tx, old_size: int) -> None:
        conn = tx.conn
        conn.execute(insert(EntryRow), tx._entries)
        if tx._nodes:
            conn.execute(insert(NodeRow), tx._nodes)
        moved = conn.execute(
            update(LogRow)
            .where(LogRow.id == tx.log, LogRow.size == old_size)  # type: ignore[arg-type]
            .values(size=tx.size, head=tx.head, compact=json.dumps([h.hex() for h in tx.compact.hashes]))
        )
        if moved.rowcount != 1:
            raise AppendConflict(f"head: expected size {old_size}, found it moved")
        if self.backend == "postgresql":
            conn.execute(text("SELECT pg_notify(:channel, :size)"), {"channel": _channel(tx.log), "size": str(tx.size)})

    def append(self, actor: str, kind: str, body: dict[str, Any], sig: dict[str, str] | None = None) -> Entry:
        """Append one entry durably and return it (with its ``seq`` and hash)."""
        return self.transact(lambda tx: tx.append(actor, kind, body, sig))

    def append_many(self, drafts: Sequence[tuple[str, str, dict[str, Any]]]) -> list[Entry]:
        """Group commit: append ``(actor, kind, body)`` drafts in one transaction, all or none."""

        def work(tx: Tx) -> list[Entry]:
            return [tx.append(actor, kind, body) for actor, kind, body in drafts]

        return self.transact(work)

    # -- reading ---------------------------------------------------------------------

    def iter_raw(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, str, bytes]]:
        """Stream ``(seq, hash, raw bytes)`` in seq order, in chunks; flat memory."""
        log_id = self.log_id
        cursor = start
        while True:
            query = (
                select(EntryRow.seq, EntryRow.hash, EntryRow.raw)  # type: ignore[call-overload]
                .where(EntryRow.log == log_id, EntryRow.seq >= cursor)
                .order_by(EntryRow.seq)
                .limit(READ_CHUNK)
            )
            if stop is not None:
                query = query.where(EntryRow.seq < stop)
            with self.read_engine.connect() as conn:
                rows = conn.execute(query).all()
            if not rows:
                return
            for seq, digest, raw in rows:
                yield int(seq), str(digest), bytes(raw)
            cursor = int(rows[-1][0]) + 1

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
                query = query.where(EntryRow.review == review)
            if actor is not None:
                query = query.where(EntryRow.actor == actor)
            if stop is not None:
                query = query.where(EntryRow.seq < stop)
            query = query.where(EntryRow.seq >= start)
            if newest_first:
                if cursor is not None:
                    query = query.where(EntryRow.seq < cursor)
                query = query.order_by(EntryRow.seq.desc())  # type: ignore[attr-defined]
            else:
                if cursor is not None:
                    query = query.where(EntryRow.seq > cursor)
                query = query.order_by(EntryRow.seq)
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

    def public_keys(self) -> dict[str, tuple[str, str]]:
        """Enrolled keys: fingerprint → (actor, public key)."""
        with self.read_engine.connect() as conn:
            rows = conn.execute(
                select(KeyRow.fingerprint, KeyRow.actor, KeyRow.public_key).where(KeyRow.log == self.log_id)  # type: ignore[call-overload]
            ).all()
        return {fp: (actor, key) for fp, actor, key in rows}

    # -- Merkle tree (RFC 9162 §2.1) -------------------------------------------------

    def _range_hashes(self, conn: Connection, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        out = []
        for start, end in ranges:
            nodes = []
            for level, index in merkle.perfect_subtrees(start, end):
                if level == 0:
                    row = conn.execute(
                        select(EntryRow.hash).where(EntryRow.log == self.log_id, EntryRow.seq == index)  # type: ignore[call-overload]
                    ).one()
                    nodes.append(parse_hash(row[0]))
                else:
                    row = conn.execute(
                        select(NodeRow.hash).where(  # type: ignore[call-overload]
                            NodeRow.log == self.log_id, NodeRow.level == level, NodeRow.idx == index
                        )
                    ).one()
                    nodes.append(bytes(row[0]))
            out.append(merkle.subtree_root(nodes))
        return out

    def root(self, size: int | None = None) -> bytes:
        """The Merkle tree hash over the first ``size`` entries, from O(log n) stored nodes."""
        current = self.size()
        size = current if size is None else size
        if not 0 <= size <= current:
            raise StoreError(f"tree size: expected 0..{current}, found {size}")
        if size == 0:
            return merkle.EMPTY_ROOT
        with self.read_engine.connect() as conn:
            return self._range_hashes(conn, [(0, size)])[0]

    def inclusion_proof(self, seq: int, size: int | None = None) -> list[bytes]:
        current = self.size()
        size = current if size is None else size
        if not 0 <= seq < size <= current:
            raise StoreError(f"inclusion proof: expected 0 <= seq < size <= {current}, found seq {seq}, size {size}")
        with self.read_engine.connect() as conn:
            return self._range_hashes(conn, merkle.inclusion_path(seq, size))

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        current = self.size()
        new_size = current if new_size is None else new_size
        if not 0 < old_size <= new_size <= current:
            raise StoreError(
                f"consistency proof: expected 0 < old size <= new size <= {current}, found {old_size}, {new_size}"
            )
        with self.read_engine.connect() as conn:
            return self._range_hashes(conn, merkle.consistency_path(old_size, new_size))

    # -- checkpoints -------------------------------------------------------------------

    def checkpoint(self, key: str | Path | Signer) -> Checkpoint:
        """Sign and store the current tree head (its root comes from the compact range)."""
        signer = key if isinstance(key, Signer) else read_private_key(key)
        if signer.public != self.public_key:
            raise StoreError(
                f"checkpoint key: expected the log's key {self.public_key}, found {signer.public}"
            )
        with self.read_engine.connect() as conn:
            size, compact = conn.execute(
                select(LogRow.size, LogRow.compact).where(LogRow.id == self.log_id)  # type: ignore[call-overload]
            ).one()
        hashes = [bytes.fromhex(h) for h in json.loads(compact)]
        root = format_hash(merkle.CompactRange(size, hashes).root())
        body = {"log": self.log_id, "size": int(size), "root": root, "at": format_time(self.clock())}
        point = Checkpoint(**body, sig=signer.sign(canonical(body)))
        with self.write_engine.begin() as conn:
            exists = conn.execute(
                select(CheckpointRow.size).where(CheckpointRow.log == self.log_id, CheckpointRow.size == size)  # type: ignore[call-overload]
            ).first()
            if exists is None:
                conn.execute(
                    insert(CheckpointRow),
                    {"log": self.log_id, "size": size, "root": root, "at": point.at, "signed": json.dumps(point.to_json())},
                )
            else:
                conn.execute(
                    update(CheckpointRow)
                    .where(CheckpointRow.log == self.log_id, CheckpointRow.size == size)  # type: ignore[arg-type]
                    .values(root=root, at=point.at, signed=json.dumps(point.to_json()))
                )
        return point

    def checkpoints(self) -> list[Checkpoint]:
        with self.read_engine.connect() as conn:
            rows = conn.execute(
                select(CheckpointRow.signed).where(CheckpointRow.log == self.log_id).order_by(CheckpointRow.size)  # type: ignore[call-overload]
            ).all()
        return [Checkpoint.from_json(json.loads(row[0])) for row in rows]

    def latest_checkpoint(self) -> Checkpoint | None:
        with self.read_engine.connect() as conn:
            row = conn.execute(
                select(CheckpointRow.signed)  # type: ignore[call-overload]
                .where(CheckpointRow.log == self.log_id)
                .order_by(CheckpointRow.size.desc())  # type: ignore[attr-defined]
                .limit(1)
            ).first()
        return None if row is None else Checkpoint.from_json(json.loads(row[0]))

    def count(self, table: type[SQLModel]) -> int:
        with self.read_engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())

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
        self.feed.close()
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()


def parse_entry(raw: bytes) -> Entry:
    return entries.from_json(decode(raw, "entry"), raw)


def open_store(url: str, *, clock: Callable[[], datetime] | None = None) -> Store:
    """Open the store named by ``url``; ``postgres://`` and ``postgresql://`` use psycopg 3."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    return Store(url, clock=clock)


def _channel(log_id: str) -> str:
    return f"signoff_{log_id}"


def _safe(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<store>"


def _sqlite_engine(url: str, *, write: bool) -> Engine:
    engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False}, pool_size=16, max_overflow=32)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine
