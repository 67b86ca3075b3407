"""The review service's resume leases (:mod:`signoff.audit.resume_leases`): take over, renew, release.

Each is one transaction. Taking over a frontier checks, from the log, that its claim stands and that
an approved call of it has neither run nor been failed, then reads and writes the lease.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from signoff.audit import resume_leases
from signoff.audit.entry import parse_time
from signoff.audit.log_state import read_frontier
from signoff.audit.rules import RUNNABLE

if TYPE_CHECKING:
    from signoff.audit.store import Store
    from signoff.audit.tx import Tx


class ReviewLeases:
    """``ReviewService``'s lease operations (a base of it)."""

    store: Store

    def take_over(
        self, frontier_id: str, *, holder: str, seconds: float, older_than: float, until_replied: bool = False
    ) -> str | None:
        """Take the send of claimed ``frontier_id`` for ``holder`` (a lease of ``seconds``): ``None`` if
        it is now ``holder``'s to send, else why not. Refused when the log shows nothing left to run
        (the calls ran, failed or the run is gone; with ``until_replied``, and its reply is recorded),
        or when a live party holds it (:func:`signoff.audit.resume_leases.take`; ``older_than`` for a
        claim with no lease)."""

        def work(tx: Tx) -> str | None:
            on_log = read_frontier(tx.rows, tx.log, frontier_id, pending=tx.appended)
            if on_log.abandoned is not None:
                return f"its run is gone ({on_log.abandoned.kind})"
            if on_log.resumed is None:
                return "not claimed"
            left = [
                r.id for r in on_log.reviews if r.status in RUNNABLE and not r.executed and r.id not in on_log.failed
            ]
            if not left and not (until_replied and not on_log.replied):
                return "no approved call of it waits to run" + (", and its reply is recorded" if until_replied else "")
            now = tx.now.timestamp()
            claim_age = now - parse_time(on_log.resumed.at).timestamp()
            return resume_leases.take(
                tx, frontier_id, holder=holder, until=now + seconds, now=now, claim_age=claim_age, older_than=older_than
            )

        return self.store.transact(work)

    def renew_leases(self, holder: str, seconds: float) -> None:
        """Every lease ``holder`` has now ends ``seconds`` from now."""
        self.store.transact(lambda tx: resume_leases.renew(tx, holder, tx.now.timestamp() + seconds))

    def release_lease(self, frontier_id: str, holder: str) -> None:
        """``holder``'s send of ``frontier_id`` is over."""
        self.store.transact(lambda tx: resume_leases.release(tx, frontier_id, holder))
