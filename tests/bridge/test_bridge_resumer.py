"""The resumer on SQLite and PostgreSQL: push wake-ups, deadlines, and racing workers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, runs, single_agent, transfer_script
from conftest import assert_bound
from google.adk.events.event import Event

from signoff import bridge

pytestmark = pytest.mark.asyncio


async def _until(predicate: object, timeout: float) -> float:
    start = time.monotonic()
    while not predicate():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout}s")
        await asyncio.sleep(0.005)
    return time.monotonic() - start


async def test_serve_wakes_on_decision(store_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(store_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    stop = asyncio.Event()
    # max_wait is long: a resume within a second can only come from the push wake-up.
    server = asyncio.create_task(signoff.resumer(h.runner, max_wait=30).serve(stop=stop))
    await h.start()
    [review] = signoff.reviews.pending()
    await asyncio.sleep(0.2)  # the server is asleep in wait_for_change
    await asyncio.to_thread(signoff.reviews.approve, review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    took = await _until(lambda: len(runs(runs_file)) == 1, timeout=5)
    assert took < 1.0
    stop.set()
    signoff.store.feed.bump()
    await asyncio.wait_for(server, 10)
    assert_bound(signoff.store)
    signoff.close()


async def test_serve_expires_at_deadline(store_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(store_url, policies=[bridge.ToolPolicy("transfer", deadline_seconds=0.5)])
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    stop = asyncio.Event()
    server = asyncio.create_task(signoff.resumer(h.runner, max_wait=30).serve(stop=stop))
    await _until(lambda: signoff.reviews.get(review.id).resumed, timeout=5)
    assert signoff.reviews.get(review.id).status == "expired"
    assert runs(runs_file) == []
    stop.set()
    signoff.store.feed.bump()
    await asyncio.wait_for(server, 10)
    signoff.close()


async def test_racing_workers_resume_once(store_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(store_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    a = signoff.resumer(h.runner, actor="agent:worker-a")
    b = signoff.resumer(h.runner, actor="agent:worker-b")
    done_a, done_b = await asyncio.gather(a.run_once(), b.run_once())
    assert len(done_a) + len(done_b) == 1
    assert len(runs(runs_file)) == 1
    assert len(list(signoff.store.entries(kind="run.resumed"))) == 1
    assert_bound(signoff.store)
    signoff.close()


async def test_review_whose_pause_never_reached_the_session_is_left_unclaimed(
    sqlite_url: str, runs_file: Path, tmp_path: Path
) -> None:
    """The process died between the plugin opening the frontier and ADK appending the pause."""
    signoff = bridge.Signoff(sqlite_url)
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [real] = signoff.reviews.pending()
    ghost = bridge.PausedCall(
        app="bank",
        user="u1",
        session=h.session_id,
        invocation="e-never-persisted",
        confirmation_id="adk-ghost",
        call_id="call-ghost",
        tool="transfer",
        args={"amount": 1, "to": "ghost"},
        agent="teller",
    )
    [orphan] = signoff.open_frontier([ghost]).reviews
    signoff.reviews.approve(orphan.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    signoff.reviews.approve(real.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    done = await signoff.resumer(h.runner).run_once()
    assert [d.frontier for d in done] == [real.frontier]
    assert not signoff.reviews.frontier(orphan.frontier).resumed
    assert [r["args"]["to"] for r in runs(runs_file)] == ["acct-1"]
    signoff.close()


async def test_many_frontiers_resume_concurrently(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url)
    sessions = []
    for i in range(3):
        h = Harness(signoff, single_agent(transfer_script(amount=i + 1, to=f"acct-{i}")), tmp_path)
        await h.start()
        sessions.append(h.session_id)
    for review in signoff.reviews.pending():
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    done = await signoff.resumer(h.runner, concurrency=3).run_once()
    assert sorted(d.session for d in done) == sorted(sessions)
    assert sorted(r["args"]["amount"] for r in runs(runs_file)) == [1, 2, 3]
    assert_bound(signoff.store)
    signoff.close()


async def test_a_session_changed_under_the_send_is_read_again(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    """The run that paused appends one more event just after the resumer's runner read the session
    (a decision milliseconds after the pause): ADK refuses the resumer's append as stale. The resumer
    reads the session again and sends once; the tool runs once (found by the scale benchmark)."""
    from google.adk.errors import StaleSessionError
    from google.adk.sessions.sqlite_session_service import SqliteSessionService
    from google.genai import types

    signoff = bridge.Signoff(sqlite_url)
    try:
        h = Harness(signoff, single_agent(transfer_script()), tmp_path)
        await h.start()
        [review] = signoff.reviews.pending()
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
        other_writer = SqliteSessionService(db_path=str(tmp_path / "sessions.db"))
        stale: list[Exception] = []
        reads: list[object] = []
        real_get = h.sessions.get_session

        async def get_then_race(**kw: object) -> object:
            session = await real_get(**kw)  # type: ignore[arg-type]
            reads.append(kw)
            if len(reads) == 2 and session is not None:  # the runner's own read (the resumer's claim read first)
                theirs = await other_writer.get_session(app_name=session.app_name, user_id=session.user_id,
                                                        session_id=session.id)  # fmt: skip
                assert theirs is not None
                await asyncio.sleep(0.002)  # the storage's update time moves past the copy just read
                note = Event(author="teller", invocation_id="late", content=types.Content(role="model",
                             parts=[types.Part(text="(the opening run's last event)")]))  # fmt: skip
                await other_writer.append_event(theirs, note)
                stale.append(StaleSessionError("raced"))
            return session

        h.sessions.get_session = get_then_race  # type: ignore[method-assign]
        [done] = await h.resume()
        assert stale, "the race was not staged"
        assert done.how == "sent" and [r["args"] for r in runs(runs_file)] == [{"amount": 50, "to": "acct-1"}]
        assert signoff.reviews.get(review.id).executed
        assert_bound(signoff.store)
    finally:
        signoff.close()


async def test_a_decision_before_the_pause_s_last_event_waits_for_it(
    sqlite_url: str, runs_file: Path, tmp_path: Path
) -> None:
    """ADK stores a pause as two events: the confirmation request, then the paused call's function
    response. A resume sent between them made ADK refuse the pausing run's last append (the opening
    run's caller got ``StaleSessionError``: 20 of 500 in the scale benchmark). The resumer claims only
    once the response is stored too, or once ``PAUSE_SETTLE_SECONDS`` have passed without it (the
    pausing run died in between: the pause is resumed all the same)."""
    from signoff.bridge import _resumer, _session_events

    signoff = bridge.Signoff(sqlite_url)
    try:
        h = Harness(signoff, single_agent(transfer_script()), tmp_path)
        await h.start()
        [review] = signoff.reviews.pending()
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
        real_get = h.sessions.get_session
        looks: list[Event] = []  # the session's events at the first look, before the resume

        def without_the_response(events: list[Event]) -> list[Event]:
            """The pause as it is between ADK's two appends: the request stored, the call's response not yet
            (ADK appends the response second, though its timestamp sorts it first when the session is read)."""
            kept = [e for e in events if not any(r.id == "call-transfer" for r in e.get_function_responses())]
            assert len(kept) == len(events) - 1 and any(e.long_running_tool_ids for e in kept), "not a stored pause"
            return kept

        async def before_the_response_is_stored(**kw: object) -> object:
            session = await real_get(**kw)  # type: ignore[arg-type]
            if session is not None and not looks:  # the first look only
                looks.extend(session.events)
                session.events = without_the_response(session.events)
            return session

        h.sessions.get_session = before_the_response_is_stored  # type: ignore[method-assign]
        resumer = signoff.resumer(h.runner, on_event=h.events.append)
        assert await resumer.run_once() == [] and looks and runs(runs_file) == []
        assert not signoff.reviews.frontier(review.frontier).resumed
        wait, _due = resumer._next_wake()  # serve() looks again in milliseconds, not after max_wait
        assert wait <= _resumer.PAUSE_RECHECK < resumer.max_wait
        await asyncio.sleep(_resumer.PAUSE_RECHECK + 0.01)
        [done] = await resumer.run_once()
        assert done.how == "sent"
        assert [r["args"] for r in runs(runs_file)] == [{"amount": 50, "to": "acct-1"}]

        # The same pause without its response, looked at soon and after the settle time.
        pause = [e for e in looks if e.author != "user"]
        request_at = next(e.timestamp for e in pause if e.long_running_tool_ids)
        frontier = signoff.reviews.frontier(review.frontier)
        assert _session_events.paused_in(pause, frontier, now=request_at + 0.1)
        half = without_the_response(pause)
        assert not _session_events.paused_in(half, frontier, now=request_at + 0.1)
        assert _session_events.paused_in(half, frontier, now=request_at + _session_events.PAUSE_SETTLE_SECONDS)
        no_request = [e for e in pause if not e.long_running_tool_ids]
        assert not _session_events.paused_in(no_request, frontier, now=request_at + 3600)
        assert_bound(signoff.store)
    finally:
        signoff.close()


async def test_a_decision_faster_than_the_pause_is_stored_still_resumes(
    sqlite_url: str, runs_file: Path, tmp_path: Path
) -> None:
    """The plugin opens the review in ADK's event callback, just before ADK stores the pause event: a
    decision within those milliseconds finds no pause in the session. The resumer does not claim it
    then, and looks again shortly (before, it never looked again: found by the scale benchmark)."""
    from signoff.bridge import _resumer

    signoff = bridge.Signoff(sqlite_url)
    try:
        h = Harness(signoff, single_agent(transfer_script()), tmp_path)
        await h.start()
        [review] = signoff.reviews.pending()
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
        real_get = h.sessions.get_session
        hidden: list[str] = []

        async def before_the_pause_is_stored(**kw: object) -> object:
            session = await real_get(**kw)  # type: ignore[arg-type]
            if not hidden and session is not None:  # the first look: the pause event is not there yet
                hidden.append(session.id)
                session.events = [e for e in session.events if not e.long_running_tool_ids]
            return session

        h.sessions.get_session = before_the_pause_is_stored  # type: ignore[method-assign]
        resumer = signoff.resumer(h.runner, on_event=h.events.append)
        assert await resumer.run_once() == [] and hidden and runs(runs_file) == []
        assert not signoff.reviews.frontier(review.frontier).resumed
        assert await resumer.run_once() == []  # too soon to look again
        await asyncio.sleep(_resumer.ORPHAN_FIRST_RECHECK + 0.05)
        [done] = await resumer.run_once()
        assert done.frontier == review.frontier
        assert [r["args"] for r in runs(runs_file)] == [{"amount": 50, "to": "acct-1"}]
        assert_bound(signoff.store)
    finally:
        signoff.close()
