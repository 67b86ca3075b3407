"""``SignoffPlugin``: one ADK plugin that puts every paused tool call of an app in front of a person.

Internal module, not public API; import from ``bridge``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, Protocol

from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from signoff.audit import Frontier
from signoff.audit.errors import AuditError
from signoff.bridge import _telemetry as telemetry
from signoff.bridge._answers import check_answers
from signoff.bridge._calls import (
    A2A_TASK,
    KIND_CONFIRMATION,
    KIND_WORKFLOW_INPUT,
    METADATA_KEY,
    REQUEST_INPUT,
    WORKFLOW_CONFIRMATION_PREFIX,
    PausedCall,
    adk_confirmation_id,
    agent_actor,
    log_confirmation_id,
    paused_calls,
)
from signoff.bridge._guard import RESUMING, ConfirmationRefused, GuardHost, client_resume, confirmation_answers
from signoff.bridge._mapping import relayed
from signoff.bridge._rewind import ABORTED, TASK_CANCELLED, record_gone

log = logging.getLogger("signoff.bridge")
CANCELLER = "agent:signoff"  # who records a cancelled run's run.cancelled
# The session of the run whose AgentTool is running now (this task's context): ADK 2.13 runs the wrapped
# agent in a nested Runner on a fresh in-memory session that it discards, so a pause inside it can
# never be resumed ("AgentTool cannot resume because its nested session is discarded").
AGENT_TOOL_OF: ContextVar[str | None] = ContextVar("signoff_agent_tool_of", default=None)


class PluginHost(GuardHost, Protocol):
    """What the plugin needs of its ``Signoff``."""

    def open_frontier(self, calls: Sequence[PausedCall]) -> Frontier: ...

    async def before_tool(self, tool: BaseTool, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None: ...

    async def after_tool(
        self, tool: BaseTool, args: dict[str, Any], tool_context: Any, result: Any
    ) -> dict[str, Any] | None: ...

    async def tool_failed(self, tool_context: Any, error: BaseException) -> None: ...

    def busy_session(self, session_id: str) -> str | None: ...

    def review_link(self, review_id: str) -> str | None: ...

    def wants_review(self, call: PausedCall) -> bool: ...


class SignoffPlugin(BasePlugin):
    """Opens one frontier per pause, applies decisions before tools run, records what ran.

    * ``on_user_message_callback``: the guard (:mod:`signoff.bridge._guard`): an answer to a call under
      review that Signoff's resumer did not send is refused while the call is undecided (ADK stores
      nothing), and once it is decided is replaced by the decisions on the log, with ``run.resumed``.
    * ``on_event_callback``: an event that pauses on ``adk_request_confirmation`` (or, for a workflow
      tool node, ``adk_request_input`` with ``wf_tool_confirmation:<node_path>``) opens one review
      per call in one transaction, before ADK persists the event; the event is stamped with
      ``custom_metadata["signoff"] = {"frontier": id, "reviews": {confirmation_id: review_id}, "state":
      "pending", "links": {confirmation_id: desk URL}}`` (links with a ``desk_url``), so the session
      itself binds each paused call to its review, and ``adk web``'s event view says where to decide.
    * ``before_tool_callback``: see :meth:`Signoff.before_tool`.
    * ``after_tool_callback``: see :meth:`Signoff.after_tool`.
    * ``on_tool_error_callback``: a tool that raised is not recorded as executed (the error is ADK's); its
      outcome is unknown, so ``run.resume_failed`` names it and it never runs again by itself.
    * ``before_model_callback``: an answer to a question under review (kind ``input``) that the model is
      about to read is the signed one, and is recorded once as delivered (:mod:`signoff.bridge._answers`).
    * Cancellation (:mod:`signoff.bridge._rewind`): an abort event (``INVOCATION_ABORTED``) that seals a
      confirmation request, or the end of a task cancelled between its pause and the end of its run
      (no ``after_run_callback``), records ``run.cancelled`` for the frontier, once: its open reviews are
      withdrawn with the reason, and nothing of it resumes.
    """

    def __init__(self, signoff: PluginHost, name: str = "signoff") -> None:
        super().__init__(name=name)
        self.signoff = signoff
        # invocation -> the frontiers it opened, until its run ends (after_run_callback) or its task does
        self._pausing: dict[str, list[str]] = {}

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> types.Content | None:
        """A second run on a session whose reviewed call is running in this process (a client re-driving
        the invocation meanwhile) is refused before it writes anything: it would run the call twice, or
        make the running one fail on a stale session."""
        running = self.signoff.busy_session(invocation_context.session.id)
        if running is not None:
            raise ConfirmationRefused(
                f"session {invocation_context.session.id}: review {running}'s call is running now; "
                "this run was not started (nothing was stored)"
            )
        return None

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        if RESUMING.get() or not any(p.function_response for p in user_message.parts or []):
            return None
        session = invocation_context.session

        def reviewed(call_id: str) -> bool:  # a question to a person under review (kind input)
            return self.signoff.lookup_review_id(session.id, call_id) is not None

        answers = await asyncio.to_thread(confirmation_answers, user_message, reviewed)
        if not answers:
            return None
        return await asyncio.to_thread(
            client_resume,
            self.signoff,
            app=session.app_name,
            user=session.user_id,
            session=session.id,
            invocation=invocation_context.invocation_id,
            answers=answers,
        )

    async def on_event_callback(self, *, invocation_context: InvocationContext, event: Event) -> Event | None:
        if event.error_code == ABORTED:
            await self._sealed(invocation_context, event)
            return None
        if event.partial:
            return None
        session = invocation_context.session
        if not event.long_running_tool_ids:
            if (event.custom_metadata or {}).get(A2A_TASK) and event.get_function_responses():
                await asyncio.to_thread(self._relayed_results, session.id, event)
            return None
        calls = paused_calls(
            event, app=session.app_name, user=session.user_id, session=session.id, history=session.events
        )
        calls = [c for c in calls if self.signoff.wants_review(c)]
        if not calls:
            return None
        outer = AGENT_TOOL_OF.get()
        if outer is not None and outer != session.id:
            log.warning(
                "%s() paused inside an AgentTool's nested run (session %s), which ADK discards: no review is "
                "opened and the call does not run. Gate the AgentTool itself (ToolPolicy(<its name>, "
                "review=True)), or put the agent under sub_agents",
                calls[0].tool,
                outer,
            )
            return None
        known = await asyncio.to_thread(self._known, session.id, calls)
        if len(known) == len(calls):  # the same pause again (ADK relays an A2A pause twice): stamp, not reopen
            frontier = await asyncio.to_thread(self.signoff.reviews.frontier, known[0].frontier)
        else:
            fresh = [c for c in calls if c.log_confirmation_id not in {r.call.confirmation_id for r in known}]
            frontier = await asyncio.to_thread(self.signoff.open_frontier, fresh)
        metadata = dict(event.custom_metadata or {})
        by_call = {adk_confirmation_id(r.call.confirmation_id, r.call.kind): r.id for r in frontier.reviews}
        metadata[METADATA_KEY] = {"frontier": frontier.id, "reviews": by_call, "state": "pending"}
        links = {cid: link for cid, rid in by_call.items() if (link := self.signoff.review_link(rid))}
        if links:  # where a developer in `adk web` (the event's metadata) goes to see and decide it
            metadata[METADATA_KEY]["links"] = links
        traceparent = telemetry.pause_traceparent()
        if traceparent:  # where each review's span goes in the agent's trace (when an SDK records)
            metadata[METADATA_KEY][telemetry.TRACE_KEY] = traceparent
        # Stamped in place: ADK persists this very event object right after the callbacks.
        event.custom_metadata = metadata
        self._watch_task(invocation_context.invocation_id, frontier.id)
        return None

    def _known(self, session_id: str, calls: Sequence[PausedCall]) -> list[Any]:
        """The reviews already opened for these calls of this session (an indexed lookup each)."""
        found = []
        for call in calls:
            review_id = self.signoff.lookup_review_id(session_id, call.log_confirmation_id)
            if review_id is not None:
                found.append(self.signoff.reviews.get(review_id))
        return found

    def _relayed_results(self, session_id: str, event: Event) -> None:
        """A remote agent's tool result relayed over A2A: an approved call of a review here that ran
        remotely is recorded as ``tool.executed`` (once), with the args it was approved with (the remote
        runs the args it asked for, which are the ones signed; an edit is never sent: see
        :func:`signoff.bridge._mapping.relayed_edit`)."""
        for response in event.get_function_responses():
            review_id = (
                self.signoff.lookup_review_id(session_id, str(response.id), by="call_id") if response.id else None
            )
            if review_id is None:
                continue
            review = self.signoff.reviews.get(review_id)
            if not relayed(review) or review.status != "approved" or not review.resumed:
                continue
            if review.executed or review.resume_failed or review.problem:
                continue
            try:
                self.signoff.reviews.record_execution(
                    review.id,
                    actor=agent_actor(review.call.agent),
                    args=dict(review.final_args if review.final_args is not None else review.call.args),
                    result=response.response,
                )
            except AuditError as exc:  # recorded meanwhile (the same result relayed again)
                log.info("review %s: the remote result was not recorded again: %s", review.id, exc)

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """The run ended on its own (paused, or finished): its pauses stand."""
        self._pausing.pop(invocation_context.invocation_id, None)

    def _watch_task(self, invocation: str, frontier_id: str) -> None:
        """Withdraw ``frontier_id`` if the task running its invocation is cancelled before the run ends."""
        task = asyncio.current_task()
        if task is None:
            return
        first = invocation not in self._pausing
        self._pausing.setdefault(invocation, []).append(frontier_id)
        if first:
            task.add_done_callback(lambda done: self._task_done(invocation, done))

    def _task_done(self, invocation: str, task: asyncio.Task[Any]) -> None:
        frontiers = self._pausing.pop(invocation, None)
        if not frontiers or not task.cancelled():
            return
        for frontier_id in frontiers:  # (the loop is ending this task: a short write, in place)
            try:
                record_gone(self.signoff.reviews, frontier_id, ("run.cancelled", TASK_CANCELLED), CANCELLER)
            except Exception:  # noqa: BLE001 - a done-callback must not raise; the resumer's look retries
                log.exception("frontier %s: its cancelled run's reviews could not be withdrawn", frontier_id)

    async def _sealed(self, invocation_context: InvocationContext, event: Event) -> None:
        """ADK sealed an aborted invocation: each frontier whose confirmation requests it answers gets
        ``run.cancelled`` with ADK's message (before ADK stores the event)."""
        self._pausing.pop(invocation_context.invocation_id, None)
        session = invocation_context.session
        reason = f"cancelled: {event.error_message or 'the invocation was aborted'}"
        frontiers: list[str] = []
        for response in event.get_function_responses():
            if not response.id:
                continue
            workflow = response.name == REQUEST_INPUT and response.id.startswith(WORKFLOW_CONFIRMATION_PREFIX)
            kind = KIND_WORKFLOW_INPUT if workflow else KIND_CONFIRMATION  # (an input's id is logged as it is)
            logged = log_confirmation_id(response.id, kind, invocation_context.invocation_id)
            review_id = await asyncio.to_thread(self.signoff.lookup_review_id, session.id, logged)
            if review_id is None:
                continue
            frontier_id = (await asyncio.to_thread(self.signoff.reviews.get, review_id)).frontier
            if frontier_id and frontier_id not in frontiers:
                frontiers.append(frontier_id)
        for frontier_id in frontiers:
            await asyncio.to_thread(
                record_gone, self.signoff.reviews, frontier_id, ("run.cancelled", reason), CANCELLER
            )

    async def before_model_callback(self, *, callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        """The answers to questions under review that the model is about to read are the signed ones
        (:func:`signoff.bridge._answers.check_answers`); raises :class:`AnswerRefused` otherwise."""
        last = llm_request.contents[-1] if llm_request.contents else None
        responses = [p.function_response for p in (last.parts or []) if p.function_response] if last else []
        if responses:  # only a person's (or a client's) answers: a long-running tool's own interim result is not one
            from_user = {
                fr.id
                for ev in callback_context.session.events
                if ev.author == "user"
                for fr in ev.get_function_responses()
            }
            responses = [r for r in responses if r.id in from_user]
        if responses:
            await asyncio.to_thread(check_answers, self.signoff, callback_context.session.id, responses)
        return None

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        answer = await self.signoff.before_tool(tool, tool_args, tool_context)
        if answer is None and isinstance(tool, AgentTool):  # it runs now, its agent in a nested run
            AGENT_TOOL_OF.set(tool_context.session.id)
        return answer

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        if isinstance(tool, AgentTool):
            AGENT_TOOL_OF.set(None)
        return await self.signoff.after_tool(tool, tool_args, tool_context, result)

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        if isinstance(tool, AgentTool):
            AGENT_TOOL_OF.set(None)
        await self.signoff.tool_failed(tool_context, error)
        return None
