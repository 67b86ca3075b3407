"""Reads of the review projection, cached per log size.

Every change to a review (and to a reviewer) is a log entry written in the same
transaction as the projection it changes (DESIGN.md, "The record"), so while the log's size
is unchanged those reads are too. Each lookup still reads the size (one indexed row), so
replicas sharing a database never serve a stale page.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")


class LogCache:
    def __init__(self, store: Any, max_items: int = 256) -> None:
        self.store = store
        self.max_items = max_items
        self._items: OrderedDict[Hashable, tuple[Hashable, Any]] = OrderedDict()
        self._timed: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def read_for(self, key: Hashable, seconds: float, load: Callable[[], T]) -> T:
        """A value that may be up to ``seconds`` old whatever the log did meanwhile: for hints (the
        filters' suggestions) and counts that depend on the clock anyway ("not yet run")."""
        now = time.monotonic()
        with self._lock:
            hit = self._timed.get(key)
            if hit is not None and hit[0] > now:
                value: T = hit[1]
                return value
        value = load()
        with self._lock:
            self._timed[key] = (now + seconds, value)
            self._timed.move_to_end(key)
            while len(self._timed) > self.max_items:
                self._timed.popitem(last=False)
        return value

    def read(self, key: Hashable, load: Callable[[], T]) -> T:
        return self.read_at(key, self.store.size(), load)  # the size read first: a loaded value can only be newer

    def read_at(self, key: Hashable, size: Hashable, load: Callable[[], T]) -> T:
        """As :meth:`read`, at a size the caller read first: for a value of several logs (desk/across.py),
        the tuple of their sizes."""
        with self._lock:
            hit = self._items.get(key)
            if hit is not None and hit[0] == size:
                self._items.move_to_end(key)
                value: T = hit[1]
                return value
        value = load()
        with self._lock:
            self._items[key] = (size, value)
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
        return value
