"""A tool that raised is recorded on every path, and never run again by a restart (issue 34 item 13).

The payments provider charged, then its answer was lost: the tool raised. A raise proves nothing about
the effect, so the call must not run again by itself: ``run.resume_failed`` names it, on the first send,
on a restarted worker's recovery and on a takeover alike, and the gate refuses it from then on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _support import RAISES_ENV, REVIEWER, REVIEWER_KEY, Harness, runs, single_agent, transfer_script
from _zygote import Zygote

from signoff import bridge
from signoff.audit.verify import verify_store

ACTOR = "agent:resumer-restarted"


async def _approved(signoff: bridge.Signoff, tmp_path: Path) -> str:
    h = Harness(signoff, single_agent(transfer_script(amount=700, to="acct-r")), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    return review.id


def _failed(signoff: bridge.Signoff, review_id: str) -> list[dict[str, object]]:
    return [e.body for e in signoff.store.entries(kind="run.resume_failed") if review_id in e.body["reviews"]]


@pytest.mark.asyncio
async def test_a_restarted_worker_whose_recovery_raises_records_it_and_never_runs_it_again(
    store_url: str, runs_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack of item 13: a worker is killed inside the tool (before its effect); its restart drives
    the run again and the tool charges, then raises. Every later restart of that worker leaves it alone."""
    signoff = bridge.Signoff(store_url)
    review_id = await _approved(signoff, tmp_path)
    monkeypatch.setenv(RAISES_ENV, "1")
    sessions = f"sqlite:{tmp_path / 'sessions.db'}"
    zygote = Zygote()
    try:
        killed = zygote.run(store_url, sessions, ACTOR, "in_tool", str(tmp_path / "killed.json"))
        assert killed == {"exit": -1, "signal": 9}
        assert runs(runs_file) == []  # killed before the effect
        for i in range(3):  # the restarts: the first recovers the claim and the tool raises; the others find it
            assert zygote.run(store_url, sessions, ACTOR, None, str(tmp_path / f"restart-{i}.json")) == {
                "exit": 0,
                "signal": 0,
            }
    finally:
        zygote.close()
    assert [r["tool"] for r in runs(runs_file)] == ["transfer"]  # charged once, never again
    [failed] = _failed(signoff, review_id)
    assert "TimeoutError: the payments provider did not answer in time" in str(failed["reason"]), failed
    review = signoff.reviews.get(review_id)
    assert review.resume_failed and not review.executed
    report = verify_store(signoff.store)
    assert report.ok, report.to_json()
    signoff.close()


@pytest.mark.asyncio
async def test_a_tool_that_raised_on_its_first_send_is_recorded_by_the_gate(
    sqlite_url: str, runs_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The raise is recorded where it happens, in the gate, whoever sent the answer: the reason names the
    error and says that the outcome is unknown."""
    signoff = bridge.Signoff(sqlite_url)
    review_id = await _approved(signoff, tmp_path)
    monkeypatch.setenv(RAISES_ENV, "1")
    h = Harness(signoff, single_agent([]), tmp_path)
    resumer = signoff.resumer(h.runner)
    assert await resumer.run_once() == []
    assert [f[1] for f in resumer.failures] == ["run"]
    [failed] = _failed(signoff, review_id)
    reason = str(failed["reason"])
    assert reason.startswith("the tool raised TimeoutError: the payments provider did not answer"), reason
    assert "outcome is unknown" in reason
    assert len(runs(runs_file)) == 1
    # Driven again (as a restart would), the gate refuses the call from the log.
    monkeypatch.delenv(RAISES_ENV)
    again = signoff.resumer(h.runner, actor="agent:another-worker")
    await again.take_over_stalled()
    assert len(runs(runs_file)) == 1
    signoff.close()
