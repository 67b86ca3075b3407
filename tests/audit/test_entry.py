"""Entries and hashing (DESIGN.md "The record"), checked on the bytes the store really holds."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
from auditkit import AGENT, ALICE, TRANSFER_SCHEMA, Db, Keys, admin_draft, call, key_body

from signoff.audit import CanonicalFormError, InvalidEntry, Policy, ReviewService, Store, canonical
from signoff.audit.entry import ZERO_HASH, build, statement
from signoff.audit.keys import Signer
from signoff.audit.trust import LogRules
from signoff.audit.trust import statement as trust_statement

HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def _busy_log(store: Store, svc: ReviewService, keys: Keys) -> None:
    """A bit of everything: opens, every decision, resume, execution, keys, a group commit, a checkpoint."""
    front = svc.open_frontier(
        [
            call("e1", tool_schema=TRANSFER_SCHEMA),
            call("e2", args={"amount": 2, "to": "ann", "memo": "é ✓ \U0001f600"}),
            call("e3"),
        ],
        actor=AGENT,
        policies=Policy(deadline_seconds=600),
    )
    a, b, c = (r.id for r in front.reviews)
    svc.approve(a, reviewer=ALICE, rationale="ok", signer=keys.alice)
    svc.edit(b, reviewer=ALICE, patch=[{"op": "replace", "path": "/amount", "value": 3}], signer=keys.alice)
    svc.reject(c, reviewer=ALICE, reason="no", signer=keys.alice)
    svc.claim_resume(front.id, actor=AGENT)
    svc.record_execution(a, actor=AGENT, args={"amount": 100, "to": "bob"})
    svc.enroll_key("agent:teller", Signer.generate().public, admin=keys.admin)
    store.append_many([admin_draft(store, keys.admin, key_body(f"b{n}")) for n in range(3)])
    store.checkpoint(keys.log)


def test_stored_bytes_hashes_and_links(store: Store, svc: ReviewService, keys: Keys, store_url: str) -> None:
    _busy_log(store, svc, keys)
    with Db(store_url) as db:
        rows = db.entries()
    assert [seq for seq, _h, _r in rows] == list(range(len(rows))), "seq is dense from 0"
    assert len(rows) == store.size() >= 15
    prev = "sha256:" + "0" * 64
    for seq, stored_hash, raw in rows:
        data: dict[str, Any] = json.loads(raw)
        # the stored bytes are the canonical bytes (and decode as strict UTF-8)
        assert canonical(data) == raw, seq
        raw.decode("utf-8")
        # hash = SHA-256(0x00 || bytes), written with its algorithm prefix
        assert stored_hash == "sha256:" + hashlib.sha256(b"\x00" + raw).hexdigest(), seq
        assert data["prev"] == prev, seq
        prev = stored_hash
        assert data["seq"] == seq and data["v"] == 1 and data["log"] == store.log_id
        assert TIME.match(data["at"]), data["at"]
        assert set(data) <= {"v", "log", "seq", "prev", "at", "actor", "kind", "body", "sig"}
        assert set(data) >= {"v", "log", "seq", "prev", "at", "actor", "kind", "body"}
    assert json.loads(rows[0][2])["prev"] == ZERO_HASH == "sha256:" + "0" * 64
    assert store.info().head == rows[-1][1]


def test_entries_read_back_equal_the_stored_bytes(store: Store, svc: ReviewService, keys: Keys, store_url: str) -> None:
    _busy_log(store, svc, keys)
    with Db(store_url) as db:
        rows = db.entries()
    read = list(store.entries())
    assert [e.raw for e in read] == [raw for _s, _h, raw in rows]
    assert [e.hash for e in read] == [h for _s, h, _r in rows]
    for item in read:
        assert item.to_json() == json.loads(item.raw)
        assert canonical(item.to_json()) == item.raw


def test_every_hash_in_the_log_carries_its_prefix(store: Store, svc: ReviewService, keys: Keys) -> None:
    _busy_log(store, svc, keys)

    def hashes(value: Any, key: str = "") -> list[str]:
        if isinstance(value, dict):
            return [h for k, v in value.items() for h in hashes(v, k)]
        if isinstance(value, list):
            return [h for v in value for h in hashes(v, key)]
        return [value] if key in ("prev", "args_digest", "root") else []

    found = [h for item in store.entries() for h in hashes(item.to_json())]
    assert len(found) > store.size()  # every prev plus the digests
    assert all(HASH.match(h) for h in found), found


def test_append_returns_what_was_stored(store: Store, store_url: str, keys: Keys) -> None:
    before = store.info()
    item = store.append(*admin_draft(store, keys.admin, key_body("x")))
    assert item.seq == before.size and item.prev == before.head
    with Db(store_url) as db:
        assert db.one("SELECT hash, raw FROM signoff_entry WHERE seq = ?", (item.seq,)) == (item.hash, item.raw)
    assert store.info().head == item.hash


def test_build_is_deterministic_and_hashes_as_rfc9162_leaf() -> None:
    fields: dict[str, Any] = dict(
        log="log_x",
        seq=3,
        prev=ZERO_HASH,
        at="2026-11-30T14:00:00.123456Z",
        actor=ALICE,
        kind="review.rejected",
        body={"review": "rv_1", "reason": "nö"},
    )
    one, two = build(**fields), build(**fields)
    assert one.raw == two.raw == canonical({"v": 1, **fields})
    assert one.hash == "sha256:" + hashlib.sha256(b"\x00" + one.raw).hexdigest()
    assert one.hash != "sha256:" + hashlib.sha256(one.raw).hexdigest()  # the 0x00 leaf prefix matters


def test_statement_leaves_out_seq_prev_and_at() -> None:
    body = {"review": "rv_1", "args_digest": "sha256:" + "1" * 64, "rationale": ""}
    # rules version 2 names the log, so a signature made for one log is worth nothing on another
    assert statement("review.approved", ALICE, body, "log_x") == canonical(
        {"log": "log_x", "kind": "review.approved", "actor": ALICE, "body": body}
    )
    assert trust_statement(LogRules("log_x", 2, True), "review.approved", ALICE, body) == statement(
        "review.approved", ALICE, body, "log_x"
    )
    # version 1 (and entries 0 and 1, which set the rules up) leave it out
    assert statement("review.approved", ALICE, body) == canonical(
        {"kind": "review.approved", "actor": ALICE, "body": body}
    )
    assert trust_statement(LogRules("log_x"), "review.approved", ALICE, body) == statement(
        "review.approved", ALICE, body
    )
    a = build(
        log="l", seq=1, prev=ZERO_HASH, at="2026-11-30T14:00:00.000001Z", actor=ALICE, kind="review.approved", body=body
    )
    b = build(
        log="l",
        seq=9,
        prev="sha256:" + "2" * 64,
        at="2027-01-01T00:00:00.000000Z",
        actor=ALICE,
        kind="review.approved",
        body=body,
    )
    assert a.raw != b.raw


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"actor": "alice"}, "actor"),
        ({"actor": "human:has space"}, "actor"),
        ({"kind": "review.teleported"}, "kind"),
        ({"body": ["not", "an", "object"]}, "body"),
    ],
)
def test_build_refuses_malformed_fields(fields: dict[str, Any], words: str) -> None:
    base: dict[str, Any] = dict(
        log="l", seq=0, prev=ZERO_HASH, at="2026-11-30T14:00:00.000000Z", actor=ALICE, kind="key.enrolled", body={}
    )
    with pytest.raises(InvalidEntry) as caught:
        build(**{**base, **fields})
    assert words in str(caught.value) and "expected" in str(caught.value) and "found" in str(caught.value)


def test_build_refuses_numbers_outside_ijson_naming_the_body_path() -> None:
    with pytest.raises(CanonicalFormError) as caught:
        build(
            log="l",
            seq=0,
            prev=ZERO_HASH,
            at="2026-11-30T14:00:00.000000Z",
            actor=ALICE,
            kind="key.enrolled",
            body={"n": [1, float("nan")]},
        )
    assert caught.value.path == "$.body.n[1]"
