"""Frontiers: several gated calls from one model response resume once, in one message."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from _support import (
    REVIEWER,
    REVIEWER_KEY,
    Harness,
    ScriptedLlm,
    fc,
    runs,
    sequential_agent,
    single_agent,
    workflow_agent,
)

from signoff import bridge

pytestmark = pytest.mark.asyncio

FRONTIER_SCRIPT = [
    [
        {"text": "Three payments and a lookup."},
        fc("transfer", {"amount": 10, "to": "acct-a"}, "call-a"),
        fc("transfer", {"amount": 20, "to": "acct-b"}, "call-b"),
        fc("close_account", {"account": "acct-c"}, "call-c"),
        fc("lookup", {"query": "rates"}, "call-d"),
    ]
]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
async def test_three_gated_and_one_ungated_resume_once(
    order: tuple[int, ...], signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    agent = single_agent(FRONTIER_SCRIPT)
    h = Harness(signoff, agent, tmp_path)
    await h.start()
    pending = {r.call.call_id: r for r in signoff.reviews.pending()}
    assert sorted(pending) == ["call-a", "call-b", "call-c"]
    assert len({r.frontier for r in pending.values()}) == 1  # one pause, one frontier
    assert [r["tool"] for r in runs(runs_file)] == ["lookup"]  # the ungated call ran at once

    decisions = [
        lambda: signoff.reviews.approve(pending["call-a"].id, reviewer=REVIEWER, signer=REVIEWER_KEY),
        lambda: signoff.edit(
            pending["call-b"].id,
            reviewer=REVIEWER,
            signer=REVIEWER_KEY,
            patch=[{"op": "replace", "path": "/amount", "value": 2}],
        ),
        lambda: signoff.reviews.reject(
            pending["call-c"].id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="keep acct-c open"
        ),
    ]
    resumer = signoff.resumer(h.runner, on_event=h.events.append)
    for step, index in enumerate(order):
        decisions[index]()
        resumed = await resumer.run_once()
        if step < 2:
            assert resumed == []  # not before the last decision
    assert len(resumed) == 1

    answers = [e for e in await h.session_events() if e.author == "user" and e.get_function_responses()]
    assert len(answers) == 1 and len(answers[0].get_function_responses()) == 3  # one message answering all three

    ran = runs(runs_file)
    assert ran[0]["tool"] == "lookup"
    assert sorted((r["tool"], r["args"]["amount"], r["args"]["to"]) for r in ran[1:]) == [
        ("transfer", 2, "acct-b"),
        ("transfer", 10, "acct-a"),
    ]
    seen = json.loads(
        next(p.text for e in reversed(h.events) if e.content for p in e.content.parts or [] if p.text)[len("done: ") :]
    )
    by_name: dict[str, list[object]] = {}
    for item in seen:
        by_name.setdefault(item["name"], []).append(item["response"])
    assert by_name["lookup"] == [{"answer": "about rates"}]  # the ungated result reached the model
    assert isinstance(agent.model, ScriptedLlm)
    assert len(agent.model.requests) == 2  # the pause and one answer: no extra model call
    assert "keep acct-c open" in json.dumps(by_name["close_account"])
    assert await resumer.run_once() == []


async def test_sequential_agent_gated_tools_in_two_agents(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    h = Harness(signoff, sequential_agent(), tmp_path)
    await h.start()
    [first] = signoff.reviews.pending()
    assert (first.call.agent, first.call.tool) == ("payer", "transfer")
    signoff.reviews.approve(first.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    await h.resume()
    [second] = signoff.reviews.pending()
    assert (second.call.agent, second.call.tool) == ("closer", "close_account")
    assert second.frontier != first.frontier
    signoff.reviews.approve(second.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    await h.resume()
    assert [(r["tool"], r["args"]) for r in runs(runs_file)] == [
        ("transfer", {"amount": 10, "to": "acct-p"}),
        ("close_account", {"account": "acct-c"}),
    ]


async def test_workflow_gated_tool_node(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    h = Harness(signoff, workflow_agent(), tmp_path)
    await h.start(json.dumps({"amount": 70, "to": "acct-w"}))
    [review] = signoff.reviews.pending()
    assert review.call.kind == "workflow_input"
    # Logged as <ADK interrupt id>#<invocation>: ADK reuses the interrupt id in later invocations.
    assert review.call.confirmation_id == f"wf_tool_confirmation:{review.call.node_path}#{review.call.invocation}"
    assert review.call.call_id == f"wf_tool_confirmation:{review.call.node_path}"
    assert review.call.args == {"amount": 70, "to": "acct-w"}
    signoff.edit(
        review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=[{"op": "replace", "path": "/amount", "value": 7}]
    )
    [done] = await h.resume()
    assert done.how == "sent"
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 7, "to": "acct-w"}]
    assert signoff.reviews.get(review.id).executed


async def test_workflow_rejected_tool_node_never_runs(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    h = Harness(signoff, workflow_agent(), tmp_path)
    await h.start(json.dumps({"amount": 70, "to": "acct-w"}))
    [review] = signoff.reviews.pending()
    signoff.reviews.reject(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="no")
    await h.resume()
    assert runs(runs_file) == []


async def test_workflow_paused_again_in_the_same_session(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    """ADK reuses wf_tool_confirmation:<node_path> in a later invocation; each pause is its own review."""
    from _support import run_turn

    h = Harness(signoff, workflow_agent(), tmp_path)
    await h.start(json.dumps({"amount": 1, "to": "first"}))
    [first] = signoff.reviews.pending()
    signoff.reviews.approve(first.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    await h.resume()
    await run_turn(h.runner, h.session_id, json.dumps({"amount": 2, "to": "second"}))
    [second] = signoff.reviews.pending()
    assert second.call.node_path == first.call.node_path and second.id != first.id
    signoff.reviews.approve(second.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    [done] = await h.resume()
    assert done.how == "sent"
    ran = runs(runs_file)
    assert [r["args"]["to"] for r in ran] == ["first", "second"]
    assert ran[0]["key"] != ran[1]["key"]  # two calls, two idempotency keys
