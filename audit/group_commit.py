"""Group commit: concurrent writers' work gathered into one transaction, each answered after its commit.

A durable commit costs one ``fsync`` (SQLite) or one WAL flush (PostgreSQL), whatever it holds.
Writers that arrive while a commit is under way queue up; the next commit takes them all, so
*n* concurrent writers pay for about one flush instead of *n*.

The shape is a leader/follower queue. A writer appends its request and, if no batch is
being run, becomes the leader: it takes every queued request (its own first), runs them in
one transaction (:meth:`signoff.audit.store.Store._run_batch`) and answers each. It then hands
the leadership to the first request still queued, so no writer serves others for ever and a
lone writer runs its own work at once, on its own thread, with no hand-off at all.

Every request is answered with the outcome of the commit that holds its work, and only then:
its result, its own error (the others still commit), or the error that failed the whole batch.
Nothing is answered before the commit returns, so a crash can lose only unanswered work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

MAX_BATCH = 256
"""At most this many writers' work in one transaction (a bound on a transaction's size and on
how long a lock is held, not a pause: a batch never waits for more writers)."""


class Request(Generic[T]):
    """One writer's work and, once its batch committed, its outcome."""

    __slots__ = ("_wake", "error", "lead", "result", "settled", "work")

    def __init__(self, work: Callable[[Any], T]) -> None:
        self.work = work
        self.result: T | None = None
        self.error: BaseException | None = None
        self.settled = False
        self.lead = False
        self._wake = threading.Event()

    def succeed(self, result: T) -> None:
        self.result, self.error, self.settled = result, None, True

    def fail(self, error: BaseException) -> None:
        self.result, self.error, self.settled = None, error, True

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class GroupCommit:
    """The queue of one store's writers in one process (one per :class:`~signoff.audit.store.Store`)."""

    def __init__(self, run_batch: Callable[[list[Request[Any]]], None], max_batch: int = MAX_BATCH) -> None:
        """``run_batch`` runs the requests in one transaction and settles every one of them, or raises
        (then each request it left unsettled fails with that error)."""
        self._run_batch = run_batch
        self._max = max_batch
        self._lock = threading.Lock()
        self._queue: list[Request[Any]] = []
        self._leading = False
        self._local = threading.local()
        self.batches = 0  # commits made, and
        self.batched = 0  # requests answered by them: batched / batches is the mean batch size

    def submit(self, work: Callable[[Any], T]) -> T:
        """Run ``work`` in a transaction shared with the writers queued beside it; return its result
        (or raise its error) once that transaction has committed (or failed)."""
        if getattr(self._local, "leading", False):
            raise RuntimeError("transact: expected no transaction inside another one's work, found one nested")
        request: Request[T] = Request(work)
        with self._lock:
            self._queue.append(request)
            if not self._leading:
                self._leading = request.lead = True
        if not request.lead:
            request._wake.wait()
            if not request.lead:  # answered by another writer's batch
                return request.outcome()
        self._lead()
        return request.outcome()

    def _lead(self) -> None:
        """Run one batch (this writer's request is first in the queue), then hand the lead on."""
        with self._lock:
            batch = self._queue[: self._max]
            del self._queue[: self._max]
        self._local.leading = True
        try:
            self._run_batch(batch)
        except BaseException as exc:  # the whole transaction failed: so did every request in it
            for request in batch:
                if not request.settled:
                    request.fail(exc)
        finally:
            self._local.leading = False
            for request in batch:
                if not request.settled:  # run_batch returned without settling it: a bug, never silence
                    request.fail(RuntimeError("transact: the batch ended without an outcome for this work"))
            with self._lock:
                self.batches += 1
                self.batched += len(batch)
                if self._queue:
                    successor = self._queue[0]
                    successor.lead = True
                    successor._wake.set()
                else:
                    self._leading = False
            for request in batch[1:]:  # the leader's own request is batch[0]: it returns by itself
                request._wake.set()
