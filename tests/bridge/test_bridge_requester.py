"""The person the agent acts for (issue 22, 4): ``Signoff(requester=…)`` maps the ADK ``user_id`` to a
``human:``, each review records it as ``requested_by``, and that person cannot approve their own
agent's call, however wide their roles; rejecting it is allowed. A real ADK run; the tool records its
runs from inside itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, runs, single_agent, transfer_script

from signoff import bridge
from signoff.audit import SelfApproval

pytestmark = pytest.mark.asyncio


async def test_a_reviewer_cannot_approve_the_call_their_own_agent_asked_for(
    store_url: str, runs_file: Path, tmp_path: Path
) -> None:
    # the Harness's runs are user "u1"; the app says that is Alice, who is also a reviewer for every tool
    signoff = bridge.Signoff(store_url, requester=lambda user_id: REVIEWER if user_id == "u1" else f"human:{user_id}")
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    assert review.call.requested_by == REVIEWER
    with pytest.raises(SelfApproval):
        signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    signoff.reviews.reject(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="I did not mean it")
    await h.resume()
    assert runs(runs_file) == []
    signoff.close()


async def test_a_requester_mapping_that_names_no_person_stops_the_pause(sqlite_url: str, tmp_path: Path) -> None:
    signoff = bridge.Signoff(sqlite_url, requester=lambda user_id: user_id)  # "u1": not a human: actor
    h = Harness(signoff, single_agent(transfer_script()), tmp_path)
    with pytest.raises(Exception, match=r"requester\('u1'\): expected a human: actor"):
        await h.start()
    assert signoff.reviews.pending() == []
    signoff.close()
