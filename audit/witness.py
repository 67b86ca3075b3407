"""A c2sp.org/tlog-witness@v1.0.0 witness: parse, verify, compare-and-swap its state, cosign.

It knows nothing of Signoff's reviews: it imports only the C2SP modules, ``keys``, ``merkle``
and the errors. Run it with ``audit witness serve`` or ``python -m signoff.audit.cli_witness serve``.

* State per origin (size, root, the latest cosigned checkpoint with the log's verified signatures
  and the witness's cosignature) lives in SQLite (``sqlite:///path.db``, a bare path) or
  PostgreSQL (``postgresql://…``). Checking the old size and writing the new state is one
  transaction ("add-checkpoint": "must be performed atomically"): SQLite ``BEGIN IMMEDIATE``;
  PostgreSQL ``INSERT … ON CONFLICT DO NOTHING`` then ``SELECT … FOR UPDATE``. The row is
  committed before the response is written ("MUST persist the new checkpoint before responding").
* HTTP (``http.server``, HTTP/1.1 keep-alive, the SHOULD): ``POST /add-checkpoint`` and
  ``GET /<hex sha256 of origin>/checkpoint`` ("Monitor Retrieval Mechanism"; 404 if never cosigned).
  Bodies are limited to :data:`MAX_BODY` bytes (413 beyond), idle connections to 30 s.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from signoff.audit.c2sp_errors import C2SPError, WitnessRequestError
from signoff.audit.signed_note import Verifier, format_note
from signoff.audit.tlog_cosignature import Cosigner
from signoff.audit.tlog_witness import Decision, Stored, decide, parse_request

__all__ = [
    "MAX_BODY",
    "PostgresState",
    "Record",
    "Response",
    "SQLiteState",
    "Witness",
    "WitnessState",
    "make_server",
    "open_state",
]

MAX_BODY = 256 * 1024
"""Largest ``add-checkpoint`` body read: 63 proof lines and a checkpoint with dozens of signatures."""
TABLE = "signoff_witness_checkpoints"


@dataclass(frozen=True)
class Record:
    """What the witness keeps per origin: the latest cosigned size and root, and its note."""

    size: int
    root: bytes
    note: bytes


Step = Callable[[Stored | None], tuple[Decision, Record | None]]
"""Run under the origin's lock: the decision, and the record to write (None: write nothing)."""


class WitnessState(Protocol):
    def update(self, origin: str, step: Step) -> Decision:
        """Run ``step`` on the origin's record under a lock; write its new record, if any, atomically."""
        ...

    def latest(self, origin: str) -> bytes | None:
        """The latest cosigned checkpoint note for ``origin``, or None."""
        ...

    def close(self) -> None: ...


class SQLiteState:
    """The witness state in a SQLite file; every update is one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        # Connections are kept open in a small pool: opening one per request costs a WAL checkpoint at
        # every close (the last connection of a WAL database checkpoints it), several fsyncs each time.
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (origin TEXT PRIMARY KEY, size INTEGER NOT NULL, "
                "root BLOB NOT NULL, note BLOB NOT NULL)"
            )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA synchronous=FULL")
        try:
            yield conn
        finally:
            with self._lock:
                if len(self._idle) < 8:
                    self._idle.append(conn)
                    conn = None
            if conn is not None:
                conn.close()

    def update(self, origin: str, step: Step) -> Decision:
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")  # the write lock first: nobody reads a size we are about to replace
            try:
                row = conn.execute(f"SELECT size, root FROM {TABLE} WHERE origin = ?", (origin,)).fetchone()
                decision, record = step(Stored(row[0], bytes(row[1])) if row else None)
                if record is None:
                    conn.execute("ROLLBACK")
                    return decision
                conn.execute(
                    f"INSERT INTO {TABLE} (origin, size, root, note) VALUES (?, ?, ?, ?) ON CONFLICT (origin) "
                    "DO UPDATE SET size = excluded.size, root = excluded.root, note = excluded.note",
                    (origin, record.size, record.root, record.note),
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return decision

    def latest(self, origin: str) -> bytes | None:
        with self._connect() as conn:
            row = conn.execute(f"SELECT note FROM {TABLE} WHERE origin = ?", (origin,)).fetchone()
        return bytes(row[0]) if row else None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class PostgresState:
    """The witness state in PostgreSQL (psycopg 3); a small pool of connections, one row lock per update.

    At most ``pool_size`` connections are open at once: a burst of requests (200 clients at once) waits
    for one rather than opening one each, which the server's ``max_connections`` (100 by default) would
    refuse with a 500 for some of them. Each update holds the origin's row lock anyway."""

    def __init__(self, url: str, pool_size: int = 8) -> None:
        import psycopg

        self._psycopg = psycopg
        self.url = url
        self.pool_size = pool_size
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._open = threading.BoundedSemaphore(pool_size)  # connections in use or idle, at most pool_size
        with self._connection() as conn, conn.transaction():
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (origin TEXT PRIMARY KEY, size BIGINT, root BYTEA, note BYTEA)"
            )

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        with self._open:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._psycopg.connect(self.url, autocommit=True)
            try:
                yield conn
            except BaseException:
                conn.close()  # its state is unknown: never hand it out again
                raise
            with self._lock:
                if not conn.closed:
                    self._idle.append(conn)
                    return
            conn.close()

    def update(self, origin: str, step: Step) -> Decision:
        with self._connection() as conn:
            with conn.transaction() as tx:
                # A placeholder row (NULL size: never cosigned) to lock, even for a new origin.
                conn.execute(f"INSERT INTO {TABLE} (origin) VALUES (%s) ON CONFLICT DO NOTHING", (origin,))
                row = conn.execute(f"SELECT size, root FROM {TABLE} WHERE origin = %s FOR UPDATE", (origin,)).fetchone()
                decision, record = step(Stored(row[0], bytes(row[1])) if row and row[0] is not None else None)
                if record is None:
                    raise self._psycopg.Rollback(tx)
                conn.execute(
                    f"UPDATE {TABLE} SET size = %s, root = %s, note = %s WHERE origin = %s",
                    (record.size, record.root, record.note, origin),
                )
            return decision

    def latest(self, origin: str) -> bytes | None:
        with self._connection() as conn:
            row = conn.execute(f"SELECT note FROM {TABLE} WHERE origin = %s AND size IS NOT NULL", (origin,)).fetchone()
        return bytes(row[0]) if row else None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def open_state(url: str) -> WitnessState:
    """``sqlite:///relative.db``, ``sqlite:////absolute.db``, a bare file path, or ``postgresql://…``."""
    if url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
        return PostgresState(url.replace("postgresql+psycopg://", "postgresql://", 1))
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
    elif "://" in url:
        raise WitnessRequestError(f"--store: expected sqlite:///path.db, postgresql://… or a file path, found {url!r}")
    else:
        path = url
    if not path or path.endswith("/"):
        raise WitnessRequestError(f"--store: expected a SQLite file path, found {url!r}")
    Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return SQLiteState(Path(path).expanduser())


# -- the witness --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes


_TEXT = "text/plain; charset=utf-8"


class Witness:
    """The witness's logic over HTTP-free requests: ``logs`` maps each origin to its trusted keys."""

    def __init__(self, cosigner: Cosigner, logs: Mapping[str, Sequence[Verifier]], state: WitnessState) -> None:
        self.cosigner = cosigner
        self.logs = {origin: tuple(keys) for origin, keys in logs.items()}
        self.state = state
        self._by_hash = {hashlib.sha256(origin.encode("utf-8")).hexdigest(): origin for origin in self.logs}

    def add_checkpoint(self, body: bytes) -> Response:
        """The "add-checkpoint" call: decide, and on success cosign and persist in the same transaction."""
        try:
            request = parse_request(body)
        except WitnessRequestError as exc:
            return Response(400, _TEXT, f"{exc}\n".encode())
        origin = request.origin
        if origin not in self.logs:
            return self._respond(decide(request, self.logs, None))  # 404: no state for unknown origins

        def step(stored: Stored | None) -> tuple[Decision, Record | None]:
            decision = decide(request, self.logs, stored)
            if not decision.ok or decision.checkpoint is None:
                return decision, None
            # "The signatures MUST be cosignatures from the witness key(s) on the checkpoint"; the timestamp
            # "MUST NOT be zero" (Cosigner.sign_at refuses 0). A refused checkpoint is never cosigned.
            cosignature = self.cosigner.cosign(decision.text)
            # The monitoring checkpoint "MUST include the cosignature(s) from the witness's key(s) that were
            # returned from add-checkpoint and the cosignature from the log key(s) that the witness verified"
            note = format_note(decision.text, (*decision.log_signatures, cosignature))
            body = (cosignature.line() + "\n").encode("utf-8")
            record = Record(decision.checkpoint.size, decision.checkpoint.root, note)
            return replace(decision, body=body), record

        return self._respond(self.state.update(origin, step))

    def checkpoint(self, origin_hash: str) -> Response:
        """``GET <monitoring prefix>/<origin hash>/checkpoint``: the latest cosigned note, or 404."""
        origin = self._by_hash.get(origin_hash)
        note = self.state.latest(origin) if origin is not None else None
        if note is None:  # "If the witness has never cosigned a checkpoint for that log, it MUST respond 404"
            return Response(404, _TEXT, b"expected a log this witness cosigned, found none for this origin hash\n")
        return Response(200, _TEXT, note)

    @staticmethod
    def _respond(decision: Decision) -> Response:
        return Response(decision.status, decision.content_type, decision.body)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive ("Clients SHOULD use, and witnesses SHOULD support")
    disable_nagle_algorithm = True  # the headers and the body are two writes: no 40 ms wait for the ACK
    timeout = 30
    server_version = "signoff-witness/1"
    witness: Witness
    quiet = False

    def _send(self, response: Response, *, close: bool = False) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.send_header("Cache-Control", "no-store")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def _error(self, status: int, message: str, *, close: bool = False) -> None:
        self._send(Response(status, _TEXT, (message + "\n").encode()), close=close)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if self.path != "/add-checkpoint":
            self._error(404, f"expected POST /add-checkpoint, found POST {self.path[:100]}", close=True)
            return
        if self.headers.get("Transfer-Encoding"):
            self._error(411, "expected a Content-Length, found a Transfer-Encoding", close=True)
            return
        length_text = self.headers.get("Content-Length", "")
        if not length_text.isdigit():
            self._error(411, f"expected a Content-Length, found {length_text[:20]!r}", close=True)
            return
        length = int(length_text)
        if length > MAX_BODY:
            self._error(413, f"expected a body of at most {MAX_BODY} bytes, found {length}", close=True)
            return
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            return
        try:
            response = self.witness.add_checkpoint(body)
        except C2SPError as exc:
            response = Response(400, _TEXT, f"{exc}\n".encode())
        except Exception as exc:  # noqa: BLE001 - the edge: answer 500 and keep serving
            self.log_error("add-checkpoint failed: %s: %s", type(exc).__name__, exc)
            response = Response(500, _TEXT, b"internal error: the checkpoint was not cosigned\n")
        self._send(response)

    def do_GET(self) -> None:  # noqa: N802
        parts = self.path.split("/")
        if len(parts) == 3 and parts[0] == "" and parts[2] == "checkpoint" and len(parts[1]) == 64:
            try:
                self._send(self.witness.checkpoint(parts[1]))
            except Exception as exc:  # noqa: BLE001
                self.log_error("checkpoint failed: %s: %s", type(exc).__name__, exc)
                self._error(500, "internal error")
            return
        if parts[1:] == ["add-checkpoint"]:  # "The request MUST be an HTTP POST"
            self._error(405, "expected POST /add-checkpoint, found GET")
            return
        self._error(404, f"expected GET /<hex sha256 of origin>/checkpoint, found GET {self.path[:100]}")

    do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        if not self.quiet:
            super().log_message(format, *args)


BACKLOG = 1024
"""Connections the kernel queues before the server accepts them (capped by ``net.core.somaxconn``). The
standard library's 5 reset 40 of 200 clients that connected at once; a witness many logs push to takes
a burst (``tests/audit/test_witness.py``, 200 at once)."""


class _Server(ThreadingHTTPServer):
    """One thread per connection (each ``add-checkpoint`` waits on the origin's lock in the state, not on
    the other connections), and a listen backlog sized for a burst."""

    request_queue_size = BACKLOG
    daemon_threads = True


def make_server(
    witness: Witness, host: str = "127.0.0.1", port: int = 7380, *, quiet: bool = False
) -> ThreadingHTTPServer:
    """A threaded HTTP server for ``witness`` (call ``serve_forever``; port 0 picks a free one)."""
    handler = type("WitnessHandler", (_Handler,), {"witness": witness, "quiet": quiet})
    return _Server((host, port), handler)
