"""Teams and policies through real google-adk (issue 13): a quorum of two people before a tool
runs; a call the admin's policy lets through runs at once and is recorded; a forged policy lets
nothing through; a review escalates while the resumer serves."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, last_text, runs, single_agent, transfer_script

from signoff import bridge
from signoff.audit import ReviewService
from signoff.audit.keys import Signer, read_private_key
from signoff.audit.store import default_admin_key
from signoff.audit.verify import verify_store

pytestmark = pytest.mark.asyncio

DAVE = "human:dave@example.org"
ERIN = "human:erin@example.org"
SMALL = {
    "policy": "small-transfers",
    "tools": "transfer",
    "review_when": "args.amount > vars.limit",
    "vars": {"limit": 100},
}


def _tool_results(h: Harness) -> list[dict[str, Any]]:
    """What the model saw as tool results."""
    return [
        part.function_response.response or {}
        for event in h.events
        if event.content and event.content.parts
        for part in event.content.parts
        if part.function_response is not None
    ]


def _admin(tmp_path: Path) -> Signer:
    return read_private_key(default_admin_key(tmp_path / "log.key"))


def _enroll(signoff: bridge.Signoff, tmp_path: Path, who: str, role: str) -> Signer:
    key = Signer.generate()
    signoff.reviews.enroll_reviewer(who, roles=[role], tools=["*"], key=key.public, admin=_admin(tmp_path))
    return key


async def test_two_people_must_approve_before_the_tool_runs(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url, policies=[bridge.ToolPolicy("transfer", approvals=2)])
    try:
        dave = _enroll(signoff, tmp_path, DAVE, "teller")
        h = Harness(signoff, single_agent(transfer_script(amount=700)), tmp_path)
        await h.start()
        [review] = signoff.reviews.pending()
        assert review.approvals_needed == 2
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, rationale="looks right")
        assert await h.resume() == [] and runs(runs_file) == []  # one person is not enough
        signoff.reviews.approve(review.id, reviewer=DAVE, signer=dave, rationale="second pair of eyes")
        [done] = await h.resume()
        assert done.how == "sent"
        assert [r["args"] for r in runs(runs_file)] == [{"amount": 700, "to": "acct-1"}]
        assert [who for who, _seq in signoff.reviews.get(review.id).approvals] == [REVIEWER, DAVE]
        assert verify_store(signoff.store).ok
    finally:
        signoff.close()


async def test_a_quorum_edit_runs_the_edited_args_once_both_agree(
    sqlite_url: str, runs_file: Path, tmp_path: Path
) -> None:
    signoff = bridge.Signoff(sqlite_url, policies=[bridge.ToolPolicy("transfer", approvals=2)])
    try:
        dave = _enroll(signoff, tmp_path, DAVE, "teller")
        h = Harness(signoff, single_agent(transfer_script(amount=700)), tmp_path)
        await h.start()
        [review] = signoff.reviews.pending()
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
        signoff.reviews.edit(
            review.id, reviewer=DAVE, signer=dave, patch=[{"op": "replace", "path": "/amount", "value": 70}]
        )
        assert await h.resume() == []  # the edit is dave's approval of 70; alice's was of 700
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
        await h.resume()
        assert [r["args"] for r in runs(runs_file)] == [{"amount": 70, "to": "acct-1"}]
        assert "edited the arguments" in last_text(h.events)
    finally:
        signoff.close()


async def test_a_call_the_policy_lets_through_runs_without_a_pause(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    signoff.reviews.set_policy(SMALL, admin=_admin(tmp_path))
    h = Harness(signoff, single_agent(transfer_script(amount=60)), tmp_path)
    await h.start()
    assert signoff.reviews.pending() == [] and h.paused() == []
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 60, "to": "acct-1"}]
    [auto] = signoff.store.entries(kind="review.auto_approved")
    assert auto.body["inputs"]["args"] == auto.body["call"]["args"]  # sealed: the rule saw the values
    assert signoff.reviews.get(auto.body["review"]).call.args == {"amount": 60, "to": "acct-1"}
    [executed] = signoff.store.entries(kind="tool.executed")
    assert executed.body["review"] == auto.body["review"]
    assert executed.body["args_digest"] == auto.body["call"]["args_digest"]
    assert signoff.reviews.get(auto.body["review"]).status == "auto_approved"


async def test_a_call_the_rule_holds_pauses_for_a_person(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    entry = signoff.reviews.set_policy(SMALL, admin=_admin(tmp_path))
    h = Harness(signoff, single_agent(transfer_script(amount=6000)), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    assert (review.policy.name, review.policy.seq) == ("small-transfers", entry.seq)
    assert runs(runs_file) == [] and list(signoff.store.entries(kind="review.auto_approved")) == []
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    await h.resume()
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 6000, "to": "acct-1"}]


async def test_a_forged_policy_lets_nothing_through(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    """A policy.set that lets every transfer through, signed by a key no admin holds, written straight
    into the database: the write path proves it before relying on it (issue 34 item 7), so nothing is
    auto-approved under it; the call waits for a person, as with no policy at all."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
    from auditkit import Db, forge_append

    lax = {"policy": "lax", "tools": "transfer", "review_when": "false"}
    with Db(sqlite_url) as db:
        forge_append(db, "admin:root", "policy.set", lax, signer=Signer.generate())
    signoff = bridge.Signoff(sqlite_url)
    try:
        h = Harness(signoff, single_agent(transfer_script(amount=6000)), tmp_path)
        await h.start()
        assert runs(runs_file) == []
        assert list(signoff.store.entries(kind="tool.executed")) == []
        assert list(signoff.store.entries(kind="review.auto_approved")) == []
        [waiting] = signoff.reviews.pending()
        assert waiting.tool == "transfer" and waiting.policy.name is None  # not under the forged policy
    finally:
        signoff.close()


async def test_the_resumer_escalates_a_review_at_its_time(sqlite_url: str, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url)
    try:
        erin = _enroll(signoff, tmp_path, ERIN, "supervisor")
        policy = {"policy": "esc", "tools": "transfer", "role": "teller",
                  "escalate": {"to_role": "supervisor", "after_seconds": 0.5}}  # fmt: skip
        signoff.reviews.set_policy(policy, admin=_admin(tmp_path))
        h = Harness(signoff, single_agent(transfer_script()), tmp_path)
        await h.start()
        [review] = signoff.reviews.pending()
        assert not ReviewService.can_decide(signoff.reviews, ERIN, review)
        stop = asyncio.Event()
        resumer = signoff.resumer(h.runner, max_wait=5.0)
        task = asyncio.create_task(resumer.serve(stop=stop))
        try:
            for _ in range(100):
                if signoff.reviews.get(review.id).escalated_role:
                    break
                await asyncio.sleep(0.05)
            escalated = signoff.reviews.get(review.id)
            assert escalated.escalated_role == "supervisor" and signoff.reviews.can_decide(ERIN, escalated)
            signoff.reviews.approve(review.id, reviewer=ERIN, signer=erin)
            for _ in range(100):
                if signoff.reviews.get(review.id).executed:
                    break
                await asyncio.sleep(0.05)
            assert signoff.reviews.get(review.id).executed
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
        assert verify_store(signoff.store).ok
    finally:
        signoff.close()


async def test_approve_then_reject_rejects(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url, policies=[bridge.ToolPolicy("transfer", approvals=2)])
    try:
        dave = _enroll(signoff, tmp_path, DAVE, "teller")
        h = Harness(signoff, single_agent(transfer_script(amount=700)), tmp_path)
        await h.start()
        [review] = signoff.reviews.pending()
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
        signoff.reviews.reject(review.id, reviewer=DAVE, signer=dave, reason="not without a ticket")
        [done] = await h.resume()
        assert done.how == "sent" and runs(runs_file) == []
        assert any("not without a ticket" in str(r.get("error", "")) for r in _tool_results(h)), _tool_results(h)
        assert verify_store(signoff.store).ok
    finally:
        signoff.close()


async def test_a_rule_that_cannot_be_evaluated_asks_a_person(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    """The rule reads args.limit_ok, which the call does not have: it fails closed, a review opens."""
    policy = {"policy": "broken", "tools": "transfer", "review_when": "!args.limit_ok"}
    signoff.reviews.set_policy(policy, admin=_admin(tmp_path))
    h = Harness(signoff, single_agent(transfer_script(amount=5)), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    assert review.policy.name == "broken" and runs(runs_file) == []
    assert list(signoff.store.entries(kind="review.auto_approved")) == []
