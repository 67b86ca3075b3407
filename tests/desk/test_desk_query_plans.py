"""The desk's reads of many ids at once seek an index by those ids, never walk the whole log; the latest
decisions are read from the decided rows alone, never past the open ones (issue 24 §5).

Given ``log = ?`` beside ``id IN (…)`` of ten ids or more, SQLite's planner prefers an index that starts
with ``log`` and walks every row of the log: at 100,000 pending reviews that cost the live stream 20 ms a
burst, and the Decided page a walk of every reply the log holds. Each statement here is read back with
SQLite's ``EXPLAIN QUERY PLAN``: the column listed in ``IN (…)`` must be one the search is keyed on.

With fewer decisions in sight than a page shows, the queue's "Just decided" panel walked every entry of
the log, and the Decided page every open review (their ``decided_seq`` NULL at the end of the index):
61 ms a page at 100,000 pending, after every write. The work SQLite does for those reads (its virtual
machine's steps) must not grow with the open reviews.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from deskkit import ALICE, Env, sign_in, vm_steps
from fastapi.testclient import TestClient
from sqlalchemy import event

from signoff.desk import queries
from signoff.desk.scope import Scope, ToolRoles
from signoff.desk.sse import Broker

MANY = 12  # above the ten ids at which SQLite's planner turned to the (log, …) index
IN_LIST = re.compile(r"\b(\w+)\s+IN\s*\(", re.IGNORECASE)
IDS = {"id", "subject", "seq", "owner"}  # columns a list names rows by (``tool IN (…)`` filters a walk)


@contextmanager
def statements(engine: Any) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def keyed_by_their_lists(engine: Any, seen: list[tuple[str, Any]]) -> list[str]:
    """The plans of the statements that list rows by id; fails on one whose search is not keyed on the
    listed column."""
    checked = []
    with engine.connect() as conn:
        for statement, parameters in seen:
            listed = [c for c in IN_LIST.findall(statement) if c in IDS]
            if not listed or not statement.lstrip().upper().startswith("SELECT"):
                continue
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))
            first = plan.split(" USING ", 1)[-1]  # the outermost search: the table the list is about
            assert any(f"{column}=?" in first for column in listed), (statement, plan)
            checked.append(plan)
    return checked


@pytest.fixture
def decided(sqlite_env: Env) -> list[Any]:
    """``MANY`` reviews, each approved, resumed, run and replied to (a Decided page of them with outcomes)."""
    done = []
    for _ in range(MANY):
        review = sqlite_env.open()[0]
        sqlite_env.svc.approve(review.id, reviewer=ALICE, signer=sqlite_env.signer_of(ALICE))
        sqlite_env.svc.claim_resume(review.frontier, actor="agent:teller")
        sqlite_env.svc.record_execution(review.id, actor="agent:teller", args=review.call.args, result={"ok": 1})
        sqlite_env.svc.record_reply(review.frontier, actor="agent:teller", text="Paid.")
        done.append(review)
    return done


def test_the_live_streams_subjects_are_read_by_id(sqlite_env: Env, decided: list[Any]) -> None:
    store = sqlite_env.desk.store
    with statements(store.read_engine) as seen:
        found = ToolRoles(store).subjects([r.id for r in decided])
    assert set(found) == {r.id for r in decided}
    assert keyed_by_their_lists(store.read_engine, seen)


def test_a_burst_of_events_reads_by_id(sqlite_env: Env, decided: list[Any]) -> None:
    store = sqlite_env.desk.store
    broker = Broker(store, sqlite_env.svc, ToolRoles(store))
    with statements(store.read_engine) as seen:
        events = broker._events(list(store.entries(start=0, stop=store.size())), end_streams=False)
    assert sum(ev["type"] == "closed" for ev, _about, _before in events) == MANY
    assert keyed_by_their_lists(store.read_engine, seen)


def test_the_decided_pages_outcomes_are_read_by_subject(
    sqlite_env: Env, sclient: TestClient, decided: list[Any]
) -> None:
    sign_in(sclient)
    store = sqlite_env.desk.store
    with statements(store.read_engine) as seen:
        html = sclient.get("/decided").text
    assert html.count("Paid.") >= MANY  # every row's reply, read by frontier
    plans = keyed_by_their_lists(store.read_engine, seen)
    assert any("ix_signoff_entry_subject" in p for p in plans)


def test_the_latest_decisions_are_read_without_walking_the_open_reviews(sqlite_env: Env) -> None:
    store = sqlite_env.desk.store
    for review in sqlite_env.open(n=2):
        sqlite_env.svc.approve(review.id, reviewer=ALICE, signer=sqlite_env.signer_of(ALICE))
    alice = Scope.of(ALICE, sqlite_env.svc.reviewer(ALICE))
    everyone = sqlite_env.desk.visible(alice)

    def work() -> tuple[int, int]:
        with vm_steps(store.read_engine) as panel:
            assert len(queries.recent(store, everyone)) == 2  # fewer than the panel shows
        with vm_steps(store.read_engine) as page:
            assert queries.decided(store, everyone, queries.HistoryQuery()).total == 2
        return panel[0], page[0]

    before = work()
    sqlite_env.open(n=400)  # 400 more open reviews, one frontier
    sqlite_env.open(n=400)
    after = work()
    # Walking them cost the panel (entries) and the page (index rows) far more than 2x: a few steps each.
    assert after[0] <= before[0] * 1.2 + 2, ("the panel", before, after)
    assert after[1] <= before[1] * 1.2 + 2, ("the Decided page", before, after)
