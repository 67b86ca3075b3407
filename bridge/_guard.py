"""The guard on resume messages: only Signoff's decision answers a call under review.

Internal module, not public API; import from ``signoff.bridge``.

ADK treats a paused call as answered by the last user message that holds a ``FunctionResponse``
for its ``adk_request_confirmation`` (or a workflow node's ``adk_request_input``), and never lets
a consumed confirmation be answered again (``flows/llm_flows/tools/_confirmation.py``, checked in
``tests/bridge/test_bridge_adk_facts.py``). So an answer that did not come from a person's decision,
such as an API client's early ``confirmed: true`` through ``adk api_server`` or the dev UI's confirm
button, would end the call's only chance to run with the real decision. The plugin's
``on_user_message_callback`` runs before ADK stores the message, and:

* passes a message sent by Signoff's own resumer in this process (:data:`RESUMING` is set around it);
* refuses any other answer while a review of its frontier is still open: ADK stores nothing, the
  call stays paused, and the person's decision resumes it later;
* once every review of the frontier is final, claims the frontier for whoever sent the message
  (``run.resumed``, once: a resumer that got there first wins) and answers every call of the
  frontier with the decisions on the log, whatever the message said.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from google.genai import types

from signoff.audit import Frontier, ReviewService
from signoff.audit.errors import AlreadyResumed, AuditError, FrontierNotReady
from signoff.bridge._calls import (
    REQUEST_CONFIRMATION,
    REQUEST_INPUT,
    WORKFLOW_CONFIRMATION_PREFIX,
    log_confirmation_id,
    paused_call_of,
    resume_message,
)
from signoff.bridge._mapping import RELAYED_EDIT, answer_for, relayed_edit

RESUMING: contextvars.ContextVar[bool] = contextvars.ContextVar("signoff_resuming", default=False)
"""True while Signoff itself sends a frontier's answers (the resumer, or an app inside :func:`resuming`)."""


class ConfirmationRefused(AuditError):
    """A resume message answered a call under review when it may not; ADK stores nothing of it."""


@contextmanager
def resuming() -> Iterator[None]:
    """Mark the answers sent inside this block as Signoff's own (the frontier is claimed already)."""
    token = RESUMING.set(True)
    try:
        yield
    finally:
        RESUMING.reset(token)


def confirmation_answers(
    message: types.Content | None, reviewed: Callable[[str], bool] | None = None
) -> list[types.FunctionResponse]:
    """The function responses in ``message`` that answer a paused call: a confirmation, a workflow
    node's, ``adk_request_input``, or (``reviewed(id)`` says so: an indexed lookup) another question to a
    person under review (kind ``input``)."""
    found = []
    for part in (message.parts if message is not None and message.parts else []) or []:
        response = part.function_response
        if response is None:
            continue
        workflow = response.name == REQUEST_INPUT and str(response.id or "").startswith(WORKFLOW_CONFIRMATION_PREFIX)
        if (
            response.name == REQUEST_CONFIRMATION
            or workflow
            or (reviewed is not None and response.id and reviewed(str(response.id)))
        ):
            found.append(response)
    return found


class GuardHost(Protocol):
    """What the guard needs of its ``Signoff``."""

    reviews: ReviewService

    def lookup_review_id(self, session: str, value: str, *, by: str = "confirmation_id") -> str | None: ...

    def note_claim(self, frontier_id: str) -> None: ...

    def review_link(self, review_id: str) -> str | None: ...


def client_resume(
    host: GuardHost, *, app: str, user: str, session: str, invocation: str, answers: list[types.FunctionResponse]
) -> types.Content:
    """Answer a frontier for a client (see the module docstring), or raise :class:`ConfirmationRefused`.

    Blocking (it reads and writes the log): run it in a thread."""
    frontiers: dict[str, Frontier] = {}
    for answer in answers:
        workflow = answer.name == REQUEST_INPUT and str(answer.id or "").startswith(WORKFLOW_CONFIRMATION_PREFIX)
        kind = "workflow_input" if workflow else "confirmation"  # (an input's id is logged as it is)
        logged = log_confirmation_id(str(answer.id or ""), kind, invocation)
        review_id = host.lookup_review_id(session, logged)
        if review_id is None:
            raise ConfirmationRefused(
                f"{answer.name} {answer.id!r}: expected a call Signoff reviews, found no review of it in session "
                f"{session!r}; nothing was stored"
            )
        frontier_id = host.reviews.get(review_id).frontier
        if frontier_id not in frontiers:
            frontiers[frontier_id] = host.reviews.frontier(frontier_id)
    if len(frontiers) != 1:
        raise ConfirmationRefused(
            f"expected answers to the calls of one pause, found calls of {len(frontiers)} pauses; nothing was stored"
        )
    (frontier,) = frontiers.values()
    waiting = [r.id for r in frontier.reviews if not r.final]
    if waiting:
        links = [link for link in (host.review_link(rid) for rid in waiting) if link]
        where = f"at {', '.join(links)}" if links else "in the Signoff desk (or with `audit approve`)"
        raise ConfirmationRefused(
            f"review {', '.join(waiting)} of {frontier.reviews[0].call.tool}() is still pending: a person decides "
            f"it {where}, and then Signoff resumes the run. Nothing was consumed: this answer was not stored, "
            "and the call stays paused."
        )
    try:
        host.reviews.claim_resume(frontier.id, actor=f"agent:client-of-{app}", via=f"client:{user}")
    except (AlreadyResumed, FrontierNotReady) as exc:
        raise ConfirmationRefused(f"frontier {frontier.id} was already resumed ({exc}); nothing was stored") from None
    host.note_claim(frontier.id)
    refused = [r.id for r in frontier.reviews if relayed_edit(r) and not r.resume_failed]
    if refused:  # the remote agent would run the unedited args: it is told no, and the log says why
        host.reviews.record_resume_failure(
            frontier.id, actor=f"agent:client-of-{app}", reviews=refused, reason=RELAYED_EDIT
        )
    return resume_message((paused_call_of(r), answer_for(r)) for r in frontier.reviews)
