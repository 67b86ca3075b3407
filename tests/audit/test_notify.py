"""Wake-ups when the log grows: in this process at once, from other connections (SQLite
``PRAGMA data_version``, PostgreSQL ``LISTEN/NOTIFY``) within milliseconds, never for a write
that was refused, and with no fixed slow poll."""

from __future__ import annotations

import threading
import time

import pytest
from auditkit import AGENT, ALICE, Keys, admin_draft, call, key_body

from signoff.audit import ReviewClosed, ReviewService, Signer, Store, open_store
from signoff.audit.notify import ChangeFeed


def _append(store: Store, admin: Signer, n: int = 0) -> int:
    """One entry: a key the admin enrolls (the store's own append, no review rules involved)."""
    return store.append(*admin_draft(store, admin, key_body(f"n{n}"))).seq


def test_change_feed_wakes_waiters_at_once() -> None:
    feed = ChangeFeed(None)
    seen = feed.version
    woke: list[float] = []

    def wait() -> None:
        feed.wait(seen, 5)
        woke.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)
    bumped = time.monotonic()
    feed.bump()
    waiter.join(2)
    assert woke and woke[0] - bumped < 0.2
    assert feed.wait(seen, 5) == seen + 1  # already changed: no waiting at all
    started = time.monotonic()
    assert feed.wait(feed.version, 0.2) == seen + 1
    assert 0.15 < time.monotonic() - started < 1.0


def _latency_from_another_store(store: Store, store_url: str, admin: Signer) -> float:
    other = open_store(store_url)
    try:
        other.info()
        size = store.size()
        committed: list[float] = []

        def write() -> None:
            time.sleep(0.25)
            _append(other, admin, 1)
            committed.append(time.monotonic())

        writer = threading.Thread(target=write)
        writer.start()
        assert store.wait_for_change(size, timeout=10) == size + 1
        woke = time.monotonic()
        writer.join()
        return woke - committed[0]
    finally:
        other.close()


def test_wait_for_change_wakes_for_another_connections_commit(store: Store, store_url: str, admin: Signer) -> None:
    latencies = [_latency_from_another_store(store, store_url, admin) for _ in range(3)]
    assert max(latencies) < 0.5, latencies
    assert min(latencies) < 0.1, latencies  # milliseconds, not a slow poll


def test_wait_for_change_in_the_same_store_is_immediate(store: Store, admin: Signer) -> None:
    size = store.size()
    committed: list[float] = []

    def write() -> None:
        time.sleep(0.2)
        _append(store, admin)
        committed.append(time.monotonic())

    writer = threading.Thread(target=write)
    writer.start()
    assert store.wait_for_change(size, timeout=10) == size + 1
    woke = time.monotonic()
    writer.join()
    assert woke - committed[0] < 0.05


def test_a_refused_operation_wakes_nobody(store: Store, store_url: str, keys: Keys) -> None:
    svc = ReviewService(store)
    svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
    review = svc.open_frontier([call("n1")], actor=AGENT).reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
    size = store.size()
    watcher = open_store(store_url)
    try:
        result: list[int] = []
        waiter = threading.Thread(target=lambda: result.append(watcher.wait_for_change(size, timeout=0.6)))
        waiter.start()
        time.sleep(0.1)
        with pytest.raises(ReviewClosed):
            svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
        waiter.join(5)
        assert result == [size]
    finally:
        watcher.close()


def test_close_stops_the_watcher(store: Store, store_url: str) -> None:
    other = open_store(store_url)
    other.info()
    other.wait_for_change(other.size(), timeout=0.05)  # starts the watcher (if the backend has one)
    thread = getattr(other.feed, "_thread", None)
    other.close()
    if thread is not None:
        thread.join(3)
        assert not thread.is_alive()


def test_first_wait_sees_a_commit_that_landed_just_before_it(store: Store, store_url: str, admin: Signer) -> None:
    """``wait_for_decision`` reads the feed's version, checks the review, then waits. A commit
    from another process that lands between the check and the wait must still wake it, also
    on the store's very first wait (when the watcher starts)."""
    waiter = open_store(store_url)
    try:
        waiter.info()
        seen = waiter.feed.version  # the waiter has looked at the log ...
        _append(store, admin)  # ... another process commits ...
        started = time.monotonic()
        waiter.feed.wait(seen, 1.5)  # ... and only now does the waiter go to sleep
        assert time.monotonic() - started < 0.5
    finally:
        waiter.close()
