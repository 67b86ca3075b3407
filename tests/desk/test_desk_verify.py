"""The log page's incremental verifier (desk/verify.py)."""

from __future__ import annotations

import random

import pytest
from deskkit import Env

from audit import merkle
from desk.verify import CompactRange, IncrementalVerifier, verify_consistency


@pytest.fixture
def env(sqlite_env: Env) -> Env:
    return sqlite_env


def test_compact_range_matches_audit_merkle() -> None:
    leaves = [merkle.leaf_hash(bytes([i])) for i in range(40)]
    cr = CompactRange()
    for n, leaf in enumerate(leaves, 1):
        cr.append(leaf)
        assert cr.root() == merkle.root_from_leaves(leaves[:n])


@pytest.mark.parametrize("old,new", [(1, 1), (1, 2), (3, 7), (4, 8), (5, 40), (16, 17), (31, 32)])
def test_consistency_check_matches_rfc9162_vectors_from_audit(old: int, new: int) -> None:
    leaves = [merkle.leaf_hash(bytes([i])) for i in range(new)]
    proof = merkle.consistency_proof(leaves, old, new)
    a, b = merkle.root_from_leaves(leaves[:old]), merkle.root_from_leaves(leaves)
    assert verify_consistency(old, new, a, b, proof)
    if proof:
        bad = list(proof)
        bad[random.randrange(len(bad))] = b"\x00" * 32
        assert not verify_consistency(old, new, a, b, bad)
    assert not verify_consistency(old, new, b"\x01" * 32, b, proof)


def test_badge_advances_incrementally_and_checks_the_checkpoint(env: Env) -> None:
    v = IncrementalVerifier(env.desk.store)
    first = v.status()
    assert first.ok and first.verified_upto == env.desk.store.size() - 1
    env.desk.store.checkpoint(env.key)
    env.open()
    second = v.status()
    assert second.ok and second.checkpoint_size == first.size and second.verified_upto == first.size
    env.desk.store.checkpoint(env.key)
    assert v.status().checkpoint_size == env.desk.store.size()


def test_badge_names_the_first_tampered_entry(env: Env) -> None:
    from sqlalchemy import text

    env.open()
    env.open()
    store = env.desk.store
    with store.write_engine.begin() as conn:
        raw = conn.execute(text("SELECT raw FROM signoff_entry WHERE seq = 4")).scalar_one()
        conn.execute(
            text("UPDATE signoff_entry SET raw = :r WHERE seq = 4"), {"r": bytes(raw).replace(b"acct-1", b"acct-X")}
        )
    s = IncrementalVerifier(store).status()
    assert not s.ok and s.verified_upto == 3 and "seq 4" in (s.error or "")
