"""The log page's verification badge: "verified up to seq N".

The desk keeps the verifier's state between requests (the last verified hash and the
compact range of the Merkle tree, RFC 9162 §2.1), so each request only reads entries
appended since the last one. The latest signed checkpoint's root is checked against the
verified prefix, directly when the sizes meet, else through a consistency proof
(RFC 9162 §2.1.4.2) checked here against the root the desk computed itself.

This checks the hash chain and the Merkle roots. The lifecycle rules are checked by the
full offline ``audit verify``.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from signoff.audit import merkle
from signoff.audit.entry import ZERO_HASH

log = logging.getLogger("desk.verify")

ZERO = ZERO_HASH


def _hex(h: bytes) -> str:
    return "sha256:" + h.hex()


def _bytes(h: Any) -> bytes:
    if isinstance(h, bytes):
        return h
    s = str(h)
    return bytes.fromhex(s.split(":", 1)[1] if ":" in s else s)


@dataclass(frozen=True)
class Status:
    ok: bool
    verified_upto: int | None
    size: int
    checkpoint_size: int | None
    error: str | None


def _cp_fields(cp: Any) -> tuple[int, bytes] | None:
    if cp is None:
        return None
    size = getattr(cp, "size", None)
    root = getattr(cp, "root", None)
    if size is None and hasattr(cp, "to_json"):
        j = cp.to_json()
        size, root = j.get("size"), j.get("root")
    if size is None or root is None:
        return None
    return int(size), _bytes(root)


class IncrementalVerifier:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.range = merkle.CompactRange()
        self.last = ZERO
        self.error: str | None = None
        self.checkpoint_size: int | None = None
        self._checked_cp: tuple[int, bytes] | None = None
        self._lock = threading.Lock()

    def status(self) -> Status:
        with self._lock:
            if self.error is None:
                self._advance()
            n = self.range.size
            return Status(
                ok=self.error is None,
                verified_upto=(n - 1) if n else None,
                size=n,
                checkpoint_size=self.checkpoint_size,
                error=self.error,
            )

    def warm(self) -> None:
        """Verify what is there now, off the request path; a failure here is logged, not raised."""
        try:
            self.status()
        except Exception:  # noqa: BLE001 - the next request retries and reports
            log.exception("verification warm-up failed")

    def _fail(self, seq: int | None, what: str) -> None:
        self.error = f"seq {seq}: {what}" if seq is not None else what
        raise _Stop

    def _advance(self) -> None:
        try:
            cp = _cp_fields(self.store.latest_checkpoint())
            size = self.store.size()
            for seq, stored, raw in self.store.iter_raw(self.range.size, size):
                n = self.range.size
                if seq != n:
                    self._fail(n, f"expected seq {n}, found {seq}")
                h = merkle.leaf_hash(raw)
                if stored != _hex(h):
                    self._fail(seq, f"hash: stored {stored}, but the entry's bytes hash to {_hex(h)}")
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    self._fail(seq, "stored bytes are not JSON")
                if parsed.get("seq") != seq:
                    self._fail(seq, f"the entry's bytes say seq {parsed.get('seq')}")
                if parsed.get("prev") != self.last:
                    self._fail(seq, f"prev: expected {self.last}, found {parsed.get('prev')}")
                self.range.append(h)
                self.last = stored
                if cp is not None and cp[0] == self.range.size:
                    self._check_cp(cp, direct=True)
            if cp is not None and cp != self._checked_cp and cp[0] <= self.range.size:
                self._check_cp(cp, direct=cp[0] == self.range.size)
        except _Stop:
            pass

    def _check_cp(self, cp: tuple[int, bytes], direct: bool) -> None:
        size, root = cp
        if direct:
            if self.range.root() != root:
                self._fail(size - 1, f"checkpoint root at size {size} does not match the entries")
        else:
            proof = [_bytes(p) for p in self.store.consistency_proof(size, self.range.size)]
            try:
                merkle.verify_consistency(size, self.range.size, root, self.range.root(), proof)
            except merkle.ProofError as exc:
                self._fail(None, f"checkpoint at size {size} is not consistent with the log: {exc}")
        self._checked_cp = cp
        self.checkpoint_size = size


class _Stop(Exception):
    pass


@dataclass(frozen=True)
class RuleStatus:
    """The last run of audit's own verifier (``audit verify --incremental`` against the latest
    checkpoint): lifecycle rules, signatures and the projection, not just hashes."""

    ok: bool | None  # None: not run yet
    size: int  # log size it covered
    checked_from: int
    checkpoint_size: int | None
    failure: str | None
    running: bool
    at: float | None


class RuleVerifier:
    """Runs ``audit.verify.verify_store`` off the request path whenever the log has grown.

    With a signed checkpoint, entries before it are proven by its root and only later ones are
    read (incremental), here; without one the whole log is read, at most every ``full_every``
    seconds, in a child process (desk/verify_child.py: its memory, 6 KB per open review, goes back
    when it ends, and the desk's pages keep their GIL meanwhile).
    """

    def __init__(self, store: Any, full_every: float = 300.0) -> None:
        self.store = store
        self.full_every = full_every
        self._lock = threading.Lock()
        self._running = False
        self._last: RuleStatus = RuleStatus(None, 0, 0, None, None, False, None)
        self._last_full = 0.0
        self.child_runs = 0  # full runs made in a child process
        self._child: Any = None  # the one running, if any
        self._stopped = False

    def status(self, *, wait: float = 0.0) -> RuleStatus:
        """The latest result; starts a new run in the background if the log grew since."""
        import time

        size = self.store.size()
        with self._lock:
            stale = self._last.ok is None or self._last.size != size
            if stale and not self._running:
                self._running = True
                threading.Thread(target=self._run, name="desk-audit-verify", daemon=True).start()
        end = time.monotonic() + wait
        while wait and self._running and time.monotonic() < end:
            time.sleep(0.01)
        last = self._last
        return RuleStatus(
            last.ok, last.size, last.checked_from, last.checkpoint_size, last.failure, self._running, last.at
        )

    def _run(self) -> None:
        import time

        from signoff.audit.verify import verify_store

        try:
            cp = self.store.latest_checkpoint()
            incremental = cp is not None and cp.size < self.store.size()
            if not incremental and time.monotonic() - self._last_full < self.full_every and self._last.ok is not None:
                return
            if incremental:
                report = verify_store(self.store, against=cp, incremental=True)
                failure = str(report.failure) if report.failure is not None else None
                ok, size, checked_from = report.ok, report.size, report.checked_from
            else:
                ok, size, checked_from, failure = self._full_in_child()
                self._last_full = time.monotonic()
            self._last = RuleStatus(
                ok=ok,
                size=size,
                checked_from=checked_from,
                checkpoint_size=cp.size if cp is not None else None,
                failure=failure,
                running=False,
                at=time.time(),
            )
        except Exception as exc:  # noqa: BLE001 - shown on the badge, logged here
            log.exception("audit verification failed to run")
            self._last = RuleStatus(
                False, self._last.size, 0, None, f"verifier could not run: {exc}", False, time.time()
            )
        finally:
            self._running = False

    def _full_in_child(self) -> tuple[bool, int, int, str | None]:
        """``verify_store`` of the whole log in ``python -m signoff.desk.verify_child``: (ok, size, checked
        from, failure). A child that fails to run is a failure that says so, never a pass."""
        import subprocess
        import sys

        asked = json.dumps({"url": self.store.url, "log": self.store.log_id})
        with self._lock:
            if self._stopped:
                return False, self._last.size, 0, "verifier could not run: the desk is stopping"
            # -P: the installed signoff, never a ``signoff`` package in the directory the desk was started from.
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "signoff.desk.verify_child"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            self._child = proc
            self.child_runs += 1
        try:
            out, err = proc.communicate(asked)
        finally:
            with self._lock:
                self._child = None
        try:
            found = json.loads(out) if proc.returncode == 0 else None
        except ValueError:
            found = None
        if not isinstance(found, dict):
            return False, self._last.size, 0, _child_failure(proc.returncode, err)
        return bool(found["ok"]), int(found["size"]), int(found["checked_from"]), found["failure"]

    def start(self) -> None:
        """Allow full runs (again): the desk's start-up; a desk's app may be started after a stop."""
        with self._lock:
            self._stopped = False

    def stop(self) -> None:
        """End a full check running in its child process, and start no other (the desk is shutting down):
        a child left behind would read the whole log for nobody."""
        with self._lock:
            self._stopped = True
            child = self._child
        if child is not None and child.poll() is None:
            child.kill()


def _child_failure(returncode: int, stderr: str | None) -> str:
    """What a child that did not report says: its exit status and the last line it wrote to stderr."""
    lines = (stderr or "").strip().splitlines()
    return f"verifier could not run: exit {returncode}: {lines[-1] if lines else 'no message'}"
