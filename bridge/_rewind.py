"""Rewinds and cancellations: a run that went back before a paused call, or was cancelled while it
paused, is recorded, and nothing of it resumes.

Internal module, not public API; import from ``bridge``.

ADK facts (google-adk 2.13, checked in ``tests/bridge/test_bridge_rewind.py``): ``Runner.rewind_async(
rewind_before_invocation_id=X)`` (and ``adk api_server``'s rewind, which calls it) deletes nothing; it
appends a user event whose ``actions.rewind_before_invocation_id`` is ``X``, and from then on the events
from ``X``'s first one up to that event are not *live* (``google.adk.events._rewind_events._apply_rewinds``,
which ADK calls "the single source of truth for which events are live"). Answering a pause that is not
live fails in ADK with ``ValueError: Function call not found``.

A pause whose events are in the session but not live was rewound: its frontier gets ``run.rewound``
(``ReviewService.record_rewind``), which withdraws its open reviews with reason ``rewound``.

Cancellation (ADK facts, checked in ``tests/bridge/test_bridge_cancel.py``): a run cancelled with
``abort_signal`` (or a client disconnect that ADK turns into an abort) while it pauses is *sealed*: ADK
appends an agent event with ``error_code="INVOCATION_ABORTED"`` whose function responses answer the
dangling calls, the confirmation requests included (``{"error": "Invocation was aborted by client."}``),
and it never replays a sealed call. A plain task cancel (``task.cancel()``) seals nothing and runs no
callback after the pause. Either way the frontier gets ``run.cancelled`` (``ReviewService.record_cancel``),
which withdraws its open reviews with the reason: from the plugin, which sees the abort event and the
end of the cancelled task; and, for a process that died in between, from the resumer's look.

The resumer looks before it claims a decided frontier, and, every ``every`` seconds, in the sessions of
the frontiers still open (:class:`RewindWatch`): one ``list_sessions`` of the app, and a ``get_session``
only of a session whose ``last_update_time`` moved since it was last looked at (a rewind or an abort
appends an event, so it moves).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from google.adk.events._rewind_events import _apply_rewinds
from google.adk.events.event import Event

from signoff.audit import Frontier, ReviewService
from signoff.audit.errors import AlreadyResumed, AuditError
from signoff.bridge import _telemetry as telemetry
from signoff.bridge._calls import adk_confirmation_id

log = logging.getLogger("signoff.bridge")
ABORTED = "INVOCATION_ABORTED"  # google.adk.events._abort_events: the error_code of a sealing event
TASK_CANCELLED = "cancelled: the run's task was cancelled while it paused"


def aborted(events: list[Event], frontier: Frontier) -> str | None:
    """Why ADK sealed the pause of ``frontier`` (``cancelled: <its message>``), when an abort event of the
    pause's invocation answers one of its confirmation requests; ``None`` otherwise."""
    ids = {adk_confirmation_id(r.call.confirmation_id, r.call.kind) for r in frontier.reviews}
    invocation = frontier.reviews[0].call.invocation
    for ev in events:
        if (
            ev.error_code == ABORTED
            and ev.invocation_id == invocation
            and any(fr.id in ids for fr in ev.get_function_responses())
        ):
            return f"cancelled: {ev.error_message or 'the invocation was aborted'}"
    return None


def gone(events: list[Event], frontier: Frontier) -> tuple[str, str] | None:
    """``("run.rewound", before)`` or ``("run.cancelled", reason)`` when the session shows the run of
    ``frontier`` is gone before its pause was answered; ``None`` when the pause can still be answered."""
    before = rewound_before(events, frontier)
    if before is not None:
        return "run.rewound", before
    why = aborted(events, frontier)
    return ("run.cancelled", why) if why is not None else None


def record_gone(reviews: ReviewService, frontier_id: str, found: tuple[str, str], actor: str) -> bool:
    """Record what :func:`gone` found: ``("run.rewound", before)`` or ``("run.cancelled", reason)``;
    ``False`` when the log says the frontier was resumed, rewound or cancelled already."""
    kind, detail = found
    try:
        if kind == "run.rewound":
            entry = reviews.record_rewind(frontier_id, actor=actor, before=detail)
        else:
            entry = reviews.record_cancel(frontier_id, actor=actor, reason=detail)
    except AlreadyResumed as exc:
        log.info("frontier %s: its session shows %s, but %s", frontier_id, kind, exc)
        return False
    telemetry.withdrawn(reviews, entry.body["withdrawn"])
    log.warning(
        "frontier %s: %s; %s withdrawn, nothing of it runs (seq %d)",
        frontier_id,
        entry.body["reason"],
        ", ".join(entry.body["withdrawn"]) or "no review",
        entry.seq,
    )
    return True


def rewound_before(events: list[Event], frontier: Frontier) -> str | None:
    """The invocation a rewind went back before, when ``events`` hold the pause of ``frontier`` and a
    rewind made it not live; ``None`` when the pause is live (or not in the session at all)."""
    ids = {adk_confirmation_id(r.call.confirmation_id, r.call.kind) for r in frontier.reviews}
    invocation = frontier.reviews[0].call.invocation
    held = [
        i
        for i, ev in enumerate(events)
        if ev.invocation_id == invocation and any(fc.id in ids for fc in ev.get_function_calls())
    ]
    if not held:
        return None
    live = {id(ev) for ev in _apply_rewinds(events)}
    if any(id(events[i]) in live for i in held):
        return None
    first: dict[str, int] = {}
    for i, ev in enumerate(events):
        if ev.invocation_id and ev.invocation_id not in first:
            first[ev.invocation_id] = i
    for ev in events[held[-1] + 1 :]:
        target = ev.actions.rewind_before_invocation_id if ev.actions else None
        if target and first.get(target, len(events)) <= held[0]:
            return str(target)
    return invocation  # not live for a reason ADK may add later: named by its own invocation


class RewindWatch:
    """Looks at the sessions of one app's open frontiers, at most every ``every`` seconds."""

    def __init__(self, reviews: ReviewService, session_service: Any, app: str, actor: str, every: float) -> None:
        self.reviews = reviews
        self.sessions = session_service
        self.app = app
        self.actor = actor
        self.every = every
        self._next = 0.0
        self._seen: dict[str, float] = {}  # session id -> its last_update_time when last looked at

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def seconds_until(self) -> float:
        """Seconds until the next look is due (0 when it is)."""
        return max(0.0, self._next - time.monotonic())

    async def look(self) -> list[str]:
        """Record ``run.rewound`` (``run.cancelled``) for every open frontier of the app whose pause a
        rewind made not live (an abort sealed); the frontier ids recorded. Each frontier fails alone
        (logged, looked at again next time)."""
        self._next = time.monotonic() + self.every
        open_ = await asyncio.to_thread(self.reviews.open_frontier_sessions, self.app)
        if not open_:
            self._seen.clear()
            return []
        listed = await self.sessions.list_sessions(app_name=self.app)
        now = {s.id: s for s in listed.sessions}
        by_session: dict[str, list[str]] = {}
        for frontier_id, session_id in open_:
            by_session.setdefault(session_id, []).append(frontier_id)
        recorded: list[str] = []
        for session_id, frontiers in by_session.items():
            found = now.get(session_id)
            if found is None or self._seen.get(session_id) == found.last_update_time:
                continue
            recorded.extend(await self._look_at(found.user_id, session_id, frontiers))
        for gone in [sid for sid in self._seen if sid not in by_session]:
            del self._seen[gone]
        return recorded

    async def _look_at(self, user: str, session_id: str, frontiers: Iterable[str]) -> list[str]:
        session = await self.sessions.get_session(app_name=self.app, user_id=user, session_id=session_id)
        if session is None:
            return []
        recorded = []
        settled = True
        for frontier_id in frontiers:
            try:
                frontier = await asyncio.to_thread(self.reviews.frontier, frontier_id)
                found = gone(session.events, frontier)
                if found is not None and await asyncio.to_thread(
                    record_gone, self.reviews, frontier.id, found, self.actor
                ):
                    recorded.append(frontier_id)
            except AuditError as exc:
                settled = False
                log.error("frontier %s: could not record its rewind: %s; looking again", frontier_id, exc)
        if settled:
            self._seen[session_id] = session.last_update_time
        return recorded
