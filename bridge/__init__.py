"""Signoff's ADK bridge: every paused tool call becomes a review, every decision resumes the run.

One line in an ADK app::

    signoff = bridge.Signoff("sqlite:///signoff.db")
    app = App(name="bank", root_agent=agent, plugins=[signoff.plugin()],
              resumability_config=ResumabilityConfig(is_resumable=True))

and one worker that sends decisions back (in this process or another)::

    await signoff.resumer(runner).serve()

Everything public is re-exported here; the ``_``-prefixed modules are internal.
"""

from typing import Any

from google.adk.tools.tool_confirmation import ToolConfirmation

from signoff.audit import Review, Signer
from signoff.bridge._calls import PausedCall, paused_calls, resume_message
from signoff.bridge._gate import DecisionPending, NoReview
from signoff.bridge._guard import ConfirmationRefused, resuming
from signoff.bridge._keys import idempotency_key
from signoff.bridge._mapping import stop_reason, to_tool_confirmation
from signoff.bridge._plugin import SignoffPlugin
from signoff.bridge._policy import Policies, ToolPolicy
from signoff.bridge._resumer import Resumed, Resumer
from signoff.bridge._schema import check_args, tool_schema
from signoff.bridge._signoff import Signoff, apply_reviewed_args, default_signoff, record_tool_executed


async def request_confirmation(call: PausedCall, *, timeout: float | None = None) -> ToolConfirmation:
    """:meth:`Signoff.request_confirmation` on the most recently created ``Signoff``."""
    return await default_signoff().request_confirmation(call, timeout=timeout)


def record_decision(
    call: PausedCall | Review | str,
    confirmation: ToolConfirmation,
    *,
    reviewer: str,
    rationale: str = "",
    signer: Signer | None = None,
    sig: dict[str, Any] | None = None,
) -> Review:
    """:meth:`Signoff.record_decision` on the most recently created ``Signoff``."""
    return default_signoff().record_decision(
        call, confirmation, reviewer=reviewer, rationale=rationale, signer=signer, sig=sig
    )


__all__ = [
    "ConfirmationRefused",
    "DecisionPending",
    "NoReview",
    "PausedCall",
    "Policies",
    "Resumed",
    "Resumer",
    "Signoff",
    "SignoffPlugin",
    "ToolPolicy",
    "apply_reviewed_args",
    "check_args",
    "idempotency_key",
    "paused_calls",
    "record_decision",
    "record_tool_executed",
    "request_confirmation",
    "resume_message",
    "resuming",
    "stop_reason",
    "to_tool_confirmation",
    "tool_schema",
]
