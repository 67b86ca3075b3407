"""Live updates over Server-Sent Events (HTML Living Standard §9.2).

One watcher thread per app waits on ``ReviewService.wait_for_change`` (push, not slow
polling), reads the new log entries once, and fans them out to every connected browser.
While no browser is connected the watcher sleeps and reads nothing, so decisions made
through the API pay nothing for live updates nobody watches.
Events carry only ids and short strings; the page inserts them with ``textContent``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger("desk.sse")

COALESCE_SECONDS = 0.015

CLOSING_KINDS = {
    "review.approved": "approved",
    "review.edited": "edited",
    "review.rejected": "rejected",
    "review.expired": "expired",
    "review.withdrawn": "withdrawn",
}


def event_of(entry: Any) -> dict[str, Any] | None:
    body = entry.body or {}
    if entry.kind == "review.opened":
        call = body.get("call") or {}
        return {
            "type": "opened",
            "seq": entry.seq,
            "review": body.get("review"),
            "frontier": body.get("frontier"),
            "tool": call.get("tool", ""),
            "agent": call.get("agent", ""),
            "opened_at": entry.at,
            "deadline": body.get("deadline"),
        }
    if entry.kind in CLOSING_KINDS:
        return {
            "type": "closed",
            "seq": entry.seq,
            "review": body.get("review"),
            "status": CLOSING_KINDS[entry.kind],
            "actor": entry.actor,
        }
    return None


class Broker:
    def __init__(self, store: Any, svc: Any) -> None:
        self.store = store
        self.svc = svc
        self._subs: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any]]]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._active = threading.Event()  # set while at least one browser is connected
        self._resume_from: int | None = None
        self._thread: threading.Thread | None = None
        self.size = 0

    def start(self) -> None:
        self.size = self.store.size()
        self._thread = threading.Thread(target=self._run, name="desk-sse-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=0.2)

    def _take_resume(self) -> None:
        """Skip what happened before the first browser after an idle spell connected (lock held)."""
        if self._resume_from is not None:
            self.size = max(self.size, self._resume_from)
            self._resume_from = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._active.wait(timeout=1.0):
                    continue
                with self._lock:
                    self._take_resume()
                new = self.svc.wait_for_change(self.size, timeout=1.0)
                if new is None or new <= self.size:
                    continue
                # Gather a burst into one read and one frame per browser, and stay off the
                # CPU while the request that made the change is still answering.
                self._stop.wait(COALESCE_SECONDS)
                new = max(new, self.store.size())
                with self._lock:
                    self._take_resume()
                    if not self._subs or new <= self.size:
                        self.size = max(self.size, new)
                        continue
                    start = self.size
                events = [ev for e in self.store.entries(start=start, stop=new) if (ev := event_of(e))]
                self.size = new
                events.append({"type": "log", "size": new})
                for ev in events:
                    self.publish(ev)
            except Exception:  # noqa: BLE001 - keep watching; report it
                if self._stop.is_set():
                    break  # the store closed under us while shutting down
                log.exception("sse watcher failed; retrying")
                self._stop.wait(0.5)

    def publish(self, ev: dict[str, Any]) -> None:
        with self._lock:
            subs = list(self._subs)
        for loop, q in subs:
            try:
                loop.call_soon_threadsafe(q.put_nowait, ev)
            except RuntimeError:  # loop closed
                with self._lock:
                    self._subs.discard((loop, q))

    async def stream(self, heartbeat: float = 15.0) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=10_000)
        key = (loop, q)
        start = await asyncio.to_thread(self.store.size)
        with self._lock:
            if not self._subs:
                self._resume_from = start
            self._subs.add(key)
            self._active.set()
        try:
            yield f"retry: 2000\nevent: hello\ndata: {json.dumps({'size': start})}\n\n"
            while True:
                try:
                    ev = await asyncio.wait_for(q.get(), timeout=heartbeat)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if ev.get("seq", start) < start:
                    continue  # committed before this browser connected (and before its page)
                yield f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n"
        finally:
            with self._lock:
                self._subs.discard(key)
                if not self._subs:
                    self._active.clear()
