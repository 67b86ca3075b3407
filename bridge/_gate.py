"""The gate around each tool call: the reviewed args go in, what ran is recorded.

Internal module, not public API; import from ``bridge``.

DESIGN.md "The bridge": the args are mutated in place and ``None`` is returned (a returned dict
would skip the tool; returned before a decision it would skip the review). A rejection, expiry or
withdrawal always stops the tool, with the reason as the result the model sees. The decision is read
from the log, not from the resume message: a confirmation that disagrees with the log stops the call.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Protocol

from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_confirmation import ToolConfirmation

from signoff.audit import Review, ReviewService
from signoff.bridge._calls import WORKFLOW_CONFIRMATION_PREFIX, binding_for
from signoff.bridge._mapping import EDITED, PENDING, RUNS, STOPS, edit_note, stop_result
from signoff.bridge._policy import Policies

FORCED_PAUSE_STATUS = "awaiting review"
_WF_PREFIX = WORKFLOW_CONFIRMATION_PREFIX


def agent_actor(agent: str) -> str:
    return f"agent:{agent or 'adk'}"


class GateHost(Protocol):
    """What the gate needs of its ``Signoff``."""

    reviews: ReviewService
    policies: Policies

    def remember_tool(self, agent: str, tool: BaseTool) -> None: ...

    def lookup_review_id(self, session: str, value: str, *, by: str = "confirmation_id") -> str | None: ...


class ToolGate:
    """``before``/``after`` for one ``Signoff``; shared by the plugin and the agent callbacks."""

    def __init__(self, signoff: GateHost) -> None:
        self.signoff = signoff
        self._running: dict[str, Review] = {}

    async def before(self, tool: BaseTool, args: dict[str, Any], tool_context: Any) -> dict[str, Any] | None:
        """Apply the reviewed args in place and return ``None``, or stop the call with the reason.

        Before a decision exists this never answers the call (that would skip the review), except
        to ask ADK for a confirmation on a tool that a policy gates but ADK does not.
        """
        agent = tool_context.agent_name
        self.signoff.remember_tool(agent, tool)
        confirmation: ToolConfirmation | None = tool_context.tool_confirmation
        if confirmation is None:
            policy = self.signoff.policies.for_tool(tool.name)
            if (
                policy.review
                and not _in_workflow_node(tool_context)
                and await tool.check_require_confirmation(args, tool_context) is not True
            ):
                tool_context.request_confirmation(
                    hint=policy.hint or f"Signoff: a person must approve {tool.name}() before it runs."
                )
                tool_context.actions.skip_summarization = True
                return {"status": FORCED_PAUSE_STATUS}
            return None
        node_path = getattr(tool_context, "node_path", "") or ""
        binding = binding_for(
            tool_context.session.events,
            tool_context.function_call_id or "",
            node_path if _in_workflow_node(tool_context) else "",
        )
        review_id = binding[0] if binding is not None else None
        if review_id is None:
            # Not stamped by the plugin (an app using the callbacks alone): look the call up on the log.
            call_key = (
                _WF_PREFIX + node_path if _in_workflow_node(tool_context) else tool_context.function_call_id or ""
            )
            review_id = await asyncio.to_thread(
                self.signoff.lookup_review_id, tool_context.session.id, call_key, by="call_id"
            )
        if review_id is None:
            return {
                "error": f"The call {tool.name}() was not run: no Signoff review is on the log for its confirmation."
            }
        review = await asyncio.to_thread(self.signoff.reviews.get, review_id)
        if review.status in STOPS:
            return stop_result(review)
        if review.status not in RUNS:
            return {"error": f"The call {tool.name}() was not run: review {review.id} is still {PENDING}."}
        if not confirmation.confirmed:
            return {
                "error": f"The call {tool.name}() was not run: its confirmation says no, but the log says "
                f"{review.status}."
            }
        if review.executed:
            return {
                "error": f"The call {tool.name}() was not run again: the log shows it already ran.",
                "signoff": {"review": review.id, "status": "already_executed"},
            }
        final_args = copy.deepcopy(review.final_args or {})
        args.clear()
        args.update(final_args)
        self._running[_run_key(tool_context)] = review
        return None

    async def after(
        self, tool: BaseTool, args: dict[str, Any], tool_context: Any, result: Any
    ) -> dict[str, Any] | None:
        """Record ``tool.executed`` with the digest of the args the tool ran with; note an edit."""
        review = self._running.pop(_run_key(tool_context), None)
        if review is None:
            return None
        await asyncio.to_thread(
            self.signoff.reviews.record_execution, review.id, actor=agent_actor(tool_context.agent_name), args=args
        )
        if review.status == EDITED and isinstance(result, dict):
            return {**result, "signoff_note": edit_note(review)}
        return None

    def forget(self, tool_context: Any) -> None:
        """The tool raised (or was cancelled): nothing ran to completion, so nothing is recorded."""
        self._running.pop(_run_key(tool_context), None)


def _run_key(tool_context: Any) -> str:
    return f"{id(tool_context)}:{tool_context.function_call_id}"


def _in_workflow_node(tool_context: Any) -> bool:
    """A tool running as a workflow node (no LLM call precedes it)."""
    call_id = tool_context.function_call_id or ""
    if not getattr(tool_context, "node_path", ""):
        return False
    return not any(fc.id == call_id for ev in tool_context.session.events for fc in ev.get_function_calls())
