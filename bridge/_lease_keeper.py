"""A worker's resume leases, renewed from a thread while it sends (:mod:`signoff.audit.resume_leases`).

The thread renews every lease the worker holds a third of the lease's length before it lapses, so
a worker whose event loop is busy running a tool still holds what it sends. Stopping it retires
the holder: this process's other workers may take over its leases at once.
"""

from __future__ import annotations

import logging
import threading

from signoff.audit import ReviewService
from signoff.audit.resume_leases import new_holder, retire

log = logging.getLogger("signoff.bridge")

LEASE_SECONDS = 30.0  # a holder that renews nothing for this long is presumed gone (on another machine)


class LeaseKeeper:
    """Holds and renews one worker's leases; ``holder`` is its name in them."""

    def __init__(self, reviews: ReviewService, seconds: float = LEASE_SECONDS) -> None:
        self.reviews = reviews
        self.seconds = seconds
        self.holder = new_holder()
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def lease(self) -> tuple[str, float]:
        """``(holder, seconds)``, as ``ReviewService.claim_resume`` takes it."""
        return self.holder, self.seconds

    def held(self, frontier_id: str) -> None:
        """The worker now holds ``frontier_id``'s lease (claimed or taken over): keep it renewed."""
        with self._lock:
            self._held.add(frontier_id)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._renew, name="signoff-leases", daemon=True)
                self._thread.start()

    def release(self, frontier_id: str) -> None:
        """The send of ``frontier_id`` is over (sent, or failed on the log): its lease goes."""
        with self._lock:
            self._held.discard(frontier_id)
        try:
            self.reviews.release_lease(frontier_id, self.holder)
        except Exception as exc:  # noqa: BLE001 - a lease left behind lapses; nothing else depends on it
            log.warning("frontier %s: lease not released (it lapses in %g s): %s", frontier_id, self.seconds, exc)

    def stop(self) -> None:
        """Stop renewing and retire the holder (its leases may be taken over at once)."""
        self._stop.set()
        retire(self.holder)

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            with self._lock:
                if not self._held:
                    continue
            try:
                self.reviews.renew_leases(self.holder, self.seconds)
            except Exception as exc:  # noqa: BLE001 - tried again next time; lapsing is what this guards
                log.warning("resume leases of %s not renewed: %s", self.holder, exc)
