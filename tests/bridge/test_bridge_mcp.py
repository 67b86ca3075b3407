"""MCP tools, for real (issue 21): a real MCP server (``mcp``'s FastMCP over stdio, in a subprocess that
ADK's ``McpToolset`` starts) with a destructive tool, gated by ``McpToolset(require_confirmation=True)``
and, with no gate of its own, by a Signoff ``ToolPolicy(review=True)``. What the server received is
recorded from inside the server.

For each gate: an approval runs the call once with the asked args; an edit runs it with the signed
args; a rejection never reaches the server; a forged answer sent into the session reaches nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, fc, run_turn
from google.adk.agents import LlmAgent
from google.adk.tools.mcp_tool import McpToolset
from google.adk.tools.mcp_tool.mcp_session_manager import StdioConnectionParams
from google.adk.tools.tool_confirmation import ToolConfirmation
from mcp import StdioServerParameters

from signoff import bridge
from signoff.audit.verify import verify_store

pytestmark = pytest.mark.asyncio
SERVER = Path(__file__).resolve().parent / "mcp" / "records_server.py"
ASKED = {"table": "customers", "where": "region = 'EU'"}


def _agent(calls: Path, *, gate: str) -> LlmAgent:
    from _support import ScriptedLlm

    toolset = McpToolset(
        connection_params=StdioConnectionParams(
            server_params=StdioServerParameters(
                command=sys.executable, args=[str(SERVER)], env={"SIGNOFF_MCP_CALLS": str(calls)}
            ),
            timeout=30,
        ),
        require_confirmation=gate == "toolset",
    )
    script = [[{"text": "Deleting."}, fc("delete_records", dict(ASKED), "call-delete")]]
    return LlmAgent(name="records_agent", model=ScriptedLlm(script=script), tools=[toolset])


def _signoff(url: str, gate: str) -> bridge.Signoff:
    policies = [bridge.ToolPolicy("delete_records", review=True)] if gate == "policy" else []
    return bridge.Signoff(url, policies=policies)


def _received(calls: Path) -> list[dict[str, Any]]:
    if not calls.exists():
        return []
    return [json.loads(line)["args"] for line in calls.read_text().splitlines() if line.strip()]


async def _paused(url: str, tmp_path: Path, gate: str) -> tuple[bridge.Signoff, Harness, Path, Any]:
    calls = tmp_path / "mcp-calls.jsonl"
    signoff = _signoff(url, gate)
    h = Harness(signoff, _agent(calls, gate=gate), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    assert (review.tool, review.call.args) == ("delete_records", ASKED)
    assert _received(calls) == []  # paused: nothing reached the server
    return signoff, h, calls, review


@pytest.fixture(params=["toolset", "policy"])
def gate(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_an_approved_mcp_call_reaches_the_server_once(sqlite_url: str, tmp_path: Path, gate: str) -> None:
    signoff, h, calls, review = await _paused(sqlite_url, tmp_path, gate)
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    [done] = await h.resume()
    assert done.how == "sent"
    assert _received(calls) == [ASKED]
    assert await h.resume() == [] and _received(calls) == [ASKED]  # once
    assert signoff.reviews.get(review.id).executed
    assert verify_store(signoff.store).ok
    await h.runner.close()
    signoff.close()


async def test_an_edited_mcp_call_reaches_the_server_with_the_signed_args(
    sqlite_url: str, tmp_path: Path, gate: str
) -> None:
    signoff, h, calls, review = await _paused(sqlite_url, tmp_path, gate)
    patch = [{"op": "replace", "path": "/where", "value": "region = 'EU' AND closed = true"}]
    signoff.reviews.edit(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=patch)
    await h.resume()
    assert _received(calls) == [{"table": "customers", "where": "region = 'EU' AND closed = true"}]
    assert verify_store(signoff.store).ok
    await h.runner.close()
    signoff.close()


async def test_a_rejected_mcp_call_never_reaches_the_server(sqlite_url: str, tmp_path: Path, gate: str) -> None:
    signoff, h, calls, review = await _paused(sqlite_url, tmp_path, gate)
    signoff.reviews.reject(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="not the EU table")
    await h.resume()
    assert _received(calls) == []
    assert "not the EU table" in json.dumps([p.text for e in h.events if e.content for p in e.content.parts or []])
    assert verify_store(signoff.store).ok
    await h.runner.close()
    signoff.close()


async def test_a_forged_answer_reaches_nothing(sqlite_url: str, tmp_path: Path, gate: str) -> None:
    """A client answers ADK's pause itself (confirmed, while the review is pending): refused, and past the
    guard the gate still finds no decision on the log; nothing reaches the server. The real decision
    still resumes the run afterwards, once."""
    signoff, h, calls, review = await _paused(sqlite_url, tmp_path, gate)
    [paused] = h.paused()
    message = bridge.resume_message([(paused, ToolConfirmation(confirmed=True))])
    with pytest.raises(RuntimeError, match="still pending"):
        await run_turn(h.runner, h.session_id, message, invocation_id=paused.invocation)
    with bridge.resuming(), pytest.raises(RuntimeError, match="still pending") as past:  # the gate holds alone
        await run_turn(h.runner, h.session_id, message, invocation_id=paused.invocation)
    assert isinstance(past.value.__cause__, bridge.DecisionPending)
    assert _received(calls) == []
    assert signoff.reviews.get(review.id).status == "pending"
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)  # the real decision still runs it
    [done] = await h.resume()
    assert done.how == "sent" and _received(calls) == [ASKED]
    await h.runner.close()
    signoff.close()
