"""Rewinds (issue 21): a run rewound past its pause withdraws the pause's reviews, is recorded as
``run.rewound``, and nothing of it resumes or runs. A real ADK ``Runner`` (scripted model, SQLite
session file) and its own ``rewind_async``; the tool records each run from inside itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from _support import APP, REVIEWER, REVIEWER_KEY, Harness, runs, single_agent, transfer_script
from google.adk.events._rewind_events import _apply_rewinds

from signoff import bridge
from signoff.audit import ReviewClosed
from signoff.audit.verify import verify_store

pytestmark = pytest.mark.asyncio


def _kinds(signoff: bridge.Signoff, start: int) -> list[str]:
    return [e.kind for e in signoff.store.entries(start)]


async def _rewind(h: Harness, invocation: str) -> None:
    await h.runner.rewind_async(user_id="u1", session_id=h.session_id, rewind_before_invocation_id=invocation)


async def test_adk_rewind_leaves_the_pause_in_the_session_but_not_live(sqlite_url: str, tmp_path: Path) -> None:
    """The ADK fact ``bridge/_rewind.py`` rests on: a rewind deletes nothing and appends one event."""
    signoff = bridge.Signoff(sqlite_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [paused] = h.paused()
    before = await h.session_events()
    await _rewind(h, paused.invocation)
    after = await h.session_events()
    assert [e.id for e in after[: len(before)]] == [e.id for e in before] and len(after) == len(before) + 1
    assert after[-1].actions.rewind_before_invocation_id == paused.invocation
    assert not any(e.invocation_id == paused.invocation for e in _apply_rewinds(after))
    signoff.close()


async def test_a_pending_review_is_withdrawn_when_its_run_is_rewound(
    store_url: str, runs_file: Path, tmp_path: Path
) -> None:
    signoff = bridge.Signoff(store_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    await _rewind(h, review.call.invocation)
    size = signoff.store.size()
    assert await h.resume() == []  # the resumer's look at the session
    assert _kinds(signoff, size) == ["review.withdrawn", "run.rewound"]
    withdrawn = signoff.reviews.get(review.id)
    assert (withdrawn.status, withdrawn.reason) == ("withdrawn", "rewound")
    [rewound] = signoff.store.entries(kind="run.rewound")
    assert (rewound.body["frontier"], rewound.body["before"]) == (review.frontier, review.call.invocation)
    with pytest.raises(ReviewClosed, match="already withdrawn"):  # a decision that comes later
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    assert await h.resume() == [] and _kinds(signoff, size) == ["review.withdrawn", "run.rewound"]  # once
    assert runs(runs_file) == []
    assert verify_store(signoff.store).ok
    signoff.close()


async def test_a_decided_frontier_whose_run_was_rewound_is_never_resumed(
    store_url: str, runs_file: Path, tmp_path: Path
) -> None:
    """The report's case: approved, then rewound, then ``resume``. No ``run.resumed`` (the resume did not
    happen), ``run.rewound`` instead, no traceback, and the tool never runs."""
    signoff = bridge.Signoff(store_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    await _rewind(h, review.call.invocation)
    size = signoff.store.size()
    resumer = signoff.resumer(h.runner, rewind_every=3600)  # the claim's own look, not the periodic one
    resumer.rewinds._next = float("inf")
    assert await resumer.run_once() == [] and resumer.failures == []
    assert _kinds(signoff, size) == ["run.rewound"]
    assert "rewound" in signoff.reviews.get(review.id).resume_failed
    assert list(signoff.store.entries(kind="run.resumed")) == []
    assert runs(runs_file) == []
    assert verify_store(signoff.store).ok
    signoff.close()


async def test_a_rewind_between_the_claim_and_the_send_is_recorded_as_a_failed_resume(
    store_url: str, runs_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The claim is made, then the run is rewound before the answer goes out: ADK refuses the answer
    (``Function call not found``). The log says so (``run.resume_failed``, reason ``rewound``), the call
    never runs, ``audit verify --stalled-after`` lists it, and no traceback reaches the log output."""
    signoff = bridge.Signoff(store_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    rewound: list[str] = []

    def on_step(step: str, frontier: str) -> None:
        if step == "after_claim":
            rewound.append(frontier)

    resumer = signoff.resumer(h.runner, on_step=on_step)
    original = resumer._send_retrying

    async def rewind_then_send(frontier, *, how, session=None):  # type: ignore[no-untyped-def]
        await _rewind(h, review.call.invocation)
        return await original(frontier, how=how, session=None)

    resumer._send_retrying = rewind_then_send  # type: ignore[method-assign]
    caplog.set_level(logging.INFO)
    assert await resumer.run_once() == []
    assert rewound == [review.frontier]
    kinds = _kinds(signoff, 0)
    assert kinds[-2:] == ["run.resumed", "run.resume_failed"], kinds
    [failed] = signoff.store.entries(kind="run.resume_failed")
    assert failed.body["reviews"] == [review.id] and failed.body["reason"].startswith("rewound: "), failed.body
    assert signoff.reviews.get(review.id).resume_failed == failed.body["reason"]
    assert [item.review.id for item in signoff.reviews.failed_resumes()] == [review.id]
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]
    assert runs(runs_file) == []
    assert verify_store(signoff.store).ok
    signoff.close()


async def test_the_periodic_look_reads_only_sessions_that_changed(sqlite_url: str, tmp_path: Path) -> None:
    """After the first look, an idle paused session is not read again (``last_update_time`` unchanged);
    a rewind moves it, and the next look finds it."""
    signoff = bridge.Signoff(sqlite_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    reads: list[str] = []
    service = h.runner.session_service
    original = service.get_session

    async def counted(**kw):  # type: ignore[no-untyped-def]
        reads.append(kw["session_id"])
        return await original(**kw)

    service.get_session = counted  # type: ignore[method-assign]
    watch = bridge.Signoff.resumer(signoff, h.runner).rewinds
    assert await watch.look() == [] and reads == [h.session_id]
    assert await watch.look() == [] and reads == [h.session_id]  # idle: not read again
    await _rewind(h, review.call.invocation)
    reads.clear()  # (the rewind reads the session too)
    assert await watch.look() == [review.frontier] and reads == [h.session_id]
    assert signoff.reviews.open_frontier_sessions(APP) == []
    signoff.close()
