"""Other tool kinds (issue 21, 5a): an agent used as a tool (``AgentTool``), a tool inside a
``SequentialAgent``, and an ADK 2 ``Workflow`` tool node. For each: an edit runs with the signed args, a
rejection never runs, and a forged answer runs nothing. What ran is recorded from inside (the tool's own
side file; for an ``AgentTool``, the wrapped agent's ``before_agent_callback`` records the request it got).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from _support import (
    REVIEWER,
    REVIEWER_KEY,
    Harness,
    ScriptedLlm,
    _record,
    fc,
    gated,
    lookup,
    run_turn,
    runs,
    sequential_agent,
    transfer,
    workflow_agent,
)
from google.adk.agents import LlmAgent
from google.adk.tools.agent_tool import AgentTool
from google.adk.tools.tool_confirmation import ToolConfirmation

from signoff import bridge
from signoff.audit.verify import verify_store

pytestmark = pytest.mark.asyncio


def _record_request(callback_context: Any) -> None:
    content = callback_context.user_content
    text = "".join(p.text or "" for p in (content.parts if content and content.parts else []))
    _record("treasurer", {"request": text}, None)


def _agent_tool_root(*, gated_inside: bool = False) -> LlmAgent:
    inner = LlmAgent(
        name="treasurer",
        description="Moves money between the bank's own accounts.",
        model=ScriptedLlm(script=[[fc("transfer" if gated_inside else "lookup", _inner_args(gated_inside), "c-in")]]),
        tools=[gated(transfer) if gated_inside else lookup],
        before_agent_callback=_record_request,
    )
    script = [[{"text": "Asking the treasurer."}, fc("treasurer", {"request": "move 500 to reserve"}, "c-out")]]
    return LlmAgent(name="teller", model=ScriptedLlm(script=script), tools=[AgentTool(agent=inner)])


def _inner_args(gated_inside: bool) -> dict[str, Any]:
    return {"amount": 5, "to": "acct-inner"} if gated_inside else {"query": "reserve balance"}


async def _forge(h: Harness, *, past_the_guard: bool) -> None:
    [paused] = h.paused()
    message = bridge.resume_message([(paused, ToolConfirmation(confirmed=True))])
    if past_the_guard:
        with bridge.resuming():
            await run_turn(h.runner, h.session_id, message, invocation_id=paused.invocation)
    else:
        await run_turn(h.runner, h.session_id, message, invocation_id=paused.invocation)


# -- AgentTool: the agent-as-a-tool is gated by a policy --------------------------------------


def _treasurer_signoff(url: str) -> bridge.Signoff:
    return bridge.Signoff(url, policies=[bridge.ToolPolicy("treasurer", review=True)])


async def test_an_agent_tool_runs_with_the_edited_request(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = _treasurer_signoff(sqlite_url)
    h = Harness(signoff, _agent_tool_root(), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    assert (review.tool, review.call.args) == ("treasurer", {"request": "move 500 to reserve"})
    assert runs(runs_file) == []
    patch = [{"op": "replace", "path": "/request", "value": "move 50 to reserve"}]
    signoff.reviews.edit(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=patch)
    [done] = await h.resume()
    assert done.how == "sent"
    ran = runs(runs_file)
    assert ran[0] == {"tool": "treasurer", "args": {"request": "move 50 to reserve"}, **_rest(ran[0])}
    assert [r["tool"] for r in ran] == ["treasurer", "lookup"]  # the wrapped agent ran, once, as signed
    assert signoff.reviews.get(review.id).executed and verify_store(signoff.store).ok
    signoff.close()


def _rest(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("tool", "args")}


async def test_a_rejected_agent_tool_never_runs_its_agent(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = _treasurer_signoff(sqlite_url)
    h = Harness(signoff, _agent_tool_root(), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.reject(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="not today")
    await h.resume()
    assert runs(runs_file) == []
    signoff.close()


async def test_a_forged_answer_runs_no_agent_tool(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = _treasurer_signoff(sqlite_url)
    h = Harness(signoff, _agent_tool_root(), tmp_path)
    await h.start()
    for past in (False, True):
        with pytest.raises(RuntimeError, match="still pending"):
            await _forge(h, past_the_guard=past)
    assert runs(runs_file) == [] and signoff.reviews.pending()
    signoff.close()


async def test_a_gated_tool_inside_an_agent_tool_opens_no_review_that_could_never_resume(
    sqlite_url: str, runs_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """ADK 2.13 discards an AgentTool's nested session, so a pause inside it cannot be resumed. Signoff
    opens no review for it (one a person could approve and that would never run) and says what to do;
    the gated tool does not run."""
    signoff = bridge.Signoff(sqlite_url)
    h = Harness(signoff, _agent_tool_root(gated_inside=True), tmp_path)
    caplog.set_level(logging.WARNING, logger="signoff.bridge")
    await h.start()
    assert signoff.reviews.pending() == [] and list(signoff.store.entries(kind="review.opened")) == []
    assert [r["tool"] for r in runs(runs_file)] == ["treasurer"]  # the agent ran; its gated tool did not
    assert any("inside an AgentTool's nested run" in r.getMessage() for r in caplog.records)
    signoff.close()


# -- SequentialAgent and Workflow -------------------------------------------------------------


async def test_sequential_agent_edit_reject_and_forged(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url)
    h = Harness(signoff, sequential_agent(), tmp_path)
    await h.start()
    [first] = signoff.reviews.pending()
    for past in (False, True):
        with pytest.raises(RuntimeError, match="still pending"):
            await _forge(h, past_the_guard=past)
    assert runs(runs_file) == []
    patch = [{"op": "replace", "path": "/amount", "value": 1}]
    signoff.reviews.edit(first.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=patch)
    await h.resume()
    [second] = signoff.reviews.pending()
    signoff.reviews.reject(second.id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="keep it open")
    await h.resume()
    assert [(r["tool"], r["args"]) for r in runs(runs_file)] == [("transfer", {"amount": 1, "to": "acct-p"})]
    assert verify_store(signoff.store).ok
    signoff.close()


async def test_workflow_node_forged_answer_runs_nothing(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url)
    h = Harness(signoff, workflow_agent(), tmp_path)
    await h.start(json.dumps({"amount": 70, "to": "acct-w"}))
    [review] = signoff.reviews.pending()
    for past in (False, True):
        with pytest.raises(RuntimeError, match="still pending"):
            await _forge(h, past_the_guard=past)
    assert runs(runs_file) == [] and signoff.reviews.get(review.id).status == "pending"
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    [done] = await h.resume()
    assert done.how == "sent" and [r["args"] for r in runs(runs_file)] == [{"amount": 70, "to": "acct-w"}]
    signoff.close()
