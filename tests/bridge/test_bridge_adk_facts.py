"""The google-adk 2.13 facts the bridge rests on (DESIGN.md "The bridge"), checked without Signoff."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pydantic
import pytest
from _support import fc, make_app, new_session, run_turn, runs, single_agent, transfer_script
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

pytestmark = pytest.mark.asyncio


async def _paused_runner(script: Any, plugins: Sequence[BasePlugin] = ()) -> tuple[Runner, str, list[Any]]:
    app = make_app(single_agent(script), None)
    app.plugins = list(plugins)
    service = InMemorySessionService()
    runner = Runner(app=app, session_service=service)
    sid = await new_session(service)
    events = await run_turn(runner, sid, "go")
    return runner, sid, events


def _confirmation_calls(events: list[Any]) -> list[tuple[Any, types.FunctionCall]]:
    return [(e, f) for e in events for f in e.get_function_calls() if f.name == "adk_request_confirmation"]


async def test_pause_shape_and_long_running_ids(runs_file: Path) -> None:
    _, _, events = await _paused_runner(transfer_script())
    [(event, call)] = _confirmation_calls(events)
    assert call.id in event.long_running_tool_ids and call.args is not None
    assert call.args["originalFunctionCall"] == {
        "id": "call-transfer",
        "name": "transfer",
        "args": {"amount": 50, "to": "acct-1"},
    }
    # Differs slightly from DESIGN.md: payload is left out (exclude_none) when the tool set none.
    assert set(call.args["toolConfirmation"]) == {"hint", "confirmed"}
    assert call.args["toolConfirmation"]["confirmed"] is False
    assert runs(runs_file) == []


async def test_tool_confirmation_forbids_extra_keys() -> None:
    with pytest.raises(pydantic.ValidationError):
        ToolConfirmation(confirmed=True, args={"amount": 1})  # type: ignore[call-arg]
    dumped = ToolConfirmation(confirmed=True, payload={"args": {"a": 1}}).model_dump(mode="json")
    assert dumped == {"hint": "", "confirmed": True, "payload": {"args": {"a": 1}}}


async def test_resume_with_one_message_of_function_responses(runs_file: Path) -> None:
    script = [[fc("transfer", {"amount": 1, "to": "a"}, "c1"), fc("transfer", {"amount": 2, "to": "b"}, "c2")]]
    runner, sid, events = await _paused_runner(script)
    calls = _confirmation_calls(events)
    assert len(calls) == 2 and calls[0][0] is calls[1][0]  # one event, one frontier
    message = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    name="adk_request_confirmation",
                    id=call.id,
                    response=ToolConfirmation(confirmed=True).model_dump(mode="json"),
                )
            )
            for _, call in calls
        ],
    )
    await run_turn(runner, sid, message, invocation_id=events[-1].invocation_id)
    assert sorted(r["args"]["amount"] for r in runs(runs_file)) == [1, 2]


async def test_before_tool_dict_skips_tool_and_review(runs_file: Path) -> None:
    """Returning a dict before a decision skips the tool *and* ADK's confirmation gate."""

    class Skipper(BasePlugin):
        async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any) -> Any:
            return {"skipped": True}

    _, _, events = await _paused_runner(transfer_script(), [Skipper(name="skip")])
    assert _confirmation_calls(events) == []
    assert runs(runs_file) == []


async def test_before_tool_mutates_args_in_place(runs_file: Path) -> None:
    class Mutator(BasePlugin):
        async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any) -> Any:
            if tool_context.tool_confirmation is not None:
                tool_args["amount"] = 3
            return None

    runner, sid, events = await _paused_runner(transfer_script(), [Mutator(name="m")])
    [(_, call)] = _confirmation_calls(events)
    message = types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    name="adk_request_confirmation", id=call.id, response=ToolConfirmation(confirmed=True).model_dump()
                )
            )
        ],
    )
    await run_turn(runner, sid, message, invocation_id=events[-1].invocation_id)
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 3, "to": "acct-1"}]


async def test_resume_message_mixing_text_is_refused(runs_file: Path) -> None:
    """One message of function responses only: 2.13 refuses text beside them."""
    runner, sid, events = await _paused_runner(transfer_script())
    [(_, call)] = _confirmation_calls(events)
    message = types.Content(
        role="user",
        parts=[
            types.Part(text="approved, go ahead"),
            types.Part(
                function_response=types.FunctionResponse(
                    name="adk_request_confirmation", id=call.id, response=ToolConfirmation(confirmed=True).model_dump()
                )
            ),
        ],
    )
    with pytest.raises(ValueError, match="both function responses and text"):
        await run_turn(runner, sid, message, invocation_id=events[-1].invocation_id)
    assert runs(runs_file) == []
