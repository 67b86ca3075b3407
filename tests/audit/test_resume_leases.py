"""Resume leases on both backends (audit/resume_leases.py): a claimed frontier is taken over only once
nobody live holds its send, decided in the transaction that takes it, and never once its calls ran."""

from __future__ import annotations

import subprocess
import sys

import pytest
from auditkit import AGENT, ALICE, FakeClock, Keys, call

from signoff.audit import ReviewService, Store
from signoff.audit.resume_leases import MACHINE, holder_gone, new_holder, retire
from signoff.audit.verify import verify_store

OTHER = "agent:other-worker"


def _claimed(svc: ReviewService, keys: Keys, lease: tuple[str, float] | None, cid: str = "l1") -> str:
    front = svc.open_frontier([call(cid)], actor=AGENT)
    svc.approve(front.reviews[0].id, reviewer=ALICE, signer=keys.alice)
    svc.claim_resume(front.id, actor=AGENT, lease=lease)
    return front.id


def _leases(store: Store) -> list[tuple[str, str]]:
    rows = store.read_rows("SELECT frontier, holder FROM signoff_resume_lease WHERE log = ?", store.log_id)
    return sorted((str(r.frontier), str(r.holder)) for r in rows)


def test_a_live_holder_keeps_its_frontier_and_a_retired_one_gives_it_up(
    svc: ReviewService, keys: Keys, store: Store
) -> None:
    mine, theirs = new_holder(), new_holder()
    frontier = _claimed(svc, keys, (mine, 30.0))
    assert _leases(store) == [(frontier, mine)]  # written in the claim's transaction
    size = store.size()
    why = svc.take_over(frontier, holder=theirs, seconds=30.0, older_than=0.0)
    assert why is not None and f"held by {mine}, alive" in why
    assert _leases(store) == [(frontier, mine)]
    assert svc.take_over(frontier, holder=mine, seconds=30.0, older_than=0.0) is None  # its own: still its own
    retire(mine)  # the worker stopped (or its process ended): its send may be taken over at once
    assert svc.take_over(frontier, holder=theirs, seconds=30.0, older_than=0.0) is None
    assert _leases(store) == [(frontier, theirs)]
    assert store.size() == size  # a lease is not on the log
    svc.release_lease(frontier, mine)  # not its lease any more: nothing happens
    assert _leases(store) == [(frontier, theirs)]
    svc.release_lease(frontier, theirs)
    assert _leases(store) == []
    assert verify_store(store).ok
    retire(theirs)


def test_a_holder_elsewhere_keeps_its_frontier_until_its_lease_lapses(
    svc: ReviewService, keys: Keys, store: Store, clock: FakeClock
) -> None:
    """A holder on another machine cannot be looked at: only its lease tells, and renewing it keeps it."""
    elsewhere = "0123456789abcdef:4242:beef"
    assert not holder_gone(elsewhere)
    frontier = _claimed(svc, keys, (elsewhere, 30.0))
    taker = new_holder()
    clock.advance(20)
    assert "held by" in (svc.take_over(frontier, holder=taker, seconds=30.0, older_than=0.0) or "")
    svc.renew_leases(elsewhere, 30.0)  # renewed at 20 s: now good until 50 s
    clock.advance(20)
    assert "held by" in (svc.take_over(frontier, holder=taker, seconds=30.0, older_than=0.0) or "")
    clock.advance(11)
    assert svc.take_over(frontier, holder=taker, seconds=30.0, older_than=0.0) is None
    assert _leases(store) == [(frontier, taker)]
    retire(taker)


@pytest.mark.skipif(MACHINE is None, reason="no /proc here: a holder's process cannot be looked at")
def test_the_lease_of_a_process_of_this_machine_that_ended_is_taken_at_once(
    svc: ReviewService, keys: Keys, store: Store
) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = f"{MACHINE}:{int(done.stdout)}:cafe"
    assert holder_gone(dead)
    frontier = _claimed(svc, keys, (dead, 3600.0))
    taker = new_holder()
    assert svc.take_over(frontier, holder=taker, seconds=30.0, older_than=600.0) is None
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        alive = f"{MACHINE}:{live.pid}:cafe"
        assert not holder_gone(alive)
        other = _claimed(svc, keys, (alive, 3600.0), "l3")
        assert "alive" in (svc.take_over(other, holder=taker, seconds=30.0, older_than=0.0) or "")
        live.kill()
        live.wait()
        assert svc.take_over(other, holder=taker, seconds=30.0, older_than=0.0) is None
    finally:
        live.kill()
    retire(taker)


def test_a_claim_without_a_lease_is_taken_over_after_older_than(
    svc: ReviewService, keys: Keys, store: Store, clock: FakeClock
) -> None:
    """A claim by a path that holds no lease (a client's guard, an older Signoff): its age decides, as before."""
    frontier = _claimed(svc, keys, None)
    taker = new_holder()
    why = svc.take_over(frontier, holder=taker, seconds=30.0, older_than=600.0)
    assert why is not None and "holds no lease" in why and _leases(store) == []
    clock.advance(601)
    assert svc.take_over(frontier, holder=taker, seconds=30.0, older_than=600.0) is None
    assert _leases(store) == [(frontier, taker)]
    retire(taker)


def test_nothing_is_taken_over_once_its_calls_ran_or_before_it_is_claimed(
    svc: ReviewService, keys: Keys, store: Store
) -> None:
    taker = new_holder()
    front = svc.open_frontier([call("l2")], actor=AGENT)
    review = front.reviews[0]
    assert svc.take_over(front.id, holder=taker, seconds=30.0, older_than=0.0) == "not claimed"
    svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
    gone = new_holder()
    svc.claim_resume(front.id, actor=AGENT, lease=(gone, 30.0))
    retire(gone)
    svc.record_execution(review.id, actor=AGENT, args={"amount": 100, "to": "bob"})
    why = svc.take_over(front.id, holder=taker, seconds=30.0, older_than=0.0)
    assert why == "no approved call of it waits to run"
    # A recovery drives again a run whose call ran but which never reached its reply.
    assert svc.take_over(front.id, holder=taker, seconds=30.0, older_than=0.0, until_replied=True) is None
    svc.record_reply(front.id, actor=AGENT, text="done")
    why = svc.take_over(front.id, holder=taker, seconds=30.0, older_than=0.0, until_replied=True)
    assert why == "no approved call of it waits to run, and its reply is recorded"
    retire(taker)


def test_a_lapsed_lease_is_swept_when_a_holder_renews(
    svc: ReviewService, keys: Keys, store: Store, clock: FakeClock
) -> None:
    old, renewing = "0123456789abcdef:1:aa", new_holder()
    first = _claimed(svc, keys, (old, 30.0))
    second = _claimed(svc, keys, (renewing, 30.0), "l4")
    clock.advance(120)
    svc.renew_leases(renewing, 30.0)
    assert _leases(store) == [(second, renewing)]  # lapsed over a minute ago: as good as absent
    assert svc.take_over(first, holder=renewing, seconds=30.0, older_than=0.0) is None
    retire(renewing)
