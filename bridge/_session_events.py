"""Pure readers of an ADK session's events, for the resumer (:mod:`signoff.bridge._resumer`): whether a
frontier's pause is stored whole, whether its answer is stored or was consumed, whether its run went on to
the end, and what the agent said last. No I/O; each takes the session's events as ADK stored them.

Internal module, not public API.
"""

from __future__ import annotations

import time
from typing import Any

from google.adk.events.event import Event

from signoff.audit import Frontier
from signoff.bridge._calls import REQUEST_CONFIRMATION, adk_confirmation_id, canonical_bytes, response_of

PAUSE_SETTLE_SECONDS = 2.0  # a pause's last event not stored this long after its request: the pausing run died


def requested_in(events: list[Event], frontier: Frontier) -> bool:
    """Whether the session holds the confirmation requests of ``frontier`` (the pause's first part)."""
    ids = {adk_confirmation_id(r.call.confirmation_id, r.call.kind) for r in frontier.reviews}
    invocation = frontier.reviews[0].call.invocation
    return ids <= {fc.id for ev in events if ev.invocation_id == invocation for fc in ev.get_function_calls()}


def paused_in(events: list[Event], frontier: Frontier, *, now: float | None = None) -> bool:
    """Whether the session holds the whole pause that ``frontier`` answers: the confirmation requests,
    and after each the paused call's own function response, the last event the pausing run stores.

    A resume sent before that last event is stored makes ADK refuse the pausing run's append
    (``StaleSessionError`` for whoever started the run). A request whose response has not followed
    within ``PAUSE_SETTLE_SECONDS`` (the pausing run died in between) counts as stored all the same.
    """
    ids = {adk_confirmation_id(r.call.confirmation_id, r.call.kind) for r in frontier.reviews}
    invocation = frontier.reviews[0].call.invocation
    requests: dict[str, tuple[str, float]] = {}  # confirmation id -> (original call id, when it was stored)
    responded: set[str] = set()
    for ev in events:
        if ev.invocation_id != invocation:
            continue
        for fc in ev.get_function_calls():
            if fc.id in ids:
                original = (fc.args or {}).get("originalFunctionCall") or {}
                requests[str(fc.id)] = (
                    str(original.get("id") or "") if fc.name == REQUEST_CONFIRMATION else "",
                    ev.timestamp,
                )
        if ev.author != "user":
            responded.update(str(fr.id) for fr in ev.get_function_responses())
    if not ids <= requests.keys():
        return False
    clock = time.time() if now is None else now
    return all(
        not original or original in responded or clock - stored >= PAUSE_SETTLE_SECONDS
        for original, stored in requests.values()
    )


def ran_on(events: list[Event], frontier: Frontier, root: str = "") -> bool:
    """Whether the run finished after the message answering ``frontier``: the root agent ended
    (``end_of_agent``), or an agent gave a final response with something in it (ADK also stores empty
    events that count as final responses, before a tool has run)."""
    return any(
        ev.author != "user"
        and (
            (bool(root) and ev.author == root and bool(ev.actions.end_of_agent))
            or (ev.is_final_response() and bool(ev.content and ev.content.parts))
        )
        for ev in events[answer_at(events, frontier) + 1 :]
    )


def reply_in(events: list[Event], frontier: Frontier) -> str:
    """The agent's last final words after the message answering ``frontier`` (what :meth:`Resumer._drive`
    records as ``run.replied``), as the session stored them; empty if none."""
    reply = ""
    for ev in events[answer_at(events, frontier) + 1 :]:
        reply = final_text(ev) or reply
    return reply


def answer_at(events: list[Event], frontier: Frontier) -> int:
    """The index of the user event that answers ``frontier``'s pause, or ``len(events)`` if none does."""
    ids = {adk_confirmation_id(r.call.confirmation_id, r.call.kind) for r in frontier.reviews}
    invocation = frontier.reviews[0].call.invocation
    pause = max(
        (
            i
            for i, ev in enumerate(events)
            if ev.invocation_id == invocation and any(fc.id in ids for fc in ev.get_function_calls())
        ),
        default=0,
    )
    return next(
        (
            i
            for i in range(pause, len(events))
            if events[i].author == "user" and any(fr.id in ids for fr in events[i].get_function_responses())
        ),
        len(events),
    )


def answers_stored(events: list[Event], invocation: str, answers: list[tuple[Any, Any]]) -> bool:
    """Whether the session already holds, after the pause, exactly these answers (the last answer to each
    call is the one ADK takes up): a resume whose message ADK stored before the run died."""
    wanted = {call.confirmation_id: canonical_bytes(response_of(answer)) for call, answer in answers}
    pause = max(
        (
            i
            for i, ev in enumerate(events)
            if ev.invocation_id == invocation and any(fc.id in wanted for fc in ev.get_function_calls())
        ),
        default=-1,
    )
    if pause < 0:
        return False
    last: dict[str, bytes] = {}
    for ev in events[pause + 1 :]:
        if ev.author == "user":
            for fr in ev.get_function_responses():
                if fr.id in wanted:
                    last[str(fr.id)] = canonical_bytes(fr.response)
    return last == wanted


def final_text(event: Event) -> str:
    """The text of an agent's final response (thoughts left out); empty for any other event."""
    if event.author == "user" or not event.is_final_response():
        return ""
    parts = event.content.parts if event.content and event.content.parts else []
    return "".join(p.text for p in parts if p.text and not p.thought).strip()
