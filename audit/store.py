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
import json
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, create_engine, insert, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlmodel import SQLModel

from signoff.audit import c2sp, merkle, schema_version
from signoff.audit import entry as entries
from signoff.audit.canonical import check
from signoff.audit.driver import SQL, dbapi_cursor, fetch, notify_channel, safe_url, sqlite_engine
from signoff.audit.entry import Entry, format_hash, format_time, parse_hash, subject_of
from signoff.audit.errors import AppendConflict, InvalidEntry, LogExists, LogNotFound, StoreError
from signoff.audit.group_commit import GroupCommit, Request
from signoff.audit.keys import Signer, read_private_key, write_private_key
from signoff.audit.notify import ChangeFeed, sqlite_watcher
from signoff.audit.reader import READ_CHUNK, LogInfo, parse_entry
from signoff.audit.tables import CheckpointRow, KeyRow, LogRow
from signoff.audit.tree import LogTree
from signoff.audit.tree_head import Checkpoint
from signoff.audit.trust import LogRules, check_origin, configured_body
from signoff.audit.trust import statement as trust_statement
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

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime] | None = None,
        create: bool = True,
        check_schema: bool = True,
        log: str | None = None,
    ) -> None:
        """Open the store; ``create`` makes its tables in an empty database (never otherwise), and
        ``check_schema`` refuses a store at another schema revision (:mod:`.schema_version`).

        ``log``: which of the store's logs this object reads and writes (one store holds any number,
        each with its own keys, admin, reviewers, policies and checkpoints). Without it, the store's
        only log; a store that holds several refuses to guess (:class:`ManyLogs`)."""
        self.url = url
        self.wanted_log = log
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
            if create:
                with self.write_engine.begin() as conn:
                    if self.backend == "postgresql":  # processes opening a new database at once take turns
                        conn.execute(text("SELECT pg_advisory_xact_lock(727001)"))
                    if schema_version.current(conn) is None:  # an empty database: made at the head
                        SQLModel.metadata.create_all(conn)
                        schema_version.stamp_head(conn)
            with self.read_engine.connect() as conn:
                if not inspect(conn).has_table("signoff_log"):
                    raise LogNotFound(f"store {safe_url(url)}: expected a Signoff log, found none (run `audit init`)")
                if check_schema:
                    schema_version.check(conn, safe_url(url))
        except OperationalError as exc:
            raise StoreError(f"store {safe_url(url)}: expected a reachable database, found {exc.orig}") from None
        self._sql = SQL[self.backend]
        self._write_lock = threading.RLock()
        self._group = GroupCommit(self._run_batch)
        self._kept: Connection | None = None
        self._log = None
        self._rules = None
        self._compact_cache = None
        # Keys proven against their admin-signed enrolment on the log (Tx.prove_key): (actor, fingerprint)
        # -> the newest seq about the actor when it was proven; proven again once the actor has a newer entry.
        self.proven_keys: dict[tuple[str, str], int] = {}

    # -- the log itself ---------------------------------------------------------------

    def init_log(
        self,
        key_path: str | Path,
        admin_key: str | Path | None = None,
        *,
        admin: str = "admin:root",
        signed_decisions: bool = True,
        origin: str | None = None,
        sealed_values: bool = True,
        new_log: bool = False,
    ) -> LogInfo:
        """Create the log, its Ed25519 key and a separate administrator's key (PEM files, mode 0600,
        never in the database; DESIGN.md "Who holds which key").

        Entry 0 enrolls the log key; entry 1, ``log.configured``, states the rules (version 2),
        whether decisions must be signed, and the first admin's key (``admin_key``; by default
        ``<log key's name>.admin<suffix>`` beside it). Both are signed by the log key. ``origin`` names the
        log in its C2SP checkpoints (a schema-less URL; default ``signoff.invalid/<log id>``).
        ``sealed_values`` (the default): reviews keep their personal data beside the log, under
        commitments, so that it can be erased (:mod:`signoff.audit.sealing`); ``False`` keeps it in the
        entries, as logs made before did (it can then never be erased).

        ``new_log``: add another log to a store that holds some already (one per app, team or
        environment); without it, a store with a log refuses (a second ``init`` by mistake). This
        object then reads and writes the new log.
        """
        if origin is not None:
            check_origin(origin)
        if not new_log:
            with self.read_engine.connect() as conn:
                self._refuse_if_any_log(conn)
        entries.check_actor(admin, "admin")
        if not admin.startswith("admin:"):
            raise InvalidEntry(f"admin: expected an admin: actor (admin:<name>), found {admin!r}")
        admin_path = Path(admin_key) if admin_key is not None else default_admin_key(key_path)
        signer, admin_signer = Signer.generate(), Signer.generate()
        log_id = "log_" + secrets.token_hex(8)
        log_actor = f"log:{log_id}"
        write_private_key(signer, key_path)
        try:
            write_private_key(admin_signer, admin_path)
        except BaseException:
            Path(key_path).unlink(missing_ok=True)
            raise
        try:
            created = format_time(self.clock())
            # Entries 0 and 1 set the rules up, so they are signed as before any rules (no log id in the
            # statement; each names its log and is signed by that log's own key).
            rules = LogRules(log_id)
            drafts = [
                ("key.enrolled", {"actor": log_actor, "key": signer.public, "alg": "Ed25519"}),
                (
                    "log.configured",
                    configured_body(signed_decisions, admin, admin_signer.public, origin, sealed_values=sealed_values),
                ),
            ]
            rows: list[tuple[Any, ...]] = []
            prev = entries.ZERO_HASH
            compact = merkle.CompactRange()
            for seq, (kind, body) in enumerate(drafts):
                sig = signer.sign(trust_statement(rules, kind, log_actor, body))
                item = entries.build(
                    log=log_id, seq=seq, prev=prev, at=created, actor=log_actor, kind=kind, body=body, sig=sig
                )
                nodes = b"".join(node for _level, _index, node in compact.append(parse_hash(item.hash)))
                rows.append((log_id, seq, item.hash, kind, log_actor, subject_of(body), item.raw, nodes))
                prev = item.hash
            with self.write_engine.begin() as conn:
                if self.backend == "postgresql":  # two racing inits: the second waits, then sees the first log
                    conn.execute(text("LOCK TABLE signoff_log IN EXCLUSIVE MODE"))
                if not new_log:
                    self._refuse_if_any_log(conn)
                conn.execute(insert(LogRow), {"id": log_id, "created_at": created, "public_key": signer.public})
                for row in rows:
                    conn.exec_driver_sql(self._sql["insert"], row)
                for seq, owner, public in ((0, log_actor, signer), (1, admin, admin_signer)):
                    conn.execute(
                        insert(KeyRow),
                        {
                            "log": log_id,
                            "fingerprint": public.fingerprint,
                            "actor": owner,
                            "public_key": public.public,
                            "enrolled_seq": seq,
                        },
                    )
        except BaseException:
            Path(key_path).unlink(missing_ok=True)
            admin_path.unlink(missing_ok=True)
            raise
        self.wanted_log = log_id
        self._log = None
        self._rules = None
        self._compact_cache = None
        self.feed.bump()
        return self.info()

    def _refuse_if_any_log(self, on: Any) -> None:
        found = [row.id for row in on.execute(select(LogRow.id).limit(3))]  # type: ignore[call-overload]
        if found:
            raise LogExists(
                f"store {safe_url(self.url)}: expected an empty store, found log {found[0]}"
                f"{' and more' if len(found) > 1 else ''}; to add another log to it, init with --new-log"
            )

    # -- writing ---------------------------------------------------------------------

    def transact(self, work: Callable[[Tx], T]) -> T:
        """Run ``work`` in one write transaction at the locked head, then move the head.

        ``work`` appends entries with ``tx.append`` and may write projection rows through
        ``tx.conn``. If it raises, nothing of it is written and its error is raised here. The head
        moves by compare-and-swap; a lost race reruns ``work`` on the new head.

        Group commit (:mod:`signoff.audit.group_commit`): the work of writers in this process that
        arrive while a commit is under way runs in the next transaction together, each in its own
        savepoint, in arrival order, each seeing the state the ones before it left. This returns
        only once the transaction that holds ``work``'s entries has committed.
        """
        return self._group.submit(work)

    def _run_batch(self, batch: list[Request[Any]]) -> None:
        """One transaction for a batch of writers' work; settles each request once it committed.

        A request whose work raises is rolled back to its savepoint and answered with its own
        error; the others go on. A failure of the transaction itself (the commit, the lock, a lost
        connection) raises, and :class:`GroupCommit` fails every request of the batch with it.
        """
        log_id = self.log_id
        last: Exception | None = None
        for _ in range(APPEND_ATTEMPTS):
            outcomes: list[tuple[bool, Any]] = []
            try:
                with self._writer() as conn, conn.begin():
                    cursor = dbapi_cursor(conn)
                    if self.backend == "postgresql":  # SQLite's BEGIN IMMEDIATE already holds the write lock
                        cursor.execute(self._sql["lock"], (log_id,))
                    size, head = self._head(conn)
                    tx = Tx(self, conn, log_id, self.clock(), size, head, self._compact_at(conn, size, head))
                    if len(batch) == 1:  # a lone writer: its error rolls the whole transaction back
                        try:
                            outcomes.append((True, batch[0].work(tx)))
                        except Exception as exc:
                            raise _OwnError(exc) from exc
                    else:
                        for index, request in enumerate(batch):
                            if index:
                                tx.restamp(self.clock())
                            mark = tx.mark()
                            cursor.execute("SAVEPOINT signoff_item")
                            try:
                                result = request.work(tx)
                            except Exception as exc:
                                cursor.execute("ROLLBACK TO SAVEPOINT signoff_item")
                                cursor.execute("RELEASE SAVEPOINT signoff_item")
                                tx.reset(mark)
                                outcomes.append((False, exc))
                            else:
                                cursor.execute("RELEASE SAVEPOINT signoff_item")
                                outcomes.append((True, result))
                    if tx.appended:
                        cursor.executemany(self._sql["insert"], tx._entries)
                        if self.backend == "postgresql":
                            cursor.execute(self._sql["notify"], (notify_channel(log_id), str(tx.size)))
                if tx.appended:
                    self._compact_cache = (tx.size, tx.head, tx.compact)
                    self.feed.bump()
                for request, (ok, value) in zip(batch, outcomes, strict=True):
                    if ok:
                        request.succeed(value)
                    else:
                        request.fail(value)
                return
            except _OwnError as own:
                batch[0].fail(own.error)
                return
            except Exception as exc:  # the transaction itself failed: nothing of the batch was written
                self._drop_writer()
                if not _lost_race(exc):
                    raise
                # The (log, seq) key refused a second entry at this seq: another writer won the
                # compare-and-swap. Rerun the work on the new head.
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
                out.append(tx.enroll_key(actor, owner, body, sig))
            return out

        return self.transact(work)

    # -- checkpoints -------------------------------------------------------------------

    def checkpoint(self, key: str | Path | Signer) -> Checkpoint:
        """Sign the current tree head with the log key, record it on the log and store it: a C2SP signed
        note (c2sp.org/tlog-checkpoint) whose key name is the log's origin (:mod:`signoff.audit.c2sp`).

        The root comes from the compact range (no reread). The ``log.checkpoint`` entry that
        records it goes right after the entries it covers, in the same transaction as the
        stored row, so ``audit verify`` notices a stored checkpoint deleted or added behind
        the log's back.
        """
        signer = key if isinstance(key, Signer) else read_private_key(key)
        if signer.public != self.public_key:
            raise StoreError(f"checkpoint key: expected the log's key {self.public_key}, found {signer.public}")

        def work(tx: Tx) -> Checkpoint:
            root = format_hash(tx.compact.root())
            origin = tx.rules.origin
            note = c2sp.sign_checkpoint(origin, tx.size, root, signer)
            point = Checkpoint(tx.log, tx.size, root, tx.at, {}, note)
            recorded = {"size": point.size, "root": root, "at": point.at, "note": note}
            actor = f"log:{tx.log}"
            tx.append(actor, "log.checkpoint", recorded, tx.signature(actor, "log.checkpoint", recorded, None, signer))
            tx.conn.execute(
                insert(CheckpointRow),
                {
                    "log": tx.log,
                    "size": point.size,
                    "root": root,
                    "at": point.at,
                    "signed": json.dumps(point.to_json()),
                },
            )
            return point

        return self.transact(work)

    # -- waiting ---------------------------------------------------------------------

    def wait_for_change(self, after_size: int, timeout: float) -> int:
        """Block until the log holds more than ``after_size`` entries (or timeout, or
        ``feed.interrupt()``); return its size."""
        import time

        deadline = time.monotonic() + timeout
        interrupts = self.feed.interrupts
        while True:
            seen = self.feed.version
            size = self.size()
            remaining = deadline - time.monotonic()
            if size > after_size or remaining <= 0 or self.feed.interrupts != interrupts:
                return size
            self.feed.wait(seen, remaining)

    def close(self) -> None:
        self._drop_writer()
        self.feed.close()
        self.write_engine.dispose()
        if self.read_engine is not self.write_engine:
            self.read_engine.dispose()


Draft = tuple[str, str, dict[str, Any], dict[str, str] | None]


def _lost_race(exc: Exception) -> bool:
    """A refusal by the ``(log, seq)`` key, through SQLAlchemy or straight from the driver's cursor."""
    import sqlite3

    import psycopg

    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    refused = isinstance(exc, IntegrityError) or isinstance(cause, sqlite3.IntegrityError | psycopg.IntegrityError)
    return refused and "signoff_entry" in str(exc)


class _OwnError(Exception):
    """A lone writer's work raised: roll its transaction back, then answer it with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


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


def default_admin_key(key_path: str | Path) -> Path:
    """Where :meth:`Store.init_log` writes the admin's key unless told: ``log.key`` → ``log.admin.key``."""
    path = Path(key_path)
    return path.with_name(f"{path.stem}.admin{path.suffix}")


def open_store(
    url: str,
    *,
    clock: Callable[[], datetime] | None = None,
    create: bool = True,
    check_schema: bool = True,
    log: str | None = None,
) -> Store:
    """Open the store named by ``url`` (``postgres://`` and ``postgresql://`` use psycopg 3), bound to
    ``log`` (by default its only log: see :class:`Store`)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    return Store(url, clock=clock, create=create, check_schema=check_schema, log=log)
