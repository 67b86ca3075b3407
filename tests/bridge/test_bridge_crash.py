"""Crashes: SIGKILL the resumer at every point of a resume, from before the claim to after the run.

Every child is a real process, forked by a "zygote" subprocess that has imported everything and
started no thread (so a start costs milliseconds), and kills itself with SIGKILL at one step of the
resumer; the next child recovers. At the end
every frontier was resumed exactly once and every tool ran exactly once.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, runs, single_agent, transfer_script
from _zygote import Zygote
from conftest import assert_bound

from signoff import bridge

# Every point of a resume: before the claim, after it, the answer sent but not yet stored by ADK, stored
# (the run's first event), the tool entered, the tool done (tool.executed) but its response not stored,
# the run ended but its run.replied not written, and after the run.
STEPS = ["before_claim", "after_claim", "before_store", "sent", "in_tool", "after_tool", "ran", "after_send"]
ACTOR = "agent:resumer-crashy"


async def _paused_sessions(signoff: bridge.Signoff, tmp_path: Path, count: int) -> list[str]:
    sessions = []
    for i in range(count):
        h = Harness(signoff, single_agent(transfer_script(amount=100 + i, to=f"acct-{i}")), tmp_path)
        await h.start()
        sessions.append(h.session_id)
    for i, review in enumerate(signoff.reviews.pending(limit=1000)):
        if i % 2:
            signoff.edit(
                review.id,
                reviewer=REVIEWER,
                signer=REVIEWER_KEY,
                patch=[{"op": "replace", "path": "/amount", "value": i}],
            )
        else:
            signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    return sessions


@pytest.mark.slow
@pytest.mark.asyncio
async def test_sigkill_resumer_exactly_once(store_url: str, runs_file: Path, tmp_path: Path) -> None:
    postgres = store_url.startswith("postgresql")
    crashes_wanted = 14 if postgres else 28
    signoff = bridge.Signoff(store_url)
    t0 = time.perf_counter()
    sessions = await _paused_sessions(signoff, tmp_path, count=crashes_wanted)
    print(f"paused {len(sessions)} sessions in {time.perf_counter() - t0:.2f}s")
    sessions_spec = f"sqlite:{tmp_path / 'sessions.db'}"
    zygote = Zygote()
    killed: Counter[str] = Counter()
    try:
        for i in range(crashes_wanted * 2):
            if sum(killed.values()) >= crashes_wanted:
                break
            step = STEPS[i % len(STEPS)]
            ended = zygote.run(store_url, sessions_spec, ACTOR, step, str(tmp_path / f"child-{i}.json"))
            assert ended in ({"exit": 0, "signal": 0}, {"exit": -1, "signal": 9}), (i, step, ended)
            if ended["signal"] == 9:
                killed[step] += 1
        # A last worker, not killed, recovers whatever the crashes left.
        out = tmp_path / "final.json"
        assert zygote.run(store_url, sessions_spec, ACTOR, None, str(out)) == {"exit": 0, "signal": 0}
    finally:
        zygote.close()
    assert sum(killed.values()) >= crashes_wanted, killed
    assert set(killed) == set(STEPS), killed
    print("SIGKILLs by step:", dict(killed), "final:", json.loads(out.read_text()))

    # Every frontier resumed exactly once, every tool exactly once, with the decided args.
    claims = Counter(e.body["frontier"] for e in signoff.store.entries(kind="run.resumed"))
    frontiers = {r.frontier for r in signoff.reviews.pending(limit=1000)}
    assert not frontiers  # nothing left open
    opened = [e.body for e in signoff.store.entries(kind="review.opened")]
    assert len(opened) == len(sessions)
    assert set(claims.values()) == {1} and len(claims) == len(opened)
    # ... and each one's reply is on the log once, a run that ended as its worker died included.
    replied = Counter(e.body["frontier"] for e in signoff.store.entries(kind="run.replied"))
    assert replied == Counter({frontier: 1 for frontier in claims}), replied
    ran = Counter(r["session"] for r in runs(runs_file))
    assert ran == Counter({s: 1 for s in sessions})
    for body in opened:
        review = signoff.reviews.get(body["review"])
        assert review.executed and review.resumed
        [mine] = [r for r in runs(runs_file) if r["session"] == review.call.session]
        assert mine["args"] == review.final_args
    # One answer message per session, however many times the resumer died.
    h = Harness(signoff, single_agent([]), tmp_path)
    for sid in sessions:
        h.session_id = sid
        events = await h.session_events()
        answers = [e for e in events if e.author == "user" and e.get_function_responses()]
        assert len(answers) == 1
        # ... and every run went on to the model's final answer (a run killed mid-way is driven again).
        finals = [
            p.text for e in events if e.content for p in e.content.parts or [] if (p.text or "").startswith("done:")
        ]
        assert len(finals) == 1, (sid, finals)
    assert_bound(signoff.store)
    signoff.close()


@pytest.mark.asyncio
async def test_a_reply_the_session_holds_is_recorded_by_the_restart(
    store_url: str, runs_file: Path, tmp_path: Path
) -> None:
    """Issue 34 item 4: the worker dies after the run ended (its reply in the session) and before
    ``run.replied``. The restarted worker records the reply from the session, without driving the run
    again, and from then on its recovery leaves the frontier alone (done on the log)."""
    signoff = bridge.Signoff(store_url)
    [session] = await _paused_sessions(signoff, tmp_path, count=1)
    sessions_spec = f"sqlite:{tmp_path / 'sessions.db'}"
    zygote = Zygote()
    try:
        assert zygote.run(store_url, sessions_spec, ACTOR, "ran", str(tmp_path / "k.json")) == {"exit": -1, "signal": 9}
        assert not list(signoff.store.entries(kind="run.replied"))
        for i in range(2):
            out = tmp_path / f"restart-{i}.json"
            assert zygote.run(store_url, sessions_spec, ACTOR, None, str(out)) == {"exit": 0, "signal": 0}
            assert json.loads(out.read_text()) == []  # nothing sent or driven again
    finally:
        zygote.close()
    [reply] = [e.body for e in signoff.store.entries(kind="run.replied")]
    frontier = signoff.reviews.frontier(reply["frontier"])
    assert frontier.replied and frontier.reviews[0].call.session == session
    assert len(runs(runs_file)) == 1
    assert_bound(signoff.store)
    signoff.close()
