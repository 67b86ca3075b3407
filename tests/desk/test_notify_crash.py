"""desk/notify: ``kill -9`` of a real ``desk notify serve`` process in the middle of deliveries.

After a restart every event is delivered at least once, each time with the same id and body, and
none is lost, including events logged while no notifier ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from notifykit import Log, Receiver, wait_until
from sqlalchemy import select
from sqlmodel import col

from signoff.desk.notify import Endpoints, Engines
from signoff.desk.notify._endpoints import endpoint_from_options
from signoff.desk.notify._tables import NotifyJob

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def serve(url: str, tmp: Path, n: int) -> subprocess.Popen[bytes]:
    errors = open(tmp / f"notifier-{n}.log", "wb")  # noqa: SIM115 - the child writes it
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "signoff.desk",
            "notify",
            "serve",
            "--store",
            url,
            "--desk-url",
            "https://desk.test",
            "--retry-base",
            "0.05",
            "--retry-cap",
            "0.5",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=errors,
    )


def test_kill_9_mid_delivery_loses_nothing_and_repeats_with_the_same_id(log: Log, tmp_path: Path) -> None:
    receiver = Receiver(delay=0.15)  # slow enough that a kill lands while requests are in flight
    engines = Engines(log.url)
    Endpoints(engines, log.store.log_id).add(
        endpoint_from_options(
            "webhook", "hook", {"url": receiver.url, "secret": receiver.secret}, events=["opened", "decided"]
        ),
        head=log.store.size(),
    )
    first = log.store.size()
    proc = serve(log.url, tmp_path, 1)
    try:
        reviews = [log.open(deadline=None) for _ in range(20)]
        for review in reviews[:10]:
            log.approve(review)
        wait_until(lambda: len(receiver.ok()) >= 5 and receiver.active > 0, timeout=30, what="deliveries in flight")
        proc.kill()  # SIGKILL: no cleanup, mid-request
        proc.wait(timeout=10)
        delivered_before = len(receiver.ok())
        for _ in range(5):  # logged while no notifier runs
            log.open(deadline=None)
        proc = serve(log.url, tmp_path, 2)
        expected = {
            f"{e.log}-{e.seq}-{'review.opened' if e.kind == 'review.opened' else 'review.decided'}"
            for e in log.store.entries(start=first)
            if e.kind in ("review.opened", "review.approved")
        }
        assert len(expected) == 35
        wait_until(lambda: expected <= set(receiver.ids()), timeout=60, what="every event after the restart")

        def states() -> set[str]:
            with engines.read.connect() as conn:
                query = select(NotifyJob.state).where(col(NotifyJob.log) == log.store.log_id)
                return {state for (state,) in conn.execute(query)}

        wait_until(lambda: states() == {"delivered"}, what="every job recorded as delivered")
    finally:
        proc.kill()
        proc.wait(timeout=10)
        engines.dispose()
        receiver.close()
    bodies: dict[str, set[bytes]] = defaultdict(set)
    for request in receiver.ok():
        assert request.headers["signoff-event-id"] == request.json["id"]
        bodies[request.json["id"]].add(request.body)
    assert set(bodies) == expected  # nothing lost, nothing made up
    assert all(len(versions) == 1 for versions in bodies.values())  # a repeat is the same event, byte for byte
    repeated = [eid for eid in bodies if receiver.ids().count(eid) > 1]
    assert repeated, "the requests in flight at the kill were expected to be delivered again"
    assert delivered_before < 35
