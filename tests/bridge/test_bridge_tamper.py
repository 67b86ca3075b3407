"""Attacks on the database behind the service's back: the gate proves each decision from the log's own
entries and signatures, so what a database writer changes never becomes what a tool runs with."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, runs, single_agent, transfer_script

from signoff import bridge
from signoff.audit import entry as entries
from signoff.audit import merkle, sealing
from signoff.audit.canonical import digest
from signoff.audit.store import Store
from signoff.audit.verify import verify_store


def _db(store: Store) -> sqlite3.Connection:
    return sqlite3.connect(store.url.removeprefix("sqlite:///"))


def _rewrite_entry(store: Store, seq: int, change: dict[str, object]) -> None:
    """Rewrite one entry's bytes and stored hash (a writer who knows the format), leaving the rest alone."""
    with _db(store) as db:
        raw = db.execute("SELECT raw FROM signoff_entry WHERE seq = ?", (seq,)).fetchone()[0]
        data = json.loads(raw)
        data["body"]["call"].update(change)
        data["body"]["call"]["args_digest"] = digest(data["body"]["call"]["args"])
        forged = entries.build(**{k: data[k] for k in ("log", "seq", "prev", "at", "actor", "kind", "body")})
        db.execute("UPDATE signoff_entry SET raw = ?, hash = ? WHERE seq = ?", (forged.raw, forged.hash, seq))


def _last_result(h: Harness) -> str:
    responses = [
        p.function_response.response
        for e in h.events
        if e.content
        for p in e.content.parts or []
        if p.function_response
    ]
    return json.dumps(responses)


@pytest.fixture
def signoff(sqlite_url: str) -> Iterator[bridge.Signoff]:
    """Unlike conftest's, this one does not insist that the log verifies afterwards: each test breaks it,
    and checks that `audit verify` names what it broke."""
    s = bridge.Signoff(sqlite_url)
    yield s
    s.close()


def _named_by_verify(store: Store, seq: int, rule: str) -> None:
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert (report.failure.seq, rule in report.failure.rule) == (seq, True), report.failure


async def test_args_changed_in_the_log_after_signing_stop_the_tool(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    h = Harness(signoff, single_agent(transfer_script(amount=50)), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    sealed = signoff.store.entry(review.opened_seq).body["call"]["args"]
    _rewrite_entry(signoff.store, review.opened_seq, {"args": {**sealed, "amount": sealing.seal(5000).commitment}})
    await h.resume()
    assert runs(runs_file) == []  # neither 5000 (not what was signed) nor anything else
    assert "not proven" in _last_result(h)
    _named_by_verify(signoff.store, review.opened_seq + 1, "prev link")


async def test_args_changed_in_the_queue_row_are_ignored(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    h = Harness(signoff, single_agent(transfer_script(amount=50)), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    with _db(signoff.store) as db:
        row = json.loads(db.execute("SELECT data FROM signoff_review WHERE id = ?", (review.id,)).fetchone()[0])
        row["final_args"] = {"amount": 5000, "to": "evil"}
        db.execute("UPDATE signoff_review SET data = ? WHERE id = ?", (json.dumps(row), review.id))
    await h.resume()
    assert [r["args"] for r in runs(runs_file)] == [{"amount": 50, "to": "acct-1"}]
    decided = signoff.reviews.get(review.id).decision_seq
    _named_by_verify(signoff.store, decided or -1, f"projection of review {review.id}")


async def test_a_forged_unsigned_approval_appended_to_the_log_does_not_run_the_tool(
    signoff: bridge.Signoff, runs_file: Path, tmp_path: Path
) -> None:
    """A writer appends a well-linked review.approved that no person signed, and updates the queue row."""
    h = Harness(signoff, single_agent(transfer_script(amount=50)), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    size = signoff.store.size()
    with _db(signoff.store) as db:
        prev_hash = db.execute("SELECT hash FROM signoff_entry WHERE seq = ?", (size - 1,)).fetchone()[0]
        body = {"review": review.id, "args_digest": review.args_digest, "rationale": ""}
        forged = entries.build(
            log=signoff.store.log_id, seq=size, prev=prev_hash, at=entries.format_time(signoff.store.clock()),
            actor=REVIEWER, kind="review.approved", body=body,
        )  # fmt: skip
        with signoff.store.read_engine.connect() as conn:  # the Merkle nodes the new leaf completes
            compact = signoff.store._compact_at(conn, size, prev_hash)
        nodes = b"".join(node for _level, _index, node in compact.append(merkle.leaf_hash(forged.raw)))
        db.execute(
            "INSERT INTO signoff_entry (log, seq, hash, kind, actor, subject, raw, nodes) VALUES (?,?,?,?,?,?,?,?)",
            (signoff.store.log_id, size, forged.hash, forged.kind, forged.actor, review.id, forged.raw, nodes),
        )
        db.execute("UPDATE signoff_review SET status = 'approved', decided_seq = ? WHERE id = ?", (size, review.id))
        db.execute("UPDATE signoff_frontier SET open_count = 0 WHERE id = ?", (review.frontier,))
    await h.resume()
    assert runs(runs_file) == []
    assert "not proven" in _last_result(h)
    _named_by_verify(signoff.store, size, "signature")


async def test_a_pinned_log_key_refuses_a_rewritten_log(sqlite_url: str, runs_file: Path, tmp_path: Path) -> None:
    """The agent pins the log key it was given at `audit init`; a store whose entry 0 names another key
    (a whole log rewritten by someone with database access) runs nothing."""
    signoff = bridge.Signoff(sqlite_url, log_key="ed25519:" + "A" * 43 + "=")
    h = Harness(signoff, single_agent(transfer_script(amount=50)), tmp_path)
    await h.start()
    [review] = signoff.reviews.pending()
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    await h.resume()
    assert runs(runs_file) == []
    assert "pinned log key" in _last_result(h)
    signoff.close()
