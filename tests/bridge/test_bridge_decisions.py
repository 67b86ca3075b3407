"""Every decision, end to end through real google-adk with a scripted model and SQLite files."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, fc, run_turn, runs, single_agent, transfer_script
from google.adk.tools.tool_confirmation import ToolConfirmation

from signoff import bridge
from signoff.audit import sealing, values
from signoff.audit.errors import NotAllowed, SchemaViolation

pytestmark = pytest.mark.asyncio


def _done_text(h: Harness) -> str:
    texts = [p.text for e in h.events if e.content and e.content.parts for p in e.content.parts if p.text]
    return texts[-1] if texts else ""


async def test_pause_opens_one_review_with_context(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start("send 50 to acct-1 please")
    [review] = signoff.reviews.pending()
    call = review.call
    assert (call.app, call.user, call.session, call.tool) == ("bank", "u1", h.session_id, "transfer")
    assert call.args == {"amount": 50, "to": "acct-1"}
    assert call.call_id == "call-transfer" and call.confirmation_id.startswith("adk-")
    assert call.agent == "teller" and call.invocation
    assert call.context == {"user": "send 50 to acct-1 please", "model": "I will send the money."}
    assert call.tool_schema is not None and call.tool_schema["required"] == ["amount", "to"]
    assert "tool_context" not in call.tool_schema["properties"]
    assert runs(runs_file) == []
    # The session itself binds the paused call to its review.
    stamped = [e.custom_metadata for e in await h.session_events() if (e.custom_metadata or {}).get("signoff")]
    assert stamped[0] is not None and stamped[0]["signoff"]["reviews"] == {call.confirmation_id: review.id}


async def test_approve_runs_tool_once(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, rationale="fine")
    [done] = await h.resume()
    assert done.how == "sent"
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 50, "to": "acct-1"}]
    assert signoff.reviews.get(review.id).executed
    assert await h.resume() == []  # never twice
    # What happened, for the people who decided: the tool's result and the agent's next words.
    # On a sealed log both sit beside the log, under commitments (no unsalted result_digest).
    [executed] = signoff.store.entries(kind="tool.executed")
    lookup = values.lookup_for(signoff.store.read_rows, signoff.store.log_id, [review.id, review.frontier])
    preview = sealing.reveal(executed.body["result_preview"], lookup, "preview")
    assert preview == '{"amount": 50, "ok": true, "to": "acct-1"}' and "result_digest" not in executed.body
    [replied] = signoff.store.entries(kind="run.replied")
    assert replied.body["frontier"] == review.frontier
    assert sealing.reveal(replied.body["text"], lookup, "reply").startswith("done: ")


async def test_edit_tool_receives_patched_args(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script(amount=5000)), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.edit(
        review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=[{"op": "replace", "path": "/amount", "value": 500}]
    )
    confirmation = bridge.to_tool_confirmation(signoff.reviews.get(review.id))
    assert confirmation.confirmed and isinstance(confirmation.payload, dict)
    assert confirmation.payload["args"] == {"amount": 500, "to": "acct-1"}
    assert confirmation.payload["patch"] == [{"op": "replace", "path": "/amount", "value": 500}]
    await h.resume()
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 500, "to": "acct-1"}]
    # The model is told that a person changed the arguments.
    assert "edited the arguments" in _done_text(h)


async def test_reject_stops_tool_and_model_sees_reason(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.reject(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="acct-1 is flagged for fraud")
    await h.resume()
    assert runs(runs_file) == []
    assert "acct-1 is flagged for fraud" in _done_text(h)
    assert not signoff.reviews.get(review.id).executed


async def test_expire_stops_tool_and_is_not_a_rejection(runs_file: Path, sqlite_url: str, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url, policies=[bridge.ToolPolicy("transfer", deadline_seconds=0.2)])
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    assert review.deadline is not None
    await asyncio.sleep(0.3)
    with pytest.raises(Exception, match="deadline"):
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    expired = signoff.reviews.expire_due()
    assert [r.id for r in expired] == [review.id]
    assert signoff.reviews.get(review.id).status == "expired"
    await h.resume()
    assert runs(runs_file) == []
    assert "nobody decided it before" in _done_text(h)
    kinds = [e.kind for e in signoff.store.entries()]
    assert "review.expired" in kinds and "review.rejected" not in kinds
    signoff.close()


async def test_withdraw_stops_tool(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.withdraw(review.id, actor="agent:teller", reason="the customer hung up")
    await h.resume()
    assert runs(runs_file) == []
    assert "the customer hung up" in _done_text(h)


async def test_tool_own_question_gets_persons_payload(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent([[fc("set_limit", {"account": "acct-9"}, "call-limit")]]), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    assert review.call.payload == {"limit": 100} and review.call.hint == "Which daily limit?"
    [paused] = h.paused()
    bridge.record_decision(
        paused, ToolConfirmation(confirmed=True, payload={"limit": 250}), reviewer=REVIEWER, signer=REVIEWER_KEY
    )
    assert bridge.to_tool_confirmation(signoff.reviews.get(review.id)).payload == {"limit": 250}
    await h.resume()
    asked, ran = runs(runs_file)
    assert asked["tool"] == "set_limit.asked" and ran["tool"] == "set_limit"
    assert ran["payload"] == {"limit": 250}
    assert asked["key"] == ran["key"]  # the idempotency key is the same in every attempt


async def test_record_decision_edit_and_schema_refusal(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [paused] = h.paused()
    size = signoff.store.size()
    for bad_args, parameter in [
        ({"amount": "lots", "to": "acct-1"}, "amount"),  # wrong JSON type
        ({"to": "acct-1"}, "amount"),  # missing required parameter
        ({"amount": 5, "to": "acct-1", "memo": "x"}, "memo"),  # unknown parameter
    ]:
        with pytest.raises(SchemaViolation) as info:
            bridge.record_decision(
                paused, ToolConfirmation(confirmed=True, payload={"args": bad_args}), reviewer=REVIEWER
            )
        assert info.value.parameter == parameter
    assert signoff.store.size() == size  # nothing recorded
    edited = bridge.record_decision(
        paused,
        ToolConfirmation(confirmed=True, payload={"args": {"amount": 7, "to": "acct-1"}}),
        reviewer=REVIEWER,
        signer=REVIEWER_KEY,
        rationale="smaller",
    )
    assert edited.status == "edited" and edited.final_args == {"amount": 7, "to": "acct-1"}
    await h.resume()
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 7, "to": "acct-1"}]


async def test_audit_refuses_schema_breaking_edit_too(signoff: bridge.Signoff, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    size = signoff.store.size()
    with pytest.raises(SchemaViolation):
        signoff.reviews.edit(
            review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=[{"op": "add", "path": "/memo", "value": "x"}]
        )
    assert signoff.store.size() == size


async def test_agent_cannot_approve(signoff: bridge.Signoff, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    [paused] = h.paused()
    size = signoff.store.size()
    with pytest.raises(NotAllowed):
        signoff.reviews.approve(review.id, reviewer="agent:teller")
    with pytest.raises(NotAllowed):
        bridge.record_decision(paused, ToolConfirmation(confirmed=True), reviewer="agent:teller")
    with pytest.raises(NotAllowed):  # enrolled human, but their tools do not cover transfer
        bridge.record_decision(paused, ToolConfirmation(confirmed=True), reviewer="human:bob@example.org")
    assert signoff.store.size() == size


async def test_policy_gates_tool_without_require_confirmation(runs_file: Path, sqlite_url: str, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url, policies=[bridge.ToolPolicy("ref*", review=True, role="teller")])
    h = Harness(signoff, single_agent([[fc("refund", {"order": "o-1"}, "call-refund")]]), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    assert review.call.tool == "refund" and review.policy.role == "teller"
    assert runs(runs_file) == []
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    await h.resume()
    assert [r["args"] for r in runs(runs_file)] == [{"order": "o-1"}]
    signoff.close()


async def test_callbacks_instead_of_plugin(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    """apply_reviewed_args + record_tool_executed as agent callbacks, no plugin in the App: the pause
    still opens a review (the callback registered the plugin on the runner), and the edit runs."""
    h = Harness(signoff, single_agent(transfer_script(amount=900), callbacks=True), tmp_path, plugin=False)
    await h.start()
    [review] = signoff.reviews.pending()
    assert review.call.args == {"amount": 900, "to": "acct-1"}
    signoff.edit(
        review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=[{"op": "replace", "path": "/amount", "value": 90}]
    )
    await h.resume()
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 90, "to": "acct-1"}]
    assert signoff.reviews.get(review.id).executed


async def test_idempotency_key_is_stable(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    await h.resume()
    [ran] = runs(runs_file)
    assert ran["key"].startswith("signoff-") and len(ran["key"]) == len("signoff-") + 32


async def test_request_confirmation_in_process(signoff: bridge.Signoff, runs_file: Path, tmp_path: Path) -> None:
    """An app that drives the run itself waits for the decision, then sends the answer through its runner:
    the plugin claims the frontier for it (run.resumed) and the tool runs once, with the logged args."""
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    events = await h.start()
    [paused] = h.paused(events)
    waiter = asyncio.create_task(signoff.request_confirmation(paused, timeout=10))
    for _ in range(100):
        if signoff.reviews.pending():
            break
        await asyncio.sleep(0.01)
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    confirmation = await asyncio.wait_for(waiter, 5)
    assert confirmation.confirmed is True
    await run_turn(h.runner, h.session_id, bridge.resume_message([(paused, confirmation)]))
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 50, "to": "acct-1"}]
    assert signoff.reviews.frontier(review.frontier).resumed  # claimed: no resumer sends it again
    assert await h.resume() == []
    [claim] = [e for e in signoff.store.entries(kind="run.resumed")]
    assert claim.body["via"] == "client:u1"


async def test_request_confirmation_timeout_expires(signoff: bridge.Signoff, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path, plugin=False)
    [paused] = h.paused(await h.start())
    confirmation = await signoff.request_confirmation(paused, timeout=0.3)
    assert confirmation.confirmed is False
    review = signoff.review_for(paused)
    assert review is not None and review.status == "expired"


async def test_request_confirmation_cancel_withdraws(signoff: bridge.Signoff, tmp_path: Path) -> None:
    h = Harness(signoff, single_agent(transfer_script()), tmp_path, plugin=False)
    [paused] = h.paused(await h.start())
    waiter = asyncio.create_task(signoff.request_confirmation(paused, timeout=30))
    await asyncio.sleep(0.3)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    review = signoff.review_for(paused)
    assert review is not None and review.status == "withdrawn"


def _pay(amount: int, speed: Literal["normal", "urgent"], tags: list[str], note: str | None = None) -> dict[str, Any]:
    """Pay someone."""
    return {}


async def test_the_schema_keeps_enums_items_and_nulls_so_an_edit_outside_them_is_refused() -> None:
    """A tool's Literal, list and optional parameters reach the review: the desk can offer a select,
    and an edit to a value the tool does not take is refused before anything is recorded."""
    from google.adk.tools import FunctionTool

    from signoff.audit import check_args
    from signoff.bridge._schema import tool_schema

    schema = tool_schema(FunctionTool(_pay))
    assert schema is not None
    assert schema["properties"]["speed"] == {"type": "string", "enum": ["normal", "urgent"]}
    assert schema["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert schema["properties"]["note"]["type"] == ["string", "null"]
    check_args(schema, {"amount": 1, "speed": "urgent", "tags": ["a"], "note": None})
    with pytest.raises(SchemaViolation, match="speed"):
        check_args(schema, {"amount": 1, "speed": "instant", "tags": []})
    with pytest.raises(SchemaViolation, match=r"tags\[0\]"):
        check_args(schema, {"amount": 1, "speed": "normal", "tags": [7]})
