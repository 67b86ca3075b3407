"""The log page's incremental verifier (desk/verify.py)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deskkit import ALICE, Env, make_env
from sqlalchemy import text

from signoff.desk.verify import IncrementalVerifier, RuleStatus, RuleVerifier


@pytest.fixture
def env(sqlite_env: Env) -> Env:
    return sqlite_env


def test_badge_advances_incrementally_and_checks_the_checkpoint(env: Env) -> None:
    v = IncrementalVerifier(env.desk.store)
    first = v.status()
    assert first.ok and first.verified_upto == env.desk.store.size() - 1
    env.desk.store.checkpoint(env.key)  # the checkpoint covers first.size entries and is recorded after them
    env.open()
    second = v.status()
    assert second.ok and second.checkpoint_size == first.size and second.verified_upto == env.desk.store.size() - 1
    size = env.desk.store.size()
    env.desk.store.checkpoint(env.key)
    assert v.status().checkpoint_size == size


def test_badge_names_the_first_tampered_entry(env: Env) -> None:
    from sqlalchemy import text

    seq = env.open()[0].opened_seq
    env.open()
    store = env.desk.store
    with store.write_engine.begin() as conn:
        raw = conn.execute(text("SELECT raw FROM signoff_entry WHERE seq = :s"), {"s": seq}).scalar_one()
        tampered = bytes(raw).replace(b"teller", b"tellex")  # in clear, whether the log seals values or not
        assert tampered != bytes(raw)
        conn.execute(text("UPDATE signoff_entry SET raw = :r WHERE seq = :s"), {"r": tampered, "s": seq})
    s = IncrementalVerifier(store).status()
    assert not s.ok and s.verified_upto == seq - 1 and f"seq {seq}" in (s.error or "")


# -- the rule check (RuleVerifier): a full run in a child process ------------------------------------


@pytest.fixture
def both(store_url: str, tmp_path: Path) -> Iterator[Env]:
    """A desk's log on each backend (the module's ``env`` is SQLite's alone)."""
    e = make_env(store_url, tmp_path)
    yield e
    e.desk.store.close()


def settled(rules: RuleVerifier) -> RuleStatus:
    found = rules.status(wait=60)
    assert not found.running, found
    return found


def test_a_full_rule_check_runs_in_a_child_process_and_passes_an_intact_log(both: Env) -> None:
    review = both.open()[0]
    both.svc.approve(review.id, reviewer=ALICE, signer=both.signer_of(ALICE))
    rules = RuleVerifier(both.desk.store)
    found = settled(rules)
    assert found.ok is True and found.failure is None, found
    assert (found.size, found.checked_from, found.checkpoint_size) == (both.desk.store.size(), 0, None)
    assert rules.child_runs == 1  # not in this process


def test_the_child_names_a_projection_row_edited_behind_the_service(both: Env) -> None:
    review = both.open()[0]
    store = both.desk.store
    with store.write_engine.begin() as conn:
        conn.execute(text("UPDATE signoff_review SET status = 'approved' WHERE id = :id"), {"id": review.id})
    rules = RuleVerifier(store)
    found = settled(rules)
    assert found.ok is False and rules.child_runs == 1
    assert review.id in (found.failure or "") and "status" in (found.failure or ""), found.failure


def test_a_child_that_cannot_run_is_a_failure_that_says_so(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.open()
    broken = tmp_path / "broken" / "signoff"  # a package the child imports first, and that fails
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("a broken install")\n')
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))
    rules = RuleVerifier(env.desk.store)
    found = settled(rules)
    assert found.ok is False and rules.child_runs == 1
    assert found.failure == "verifier could not run: exit 1: ImportError: a broken install", found.failure


def test_after_a_checkpoint_the_check_is_incremental_and_stays_here(env: Env) -> None:
    env.open()
    point = env.desk.store.checkpoint(env.key).size
    env.open()
    rules = RuleVerifier(env.desk.store)
    found = settled(rules)
    assert found.ok is True and found.checked_from == point and found.checkpoint_size == point
    assert rules.child_runs == 0


def test_a_desk_that_stops_ends_its_running_child(env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env.open()
    slow = tmp_path / "slow" / "signoff"  # a package the child imports first, and that takes a minute
    slow.mkdir(parents=True)
    (slow / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(slow.parent))
    rules = RuleVerifier(env.desk.store)
    assert rules.status().running
    deadline = time.monotonic() + 10
    while rules._child is None and time.monotonic() < deadline:
        time.sleep(0.01)
    child = rules._child
    assert child is not None and child.poll() is None
    started = time.monotonic()
    rules.stop()
    assert child.wait(5) == -signal.SIGKILL
    found = settled(rules)
    assert time.monotonic() - started < 5
    assert found.ok is False and found.failure == f"verifier could not run: exit {-signal.SIGKILL}: no message"
    rules.full_every = 0  # a full run due each time the log grows, and it did: no other child starts
    env.open()
    assert settled(rules).failure == "verifier could not run: the desk is stopping"
    assert rules.child_runs == 1
    rules.start()  # the desk's app started again
    monkeypatch.delenv("PYTHONPATH")
    env.open()
    assert settled(rules).ok is True and rules.child_runs == 2
