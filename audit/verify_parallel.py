"""``audit verify`` on all cores: the per-entry work in worker processes, the order-bound work in one pass.

The checks are exactly :class:`~signoff.audit.verifier.Verifier`'s; only where they run changes:

* **workers**, over chunks of entries in parallel: each entry's leaf hash (RFC 9162 §2.1.1) against
  the stored hash, its RFC 8785 form (:func:`~signoff.audit.canonical.parse_canonical`), its fields and
  the index columns stored beside it (:func:`~signoff.audit.entry_form.failure`); and, once per verify,
  the projection's and the values' order-free sums (:mod:`signoff.audit.verify_sums`);
* **one sequential pass**, in ``seq`` order: density, the ``prev`` links, the log id, who may write
  what and with which key, the review rules, checkpoints and the Merkle nodes. It reads each entry
  (``orjson`` where a worker found it on the canonical fast path) and, for a signed entry, resolves the
  key enrolled *before* it exactly as the sequential verifier does, then hands ``(key, signature,
  statement)`` to the workers instead of checking it in line
  (:func:`signoff.audit.trust.deferred_signatures`);
* **the verdict**: the first failure by ``seq`` among the pass's own, the workers' byte checks and
  the signature checks, named as the sequential verifier names it. Nothing is reported intact
  before every handed signature has come back good.

Memory stays flat: a bounded number of chunks and signature batches are in flight at a time.
Workers are forked from a single-threaded process (the ``audit`` CLI) and spawned from a threaded
one (a desk or another server, whose script then needs the usual ``__main__`` guard); the pool is
kept for the life of the process.
"""

from __future__ import annotations

import collections
import hashlib
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from signoff.audit import entry_form
from signoff.audit.canonical import parse_canonical
from signoff.audit.errors import VerificationFailed
from signoff.audit.trust import PublicKey, deferred_signatures
from signoff.audit.webauthn import Passkey, SignatureError

CHUNK = 2000
SIGNATURE_BATCH = 512
MIN_PARALLEL = int(os.environ.get("SIGNOFF_VERIFY_MIN_PARALLEL", "20000"))
"""Below this many entries to check, one process is faster than starting workers."""
_POOLS: dict[tuple[int, str], ProcessPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def env_jobs() -> int:
    """``SIGNOFF_VERIFY_JOBS``: the worker processes :func:`~signoff.audit.verify.verify_store` uses
    when not told (default 1: this process; the ``audit verify`` CLI uses every core)."""
    return max(1, int(os.environ.get("SIGNOFF_VERIFY_JOBS", "1")))


def _pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` workers kept for the life of the process (they hold no state of any log).

    Forked where it is safe (a single-threaded process, such as the ``audit`` CLI: no re-import, no
    ``__main__`` guard needed); spawned from a threaded one (a desk or another server)."""
    method = "fork" if threading.active_count() == 1 else "spawn"
    with _POOLS_LOCK:
        # A pool already made keeps serving: its own manager thread makes the process look threaded after
        # its first task, and a second pool for the same verify would start its workers all over again.
        pool = next((p for (size, _m), p in _POOLS.items() if size == jobs and not getattr(p, "_broken", False)), None)
        pool = pool or _POOLS.get((jobs, method))
        if pool is None or getattr(pool, "_broken", False):
            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method))
            _POOLS[(jobs, method)] = pool
        return pool


def submit(jobs: int, work: Callable[..., Any], *args: Any) -> Future[Any]:
    """Run ``work(*args)`` on the pool of ``jobs`` workers, beside the per-entry chunks (``work`` must be
    importable by a spawned worker: a module-level function)."""
    return _pool(jobs).submit(work, *args)


Row = tuple[int | None, str | None, bytes, bytes | None, tuple[Any, ...] | None]
Progress = Callable[[int], None]


def default_jobs() -> int:
    """Worker processes for ``audit verify``: one per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


# -- in the workers ------------------------------------------------------------------------------


def check_chunk(
    raws: list[bytes], stored: list[str | None], columns: list[tuple[Any, ...] | None]
) -> tuple[list[bytes], bytes, tuple[Any, ...] | None]:
    """Leaf hashes, canonical form, fields and stored columns of a chunk: ``(leaves, simple flags, first
    failure or None)``.

    A failure is ``(index, rule, expected, found, form)``, worded as :meth:`Verifier.add` words it; the
    entries before it are checked, the ones after it are not looked at. ``form``: a rule of
    :func:`entry_form.failure`, which the sequential pass raises in its place among the order-bound checks
    (the entry's leaf is then in ``leaves``); otherwise a byte check, raised as the entry is reached."""
    leaves: list[bytes] = []
    simple = bytearray()
    for index, raw in enumerate(raws):
        leaf = hashlib.sha256(b"\x00" + raw).digest()
        want = stored[index]
        if want is not None and want != "sha256:" + leaf.hex():
            return leaves, bytes(simple), (index, "entry hash", want, "sha256:" + leaf.hex(), False)
        try:
            value, fast = parse_canonical(raw)
        except ValueError as exc:
            return leaves, bytes(simple), (index, "canonical form (RFC 8785)", "canonical JSON bytes", str(exc), False)
        leaves.append(leaf)
        simple.append(1 if fast else 0)
        form = entry_form.failure(value, columns[index]) if isinstance(value, dict) else ("entry shape", "", "")
        if form is not None:  # (not a dict: the pass names it as "entry shape" before anything else)
            return leaves, bytes(simple), (index, *form, True)
    return leaves, bytes(simple), None


Job = tuple[int, str, str, Passkey | None, dict[str, Any], bytes]
"""``(seq, actor, public key, passkey or None, sig, statement)``: one signature to check."""


def check_signatures(jobs: list[Job]) -> list[tuple[int, str, str]]:
    """Check each job's signature as :meth:`PublicKey.verify` does; ``(seq, actor, message)`` of each failure."""
    failed = []
    for seq, actor, public, passkey, sig, message in jobs:
        key = PublicKey(actor, "", "WebAuthn" if passkey is not None else "Ed25519", public, passkey, 0)
        if passkey is None:
            key = PublicKey.enrolled(actor, {"alg": "Ed25519", "key": public}, 0)
        try:
            key.check_now(sig, message)
        except SignatureError as exc:
            failed.append((seq, actor, str(exc)))
    return failed


# -- in the main process -------------------------------------------------------------------------


def _signature_failure(seq: int, actor: str, message: str) -> VerificationFailed:
    """The failure :meth:`Verifier._check_trust` raises for a signature that does not verify."""
    rule = "signature" if message.startswith("sig") else "enrolment authority"
    return VerificationFailed(seq, rule, f"an entry {actor} may write, signed as the rules require", message)


class _Signatures:
    """Signatures handed over by the sequential pass, checked in batches by the workers."""

    def __init__(self, pool: ProcessPoolExecutor, ahead: int) -> None:
        self.pool = pool
        self.ahead = ahead
        self.batch: list[Job] = []
        self.pending: collections.deque[Future[list[tuple[int, str, str]]]] = collections.deque()
        self.failures: list[tuple[int, str, str]] = []
        self.seq = 0  # the entry being checked, set by the pass
        self.handed = 0

    def __call__(self, key: PublicKey, sig: Mapping[str, Any], message: bytes) -> None:
        self.batch.append((self.seq, key.actor, key.public, key.passkey, dict(sig), message))
        self.handed += 1
        if len(self.batch) >= SIGNATURE_BATCH:
            self.flush()

    def flush(self) -> None:
        if self.batch:
            self.pending.append(self.pool.submit(check_signatures, self.batch))
            self.batch = []
        while len(self.pending) > self.ahead:
            self.failures += self.pending.popleft().result()

    def first_failure(self, before: int | None = None) -> VerificationFailed | None:
        """Wait for every signature handed so far; the failure of the lowest ``seq`` (below ``before``)."""
        self.flush()
        while self.pending:
            self.failures += self.pending.popleft().result()
        found = [f for f in self.failures if before is None or f[0] < before]
        if not found:
            return None
        return _signature_failure(*min(found))


def _chunks(rows: Iterable[Row]) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def verify_rows(
    rows: Iterable[Row],
    verifier: Any,
    jobs: int,
    on_entry: Callable[[int], None],
) -> None:
    """Feed ``rows`` to ``verifier`` with the per-entry work on ``jobs`` worker processes.

    ``on_entry(size)`` runs after each entry (checkpoints, progress) as in the sequential loop.
    Raises the first :class:`VerificationFailed` by ``seq``."""
    ahead = 2 * jobs + 2
    pool = _pool(jobs)
    signatures = _Signatures(pool, ahead)
    in_flight: collections.deque[tuple[list[Row], Future[Any]]] = collections.deque()
    source = _chunks(rows)
    exhausted = False
    try:
        with deferred_signatures(signatures):
            while True:
                while not exhausted and len(in_flight) < ahead:
                    chunk = next(source, None)
                    if chunk is None:
                        exhausted = True
                        break
                    raws, hashes, columns = (
                        [row[2] for row in chunk],
                        [row[1] for row in chunk],
                        [row[4] for row in chunk],
                    )
                    in_flight.append((chunk, pool.submit(check_chunk, raws, hashes, columns)))
                if not in_flight:
                    break
                chunk, future = in_flight.popleft()
                leaves, simple, failure = future.result()
                for index, (stored_seq, _hash, raw, nodes, stored_columns) in enumerate(chunk):
                    form = None
                    if failure is not None and index == failure[0]:
                        seq = verifier.expected_seq
                        if stored_seq is not None and stored_seq != seq:
                            raise VerificationFailed(
                                seq, "seq density (entry missing)", f"seq {seq}", f"seq {stored_seq}"
                            )
                        if not failure[4]:
                            raise VerificationFailed(seq, failure[1], failure[2], failure[3])
                        form = (failure[1], failure[2], failure[3])
                    signatures.seq = verifier.expected_seq
                    verifier.add_checked(
                        raw, leaves[index], bool(simple[index]), stored_seq, nodes, stored_columns, form
                    )
                    on_entry(verifier.expected_seq)
    except VerificationFailed as exc:
        for _chunk, future in in_flight:
            future.cancel()
        # A signature handed for the failing entry itself was checked before the check that failed
        # (the signature is :meth:`Verifier._check_trust`, and nothing before it hands one over).
        earlier = signatures.first_failure(before=exc.seq + 1 if exc.seq is not None else None)
        raise (earlier or exc) from None
    failed = signatures.first_failure()
    if failed is not None:
        raise failed
