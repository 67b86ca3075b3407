"""Live updates over Server-Sent Events (HTML Living Standard §9.2).

One watcher thread per app waits on ``ReviewService.wait_for_change`` (push, not slow
polling), reads the new log entries once, and fans them out to every connected browser.
While no browser is connected the watcher sleeps and reads nothing, so decisions made
through the API pay nothing for live updates nobody watches.

Events (the page inserts their strings with ``textContent``):

* ``opened``: a new review, with its plain-words summary (desk/summary.py);
* ``closed``: a review was decided, expired or withdrawn;
* ``approval``: an approval (or an edit, which starts a new round) toward a quorum that did not decide
  the review yet: who has approved the round so far, and how many are needed;
* ``claimed``: a reviewer said "I'm on it", until a time;
* ``escalated``: a review was handed to another role too; ``new`` tells a reader who did not see it
  before (its role is the one escalated to) that it is new to them;
* ``resumed``: the agent's run was resumed with the answers of a frontier;
* ``executed``: a tool ran, with a short preview of its result;
* ``replied``: the agent's next words after the resumed run;
* ``resume_failed``: calls of a resumed frontier that run no more (``run.resume_failed``);
* ``log``: the log's new size; ``bye``: this stream ends (signed out, disabled, roles changed).

Each browser only hears about reviews its reviewer may see (desk/scope.py). A stream ends within
half a second when its session is closed (sign-out, here or on another replica) or its reviewer
is disabled or re-enrolled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlmodel import col

from signoff.audit.tables import ReviewRow
from signoff.desk import summary as summaries
from signoff.desk.scope import Scope, ToolRoles, entry_subject_ids

log = logging.getLogger("desk.sse")

COALESCE_SECONDS = 0.015
CATCH_UP = 1000  # entries a stream replays from the size its page was rendered at
CHECK_SECONDS = 0.5  # how often a stream checks that its session is still open

CLOSING_KINDS = {
    "review.approved": "approved",
    "review.edited": "edited",
    "review.rejected": "rejected",
    "review.expired": "expired",
    "review.withdrawn": "withdrawn",
    "review.auto_approved": "auto_approved",
}
REVIEWER_KINDS = {"reviewer.disabled": "disabled", "reviewer.enrolled": "roles changed"}
QUORUM_KINDS = ("review.approved", "review.edited")
SHORT = 200  # characters of an actor or role name an event carries
TIME = 32  # characters of a log time ("2026-11-30T14:00:00.123456Z")


def quorum_decision(entry: Any) -> bool:
    """An approval or edit on a review that needs several people (its body names the ``round``): whether it
    decided the review depends on the approvals before it, which the review's projection row tells."""
    return entry.kind in QUORUM_KINDS and "round" in (entry.body or {})


def _needed(data: dict[str, Any]) -> int:
    try:
        return max(1, int((data.get("policy") or {}).get("approvals", 1) or 1))
    except (TypeError, ValueError):
        return 1


def _round_approvers(data: dict[str, Any], seq: int) -> list[str] | None:
    """Who had approved the round of the decision at ``seq`` once it was written (it first, after an edit);
    None when the row has moved on to a later round (later events say the rest)."""
    listed = (data.get("progress") or {}).get("approvals") or data.get("approvals") or []
    seqs = [a.get("seq") for a in listed if isinstance(a, dict)]
    if seq not in seqs:
        return None
    return [str(a.get("by")) for a in listed if isinstance(a, dict) and int(a.get("seq", -1)) <= seq]


def _approval_event(entry: Any, row: Any) -> dict[str, Any]:
    """A quorum's approval (or edit) that left the review open."""
    body = entry.body or {}
    data = json.loads(row.data) if row is not None else {}
    edited = entry.kind == "review.edited"
    try:
        round_ = int(body.get("round", 0)) + (1 if edited else 0)  # an edit opens the next round
    except (TypeError, ValueError):
        round_ = 0
    ev: dict[str, Any] = {
        "type": "approval",
        "seq": entry.seq,
        "review": body.get("review"),
        "actor": entry.actor,
        "kind": CLOSING_KINDS[entry.kind],
        "round": round_,
        "needed": _needed(data) if row is not None else None,
        "approvals": _round_approvers(data, entry.seq),
    }
    progress = data.get("progress") or {}
    if edited and isinstance(progress.get("args"), dict) and int(progress.get("round", 0)) == round_:
        call = {**(data.get("call") or {}), "args": progress["args"]}  # the queue row reads as the new round
        found = summaries.of_call_json(call)
        ev["headline"], ev["lead"] = found.headline, found.lead
    return ev


def _escalated_event(entry: Any, row: Any) -> dict[str, Any]:
    """An escalation, with what a queue needs to list the review for a reader new to it."""
    body = entry.body or {}
    role = str(body.get("role") or "")[:SHORT]
    ev: dict[str, Any] = {"type": "escalated", "seq": entry.seq, "review": body.get("review"), "role": role}
    if row is not None:
        data = json.loads(row.data)
        call = data.get("call") or {}
        ev.update(
            {
                "frontier": row.frontier,
                "tool": call.get("tool", ""),
                "agent": call.get("agent", ""),
                "opened_at": row.opened_at,
                "deadline": row.deadline,
                "needed": _needed(data),
                **summaries.of_call_json(call).to_json(),
            }
        )
    return ev


def event_of(entry: Any, row: Any = None) -> dict[str, Any] | None:
    """The event a browser gets for one log entry (ids, short strings and the bounded previews). ``row`` is
    the review's projection row, read after the entry committed: it says whether an approval toward a
    quorum decided the review (then ``closed``, else ``approval``), and what an escalated review is."""
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
            "needed": _needed(body),
            **summaries.of_call_json(call).to_json(),
        }
    if quorum_decision(entry) and (row is None or row.decided_seq != entry.seq):
        return _approval_event(entry, row)
    if entry.kind == "review.claimed":
        return {
            "type": "claimed",
            "seq": entry.seq,
            "review": body.get("review"),
            "reviewer": str(body.get("reviewer") or "")[:SHORT],
            "until": str(body.get("until") or "")[:TIME],
        }
    if entry.kind == "review.escalated":
        return _escalated_event(entry, row)
    if entry.kind in CLOSING_KINDS:
        return {
            "type": "closed",
            "seq": entry.seq,
            "review": body.get("review"),
            "status": CLOSING_KINDS[entry.kind],
            "actor": entry.actor,
        }
    if entry.kind == "run.resumed":
        reviews = body.get("reviews")
        return {
            "type": "resumed",
            "seq": entry.seq,
            "frontier": body.get("frontier"),
            "reviews": [r for r in reviews if isinstance(r, str)] if isinstance(reviews, list) else [],
            "at": entry.at,
        }
    if entry.kind == "tool.executed":
        preview = body.get("result_preview")
        return {
            "type": "executed",
            "seq": entry.seq,
            "review": body.get("review"),
            "args_digest": body.get("args_digest"),
            "result_preview": str(preview) if preview is not None else None,
            "at": entry.at,
        }
    if entry.kind == "run.resume_failed":
        reviews = body.get("reviews")
        return {
            "type": "resume_failed",
            "seq": entry.seq,
            "frontier": body.get("frontier"),
            "reviews": [r for r in reviews if isinstance(r, str)] if isinstance(reviews, list) else [],
            "reason": str(body.get("reason") or ""),
            "at": entry.at,
        }
    if entry.kind == "run.replied":
        return {
            "type": "replied",
            "seq": entry.seq,
            "frontier": body.get("frontier"),
            "text": str(body.get("text") or ""),
            "at": entry.at,
        }
    return None


About = list[tuple[str, tuple[str | None, ...]]] | None
Event = tuple[dict[str, Any], About, About]  # the event, whom it is about, and (escalations) whom it was about before


@dataclass(eq=False)
class Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[dict[str, Any]]
    scope: Scope | None  # None: sees everything (tests, tools)
    session: str = ""


class Broker:
    def __init__(self, store: Any, svc: Any, tool_roles: ToolRoles | None = None) -> None:
        self.store = store
        self.svc = svc
        self.tool_roles = tool_roles if tool_roles is not None else ToolRoles(store)
        self._subs: set[Subscriber] = set()
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
                entries = list(self.store.entries(start=start, stop=new))
                self.size = new
                self._fan_out(entries, new)
            except Exception:  # noqa: BLE001 - keep watching; report it
                if self._stop.is_set():
                    break  # the store closed under us while shutting down
                log.exception("sse watcher failed; retrying")
                self._stop.wait(0.5)

    def _fan_out(self, entries: list[Any], size: int) -> None:
        events = self._events(entries, end_streams=True)
        events.append(({"type": "log", "size": size}, None, None))
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            for ev, about, before in events:
                shown = self._for(sub.scope, ev, about, before)
                if shown is not None:
                    self._put(sub, shown)

    @staticmethod
    def _sees(scope: Scope | None, about: list[tuple[str, tuple[str | None, ...]]] | None) -> bool:
        return about is None or scope is None or any(scope.sees(t, r) for t, r in about)

    @classmethod
    def _for(cls, scope: Scope | None, ev: dict[str, Any], about: About, before: About) -> dict[str, Any] | None:
        """The event as this reader gets it: None when it is about reviews they do not see; an escalation
        says ``new`` to a reader who did not see the review before it."""
        if not cls._sees(scope, about):
            return None
        if before is not None and scope is not None and not cls._sees(scope, before):
            return {**ev, "new": True}
        return ev

    def _rows(self, entries: list[Any]) -> dict[str, Any]:
        """The projection rows of the reviews whose events need them (quorum decisions, escalations)."""
        ids = list(
            dict.fromkeys(
                str((e.body or {}).get("review")) for e in entries if quorum_decision(e) or e.kind == "review.escalated"
            )
        )
        if not ids:
            return {}
        query = select(
            col(ReviewRow.id),
            col(ReviewRow.decided_seq),
            col(ReviewRow.frontier),
            col(ReviewRow.opened_at),
            col(ReviewRow.deadline),
            col(ReviewRow.data),
        ).where(col(ReviewRow.log) == self.store.log_id, col(ReviewRow.id).in_(ids))
        with self.store.read_engine.connect() as conn:
            return {str(row.id): row for row in conn.execute(query)}

    def _events(self, entries: list[Any], *, end_streams: bool) -> list[Event]:
        """Each entry's event, with the (tool, roles) of the reviews it is about (None: about none)."""
        events: list[Event] = []
        reviews = [r for r in (entry_subject_ids(e)[0] for e in entries) if r]
        subjects = self.tool_roles.subjects(reviews) if reviews else {}
        rows = self._rows(entries)
        frontiers: dict[str, list[tuple[str, tuple[str | None, ...]]]] = {}
        for entry in entries:
            if entry.kind in REVIEWER_KINDS:
                reviewer = (entry.body or {}).get("reviewer")
                if end_streams and isinstance(reviewer, str):
                    self.end(reviewer=reviewer, reason=REVIEWER_KINDS[entry.kind])
                continue
            ev = event_of(entry, rows.get(str((entry.body or {}).get("review"))))
            if ev is None:
                continue
            review, frontier = entry_subject_ids(entry)
            about: list[tuple[str, tuple[str | None, ...]]] | None = None
            before: About = None
            if review is not None:
                subject = subjects.get(review)
                about = [(subject.tool, subject.roles)] if subject is not None else []
                if entry.kind == "review.escalated" and subject is not None:
                    before = [(subject.tool, subject.roles[:1])]  # its policy's role alone
            elif frontier is not None:
                if frontier not in frontiers:
                    frontiers[frontier] = [(s.tool, s.roles) for s in self.tool_roles.frontier_subjects(frontier)]
                about = frontiers[frontier]
            events.append((ev, about, before))
        return events

    def _put(self, sub: Subscriber, ev: dict[str, Any]) -> None:
        try:
            sub.loop.call_soon_threadsafe(sub.queue.put_nowait, ev)
        except RuntimeError:  # loop closed
            with self._lock:
                self._subs.discard(sub)

    def publish(self, ev: dict[str, Any]) -> None:
        """Send ``ev`` to every browser (no scope check: only for events about no review)."""
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            self._put(sub, ev)

    def end(self, *, reviewer: str | None = None, session: str | None = None, reason: str = "signed out") -> int:
        """End the streams of a reviewer or of one session (within the event loop's next turn)."""
        with self._lock:
            subs = [
                s
                for s in self._subs
                if (reviewer is not None and s.scope is not None and s.scope.reviewer == reviewer)
                or (session is not None and s.session == session)
            ]
        for sub in subs:
            self._put(sub, {"type": "bye", "reason": reason})
        return len(subs)

    async def stream(
        self,
        heartbeat: float = 15.0,
        *,
        scope: Scope | None = None,
        session: str = "",
        alive: Callable[[], bool] | None = None,
        after: int | None = None,
    ) -> AsyncIterator[str]:
        """One browser's stream. ``alive`` (run off the loop every :data:`CHECK_SECONDS`) says whether
        its session is still open and its reviewer enabled; the stream says ``bye`` and ends when not.
        ``after`` is the log size the page was rendered at: what happened since is sent first, so a
        page never misses the entries that landed between its rendering and its stream."""
        loop = asyncio.get_running_loop()
        sub = Subscriber(loop, asyncio.Queue(maxsize=10_000), scope, session)
        start = await asyncio.to_thread(self.store.size)
        with self._lock:
            if not self._subs:
                self._resume_from = start
            self._subs.add(sub)
            self._active.set()
        try:
            yield f"retry: 2000\nevent: hello\ndata: {json.dumps({'size': start})}\n\n"
            if after is not None and 0 <= after < start and start - after <= CATCH_UP:

                def missed() -> list[Event]:
                    return self._events(list(self.store.entries(start=after, stop=start)), end_streams=False)

                for old, about, before in await asyncio.to_thread(missed):
                    shown = self._for(scope, old, about, before)
                    if shown is not None:
                        yield f"event: {shown['type']}\ndata: {json.dumps(shown)}\n\n"
            last_beat = last_check = time.monotonic()
            while True:
                wait = CHECK_SECONDS if alive is not None else heartbeat
                try:
                    ev: dict[str, Any] | None = await asyncio.wait_for(sub.queue.get(), timeout=wait)
                except TimeoutError:
                    ev = None
                now = time.monotonic()
                if alive is not None and now - last_check >= CHECK_SECONDS:
                    last_check = now
                    if not await asyncio.to_thread(alive):
                        yield f"event: bye\ndata: {json.dumps({'reason': 'signed out'})}\n\n"
                        return
                if ev is None:
                    if now - last_beat >= heartbeat:
                        last_beat = now
                        yield ": keep-alive\n\n"
                    continue
                if ev["type"] == "bye":
                    yield f"event: bye\ndata: {json.dumps(ev)}\n\n"
                    return
                if ev.get("seq", start) < start:
                    continue  # committed before this browser connected (and before its page)
                yield f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n"
        finally:
            with self._lock:
                self._subs.discard(sub)
                if not self._subs:
                    self._active.clear()
