"""Decisions on the log, mapped to what ADK understands (and back).

Internal module, not public API; import from ``bridge``.

DESIGN.md "The bridge": ``ToolConfirmation`` forbids extra keys, so edited args travel in
``payload={"args": ..., "patch": ...}``; a tool that asked its own question through
``request_confirmation(hint, payload)`` gets the person's answer as the payload instead.
"""

from __future__ import annotations

from typing import Any

from google.adk.tools.tool_confirmation import ToolConfirmation

from signoff.audit import Review

APPROVED = "approved"
EDITED = "edited"
REJECTED = "rejected"
EXPIRED = "expired"
WITHDRAWN = "withdrawn"
PENDING = "pending"
RUNS = frozenset({APPROVED, EDITED})
STOPS = frozenset({REJECTED, EXPIRED, WITHDRAWN})


RELAYED_EDIT = (
    "an edit cannot reach a call that a remote agent runs over A2A (it runs the args it asked for); "
    "the remote agent was told no, and nothing ran"
)


def relayed(review: Review) -> bool:
    """Whether the call was relayed from a remote agent over A2A (the remote runs it, as it asked)."""
    return bool((review.call.context or {}).get("a2a_task"))


def relayed_edit(review: Review) -> bool:
    """An edit of a relayed call: it is never sent as a confirmation (the remote would run the unedited
    args), but as a refusal, and the log says so (``run.resume_failed``)."""
    return review.status == EDITED and review.call.payload is None and relayed(review)


def to_tool_confirmation(review: Review) -> ToolConfirmation:
    """The ``ToolConfirmation`` that answers ``review``'s paused call; the review must be final."""
    call = review.call
    asked_own_question = call.payload is not None
    if review.status == APPROVED:
        payload = review.answer_payload if review.answer_payload is not None else call.payload
        return ToolConfirmation(hint=call.hint, confirmed=True, payload=payload)
    if relayed_edit(review):
        return ToolConfirmation(hint=f"Signoff: {RELAYED_EDIT}.", confirmed=False, payload=None)
    if review.status == EDITED:
        if asked_own_question:
            payload = review.answer_payload if review.answer_payload is not None else call.payload
        else:
            payload = {"args": review.final_args, "patch": review.patch}
        return ToolConfirmation(hint=call.hint, confirmed=True, payload=payload)
    if review.status in STOPS:
        return ToolConfirmation(hint=stop_reason(review), confirmed=False, payload=None)
    raise ValueError(f"review {review.id}: expected a final decision, found it {review.status}")


def answer_for(review: Review) -> ToolConfirmation | dict[str, Any]:
    """What answers ``review``'s paused call: a ``ToolConfirmation``, or, for a question to a person
    (kind ``input``), the ``FunctionResponse.response``: the signed answer (an object as it is, anything
    else as ``{"result": answer}``), or ``{"error": why}`` when nobody answered it."""
    if review.call.kind != "input":
        return to_tool_confirmation(review)
    if review.status in RUNS:
        answer = review.answer_payload if review.answer_payload is not None else review.call.payload
        return answer if isinstance(answer, dict) else {"result": answer}
    if review.status in STOPS:
        return {"error": stop_reason(review), "signoff": {"review": review.id, "status": review.status}}
    raise ValueError(f"review {review.id}: expected a final decision, found it {review.status}")


def stop_reason(review: Review) -> str:
    """The sentence the model reads when a person's decision (or its absence) stops the call."""
    if review.status == REJECTED:
        who = review.decided_by or "a reviewer"
        if review.call.kind == "input":
            return f"The question of {review.call.tool}() was declined by {who}: {review.reason}"
        return f"The call {review.call.tool}() was rejected by {who}: {review.reason}"
    if review.status == EXPIRED:
        deadline = review.deadline.isoformat() if review.deadline else "its deadline"
        return f"The call {review.call.tool}() was not run: nobody decided it before {deadline}."
    if review.status == WITHDRAWN:
        return f"The call {review.call.tool}() was withdrawn: {review.reason or 'the run was cancelled'}"
    return f"The call {review.call.tool}() was not run: review {review.id} is {review.status}."


def stop_result(review: Review) -> dict[str, Any]:
    """The tool result the model sees instead of running a stopped call."""
    return {
        "error": stop_reason(review),
        "signoff": {"review": review.id, "status": review.status, "reason": review.reason},
    }


def edit_note(review: Review) -> str:
    ops = ", ".join(f"{op.get('op')} {op.get('path')}" for op in review.patch or [])
    who = review.decided_by or "a reviewer"
    note = f"{who} edited the arguments before this call ran ({ops})."
    if review.rationale:
        note += f" Rationale: {review.rationale}"
    return note
