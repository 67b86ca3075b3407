"""Wake-ups when the log grows: in this process, in other processes, and on other hosts.

No fixed slow poll. A commit in this process bumps a counter under a condition variable
at once. Commits elsewhere arrive through PostgreSQL ``LISTEN``/``NOTIFY`` or, on SQLite,
through ``PRAGMA data_version``, which a watcher thread reads every few milliseconds
while anybody waits.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable

SQLITE_POLL_SECONDS = 0.004


class ChangeFeed:
    """A version counter that rises on every commit to the log, local or remote."""

    def __init__(self, watcher: Callable[[ChangeFeed, threading.Event], None] | None) -> None:
        self._cond = threading.Condition()
        self._version = 0
        self._interrupts = 0
        self._waiters = 0
        self._watcher = watcher
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.wanted = threading.Event()  # set while somebody waits; watchers may idle otherwise

    @property
    def version(self) -> int:
        return self._version

    @property
    def interrupts(self) -> int:
        """How many times :meth:`interrupt` was called: a waiter that sees it change stops waiting."""
        return self._interrupts

    def interrupt(self) -> None:
        """Wake every waiter now, with nothing new on the log (a worker that is stopping)."""
        with self._cond:
            self._interrupts += 1
            self._version += 1
            self._cond.notify_all()

    def bump(self) -> None:
        with self._cond:
            self._version += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> int:
        """Block until the version differs from ``seen`` or ``timeout`` passes; return the version."""
        self._ensure_watcher()
        with self._cond:
            self._waiters += 1
            self.wanted.set()
            try:
                self._cond.wait_for(lambda: self._version != seen, timeout=max(0.0, timeout))
            finally:
                self._waiters -= 1
                if self._waiters == 0:
                    self.wanted.clear()
            return self._version

    def _ensure_watcher(self) -> None:
        if self._watcher is None or self._thread is not None:
            return
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watcher, args=(self, self._stop), name="signoff-change-feed", daemon=True
                )
                self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self.wanted.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


def sqlite_watcher(path: str) -> Callable[[ChangeFeed, threading.Event], None]:
    """Watch a SQLite file for commits by other connections (``PRAGMA data_version``)."""

    def run(feed: ChangeFeed, stop: threading.Event) -> None:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            last = conn.execute("PRAGMA data_version").fetchone()[0]
            feed.bump()  # a commit before this first read would otherwise go unseen
            while not stop.is_set():
                if not feed.wanted.wait(timeout=1.0):
                    continue
                current = conn.execute("PRAGMA data_version").fetchone()[0]
                if current != last:
                    last = current
                    feed.bump()
                time.sleep(SQLITE_POLL_SECONDS)
        finally:
            conn.close()

    return run


def postgres_watcher(conninfo: str, channel: str) -> Callable[[ChangeFeed, threading.Event], None]:
    """Listen on a PostgreSQL channel; every ``NOTIFY`` on it bumps the feed."""

    def run(feed: ChangeFeed, stop: threading.Event) -> None:
        import psycopg

        while not stop.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    conn.execute(f'LISTEN "{channel}"')
                    feed.bump()  # anything committed while we were not listening
                    while not stop.is_set():
                        for _ in conn.notifies(timeout=0.5, stop_after=1):
                            feed.bump()
            except psycopg.Error:
                with contextlib.suppress(Exception):
                    stop.wait(0.5)

    return run
