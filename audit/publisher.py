"""The publisher: checkpoints on a schedule, pushed to every witness on the log (c2sp.org/tlog-witness).

``desk serve --key log.key --checkpoint-every S`` and ``signoff resume --log-key log.key
--checkpoint-every S`` run one in a thread; ``audit witness push`` runs one pass. Each pass:

1. makes a checkpoint (``Store.checkpoint``: a C2SP signed note, recorded on the log) if the log holds
   an entry the newest checkpoint does not cover, other than the publisher's own bookkeeping
   (``log.checkpoint``, ``log.cosigned``), so an idle log is not checkpointed again and again;
2. sends it to each witness on the log that has not cosigned it, with the consistency proof from the
   size that witness cosigned last (as the log's ``log.cosigned`` entries say; 0 and no proof at
   first). A 409 names the witness's size: one retry with a proof from it. A witness whose size is
   beyond the log's has seen another history (a fork, a rollback): that is an error, never retried;
3. records each cosignature returned (``witnessing.record_cosignatures``: ``log.cosigned`` entries and
   the stored note, in one transaction).

A witness that is slow or down delays only its own cosignature: each push has a timeout, and a failing
witness is retried with backoff (1 s doubling to 5 min) while the others are served. Nothing here is on
the decision path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from signoff.audit import witnessing
from signoff.audit.c2sp import Witness
from signoff.audit.c2sp_errors import C2SPError, WitnessError
from signoff.audit.errors import AuditError
from signoff.audit.keys import Signer
from signoff.audit.store import Store
from signoff.audit.tree_head import Checkpoint

log = logging.getLogger("signoff.audit.publisher")
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 300.0
_GROWN = (
    "SELECT seq FROM signoff_entry WHERE log = ? AND seq >= ? AND kind NOT IN ('log.checkpoint', 'log.cosigned') "
    "LIMIT 1"
)


@dataclass
class Pushed:
    """What one pass did for one witness: ``cosigned`` (the size), ``skipped`` (already has it, or backing
    off), or ``failed`` (the error)."""

    witness: str
    outcome: str
    detail: str = ""


@dataclass
class PassReport:
    checkpoint: Checkpoint | None
    made: bool
    pushed: list[Pushed] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint.size if self.checkpoint else None,
            "made": self.made,
            "witnesses": [{"witness": p.witness, "outcome": p.outcome, "detail": p.detail} for p in self.pushed],
        }


class Publisher:
    """Checkpoints and pushes for one log; ``log_key`` is the log's private key (it signs both)."""

    def __init__(
        self,
        store: Store,
        log_key: Signer,
        *,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import httpx

        if log_key.public != store.public_key:
            raise AuditError(f"log key: expected the log's key {store.public_key}, found {log_key.public}")
        self.store = store
        self.key = log_key
        self.timeout = timeout
        self.clock = clock
        self.client = httpx.Client(timeout=timeout)
        self._backoff: dict[str, tuple[float, float]] = {}  # witness -> (retry not before, last delay)
        self.errors: dict[str, str] = {}  # witness -> its last error, until it cosigns again
        self._lock = threading.Lock()

    def close(self) -> None:
        self.client.close()

    # -- one pass ------------------------------------------------------------------------------

    def checkpoint_if_grown(self) -> tuple[Checkpoint | None, bool]:
        """The checkpoint to push: a new one if the log grew past the newest (bookkeeping aside), else the
        newest note checkpoint; and whether it was made now."""
        latest = self.store.latest_checkpoint()
        start = latest.size if latest is not None else 0
        if latest is None or self.store.read_rows(_GROWN, self.store.log_id, start):
            return self.store.checkpoint(self.key), True
        return (latest if latest.note else None), False

    def publish_once(self) -> PassReport:
        """One pass: a checkpoint if the log grew, pushed to every witness at once (one thread each, so a
        slow witness costs its own timeout only), and every cosignature that came back recorded in one
        transaction."""
        with self._lock:  # one pass at a time (a scheduled pass and `audit witness push` in one process)
            point, made = self.checkpoint_if_grown()
            report = PassReport(point, made)
            if point is None:
                return report
            witnesses = list(witnessing.config(self.store).witnesses.values())
            if len(witnesses) > 1:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=len(witnesses), thread_name_prefix="signoff-push") as pool:
                    answers = list(pool.map(lambda w: self._exchange(w, point), witnesses))
            else:
                answers = [self._exchange(w, point) for w in witnesses]
            lines = [line for answer in answers if isinstance(answer, list) for line in answer]
            try:
                recorded = {str(e.body["witness"]) for e in witnessing.record_cosignatures(
                    self.store, point.size, lines, self.key)} if lines else set()  # fmt: skip
            except (AuditError, C2SPError) as exc:  # one bad line spoils the batch: record them one by one
                recorded = self._record_each(point, answers, witnesses, str(exc))
            for witness, answer in zip(witnesses, answers, strict=True):
                report.pushed.append(self._outcome(witness, point, answer, recorded))
            return report

    def _exchange(self, witness: Witness, point: Checkpoint) -> list[str] | Pushed:
        """Send ``point`` to ``witness``: its cosignature lines, or what to report instead."""
        last = witnessing.last_cosigned(self.store, witness.name)
        old = int(last.body["size"]) if last is not None else 0
        if old >= point.size:
            return Pushed(witness.name, "skipped", f"has size {old}")
        due, _delay = self._backoff.get(witness.name, (0.0, 0.0))
        if self.clock() < due:
            return Pushed(witness.name, "skipped", f"backing off after: {self.errors.get(witness.name, '')}")
        try:
            return self._send(witness, point, old, retry=True)
        except (AuditError, C2SPError) as exc:
            return self._failed(witness, str(exc))

    def _record_each(
        self, point: Checkpoint, answers: list[list[str] | Pushed], witnesses: list[Witness], why: str
    ) -> set[str]:
        recorded: set[str] = set()
        for witness, answer in zip(witnesses, answers, strict=True):
            if not isinstance(answer, list):
                continue
            try:
                written = witnessing.record_cosignatures(self.store, point.size, answer, self.key)
            except (AuditError, C2SPError) as exc:
                answers[witnesses.index(witness)] = self._failed(witness, str(exc))
                continue
            recorded.update(str(e.body["witness"]) for e in written)
        log.info("cosignatures recorded one by one after: %s", why)
        return recorded

    def _outcome(self, witness: Witness, point: Checkpoint, answer: list[str] | Pushed, recorded: set[str]) -> Pushed:
        if isinstance(answer, Pushed):
            return answer
        if witness.name not in recorded:
            now = witnessing.last_cosigned(self.store, witness.name)
            if now is None or int(now.body["size"]) != point.size:
                return self._failed(witness, f"expected its cosignature of size {point.size}, found none in its answer")
        self._backoff.pop(witness.name, None)
        if self.errors.pop(witness.name, None) is not None:
            log.warning("witness %s cosigns again (size %d)", witness.name, point.size)
        return Pushed(witness.name, "cosigned", str(point.size))

    def _send(self, witness: Witness, point: Checkpoint, old: int, *, retry: bool) -> list[str]:
        from signoff.audit.tlog_witness import Conflict, add_checkpoint

        proof = self.store.consistency_proof(old, point.size) if 0 < old < point.size else []
        note = _log_signed(point).encode("utf-8")
        answer = add_checkpoint(witness.url, note, old, proof, client=self.client, timeout=self.timeout)
        if isinstance(answer, Conflict):
            if answer.size > point.size:
                raise WitnessError(
                    f"witness {witness.name}: it cosigned size {answer.size} of this log, which has {point.size} "
                    "entries checkpointed: it saw another history (the log was rolled back or forked)"
                )
            if not retry or answer.size == old:
                raise WitnessError(f"witness {witness.name}: expected it to take size {old}, found it at {answer.size}")
            return self._send(witness, point, answer.size, retry=False)
        return list(answer.lines())

    def _failed(self, witness: Witness, error: str) -> Pushed:
        _due, delay = self._backoff.get(witness.name, (0.0, 0.0))
        delay = FIRST_BACKOFF if delay == 0 else min(delay * 2, MAX_BACKOFF)
        self._backoff[witness.name] = (self.clock() + delay, delay)
        if self.errors.get(witness.name) != error:
            log.warning("witness %s: %s (trying again in %.0f s)", witness.name, error, delay)
        self.errors[witness.name] = error
        return Pushed(witness.name, "failed", error)

    # -- on a schedule -----------------------------------------------------------------------------

    def run(self, every: float, stop: threading.Event) -> None:
        """Pass after pass, ``every`` seconds apart, until ``stop`` is set; an error is logged, never raised."""
        while not stop.is_set():
            try:
                self.publish_once()
            except Exception as exc:  # noqa: BLE001 - a thread of its own: log it, keep the schedule
                log.error("checkpoint publisher: %s: %s", type(exc).__name__, exc)
            stop.wait(every)

    def start(self, every: float) -> tuple[threading.Thread, threading.Event]:
        stop = threading.Event()
        thread = threading.Thread(target=self.run, args=(every, stop), name="signoff-publisher", daemon=True)
        thread.start()
        return thread, stop


def _log_signed(point: Checkpoint) -> str:
    """The note with only the log's own signature (what the log signed; witnesses add theirs)."""
    text, _blank, lines = point.note.partition("\n\n")
    return f"{text}\n\n{lines.splitlines()[0]}\n"


__all__ = ["PassReport", "Publisher", "Pushed"]
