"""``SignoffPlugin``: one ADK plugin that puts every paused tool call of an app in front of a person.

Internal module, not public API; import from ``bridge``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from signoff.audit import Frontier
from signoff.bridge._calls import METADATA_KEY, PausedCall, adk_confirmation_id, paused_calls
from signoff.bridge._guard import RESUMING, ConfirmationRefused, GuardHost, client_resume, confirmation_answers


class PluginHost(GuardHost, Protocol):
    """What the plugin needs of its ``Signoff``."""

    def open_frontier(self, calls: Sequence[PausedCall]) -> Frontier: ...

    async def before_tool(self, tool: BaseTool, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None: ...

    async def after_tool(
        self, tool: BaseTool, args: dict[str, Any], tool_context: Any, result: Any
    ) -> dict[str, Any] | None: ...

    def tool_failed(self, tool_context: Any) -> None: ...

    def busy_session(self, session_id: str) -> str | None: ...


class SignoffPlugin(BasePlugin):
    """Opens one frontier per pause, applies decisions before tools run, records what ran.

    * ``on_user_message_callback``: the guard (:mod:`signoff.bridge._guard`): an answer to a call under
      review that Signoff's resumer did not send is refused while the call is undecided (ADK stores
      nothing), and once it is decided is replaced by the decisions on the log, with ``run.resumed``.
    * ``on_event_callback``: an event that pauses on ``adk_request_confirmation`` (or, for a workflow
      tool node, ``adk_request_input`` with ``wf_tool_confirmation:<node_path>``) opens one review
      per call in one transaction, before ADK persists the event; the event is stamped with
      ``custom_metadata["signoff"] = {"frontier": id, "reviews": {confirmation_id: review_id}}``
      so the session itself binds each paused call to its review.
    * ``before_tool_callback``: see :meth:`Signoff.before_tool`.
    * ``after_tool_callback``: see :meth:`Signoff.after_tool`.
    * ``on_tool_error_callback``: a tool that raised is not recorded as executed (the error is ADK's).
    """

    def __init__(self, signoff: PluginHost, name: str = "signoff") -> None:
        super().__init__(name=name)
        self.signoff = signoff

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
        answers = confirmation_answers(user_message)
        if not answers or RESUMING.get():
            return None
        session = invocation_context.session
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
        if not event.long_running_tool_ids or event.partial:
            return None
        session = invocation_context.session
        calls = paused_calls(
            event, app=session.app_name, user=session.user_id, session=session.id, history=session.events
        )
        if not calls:
            return None
        frontier = await asyncio.to_thread(self.signoff.open_frontier, calls)
        metadata = dict(event.custom_metadata or {})
        metadata[METADATA_KEY] = {
            "frontier": frontier.id,
            "reviews": {adk_confirmation_id(r.call.confirmation_id, r.call.kind): r.id for r in frontier.reviews},
        }
        # Stamped in place: ADK persists this very event object right after the callbacks.
        event.custom_metadata = metadata
        return None

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        return await self.signoff.before_tool(tool, tool_args, tool_context)

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        return await self.signoff.after_tool(tool, tool_args, tool_context, result)

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        self.signoff.tool_failed(tool_context)
        return None
