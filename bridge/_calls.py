"""Paused calls: reading ADK pause events and writing the one message that answers them.

Internal module, not public API; import from ``bridge``.

ADK facts this module rests on (google-adk 2.13, checked in ``tests/bridge/test_adk_facts.py``):

* An LLM agent pauses with one ``adk_request_confirmation`` function call per gated call, with
  args ``{"originalFunctionCall": {id, name, args}, "toolConfirmation": {hint, confirmed, payload?}}``
  (``payload`` is left out when ``None``), all in one event whose ``long_running_tool_ids`` lists them.
* A workflow tool node pauses with one ``adk_request_input`` call whose id is
  ``wf_tool_confirmation:<node_path>`` and whose args are ``{interruptId, message, payload:
  {tool_name, args, confirmation_payload?}, response_schema}``.
* Both are answered by one user ``Content`` holding one ``FunctionResponse(name=<that call's name>,
  id=<that call's id>, response=ToolConfirmation(...).model_dump())`` per call, and nothing else.
* A remote agent's pause reaches the local session through a ``RemoteA2aAgent`` with the remote's own
  call ids, in events whose ``custom_metadata`` holds ``a2a:task_id``, twice (the working and the
  input-required event); a local answer resumes the remote task (``tests/bridge/test_bridge_a2a.py``).
* A question to a person pauses as a long-running call: ``adk_request_input`` (ADK's ``request_input``
  tool, a ``LongRunningFunctionTool``, args ``{message, response_schema?}``) or any other
  ``LongRunningFunctionTool``; its id is in ``long_running_tool_ids``. It is answered by a
  ``FunctionResponse(name=<the call's name>, id=<its id>, response={...})``; ADK's own CLI answers
  ``adk_request_input`` with ``{"result": <the text>}``. Signoff reviews these as kind ``input``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from google.adk.events.event import Event
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from signoff.audit import Review

REQUEST_CONFIRMATION = "adk_request_confirmation"
REQUEST_INPUT = "adk_request_input"
WORKFLOW_CONFIRMATION_PREFIX = "wf_tool_confirmation:"
METADATA_KEY = "signoff"
A2A_TASK = "a2a:task_id"  # custom_metadata of an event ADK relayed from a remote agent (RemoteA2aAgent)

KIND_CONFIRMATION = "confirmation"
KIND_WORKFLOW_INPUT = "workflow_input"
KIND_INPUT = "input"  # a question to a person (adk_request_input, a LongRunningFunctionTool): the answer is signed


@dataclass(frozen=True)
class PausedCall:
    """One tool call that ADK paused for a person, as read from the pause event."""

    app: str
    user: str
    session: str
    invocation: str
    confirmation_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    hint: str = ""
    payload: Any = None
    agent: str = ""
    node_path: str = ""
    kind: str = KIND_CONFIRMATION
    context: dict[str, str] = field(default_factory=dict)

    @property
    def log_confirmation_id(self) -> str:
        """The confirmation id as recorded on the log (see :func:`log_confirmation_id`)."""
        return log_confirmation_id(self.confirmation_id, self.kind, self.invocation)

    @property
    def function_name(self) -> str:
        """The name of the ADK function call that paused (and that the answer must name)."""
        if self.kind == KIND_INPUT:
            return self.tool
        return REQUEST_INPUT if self.kind == KIND_WORKFLOW_INPUT else REQUEST_CONFIRMATION


INVOCATION_SEPARATOR = "#"


def log_confirmation_id(confirmation_id: str, kind: str, invocation: str) -> str:
    """The id a paused call is recorded under on the log.

    ADK reuses ``wf_tool_confirmation:<node_path>`` when the same workflow pauses again in a later
    invocation of the same session, and ``audit`` refuses a second review under one confirmation id
    of a session (``DuplicateReview``); so a workflow pause is recorded as ``<id>#<invocation>``.
    """
    if kind == KIND_WORKFLOW_INPUT:
        return f"{confirmation_id}{INVOCATION_SEPARATOR}{invocation}"
    return confirmation_id


def adk_confirmation_id(logged_id: str, kind: str) -> str:
    """The function call id ADK knows, from the id on the log (inverse of :func:`log_confirmation_id`)."""
    if kind == KIND_WORKFLOW_INPUT:
        return logged_id.split(INVOCATION_SEPARATOR, 1)[0]
    return logged_id


def _text_of(content: types.Content | None) -> str:
    if content is None or not content.parts:
        return ""
    return "".join(p.text for p in content.parts if p.text and not p.thought).strip()


def conversation_context(events: Sequence[Event], call_id: str) -> dict[str, str]:
    """The last user message and the model's text before the call ``call_id``.

    Both are short strings (cut at 2,000 characters) for the reviewer; either may be empty.
    """
    model_text = ""
    start = len(events)
    for i in range(len(events) - 1, -1, -1):
        if any(fc.id == call_id for fc in events[i].get_function_calls()):
            model_text = _text_of(events[i].content)
            start = i
            break
    user_text = ""
    for i in range(start - 1, -1, -1):
        ev = events[i]
        if ev.author == "user":
            text = _text_of(ev.content)
            if text:
                user_text = text
                break
    return {"user": user_text[:2000], "model": model_text[:2000]}


def paused_calls(
    event: Event,
    *,
    app: str,
    user: str,
    session: str,
    history: Sequence[Event] = (),
) -> list[PausedCall]:
    """Every call of ``event`` that pauses for a confirmation, in the event's order.

    ``history`` is the session's events so far; it supplies the conversation context. A plain
    ``adk_request_input`` or another long-running call (a question to a person) is a call of kind
    ``input``: its args are the question, its ``payload`` the answer's starting value
    (:func:`answer_template`). A credential request yields nothing.
    """
    ids = set(event.long_running_tool_ids or ())
    if not ids:
        return []
    out: list[PausedCall] = []
    for fc in event.get_function_calls():
        if not fc.id or fc.id not in ids:
            continue
        args = fc.args or {}
        # what every paused call of this event shares
        paused = partial(
            PausedCall,
            app=app,
            user=user,
            session=session,
            invocation=event.invocation_id,
            confirmation_id=fc.id,
            agent=event.author or "",
        )
        if fc.name == REQUEST_CONFIRMATION:
            original = args.get("originalFunctionCall")
            if not isinstance(original, dict):
                continue
            confirmation = args.get("toolConfirmation") or {}
            call_id = str(original.get("id") or "")
            context = conversation_context(history, call_id)
            task = (event.custom_metadata or {}).get(A2A_TASK)
            if task:  # relayed from a remote agent over A2A: the remote runs the call
                context["a2a_task"] = str(task)
            out.append(
                paused(
                    call_id=call_id,
                    tool=str(original.get("name") or ""),
                    args=dict(original.get("args") or {}),
                    hint=str(confirmation.get("hint") or ""),
                    payload=confirmation.get("payload"),
                    node_path=_node_path(event),
                    kind=KIND_CONFIRMATION,
                    context=context,
                )
            )
        elif fc.name == REQUEST_INPUT and fc.id.startswith(WORKFLOW_CONFIRMATION_PREFIX):
            payload = args.get("payload") or {}
            if not isinstance(payload, dict) or "tool_name" not in payload:
                continue
            out.append(
                paused(
                    # A tool node gets a fresh function_call_id on every run; its node path
                    # (inside the interrupt id) is what stays the same across the pause.
                    call_id=fc.id,
                    tool=str(payload["tool_name"]),
                    args=dict(payload.get("args") or {}),
                    hint=str(args.get("message") or ""),
                    payload=payload.get("confirmation_payload"),
                    node_path=fc.id[len(WORKFLOW_CONFIRMATION_PREFIX) :],
                    kind=KIND_WORKFLOW_INPUT,
                    context=conversation_context(history, fc.id),
                )
            )
        elif fc.name not in NOT_QUESTIONS:
            out.append(
                paused(
                    call_id=fc.id,
                    tool=str(fc.name or ""),
                    args=dict(args),
                    hint=str(args.get("message") or args.get("question") or ""),
                    payload=answer_template(args.get("response_schema")),
                    node_path=_node_path(event),
                    kind=KIND_INPUT,
                    context=conversation_context(history, fc.id),
                )
            )
    return out


NOT_QUESTIONS = frozenset({REQUEST_CONFIRMATION, "adk_request_credential"})
"""Long-running calls that are not a question to a person (a credential request is ADK's own)."""


def answer_template(schema: Any) -> Any:
    """The starting value of an answer to a question whose answer follows the JSON Schema ``schema``
    (ADK's ``response_schema``): a string, a boolean, a number, or an object with each property so
    started; ``""`` (free text) when there is none. The desk builds its answer form from it."""
    if not isinstance(schema, dict):
        return ""
    kind = schema.get("type")
    if "default" in schema:
        return schema["default"]
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return 0
    if kind == "array":
        return []
    properties = schema.get("properties")
    if kind == "object" or isinstance(properties, dict):
        members = properties if isinstance(properties, dict) else {}
        return {str(name): answer_template(sub) for name, sub in members.items()}
    return ""


def _node_path(event: Event) -> str:
    info = getattr(event, "node_info", None)
    return str(getattr(info, "path", "") or "")


def agent_actor(agent: str) -> str:
    """The log actor of an ADK agent (``agent:<name>``), for the entries written on its behalf."""
    return f"agent:{agent or 'adk'}"


def canonical_bytes(value: Any) -> bytes:
    """A function response as bytes that compare equal when the JSON values are (keys sorted)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def response_of(answer: ToolConfirmation | dict[str, Any]) -> dict[str, Any]:
    """The ``FunctionResponse.response`` of one answer: a confirmation's JSON, or an input's answer."""
    return answer if isinstance(answer, dict) else answer.model_dump(mode="json")


def resume_message(answers: Iterable[tuple[PausedCall, ToolConfirmation | dict[str, Any]]]) -> types.Content:
    """One user ``Content`` answering every call of a frontier (function responses only)."""
    parts = [
        types.Part(
            function_response=types.FunctionResponse(
                name=call.function_name,
                id=call.confirmation_id,
                response=response_of(answer),
            )
        )
        for call, answer in answers
    ]
    if not parts:
        raise ValueError("a resume message needs at least one answer, found none")
    return types.Content(role="user", parts=parts)


def answered_ids(events: Sequence[Event], invocation: str, ids: Iterable[str]) -> set[str]:
    """Which of ``ids`` (paused calls of ``invocation``) an answer after their pause has consumed.

    ADK's own test (``flows/llm_flows/tools/_confirmation.py``): a confirmation is consumed once an
    agent's function response for the original call follows the user event that answered it. An
    answer the gate refused (it raised, so no function response followed) consumed nothing: the
    call is still paused, and the resumer must send the decision. A workflow node's call id changes
    on every run, so for workflow pauses any non-user event after the answer counts.
    Only answers after the pause count: a workflow reuses its interrupt ids in later invocations.
    """
    wanted = set(ids)
    start = 0
    originals: dict[str, str] = {}
    for i, ev in enumerate(events):
        if ev.invocation_id == invocation:
            for fc in ev.get_function_calls():
                if fc.id in wanted:
                    start = i
                    original = (fc.args or {}).get("originalFunctionCall") or {}
                    originals[fc.id] = str(original.get("id") or "") if fc.name == REQUEST_CONFIRMATION else ""
    consumed: set[str] = set()
    for i in range(start, len(events)):
        ev = events[i]
        if ev.author != "user":
            continue
        for fr in ev.get_function_responses():
            if fr.id not in wanted or fr.id in consumed:
                continue
            original = originals.get(fr.id, "")
            later = events[i + 1 :]
            if any(
                later_ev.author != "user"
                and (not original or any(r.id == original for r in later_ev.get_function_responses()))
                for later_ev in later
            ):
                consumed.add(str(fr.id))
    return consumed


def paused_call_of(review: Review) -> PausedCall:
    """The paused call a review was opened for, with the confirmation id ADK knows."""
    c = review.call
    return PausedCall(
        app=c.app,
        user=c.user,
        session=c.session,
        invocation=c.invocation,
        confirmation_id=adk_confirmation_id(c.confirmation_id, c.kind),
        call_id=c.call_id,
        tool=c.tool,
        args=dict(c.args),
        hint=c.hint,
        payload=c.payload,
        agent=c.agent,
        node_path=c.node_path,
        kind=c.kind,
    )


def binding_for(events: Sequence[Event], call_id: str, node_path: str = "") -> tuple[str, str] | None:
    """``(review_id, frontier_id)`` that the plugin stamped on the pause event for this call.

    ``call_id`` is the original tool call id (LLM agents); for a workflow tool node the
    ``wf_tool_confirmation:<node_path>`` interrupt is looked up instead.
    """
    wanted_input = WORKFLOW_CONFIRMATION_PREFIX + node_path if node_path else None
    for ev in reversed(events):
        meta = (ev.custom_metadata or {}).get(METADATA_KEY)
        if not isinstance(meta, dict):
            continue
        reviews = meta.get("reviews") or {}
        for fc in ev.get_function_calls():
            if not fc.id or fc.id not in reviews:
                continue
            if fc.name == REQUEST_CONFIRMATION:
                original = (fc.args or {}).get("originalFunctionCall") or {}
                if original.get("id") == call_id:
                    return str(reviews[fc.id]), str(meta.get("frontier", ""))
            elif fc.name == REQUEST_INPUT and fc.id in (call_id, wanted_input):
                return str(reviews[fc.id]), str(meta.get("frontier", ""))
    return None
