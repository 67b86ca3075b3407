"""The store: one URL selects SQLite (the default) or PostgreSQL; the same code runs on both.

Append is a compare-and-swap on the head row inside one transaction. The head row is
locked first (``BEGIN IMMEDIATE`` on SQLite, ``SELECT … FOR UPDATE`` on PostgreSQL), every
rule check runs against state read after that lock, and the head is then moved from
``size`` to ``size + n`` only if it still reads ``size``. A unique ``(log, seq)`` key backs
this up. Concurrent appenders in threads, processes or hosts queue on the lock: the chain
never forks and never has a gap. A write that fails raises; it is never reported done.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlmodel import SQLModel

from signoff.audit import entry as entries
from signoff.audit import merkle
from signoff.audit.canonical import canonical, check, decode
from signoff.audit.entry import Entry, format_hash, format_time, parse_hash
from signoff.audit.errors import AppendConflict, InvalidEntry, LogExists, LogNotFound, NotAllowed, StoreError
from signoff.audit.keys import Signer, decode_public, fingerprint, read_private_key, verify_signature, write_private_key
from signoff.audit.notify import ChangeFeed, postgres_watcher, sqlite_watcher
from signoff.audit.tables import CheckpointRow, EntryRow, KeyRow, LogRow

T = TypeVar("T")
READ_CHUNK = 2000
APPEND_ATTEMPTS = 8
HASH_SIZE = 32

_ACTOR_KEYS = "SELECT fingerprint, public_key FROM signoff_key WHERE log = ? AND actor = ?"
# Kinds that only ReviewService may write: their rules need the review projection.
SERVICE_KINDS = frozenset(entries.KINDS - {"key.enrolled"})

# The append hot path speaks the driver's own SQL on the transaction's DBAPI cursor:
# building, compiling and wrapping SQLAlchemy statements cost more than the statements.
_ENTRY_COLUMNS = ("log", "seq", "hash", "kind", "actor", "subject", "raw", "nodes")
_SQL = {
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
    },
}


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
    _entries: list[tuple[Any, ...]] = field(default_factory=list)
    appended: list[Entry] = field(default_factory=list)

    at: str = ""

    def __post_init__(self) -> None:
        self.at = format_time(self.now)

    def append(self, actor: str, kind: str, body: dict[str, Any], sig: dict[str, str] | None = None) -> Entry:
        item = entries.build(
            log=self.log, seq=self.size, prev=self.head, at=self.at, actor=actor, kind=kind, body=body, sig=sig
        )
        completed = self.compact.append(parse_hash(item.hash))
        nodes = b"".join(digest for _level, _index, digest in completed)
        self._entries.append((self.log, item.seq, item.hash, kind, actor, _subject(body), item.raw, nodes))
        self.size += 1
        self.head = item.hash
        self.appended.append(item)
        return item

    def rows(self, sql: str, *params: Any) -> list[Any]:
        """Run driver-level SQL (``?`` placeholders) in this transaction; rows with named fields."""
        return fetch(_cursor(self.conn), self.store.backend, sql, params)

    def signature(
        self,
        actor: str,
        kind: str,
        body: dict[str, Any],
        sig: dict[str, str] | None = None,
        signer: Signer | None = None,
    ) -> dict[str, str] | None:
        """The entry's signature, checked in its transaction.

        An actor with an enrolled key signs every later entry, so a forger cannot drop a
        signature. A given ``sig`` must verify against a key enrolled for the actor;
        otherwise ``signer`` signs when its key is enrolled for the actor.
        """
        keys = {row[0]: row[1] for row in self.rows(_ACTOR_KEYS, self.log, actor)}
        message = entries.statement(kind, actor, body)
        if sig is None and signer is not None and signer.fingerprint in keys:
            sig = signer.sign(message)
        if sig is None:
            if keys:
                raise NotAllowed(f"sig: expected a signature by {actor}'s enrolled key, found none")
            return None
        public = keys.get(str(sig.get("key")))
        if public is None:
            raise NotAllowed(f"sig.key: expected a key enrolled for {actor}, found {sig.get('key')!r}")
        if not verify_signature(public, sig, message):
            raise NotAllowed(f"sig.value: expected a valid Ed25519 signature by {sig.get('key')}, found an invalid one")
        return sig

    def enroll_key(
        self,
        actor: str,
        owner: str,
        key: str,
        sig: dict[str, str] | None = None,
        signer: Signer | None = None,
        body: dict[str, Any] | None = None,
    ) -> Entry:
        """``key.enrolled``: bind a public Ed25519 key to ``owner``; from now on ``owner`` signs its entries.

        ``actor`` is the owner itself or a ``service:`` (ReviewService also lets an admin enroll).
        """
        entries.check_actor(owner, "body.actor")
        decode_public(key)
        fp = fingerprint(key)
        if any(row[0] == fp for row in self.rows(_ACTOR_KEYS, self.log, owner)):
            raise InvalidEntry(f"key: expected a key not yet enrolled for {owner}, found {fp} enrolled already")
        body = body if body is not None else {"actor": owner, "key": key, "alg": "Ed25519"}
        entry = self.append(actor, "key.enrolled", body, self.signature(actor, "key.enrolled", body, sig, signer))
        self.conn.execute(
            insert(KeyRow),
            {"log": self.log, "fingerprint": fp, "actor": owner, "public_key": key, "enrolled_seq": entry.seq},
        )
        return entry


def _subject(body: dict[str, Any]) -> str | None:
    """What an entry is about, for the subject index: a review, frontier, reviewer or actor."""
    for name in ("review", "frontier", "reviewer", "actor"):
        value = body.get(name)
        if isinstance(value, str):
            return value
    return None


class Store:
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
            self.write_engine = _sqlite_engine(url, write=True)
            self.read_engine = _sqlite_engine(url, write=False)
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
            raise StoreError(f"store {_safe(url)}: expected a reachable database, found {exc.orig}") from None
        self._sql = _SQL[self.backend]
        self._write_lock = threading.RLock()
        self._kept: Connection | None = None
        self._log: LogInfo | None = None
        self._compact_cache: tuple[int, str, merkle.CompactRange] | None = None

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
            with self.write_engine.begin() as conn:
                if self.backend == "postgresql":  # two racing inits: the second waits, then sees the first log
                    conn.execute(text("LOCK TABLE signoff_log IN EXCLUSIVE MODE"))
                if conn.execute(select(LogRow.id)).first() is not None:  # type: ignore[call-overload]
                    raise LogExists(f"store {_safe(self.url)}: expected an empty store, found a log already")
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

    def _head(self, conn: Connection | None = None) -> tuple[int, str]:
        if conn is None:
            with self.read_engine.connect() as own:
                return self._head(own)
        cursor = _cursor(conn)
        cursor.execute(self._sql["last"], (self.log_id,))
        row = cursor.fetchone()
        if row is None:
            raise LogNotFound(f"store {_safe(self.url)}: expected a log, found none (run `audit init`)")
        return int(row[0]) + 1, str(row[1])

    def size(self) -> int:
        return self._head()[0]

    def read_rows(self, sql: str, *params: Any) -> list[Any]:
        """Run driver-level read SQL (``?`` placeholders) outside a write; rows with named fields."""
        with self.read_engine.connect() as conn:
            return fetch(_cursor(conn), self.backend, sql, params)

    def _compact_at(self, conn: Connection, size: int, head: str) -> merkle.CompactRange:
        """The compact range at ``size``: from the cache when the head matches, else O(log n) reads."""
        cached = self._compact_cache
        if cached is not None and cached[0] == size and cached[1] == head:
            return cached[2].copy()
        hashes = self._node_hashes(conn, merkle.perfect_subtrees(0, size))
        return merkle.CompactRange(size, hashes)

    def _node_hashes(self, conn: Connection, nodes: Sequence[tuple[int, int]]) -> list[bytes]:
        """Perfect subtree hashes: a leaf's own hash, or a node stored with the entry that completed it."""
        out = []
        for level, index in nodes:
            last_leaf = ((index + 1) << level) - 1
            cursor = _cursor(conn)
            cursor.execute(self._sql["node"], (self.log_id, last_leaf))
            row = cursor.fetchone()
            if row is None:
                raise StoreError(f"Merkle node ({level}, {index}): expected entry {last_leaf}, found none")
            if level == 0:
                out.append(parse_hash(row[0]))
            else:
                node = bytes(row[1])[(level - 1) * HASH_SIZE : level * HASH_SIZE]
                if len(node) != HASH_SIZE:
                    raise StoreError(f"Merkle node ({level}, {index}): expected a stored hash, found none")
                out.append(node)
        return out

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
                        _cursor(conn).execute(self._sql["lock"], (log_id,))
                    size, head = self._head(conn)
                    tx = Tx(self, conn, log_id, self.clock(), size, head, self._compact_at(conn, size, head))
                    result = work(tx)
                    if tx.appended:
                        _cursor(conn).executemany(self._sql["insert"], tx._entries)
                        if self.backend == "postgresql":
                            conn.execute(
                                text("SELECT pg_notify(:channel, :size)"),
                                {"channel": _channel(log_id), "size": str(tx.size)},
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

    # -- reading ---------------------------------------------------------------------

    def iter_rows(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, str, bytes, bytes]]:
        """Stream ``(seq, hash, raw bytes, stored Merkle nodes)`` in seq order, for the verifier."""
        log_id = self.log_id
        cursor = start
        while True:
            query = (
                select(EntryRow.seq, EntryRow.hash, EntryRow.raw, EntryRow.nodes)  # type: ignore[call-overload]
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
            for seq, digest, raw, nodes in rows:
                yield int(seq), str(digest), bytes(raw), bytes(nodes)
            cursor = int(rows[-1][0]) + 1

    def iter_raw(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, str, bytes]]:
        """Stream ``(seq, hash, raw bytes)`` in seq order, in chunks; flat memory."""
        for seq, digest, raw, _nodes in self.iter_rows(start, stop):
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

    def key_owners(self) -> list[tuple[str, str]]:
        """Enrolled keys as ``(fingerprint, actor)`` pairs."""
        with self.read_engine.connect() as conn:
            rows = conn.execute(
                select(KeyRow.fingerprint, KeyRow.actor).where(KeyRow.log == self.log_id)  # type: ignore[call-overload]
            ).all()
        return [(str(fp), str(actor)) for fp, actor in rows]

    # -- Merkle tree (RFC 9162 §2.1) -------------------------------------------------

    def _range_hashes(self, conn: Connection, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return [merkle.subtree_root(self._node_hashes(conn, merkle.perfect_subtrees(s, e))) for s, e in ranges]

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
            raise StoreError(f"checkpoint key: expected the log's key {self.public_key}, found {signer.public}")
        with self.read_engine.connect() as conn:
            size, head = self._head(conn)
            compact = self._compact_at(conn, size, head)
        root = format_hash(compact.root())
        point = Checkpoint(self.log_id, int(size), root, format_time(self.clock()), {})
        point = Checkpoint(point.log, point.size, point.root, point.at, signer.sign(canonical(point.body())))
        with self.write_engine.begin() as conn:
            exists = conn.execute(
                select(CheckpointRow.size).where(CheckpointRow.log == self.log_id, CheckpointRow.size == size)  # type: ignore[call-overload]
            ).first()
            if exists is None:
                conn.execute(
                    insert(CheckpointRow),
                    {
                        "log": self.log_id,
                        "size": size,
                        "root": root,
                        "at": point.at,
                        "signed": json.dumps(point.to_json()),
                    },
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


def parse_entry(raw: bytes) -> Entry:
    return entries.from_json(decode(raw, "entry"), raw)


def open_store(url: str, *, clock: Callable[[], datetime] | None = None, create: bool = True) -> Store:
    """Open the store named by ``url``; ``postgres://`` and ``postgresql://`` use psycopg 3."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    return Store(url, clock=clock, create=create)


def _cursor(conn: Connection) -> Any:
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
        conn.connection.driver_connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")  # type: ignore[union-attr]

    return engine
