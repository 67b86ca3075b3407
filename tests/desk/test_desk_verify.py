"""The log page's incremental verifier (desk/verify.py)."""

from __future__ import annotations

import pytest
from deskkit import Env

from signoff.desk.verify import IncrementalVerifier


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
