"""Idempotency keys for reviewed tool calls.

Internal module, not public API; import from ``bridge``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from signoff.bridge._calls import WORKFLOW_CONFIRMATION_PREFIX


def call_identity(tool_context: Any) -> str:
    """What identifies this tool call across every attempt and every process.

    An LLM agent's call keeps the model's function call id across the pause. A workflow tool node
    gets a fresh ``function_call_id`` on every run, so its node path and invocation are used instead.
    """
    call_id = tool_context.function_call_id or ""
    node_path = getattr(tool_context, "node_path", "") or ""
    events = tool_context.session.events
    if call_id and any(fc.id == call_id for ev in events for fc in ev.get_function_calls()):
        return call_id
    if node_path:
        # A node path repeats when the workflow runs again in the same session; the invocation
        # (kept across a pause and its resume) tells those runs apart.
        return f"{WORKFLOW_CONFIRMATION_PREFIX}{node_path}#{tool_context.invocation_id}"
    return call_id


def idempotency_key(tool_context: Any) -> str:
    """A stable key for the call a tool is running in: the same in every attempt and process.

    A tool with side effects passes it on (for example as a payment provider's idempotency key),
    so a retry after a crash between the side effect and the log entry is harmless.
    """
    session = tool_context.session
    basis = "\x1f".join([session.app_name, session.user_id, session.id, call_identity(tool_context)])
    return "signoff-" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:32]
