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

On a sealed log the values an event carries (an opened call's summary, a result preview, a reply) are
revealed from beside the log and checked against their commitments (desk/reveal.py), one read per burst;
an opened call whose values do not check carries none of them, and ``problem``.

Each browser only hears about reviews its reviewer may see (desk/scope.py). A stream ends within
half a second when its session is closed (sign-out, here or on another replica) or its reviewer
is disabled or re-enrolled; a delegate's when a delegation to them is granted or revoked, when their
delegator is disabled or re-enrolled, or when a delegation it counts on ends (the page then opens a
stream with what it sees now).
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

from signoff.audit import sealing
from signoff.audit.entry import NEVER_RUN, format_time
from signoff.audit.sealing import Lookup
from signoff.desk import queries, reveal
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
DELEGATION_KINDS = frozenset({"delegation.granted", "delegation.revoked"})
QUORUM_KINDS = ("review.approved", "review.edited")
SHORT = 200  # characters of an actor or role name an event carries
TIME = 32  # characters of a log time ("2026-11-30T14:00:00.123456Z")


def quorum_decision(entry: Any) -> bool:
    """An approval or edit on a review that needs several people (its body names the ``round``): whether it
    decided the review depends on the approvals before it, which the review's own entries tell."""
    return entry.kind in QUORUM_KINDS and "round" in (entry.body or {})


def _needed(data: dict[str, Any]) -> int:
    try:
        return max(1, int((data.get("policy") or {}).get("approvals", 1) or 1))
    except (TypeError, ValueError):
        return 1


def _round_approvers(review: Any, seq: int) -> list[str] | None:
    """Who had approved the round of the decision at ``seq`` once it was written (it first, after an edit);
    None when the review has moved on to a later round (later events say the rest)."""
    listed = list(getattr(review, "approvals", ()) or ())
    if seq not in [s for _by, s in listed]:
        return None
    return [str(by) for by, s in listed if int(s) <= seq]


def _approval_event(entry: Any, review: Any) -> dict[str, Any]:
    """A quorum's approval (or edit) that left the review open; ``review`` as the log tells it now."""
    body = entry.body or {}
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
        "needed": int(review.approvals_needed) if review is not None else None,
        "approvals": _round_approvers(review, entry.seq) if review is not None else None,
    }
    if edited and review is not None and review.status == "pending" and int(review.round) == round_:
        found = summaries.of_review(review)  # the queue row reads as the new round, the proposal struck beside it
        ev["headline"], ev["lead"], ev["lead_parts"] = found.headline, found.lead, found.to_json()["lead_parts"]
    return ev


def _escalated_event(entry: Any, review: Any) -> dict[str, Any]:
    """An escalation, with what a queue needs to list the review for a reader new to it (from the log)."""
    body = entry.body or {}
    role = str(body.get("role") or "")[:SHORT]
    ev: dict[str, Any] = {"type": "escalated", "seq": entry.seq, "review": body.get("review"), "role": role}
    if review is not None:
        call = review.call
        ev.update(
            {
                "frontier": review.frontier,
                "tool": call.tool,
                "agent": call.agent,
                "session": str(call.session)[:SHORT],
                "opened_at": format_time(review.opened_at),
                "deadline": format_time(review.deadline) if review.deadline is not None else None,
                "needed": int(review.approvals_needed),
                **summaries.of_review(review).to_json(),
                **({"problem": True} if reveal.withheld(review) else {}),
            }
        )
    return ev


def _opened_call(call: dict[str, Any], look: Lookup | None, review_id: Any) -> tuple[dict[str, Any], str]:
    """An opened call as an event may show it: on a sealed log, its values revealed and checked, or none of
    them (and what is wrong) when they do not check."""
    if look is None or not sealing.any_sealed(call):
        return call, ""
    try:
        return sealing.reveal_call(call, look, f"review {review_id}: call"), ""
    except sealing.ValueProblem as exc:
        return {**call, "args": {}, "payload": None, "hint": "", "context": {}}, str(exc)


def event_of(entry: Any, review: Any = None, look: Lookup | None = None) -> dict[str, Any] | None:
    """The event a browser gets for one log entry (ids, short strings and the bounded previews). ``review``
    is the review as its own log entries tell it, read after the entry committed (never its projection
    row, DESIGN.md "Decide from the log"): it says whether an approval toward a quorum decided the review
    (then ``closed``, else ``approval``), what the round's args are after an edit, and what an escalated
    review is. ``look``: the values beside a sealed log (desk/reveal.py)."""
    body = entry.body or {}
    if entry.kind == "review.opened":
        call, problem = _opened_call(body.get("call") or {}, look, body.get("review"))
        return {
            "type": "opened",
            "seq": entry.seq,
            "review": body.get("review"),
            "frontier": body.get("frontier"),
            "tool": call.get("tool", ""),
            "agent": call.get("agent", ""),
            "session": str(call.get("session") or "")[:SHORT],
            "opened_at": entry.at,
            "deadline": body.get("deadline"),
            "needed": _needed(body),
            **summaries.of_call_json(call).to_json(),
            **({"problem": True} if problem else {}),
        }
    if quorum_decision(entry) and (review is None or review.decision_seq != entry.seq):
        return _approval_event(entry, review)
    if entry.kind == "review.claimed":
        return {
            "type": "claimed",
            "seq": entry.seq,
            "review": body.get("review"),
            "reviewer": str(body.get("reviewer") or "")[:SHORT],
            "until": str(body.get("until") or "")[:TIME],
        }
    if entry.kind == "review.escalated":
        return _escalated_event(entry, review)
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
        preview, _note = reveal.text(body.get("result_preview"), look)
        return {
            "type": "executed",
            "seq": entry.seq,
            "review": body.get("review"),
            "args_digest": body.get("args_digest"),
            "result_preview": preview,
            "at": entry.at,
        }
    if entry.kind in NEVER_RUN:  # run.resume_failed, run.rewound, run.cancelled: the calls named never run
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
        said, _note = reveal.text(body.get("text") or "", look)
        return {
            "type": "replied",
            "seq": entry.seq,
            "frontier": body.get("frontier"),
            "text": said or "",
            "at": entry.at,
        }
    return None


About = list[tuple[str, tuple[str | None, ...]]] | None
Event = tuple[dict[str, Any], About, About]  # the event, whom it is about, and (escalations) whom it was about before


Out = list[tuple[dict[str, Any], str | None]]
"""What one put hands a stream: a burst's events, each with its frame formatted once for every stream that
names no log (None: the stream formats it)."""


def frame(name: str, data: dict[str, Any]) -> str:
    """One Server-Sent Events frame (HTML Living Standard §9.2, the event stream format: an ``event`` and a
    ``data`` field, then a blank line)."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _deliver(puts: list[tuple[Subscriber, Out]]) -> None:
    """On a stream's event loop: hand each browser its part of a burst."""
    for sub, out in puts:
        try:
            sub.queue.put_nowait(out)
        except asyncio.QueueFull:  # 10,000 bursts behind: this browser's stream is not being read
            log.warning("sse: a browser's stream is %d bursts behind; dropping one", sub.queue.qsize())


@dataclass(eq=False)
class Subscriber:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Out]
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
        """A burst's events to every browser that may see them: each event's frame formatted once, and one
        put per browser for the whole burst, which its stream writes as one chunk (issue 24: 100 browsers
        at 50 decisions/s)."""
        events = self._events(entries, end_streams=True)
        events.append(({"type": "log", "size": size}, None, None))
        frames = {id(ev): frame(ev["type"], ev) for ev, _about, _before in events}
        with self._lock:
            subs = list(self._subs)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Subscriber, Out]]] = {}
        for sub in subs:
            out: Out = []
            for ev, about, before in events:
                shown = self._for(sub.scope, ev, about, before)
                if shown is not None:
                    out.append((shown, frames.get(id(shown))))  # (an escalation's "new" copy has none)
            if out:
                by_loop.setdefault(sub.loop, []).append((sub, out))
        for loop, puts in by_loop.items():  # one wake-up of each event loop, not one per browser
            try:
                loop.call_soon_threadsafe(_deliver, puts)
            except RuntimeError:  # loop closed
                with self._lock:
                    self._subs.difference_update(sub for sub, _out in puts)

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

    def _reviews(self, entries: list[Any]) -> dict[str, Any]:
        """The reviews whose events need more than their entry (quorum decisions, escalations), as their own
        log entries tell them: one read of the subject index (desk/queries.py ``logged_reviews``)."""
        ids = list(
            dict.fromkeys(
                str((e.body or {}).get("review")) for e in entries if quorum_decision(e) or e.kind == "review.escalated"
            )
        )
        found = queries.logged_reviews(self.store, ids) if ids else {}
        return {rid: reveal.shown(review) for rid, review in found.items()}  # none of the values that do not check

    def _values(self, entries: list[Any]) -> Lookup | None:
        """On a sealed log, the values the burst's events show (opened calls, result previews, replies),
        read once; None when no entry of it holds a commitment."""
        owners: list[str] = []
        for e in entries:
            body = e.body or {}
            sealed = (
                (e.kind == "review.opened" and sealing.any_sealed(body.get("call") or {}))
                or (e.kind == "tool.executed" and sealing.is_commitment(body.get("result_preview")))
                or (e.kind == "run.replied" and sealing.is_commitment(body.get("text")))
            )
            if sealed:  # the review's values, or the frontier's (the agent's reply)
                owners.append(str(body.get("frontier" if e.kind == "run.replied" else "review")))
        return reveal.lookup(self.store, owners) if owners else None

    def _events(self, entries: list[Any], *, end_streams: bool) -> list[Event]:
        """Each entry's event, with the (tool, roles) of the reviews it is about (None: about none)."""
        events: list[Event] = []
        reviews = [r for r in (entry_subject_ids(e)[0] for e in entries) if r]
        subjects = self.tool_roles.subjects(reviews) if reviews else {}
        logged = self._reviews(entries)
        look = self._values(entries)
        frontiers: dict[str, list[tuple[str, tuple[str | None, ...]]]] = {}
        for entry in entries:
            if entry.kind in REVIEWER_KINDS:
                reviewer = (entry.body or {}).get("reviewer")
                if end_streams and isinstance(reviewer, str):
                    self.end(reviewer=reviewer, reason=REVIEWER_KINDS[entry.kind])
                    self.end(delegator=reviewer, reason="the delegator's roles changed")
                continue
            if entry.kind in DELEGATION_KINDS:  # what the delegate sees changes: their page opens it again
                delegate = (entry.body or {}).get("delegate")
                if end_streams and isinstance(delegate, str):
                    self.end(reviewer=delegate, reason="delegation changed")
                continue
            ev = event_of(entry, logged.get(str((entry.body or {}).get("review"))), look)
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

    def _put(self, sub: Subscriber, out: Out) -> None:
        try:
            sub.loop.call_soon_threadsafe(sub.queue.put_nowait, out)
        except RuntimeError:  # loop closed
            with self._lock:
                self._subs.discard(sub)

    def publish(self, ev: dict[str, Any]) -> None:
        """Send ``ev`` to every browser (no scope check: only for events about no review)."""
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            self._put(sub, [(ev, None)])

    def end(
        self,
        *,
        reviewer: str | None = None,
        session: str | None = None,
        delegator: str | None = None,
        reason: str = "signed out",
    ) -> int:
        """End the streams of a reviewer, of one session, or of the delegates of ``delegator`` (within the
        event loop's next turn)."""
        with self._lock:
            subs = [
                s
                for s in self._subs
                if (reviewer is not None and s.scope is not None and s.scope.reviewer == reviewer)
                or (session is not None and s.session == session)
                or (delegator is not None and s.scope is not None and delegator in (x.delegator for x in s.scope.lent))
            ]
        for sub in subs:
            self._put(sub, [({"type": "bye", "reason": reason}, None)])
        return len(subs)

    async def stream(
        self,
        heartbeat: float = 15.0,
        *,
        scope: Scope | None = None,
        session: str = "",
        alive: Callable[[], bool] | None = None,
        after: int | None = None,
        log: str | None = None,
    ) -> AsyncIterator[str]:
        """One browser's stream. ``alive`` (run off the loop every :data:`CHECK_SECONDS`) says whether
        its session is still open and its reviewer enabled; the stream says ``bye`` and ends when not.
        ``after`` is the log size the page was rendered at: what happened since is sent first, so a
        page never misses the entries that landed between its rendering and its stream. ``log``: name
        the log in every event (one stream of several logs' events: desk/across_stream.py)."""

        def sse(name: str, data: dict[str, Any]) -> str:
            return frame(name, {**data, "log": log} if log else data)

        loop = asyncio.get_running_loop()
        sub = Subscriber(loop, asyncio.Queue(maxsize=10_000), scope, session)
        start = await asyncio.to_thread(self.store.size)
        with self._lock:
            if not self._subs:
                self._resume_from = start
            self._subs.add(sub)
            self._active.set()
        try:
            yield "retry: 2000\n" + sse("hello", {"size": start})
            if after is not None and 0 <= after < start and start - after <= CATCH_UP:

                def missed() -> list[Event]:
                    return self._events(list(self.store.entries(start=after, stop=start)), end_streams=False)

                for old, about, before in await asyncio.to_thread(missed):
                    shown = self._for(scope, old, about, before)
                    if shown is not None:
                        yield sse(shown["type"], shown)
            last_beat = last_check = time.monotonic()
            while True:
                wait = CHECK_SECONDS if alive is not None else heartbeat
                try:
                    got: Out | None = await asyncio.wait_for(sub.queue.get(), timeout=wait)
                except TimeoutError:
                    got = None
                now = time.monotonic()
                if alive is not None and now - last_check >= CHECK_SECONDS:
                    last_check = now
                    if not await asyncio.to_thread(alive):
                        yield sse("bye", {"reason": "signed out"})
                        return
                if got is None:
                    if now - last_beat >= heartbeat:
                        last_beat = now
                        yield ": keep-alive\n\n"
                    continue
                while not sub.queue.empty():  # what else is waiting goes out in the same chunk
                    got = got + sub.queue.get_nowait()
                chunk: list[str] = []
                for ev, text in got:
                    if ev["type"] == "bye":
                        chunk.append(sse("bye", ev))
                        yield "".join(chunk)
                        return
                    if ev.get("seq", start) < start:
                        continue  # committed before this browser connected (and before its page)
                    chunk.append(text if text is not None and not log else sse(ev["type"], ev))
                if chunk:
                    yield "".join(chunk)
        finally:
            with self._lock:
                self._subs.discard(sub)
                if not self._subs:
                    self._active.clear()
