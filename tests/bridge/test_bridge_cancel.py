"""Cancellation (issue 21): a run cancelled while it pauses withdraws its open reviews with the reason,
once, and nothing of it resumes or runs. A real ADK ``Runner`` with a scripted model, cancelled the ways
ADK 2.13 offers: ``abort_signal`` (ADK seals the pause with ``INVOCATION_ABORTED``) and a plain task
cancel (ADK seals nothing). The tool records each run from inside itself.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from _support import APP, REVIEWER, REVIEWER_KEY, Harness, runs, single_agent, transfer_script
from google.adk.events._abort_events import _build_abort_events
from google.genai import types

from signoff import bridge
from signoff.audit import AlreadyResumed, ReviewClosed
from signoff.audit.verify import verify_store

pytestmark = pytest.mark.asyncio
SEALED = "cancelled: Invocation was aborted by client."


def _is_pause(event: Any) -> bool:
    return any(fc.name == "adk_request_confirmation" for fc in event.get_function_calls())


async def _run(h: Harness, *, on_pause: str) -> list[Any]:
    """A first turn that pauses on ``transfer``; at the pause event, ``abort`` sets ADK's abort signal,
    ``cancel`` cancels the task consuming the run, and ``nothing`` lets it end."""
    from _support import new_session

    h.session_id = await new_session(h.sessions)
    stop = asyncio.Event()
    seen: list[Any] = []
    message = types.Content(role="user", parts=[types.Part(text="pay")])

    async def consume() -> None:
        async for event in h.runner.run_async(
            user_id="u1", session_id=h.session_id, new_message=message, abort_signal=stop
        ):
            seen.append(event)
            if _is_pause(event) and on_pause == "abort":
                stop.set()
            if _is_pause(event) and on_pause == "cancel":
                task = asyncio.current_task()
                assert task is not None
                task.cancel()

    task = asyncio.create_task(consume())
    if on_pause == "cancel":
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the task's done-callbacks run after the awaiting code wakes up
    else:
        await task
    return seen


async def test_adk_seals_a_pause_aborted_by_its_signal(sqlite_url: str, tmp_path: Path) -> None:
    """The ADK fact the plugin rests on: the abort event answers the confirmation request."""
    signoff = bridge.Signoff(sqlite_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    seen = await _run(h, on_pause="abort")
    [pause] = [e for e in seen if _is_pause(e)]
    [abort] = [e for e in await h.session_events() if e.error_code == "INVOCATION_ABORTED"]
    confirmation = next(fc.id for fc in pause.get_function_calls() if fc.name == "adk_request_confirmation")
    assert confirmation in {fr.id for fr in abort.get_function_responses()}
    assert abort.error_message == "Invocation was aborted by client."
    signoff.close()


async def test_an_aborted_run_withdraws_its_reviews_once(store_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(store_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await _run(h, on_pause="abort")
    [review] = [r for r in (signoff.reviews.get(e.body["review"]) for e in signoff.store.entries(kind="review.opened"))]
    withdrawn = signoff.reviews.get(review.id)
    assert (withdrawn.status, withdrawn.reason) == ("withdrawn", SEALED)
    [cancelled] = signoff.store.entries(kind="run.cancelled")
    assert (cancelled.body["frontier"], cancelled.body["withdrawn"]) == (review.frontier, [review.id])
    with pytest.raises(ReviewClosed, match="already withdrawn"):
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    size = signoff.store.size()
    assert await h.resume() == [] and signoff.store.size() == size  # once: the resumer's look adds nothing
    assert runs(runs_file) == []
    assert verify_store(signoff.store).ok
    signoff.close()


async def test_a_task_cancelled_at_its_pause_withdraws_its_reviews(
    store_url: str, runs_file: Path, tmp_path: Path
) -> None:
    signoff = bridge.Signoff(store_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await _run(h, on_pause="cancel")
    [opened] = signoff.store.entries(kind="review.opened")
    review = signoff.reviews.get(opened.body["review"])
    assert (review.status, review.reason) == ("withdrawn", "cancelled: the run's task was cancelled while it paused")
    assert [e.kind for e in signoff.store.entries(opened.seq + 1)] == ["review.withdrawn", "run.cancelled"]
    with pytest.raises(AlreadyResumed, match="run.cancelled"):
        signoff.reviews.claim_resume(review.frontier, actor="agent:test")
    assert await h.resume() == [] and runs(runs_file) == []
    assert verify_store(signoff.store).ok
    signoff.close()


async def test_a_pause_that_ended_is_not_withdrawn_when_its_task_is_cancelled_later(
    sqlite_url: str, runs_file: Path, tmp_path: Path
) -> None:
    """The run paused and ended (``after_run_callback``); the task that ran it is cancelled afterwards (an
    app shutting down): the review stands, and a decision still runs the tool once."""
    signoff = bridge.Signoff(sqlite_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)

    async def pause_then_wait() -> None:
        await _run(h, on_pause="nothing")
        await asyncio.sleep(3600)

    task = asyncio.create_task(pause_then_wait())
    while not signoff.reviews.pending():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    assert len(await h.resume()) == 1
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 50, "to": "acct-1"}]
    assert list(signoff.store.entries(kind="run.cancelled")) == []
    signoff.close()


async def test_the_resumer_finds_a_sealed_pause_the_plugin_never_saw(
    store_url: str, runs_file: Path, tmp_path: Path
) -> None:
    """The process died after ADK sealed the pause and before the plugin recorded it (the seal is
    appended here with ADK's own builder): the resumer's look records ``run.cancelled``; a frontier
    decided in between is never resumed, and its approved call never runs."""
    signoff = bridge.Signoff(store_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    session = await h.sessions.get_session(app_name=APP, user_id="u1", session_id=h.session_id)
    assert session is not None
    for event in _build_abort_events(
        session.events, invocation_id=review.call.invocation, root_agent_name="teller", branch=None
    ):
        await h.sessions.append_event(session=session, event=event)
    assert await h.resume() == []
    [cancelled] = signoff.store.entries(kind="run.cancelled")
    assert cancelled.body["reason"] == SEALED and cancelled.body["withdrawn"] == []
    assert signoff.reviews.get(review.id).resume_failed == SEALED
    assert list(signoff.store.entries(kind="run.resumed")) == [] and runs(runs_file) == []
    assert verify_store(signoff.store).ok
    signoff.close()
