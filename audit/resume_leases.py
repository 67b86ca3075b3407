"""Resume leases: who is sending a claimed frontier now, so that nobody else sends it meanwhile.

A frontier's claim (``run.resumed``, review rule 5) is on the log once and for good. The send that
follows can die with its process (``kill -9`` between claim and tool); then another worker takes the
frontier over and sends it again. Before leases, "died" was guessed from the claim's age alone
(``takeover_after``), so a live claimant that was merely slow, or a restarted worker recovering its
own claims while another took them over, could have the same call run twice.

A lease says who holds a claimed frontier (``holder``: this machine, process and a nonce, see
:func:`new_holder`) and until when it promises to renew that (``until``). It is written in the
transaction of the claim, renewed by the holder while it sends, and deleted when the send is over.
A frontier is taken over, in a transaction that reads the lease (:func:`take`), only when:

* it has no lease (a claim made by another path, or before leases): the claim is ``older_than``
  seconds old, as before; or
* its holder is gone: the lease lapsed unrenewed, or the holder was a process on this machine
  (same boot, same PID namespace) that no longer runs (:func:`holder_gone`).

The lease is coordination, not record: it is not on the log, ``audit verify`` does not read it,
and what a tool ran with is still decided from the log. Someone who writes the database can make
a worker take over a live claimant's frontier, which is no more than killing that claimant.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import threading
from typing import TYPE_CHECKING

from signoff.audit.tables import ResumeLeaseRow

if TYPE_CHECKING:
    from signoff.audit.tx import Tx

TABLE = ResumeLeaseRow.__tablename__

_GET = f"SELECT holder, until FROM {TABLE} WHERE log = ? AND frontier = ?"
_INSERT = f"INSERT INTO {TABLE} (log, frontier, holder, until) VALUES (?, ?, ?, ?)"
_SET = f"UPDATE {TABLE} SET holder = ?, until = ? WHERE log = ? AND frontier = ?"
_RENEW = f"UPDATE {TABLE} SET until = ? WHERE log = ? AND holder = ?"
_RELEASE = f"DELETE FROM {TABLE} WHERE log = ? AND frontier = ? AND holder = ?"
_SWEEP = f"DELETE FROM {TABLE} WHERE log = ? AND until < ?"

_LIVE: set[str] = set()  # holders of this process still sending (see retire)
_LIVE_LOCK = threading.Lock()


def _machine() -> str | None:
    """This kernel boot and PID namespace (Linux), hashed: where a holder's process id means something
    to this process. ``None`` where it cannot be told; a holder is then gone only when its lease lapses."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    seed = f"{boot}/{namespace}/{socket.gethostname()}".encode()
    return hashlib.sha256(seed).hexdigest()[:16]


MACHINE = _machine()


def new_holder() -> str:
    """A holder name for one worker of this process: ``MACHINE:PID:NONCE`` (``-`` for an unknown machine).
    It is live (:func:`holder_gone` says no) until :func:`retire`."""
    holder = f"{MACHINE or '-'}:{os.getpid()}:{secrets.token_hex(4)}"
    with _LIVE_LOCK:
        _LIVE.add(holder)
    return holder


def retire(holder: str) -> None:
    """This process's worker ``holder`` stopped: its leases may be taken over at once."""
    with _LIVE_LOCK:
        _LIVE.discard(holder)


def _process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rpartition(")")[2].split()[:1]
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return state in (["Z"], ["X"])  # a killed process not yet reaped by its parent is gone too


def holder_gone(holder: str) -> bool:
    """Whether ``holder`` certainly stopped: a worker of this process that retired, or a process of this
    machine that no longer runs. ``False`` when it cannot be told (another machine)."""
    machine, _, rest = holder.partition(":")
    pid_text, _, _nonce = rest.partition(":")
    if MACHINE is None or machine != MACHINE or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        with _LIVE_LOCK:
            return holder not in _LIVE
    return _process_gone(pid)


def hold(tx: Tx, frontier: str, holder: str, until: float) -> None:
    """Write ``holder``'s lease on ``frontier`` in ``tx`` (the claim's transaction)."""
    _put(tx, frontier, holder, until, exists=bool(tx.rows(_GET, tx.log, frontier)))


def _put(tx: Tx, frontier: str, holder: str, until: float, *, exists: bool) -> None:
    if exists:
        tx.rows(_SET, holder, until, tx.log, frontier)
    else:
        tx.rows(_INSERT, tx.log, frontier, holder, until)


def take(
    tx: Tx, frontier: str, *, holder: str, until: float, now: float, claim_age: float, older_than: float
) -> str | None:
    """Take ``frontier``'s lease for ``holder`` if nobody live holds it: ``None`` when taken, else why not.

    In ``tx``, whose caller checked from the log that the frontier's calls still wait to run. Taken
    when there is no lease and the claim is at least ``older_than`` seconds old, when the lease
    lapsed, when its holder is gone (:func:`holder_gone`), or when it is ``holder``'s own."""
    found = tx.rows(_GET, tx.log, frontier)
    if not found:
        if claim_age < older_than:
            return f"claimed {claim_age:.1f} s ago (under {older_than:g} s) by a party that holds no lease"
    else:
        other, other_until = str(found[0].holder), float(found[0].until)
        if other != holder and other_until >= now and not holder_gone(other):
            return f"held by {other}, alive, for {other_until - now:.1f} s more unless renewed"
    _put(tx, frontier, holder, until, exists=bool(found))
    return None


def renew(tx: Tx, holder: str, until: float) -> None:
    """Move the end of every lease ``holder`` has to ``until``, and drop leases that lapsed before now
    (lapsed and absent mean the same to :func:`take`)."""
    tx.rows(_RENEW, until, tx.log, holder)
    tx.rows(_SWEEP, tx.log, tx.now.timestamp() - 60.0)


def release(tx: Tx, frontier: str, holder: str) -> None:
    """Delete ``holder``'s lease on ``frontier``: its send is over."""
    tx.rows(_RELEASE, tx.log, frontier, holder)
