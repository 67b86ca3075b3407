"""The notifier: follow the log from a stored cursor, make jobs, deliver them with retries. Not public.

Three threads, and a small pool that sends:

* **lead** takes the notifier's lock for this log (a PostgreSQL session advisory lock, or an
  ``flock`` beside a SQLite file), so that several desks started with ``--notify`` deliver each
  event once between them, and a notifier killed mid-delivery frees it at once.
* **follow** waits for the log to grow (``Store.wait_for_change``: an in-process signal,
  ``LISTEN``/``NOTIFY`` or SQLite's ``data_version``, never a slow poll), reads the new entries
  from the cursor, derives their events and writes one job per (endpoint, event) **in the same
  transaction that moves the cursor**. A crash before that commit leaves the cursor where it was.
* **dispatch** hands due jobs to the pool and records each attempt (a row in
  ``desk_notify_attempt``) with the job's new state, in batches: delivered, retried later
  (exponential backoff, capped, with up to 10 % jitter; a receiver's ``Retry-After`` is honoured
  up to the cap), failed for good, or skipped (a ``deadline_near`` whose review was decided).

A job is marked delivered only after the receiver said so, so a crash between the two repeats
the delivery, with the same event id: delivery is at least once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlmodel import col

from signoff.audit import ReviewService, Store, open_store, sealing
from signoff.audit.driver import dbapi_cursor, fetch
from signoff.audit.entry import Entry, format_time, parse_time
from signoff.audit.errors import UnknownReview
from signoff.audit.sealing import Lookup
from signoff.audit.values import lookup_for
from signoff.desk.db import engine_url
from signoff.desk.notify import _send
from signoff.desk.notify._endpoints import Endpoint, ensure_cursor, from_row, load
from signoff.desk.notify._events import REMINDER, Event, ReviewFacts, events_of, payload
from signoff.desk.notify._reminders import Reminders
from signoff.desk.notify._slack_app import SlackApp
from signoff.desk.notify._tables import Engines, NotifyCursor

log = logging.getLogger("signoff.notify")

RECORD_EVERY = 0.05  # seconds a finished delivery may wait to be written with others
RECORD_BATCH = 256  # or this many
OPENED_CACHE = 10_000  # reviews whose opening the follower remembers


@dataclass(frozen=True)
class NotifierOptions:
    """How the notifier runs. The defaults suit a desk; tests shorten the retry delays."""

    desk_url: str = "http://127.0.0.1:8080"
    retry_base: float = 2.0  # seconds before the second attempt; doubles each time
    retry_cap: float = 600.0  # no wait between attempts is longer
    max_attempts: int = 10  # then the job has failed (about 17 minutes of trying with the defaults)
    workers: int = 16  # deliveries in flight at once
    per_endpoint: int = 4  # of which to one endpoint
    timeout: float = 10.0  # one HTTP request or SMTP session
    batch: int = 500  # entries turned into jobs per transaction
    coalesce_seconds: float = 0.005  # after a wake-up, wait this long for more entries
    coalesce_max_seconds: float = 0.05  # and longer while they keep coming, up to this
    standby_seconds: float = 1.0  # how often a notifier without the lock tries to take it
    start_at: int | None = None  # first start only: the seq to follow from (default: the log's head)

    def backoff(self, attempts: int, retry_after: float | None = None) -> float:
        """Seconds to wait after ``attempts`` failed attempts."""
        delay = min(self.retry_cap, self.retry_base * 2 ** max(0, attempts - 1))
        delay = min(self.retry_cap, delay * (1 + random.random() / 10))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.retry_cap))
        return delay


@dataclass(frozen=True)
class Job:
    id: int
    endpoint: str
    event_id: str
    event: str
    review: str
    payload: dict[str, Any]
    attempts: int


@dataclass(frozen=True)
class Result:
    job: Job
    state: str  # delivered | retry | failed | skipped | dropped
    attempt: int  # 0 when nothing was sent
    at: str
    duration_ms: float
    status: int | None = None
    error: str = ""
    retry_after: float | None = None


# -- the lock -----------------------------------------------------------------------------------


class Lock(Protocol):
    def acquire(self) -> bool: ...
    def healthy(self) -> bool: ...
    def release(self) -> None: ...


class FileLock:
    """``flock`` on ``<database>.notify-<log>.lock``: one notifier per SQLite log; freed when its process dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: Any = None

    def acquire(self) -> bool:
        import fcntl

        handle = open(self.path, "a+")  # noqa: SIM115 - held open while we lead
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._file = handle
        return True

    def healthy(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()  # closing the file drops the flock
            self._file = None


class PgLock:
    """A session advisory lock on one connection: one notifier per log; freed when its connection ends."""

    def __init__(self, conninfo: str, log_id: str) -> None:
        self.conninfo = conninfo
        self.key = int.from_bytes(hashlib.sha256(f"signoff-notify:{log_id}".encode()).digest()[:8], "big", signed=True)
        self._conn: Any = None

    def acquire(self) -> bool:
        import psycopg

        try:
            if self._conn is None:
                self._conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5)
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        except psycopg.Error:
            self.release()
            return False
        return bool(row and row[0])

    def healthy(self) -> bool:
        import psycopg

        try:
            return self._conn is not None and self._conn.execute("SELECT 1").fetchone() is not None
        except psycopg.Error:
            return False

    def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()  # ends the session, and with it the lock
            self._conn = None


def make_lock(store_url: str, log_id: str) -> Lock:
    url = make_url(engine_url(store_url))
    if url.get_backend_name() == "sqlite":
        return FileLock(Path(f"{url.database}.notify-{log_id}.lock"))  # (a store may hold several logs)
    return PgLock(url.set(drivername="postgresql").render_as_string(hide_password=False), log_id)


# -- the notifier -------------------------------------------------------------------------------


# The hot paths speak the driver's own SQL (``?`` placeholders; see ``signoff.audit.driver.fetch``):
# building and compiling SQLAlchemy statements costs more CPU than the statements, and every
# millisecond of CPU here is one the decision path on the same machine does not get.
_JOB_COLUMNS = (
    "log",
    "endpoint",
    "event_id",
    "event",
    "review",
    "seq",
    "payload",
    "state",
    "attempts",
    "next_at",
    "created_at",
    "last_error",
)
_INSERT_JOB = (
    f"INSERT INTO desk_notify_job ({', '.join(_JOB_COLUMNS)}) VALUES ({', '.join('?' * len(_JOB_COLUMNS))}) "
    "ON CONFLICT (log, endpoint, event_id) DO NOTHING"
)
_MOVE_CURSOR = "UPDATE desk_notify_cursor SET position = ?, updated_at = ? WHERE log = ? AND position = ?"
_ENDPOINTS = "SELECT * FROM desk_notify_endpoint WHERE log = ? ORDER BY name"
_DUE = (
    "SELECT id, endpoint, event_id, event, review, payload, attempts, next_at FROM desk_notify_job "
    "WHERE log = ? AND state = 'pending'{busy}{full} ORDER BY next_at, id LIMIT ?"
)
_ATTEMPT_COLUMNS = ("log", "job", "endpoint", "event_id", "attempt", "at", "duration_ms", "outcome", "status", "error")
_INSERT_ATTEMPT = (
    f"INSERT INTO desk_notify_attempt ({', '.join(_ATTEMPT_COLUMNS)}) VALUES ({', '.join('?' * len(_ATTEMPT_COLUMNS))})"
)
_SET_JOB_STATE = (
    "UPDATE desk_notify_job SET state = ?, attempts = ?, next_at = ?, done_at = ?, last_error = ? WHERE id = ?"
)


def _sql(backend: str, sql: str) -> str:
    return sql if backend == "sqlite" else sql.replace("?", "%s")


class _CursorMoved(Exception):
    """Another notifier moved the cursor: reread it."""


class Notifier:
    """Follows one log and delivers its events to the endpoints stored beside it.

    ``store`` and ``svc`` may be shared with a desk in the same process (``desk serve --notify``);
    otherwise the notifier opens its own. ``start()`` runs it in background threads, ``stop()``
    ends them, ``run()`` blocks until interrupted.
    """

    def __init__(
        self,
        store_url: str,
        options: NotifierOptions | None = None,
        *,
        store: Store | None = None,
        svc: ReviewService | None = None,
        log: str | None = None,
    ) -> None:
        self.options = options or NotifierOptions()
        self.store_url = store_url
        self._own_store = store is None
        self.store = store if store is not None else open_store(store_url, create=False, log=log)
        self.svc = svc if svc is not None else ReviewService(self.store)
        self.log_id = self.store.log_id
        self.engines = Engines(store_url)
        self._lock = make_lock(store_url, self.log_id)
        self._stop = threading.Event()
        self.leading = threading.Event()
        self._wake = threading.Event()  # dispatch: new jobs, or a delivery finished
        self._dirty = threading.Event()  # jobs may have become due that dispatch has not read
        self._held_back = False  # the last look left due jobs waiting for a free slot
        self._results: queue.SimpleQueue[Result] = queue.SimpleQueue()
        # Touched by the dispatch thread only: jobs being sent (job id -> endpoint), and jobs sent
        # whose outcome is not yet written (they stay out of the due query until it is).
        self._inflight: dict[int, str] = {}
        self._finished: list[Result] = []
        self._finished_since = 0.0
        self._unrecorded: set[int] = set()
        self._opened: dict[str, ReviewFacts] = {}  # the last reviews opened, for their decisions' summaries
        self._endpoints: tuple[float, dict[str, Endpoint]] = (0.0, {})  # dispatch's copy, and when read
        self._threads: list[threading.Thread] = []
        self._pool = ThreadPoolExecutor(max_workers=self.options.workers, thread_name_prefix="signoff-notify-send")
        self._client = httpx.Client(
            timeout=self.options.timeout,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=self.options.workers * 2),
        )
        self._slack = SlackApp(self.engines, self.log_id, self.svc, self._client, self.options.desk_url)
        self._reminders = Reminders(
            self.engines, self.log_id, self.svc, self._slack, self._client, self.options.desk_url
        )
        self.counts: Counter[str] = Counter()  # outcomes since start, for tests and the CLI

    # -- running ----------------------------------------------------------------------------

    def start(self) -> Notifier:
        for name, target in (("lead", self._lead), ("follow", self._follow), ("dispatch", self._dispatch)):
            thread = threading.Thread(target=self._guard, args=(target,), name=f"signoff-notify-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def run(self) -> None:
        self.start()
        try:
            while not self._stop.wait(1.0):
                pass
        finally:
            self.stop()

    def request_stop(self) -> None:
        """Ask :meth:`run` to return (from a signal handler, say)."""
        self._stop.set()
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        end = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, end - time.monotonic()))
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._collect()
        with contextlib.suppress(Exception):  # what is not written is sent again: at least once
            self._record(force=True)
        self._lock.release()
        self.leading.clear()
        self._client.close()
        self.engines.dispose()
        if self._own_store:
            self.store.close()

    def __enter__(self) -> Notifier:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _guard(self, target: Any) -> None:
        """Keep a loop running through a failure (a database restart, say); report it, then retry."""
        while not self._stop.is_set():
            try:
                target()
                return
            except Exception:  # noqa: BLE001 - reported, then retried after a pause
                if self._stop.is_set():
                    return
                log.exception("notify: %s failed; retrying in 1 s", threading.current_thread().name)
                self._stop.wait(1.0)

    def _lead(self) -> None:
        while not self._stop.is_set():
            if not self.leading.is_set():
                if self._lock.acquire():
                    log.info("notify: following log %s (this notifier delivers)", self.log_id)
                    self.leading.set()
                    self._dirty.set()
                    self._wake.set()
                else:
                    self._stop.wait(self.options.standby_seconds)
                    continue
            if self._stop.wait(2.0):
                return
            if not self._lock.healthy():
                log.warning("notify: lost the notifier lock for log %s; standing by", self.log_id)
                self.leading.clear()
                self._lock.release()

    # -- following the log ---------------------------------------------------------------------

    def cursor(self) -> int:
        """The next seq to turn into jobs (made at the head, or ``start_at``, on the first start)."""
        with self.engines.busy_write() as conn:
            start = self.options.start_at if self.options.start_at is not None else self.store.size()
            ensure_cursor(conn, self.engines.backend, self.log_id, start)
            row = conn.execute(select(col(NotifyCursor.position)).where(col(NotifyCursor.log) == self.log_id)).one()
        return int(row[0])

    def _follow(self) -> None:
        position: int | None = None
        pause = self.options.coalesce_seconds
        while not self._stop.is_set():
            if not self.leading.wait(0.25):
                position = None
                continue
            if position is None:
                position = self.cursor()
            size = self.store.wait_for_change(position, timeout=0.5)
            if size <= position or not self.leading.is_set():
                continue
            if pause > 0:
                # Gather a burst into one read and one write, and stay off the CPU (and the SQLite
                # write lock) while the decision that woke us is still answering. The pause doubles
                # while entries keep coming (up to ``coalesce_max_seconds``), and falls back when they stop.
                self._stop.wait(pause)
                size = self.store.size()
            stop = min(size, position + self.options.batch)
            try:
                self._advance(position, stop)
            except _CursorMoved:
                position = None
                continue
            busy = stop - position > 1
            position = stop
            pause = min(self.options.coalesce_max_seconds, pause * 2) if busy else self.options.coalesce_seconds
            self._dirty.set()
            self._wake.set()

    def _facts(self, review: str) -> ReviewFacts | None:
        """What a summary says of ``review``: from the ``review.opened`` this notifier read last, or the queue."""
        cached = self._opened.get(review)
        if cached is not None:
            return cached
        try:
            found = self.svc.get(review)
        except UnknownReview:
            return None
        call = found.call  # its values revealed and checked, on a sealed log (ReviewService.get)
        deadline = format_time(found.deadline) if found.deadline is not None else None
        if found.sealed and found.problem:
            role = found.policy.role
            return ReviewFacts(call.tool, call.agent, call.app, call.session, {}, role, deadline, found.problem)
        return ReviewFacts(call.tool, call.agent, call.app, call.session, call.args, found.policy.role, deadline)

    def _values(self, entries: list[Entry]) -> Lookup | None:
        """On a sealed log, the values of the reviews the batch opens (their args), read once."""
        opened = [
            str(e.body.get("review"))
            for e in entries
            if e.kind == "review.opened" and sealing.any_sealed(e.body.get("call") or {})
        ]
        return lookup_for(self.store.read_rows, self.store.log_id, opened) if opened else None

    def _closes(self, review: str, seq: int) -> bool:
        """Whether the approval at ``seq`` decided ``review`` (the last approval its quorum needed)."""
        try:
            return self.svc.get(review).decision_seq == seq
        except UnknownReview:
            return False

    def _advance(self, start: int, stop: int) -> None:
        """Jobs for the entries in ``[start, stop)``, and the cursor moved to ``stop``, in one transaction."""
        events: list[Event] = []
        entries = list(self.store.entries(start=start, stop=stop, limit=stop - start))
        values = self._values(entries)
        for entry in entries:
            found = events_of(entry, self._facts, self._closes, values)
            if entry.kind == "review.opened" and found:
                self._opened[found[0].review] = found[0].facts
                while len(self._opened) > OPENED_CACHE:
                    del self._opened[next(iter(self._opened))]
            events.extend(found)
        now = time.time()
        created = format_time(datetime.now(UTC))
        backend = self.engines.backend
        rows: list[tuple[Any, ...]] = []
        with self.engines.busy_write() as conn:
            cursor = dbapi_cursor(conn)
            cursor.execute(_sql(backend, _MOVE_CURSOR), (stop, created, self.log_id, start))
            if cursor.rowcount != 1:
                raise _CursorMoved()
            for endpoint in map(from_row, fetch(cursor, backend, _ENDPOINTS, (self.log_id,))):
                for event in events:
                    if not endpoint.wants(event):
                        continue
                    due = now
                    lead = None
                    if event.type == REMINDER:
                        remind_at = endpoint.remind_due(event)
                        if remind_at is None:
                            continue  # no deadline, or too close to it for a reminder before it
                        due = remind_at
                    if event.type == "review.deadline_near":
                        lead = endpoint.deadline_lead
                        assert event.facts.deadline is not None
                        deadline = parse_time(event.facts.deadline).timestamp()
                        if deadline - lead <= parse_time(event.at).timestamp():
                            continue  # the whole window is shorter than the lead: review.opened said it
                        due = deadline - lead
                    body = payload(event, desk_url=self.options.desk_url, redact=endpoint.redact_args, lead=lead)
                    rows.append(
                        (
                            self.log_id,
                            endpoint.name,
                            event.id,
                            event.type,
                            event.review,
                            event.seq,
                            json.dumps(body, ensure_ascii=False),
                            "pending",
                            0,
                            due,
                            created,
                            "",
                        )
                    )
            if rows:
                cursor.executemany(_sql(backend, _INSERT_JOB), rows)
        if events:
            log.debug("notify: seq %d..%d: %d events, %d jobs", start, stop - 1, len(events), len(rows))

    # -- delivering --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        look_at = 0.0  # the time.time() at which a job may next fall due
        while not self._stop.is_set():
            self._wake.clear()
            freed = self._collect()
            wait = 0.25
            if self.leading.is_set():
                # Ask the database only when something may have become due: new jobs, retries
                # rescheduled, a slot freed for a job held back, or the next job's time come.
                if self._dirty.is_set() or (freed and self._held_back) or time.time() >= look_at:
                    self._dirty.clear()
                    look_at = time.time() + self._submit_due()
                wait = max(0.0, look_at - time.time())
            if self._record():
                continue
            if self._finished:
                wait = min(wait, max(0.0, self._finished_since + RECORD_EVERY - time.monotonic()))
            self._wake.wait(wait)

    def _due(self, now: float, limit: int, full: set[str]) -> tuple[list[Job], float | None, bool]:
        """Up to ``limit`` due jobs that are not in flight, for endpoints not at their limit; when the
        next one falls due (None: not among those read); and whether that was all there is. One query."""
        busy = [*self._inflight, *self._unrecorded]
        sql = _DUE.format(
            busy=f" AND id NOT IN ({', '.join('?' * len(busy))})" if busy else "",
            full=f" AND endpoint NOT IN ({', '.join('?' * len(full))})" if full else "",
        )
        with self.engines.read.connect() as conn:
            rows = fetch(dbapi_cursor(conn), self.engines.backend, sql, (self.log_id, *busy, *sorted(full), limit + 1))
        jobs = [
            Job(row.id, row.endpoint, row.event_id, row.event, row.review, json.loads(row.payload), row.attempts)
            for row in rows[:limit]
            if row.next_at <= now
        ]
        later = next((float(row.next_at) for row in rows if row.next_at > now), None)
        return jobs, later, len(rows) <= limit

    def _submit_due(self) -> float:
        """Send what is due; return how long dispatch may sleep before something else falls due.
        (A delivery that finishes wakes it sooner.)"""
        now = time.time()
        endpoints: dict[str, Endpoint] | None = None
        later: float | None = None
        self._held_back = False
        while True:
            capacity = self.options.workers - len(self._inflight)
            per_endpoint = Counter(self._inflight.values())
            full = {name for name, n in per_endpoint.items() if n >= self.options.per_endpoint}
            if capacity <= 0 or full:
                self._held_back = True  # due jobs may wait for a slot: a delivery that finishes looks again
            if capacity <= 0:
                return 1.0
            jobs, later, seen_all = self._due(now, capacity, full)
            if endpoints is None and jobs:
                endpoints = self._current_endpoints({job.endpoint for job in jobs})
            sent = 0
            for job in jobs:
                if capacity <= 0 or per_endpoint[job.endpoint] >= self.options.per_endpoint:
                    self._held_back = True
                    continue
                self._inflight[job.id] = job.endpoint
                per_endpoint[job.endpoint] += 1
                capacity -= 1
                sent += 1
                endpoint = (endpoints or {}).get(job.endpoint)
                if endpoint is None or not endpoint.enabled:
                    at = format_time(datetime.now(UTC))
                    self._results.put(Result(job, "dropped", 0, at, 0.0, error="endpoint removed or disabled"))
                    self._wake.set()
                    continue
                self._pool.submit(self._deliver, job, endpoint)
            if sent == 0 or sent == len(jobs) and (later is not None or seen_all):
                break  # nothing more can go now, or everything due went
        if later is None:
            return 1.0
        return max(0.0, min(1.0, later - time.time()))

    def _current_endpoints(self, names: set[str]) -> dict[str, Endpoint]:
        """The endpoints, reread when a second old or when one of ``names`` is missing (new, or removed)."""
        read_at, known = self._endpoints
        if time.monotonic() - read_at > 1.0 or not names <= known.keys():
            with self.engines.read.connect() as conn:
                known = {e.name: e for e in load(conn, self.log_id)}
            self._endpoints = (time.monotonic(), known)
        return known

    def _still_pending(self, job: Job) -> bool:
        """For ``deadline_near``: is the review still waiting, with its deadline ahead?"""
        try:
            review = self.svc.get(job.review)
        except UnknownReview:
            return False
        return review.status == "pending" and (review.deadline is None or review.deadline > datetime.now(UTC))

    def _deliver(self, job: Job, endpoint: Endpoint) -> None:
        started = time.time()
        at = format_time(datetime.now(UTC))
        try:
            if job.event == "review.deadline_near" and not self._still_pending(job):
                self._results.put(Result(job, "skipped", 0, at, 0.0, error="decided before its deadline drew near"))
                return
            reminder = job.event == REMINDER
            if reminder and endpoint.kind in ("webhook", "slack") and not self._still_pending(job):
                self._results.put(Result(job, "skipped", 0, at, 0.0, error="decided before the reminder was due"))
                return
            attempt = job.attempts + 1
            if reminder and endpoint.kind in ("slack-app", "email"):  # to each person the review still needs
                outcome = self._reminders.deliver(
                    endpoint, job.event_id, job.review, job.payload, timeout=self.options.timeout
                )
            elif endpoint.kind == "slack-app":
                outcome = self._slack.deliver(endpoint, job.event, job.review, timeout=self.options.timeout)
            else:
                outcome = _send.send(endpoint, job.payload, self._client, timeout=self.options.timeout, attempt=attempt)
            if outcome.skipped:
                state = "skipped"
            elif outcome.delivered:
                state = "delivered"
            elif outcome.retry and attempt < self.options.max_attempts:
                state = "retry"
            else:
                state = "failed"
            self._results.put(
                Result(
                    job,
                    state,
                    attempt,
                    at,
                    (time.time() - started) * 1000,
                    outcome.status,
                    outcome.error,
                    outcome.retry_after,
                )
            )
        except Exception as exc:  # noqa: BLE001 - a bug in a channel must not stall the job forever
            log.exception("notify: delivering %s to %s failed", job.event_id, job.endpoint)
            self._results.put(
                Result(
                    job,
                    "retry",
                    job.attempts + 1,
                    at,
                    (time.time() - started) * 1000,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
            )
        finally:
            self._wake.set()

    def _collect(self) -> int:
        """Take finished deliveries off the queue: their slots are free, their outcomes still unwritten.
        Returns how many."""
        taken = 0
        with contextlib.suppress(queue.Empty):
            while True:
                result = self._results.get_nowait()
                if not self._finished:
                    self._finished_since = time.monotonic()
                self._finished.append(result)
                self._inflight.pop(result.job.id, None)
                self._unrecorded.add(result.job.id)
                taken += 1
        return taken

    def _record(self, *, force: bool = False) -> bool:
        """Write finished attempts and the jobs' new states in one transaction, once ``RECORD_EVERY``
        has passed since the oldest (or ``RECORD_BATCH`` are waiting): a burst of deliveries costs one
        write, not one each. Until then a crash sends them again (at least once). False if nothing was due."""
        if not self._finished:
            return False
        due = self._finished_since + RECORD_EVERY <= time.monotonic() or len(self._finished) >= RECORD_BATCH
        if not (force or due):
            return False
        results = self._finished
        now = time.time()
        done = format_time(datetime.now(UTC))
        attempts: list[tuple[Any, ...]] = []
        changes: list[tuple[Any, ...]] = []
        for r in results:
            if r.attempt:
                attempts.append(
                    (
                        self.log_id,
                        r.job.id,
                        r.job.endpoint,
                        r.job.event_id,
                        r.attempt,
                        r.at,
                        round(r.duration_ms, 3),
                        r.state,
                        r.status,
                        r.error,
                    )
                )
            state = {"retry": "pending", "dropped": "skipped"}.get(r.state, r.state)
            next_at = now + self.options.backoff(r.attempt, r.retry_after) if r.state == "retry" else now
            changes.append(
                (
                    state,
                    max(r.job.attempts, r.attempt),
                    next_at,
                    None if state == "pending" else done,
                    r.error,
                    r.job.id,
                )
            )
        backend = self.engines.backend
        with self.engines.busy_write() as conn:  # on failure all stay unwritten, and are tried again
            cursor = dbapi_cursor(conn)
            if attempts:
                cursor.executemany(_sql(backend, _INSERT_ATTEMPT), attempts)
            cursor.executemany(_sql(backend, _SET_JOB_STATE), changes)
        self._finished = []
        if any(r.state == "retry" for r in results):
            self._dirty.set()  # rescheduled: dispatch looks for them again
        for r in results:
            self._unrecorded.discard(r.job.id)
            self.counts[r.state] += 1
            level = {"retry": logging.WARNING, "failed": logging.ERROR}.get(r.state, logging.DEBUG)
            log.log(
                level,
                "notify: %s %s to %s (attempt %d) %s",
                r.state,
                r.job.event_id,
                r.job.endpoint,
                r.attempt,
                r.error,
            )
        return True


@contextlib.contextmanager
def running(store_url: str, options: NotifierOptions | None = None, **kwargs: Any) -> Iterator[Notifier]:
    """A notifier in background threads for the length of a ``with`` block."""
    notifier = Notifier(store_url, options, **kwargs).start()
    try:
        yield notifier
    finally:
        notifier.stop()
