"""Verification: the report of an intact log, incremental checking from a kept checkpoint,
and the review rules 1-6 re-checked over the log. Rule-breaking entries are forged straight
into the database (well linked and hashed, and signed with the key of the actor they name
wherever that actor has one, so only the rule can catch them)."""

from __future__ import annotations

from typing import Any

import pytest
from auditkit import (
    ADMIN,
    AGENT,
    ALICE,
    BOB,
    CAROL,
    MALLORY,
    TRANSFER_SCHEMA,
    Db,
    FakeClock,
    Keys,
    call,
    forge_append,
    truncate,
)

from signoff.audit import Policy, ReviewService, Signer, Store, digest, merkle
from signoff.audit.verify import verify_store


def test_intact_report(svc: ReviewService, keys: Keys, store: Store, key_path: Any) -> None:
    front = svc.open_frontier([call("v1"), call("v2")], actor=AGENT)
    a, b = front.reviews
    svc.approve(a.id, reviewer=ALICE, signer=keys.alice)
    store.checkpoint(key_path)
    svc.reject(b.id, reviewer=ALICE, reason="no", signer=keys.alice)
    svc.claim_resume(front.id, actor=AGENT)
    store.checkpoint(key_path)
    report = verify_store(store)
    assert report.ok and report.failure is None
    leaves = [bytes.fromhex(h[7:]) for _s, h, _r in store.iter_raw()]
    assert (report.log, report.size, report.checked_from, report.checkpoints) == (store.log_id, len(leaves), 0, 2)
    assert report.root == "sha256:" + merkle.root_from_leaves(leaves).hex()
    as_json = report.to_json()
    assert as_json["ok"] is True and "failure" not in as_json


def test_incremental_verification_from_a_kept_checkpoint(
    svc: ReviewService, keys: Keys, store: Store, key_path: Any
) -> None:
    front = svc.open_frontier([call("i1"), call("i2")], actor=AGENT)
    a, b = front.reviews
    svc.approve(a.id, reviewer=ALICE, signer=keys.alice)
    kept = store.checkpoint(key_path)
    # later entries touch reviews and frontiers opened before the checkpoint
    svc.reject(b.id, reviewer=ALICE, reason="no", signer=keys.alice)
    svc.claim_resume(front.id, actor=AGENT)
    svc.record_execution(a.id, actor=AGENT, args={"amount": 100, "to": "bob"})
    full = verify_store(store, against=kept)
    assert full.ok and full.checked_from == 0  # by default the whole log is reread
    report = verify_store(store, against=kept, incremental=True)
    assert report.ok, report.failure
    assert report.checked_from == kept.size and report.size == store.size()
    assert report.notes
    latest = store.checkpoint(key_path)
    same = verify_store(store, against=latest, incremental=True)
    # nothing newer but the log's record of that checkpoint itself: only that entry is checked
    assert same.ok and same.checked_from == latest.size == store.size() - 1


def test_incremental_verification_reads_the_prefix_by_index_not_by_scan(
    svc: ReviewService, keys: Keys, store: Store, key_path: Any
) -> None:
    """O(new), not O(log): the trust entries before the kept checkpoint are read by kind (revision 0005's
    index) and a review's by subject, page after page; no read of them walks the whole log (SQLite's plans)."""
    if store.backend != "sqlite":
        pytest.skip("query plans are read with SQLite's EXPLAIN QUERY PLAN")
    from sqlalchemy import event

    front = svc.open_frontier([call("p1"), call("p2")], actor=AGENT)
    svc.approve(front.reviews[0].id, reviewer=ALICE, signer=keys.alice)
    kept = store.checkpoint(key_path)
    svc.approve(front.reviews[1].id, reviewer=ALICE, signer=keys.alice)
    svc.claim_resume(front.id, actor=AGENT)
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if "FROM signoff_entry" in statement and ("kind = ?" in statement or "subject = ?" in statement):
            seen.append((statement, parameters))

    event.listen(store.read_engine, "before_cursor_execute", record)
    try:
        assert verify_store(store, against=kept, incremental=True).ok
    finally:
        event.remove(store.read_engine, "before_cursor_execute", record)
    assert any("kind = ?" in s for s, _p in seen) and any("subject = ?" in s for s, _p in seen)
    kinds = [p[1] for s, p in seen if "kind = ?" in s]
    assert any(kinds.count(k) > 1 for k in kinds)  # a kind read page after page (the next page after a cursor)
    with store.read_engine.connect() as conn:
        for statement, parameters in seen:
            plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters))
            assert "ix_signoff_entry_kind" in plan or "ix_signoff_entry_subject" in plan, (statement, plan)


def test_incremental_verification_still_checks_the_rules_after_the_checkpoint(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, key_path: Any
) -> None:
    front = svc.open_frontier([call("j1")], actor=AGENT)
    review = front.reviews[0]
    svc.approve(review.id, reviewer=ALICE, signer=keys.alice)
    kept = store.checkpoint(key_path)
    with Db(store_url) as db:  # signed by alice herself: only the rule can catch it
        forged = forge_append(
            db, ALICE, "review.rejected", {"review": review.id, "reason": "second outcome"}, signer=keys.alice
        )
    for incremental in (False, True):
        report = verify_store(store, against=kept, incremental=incremental)
        assert not report.ok and report.failure is not None
        assert (report.failure.seq, report.failure.rule) == (forged.seq, "review rule 1")


def test_pinned_log_key(store: Store, svc: ReviewService) -> None:
    assert verify_store(store, pinned_key=store.public_key).ok
    report = verify_store(store, pinned_key=Signer.generate().public)
    assert not report.ok and report.failure is not None
    assert (report.failure.seq, report.failure.rule) == (0, "log key")


# -- the rules, re-checked over the log ---------------------------------------------------


KEYED_AGENT, KEYED_SERVICE = "agent:keyed", "service:keyed"


@pytest.fixture
def world(svc: ReviewService, keys: Keys, store: Store, clock: FakeClock) -> dict[str, Any]:
    """A log with a review in every state, for forging the next entry; an agent, a service and mallory
    (who is no reviewer) hold keys the admin enrolled, so their forged entries can be signed too."""
    for actor in (KEYED_AGENT, KEYED_SERVICE, MALLORY):
        keys.people[actor] = Signer.generate()
        svc.enroll_key(actor, keys.people[actor].public, admin=keys.admin)
    pending = svc.open_frontier(
        [call("w1", tool_schema=TRANSFER_SCHEMA), call("w2")], actor=AGENT, policies=Policy(deadline_seconds=60)
    )
    p1, p2 = pending.reviews
    decided = svc.open_frontier([call("w3"), call("w4")], actor=AGENT)
    approved, rejected = decided.reviews
    svc.approve(approved.id, reviewer=ALICE, signer=keys.alice)
    svc.reject(rejected.id, reviewer=ALICE, reason="no", signer=keys.alice)
    done = svc.open_frontier([call("w5")], actor=AGENT)
    svc.approve(done.reviews[0].id, reviewer=ALICE, signer=keys.alice)
    svc.claim_resume(done.id, actor=AGENT)
    assert verify_store(store).ok
    return {
        "keys": keys,
        "p1": p1,
        "p2": p2,
        "pending": pending,
        "approved": approved,
        "rejected": rejected,
        "decided": decided,
        "done": done,
        "deadline": p1.deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if p1.deadline else "",
    }


Forgery = tuple[str, str, Any, dict[str, Any], str]  # actor, kind, body, options, expected rule


def _forgeries(w: dict[str, Any]) -> dict[str, Forgery]:
    p1, approved, rejected = w["p1"], w["approved"], w["rejected"]
    keys: Keys = w["keys"]

    def by(actor: str) -> dict[str, Any]:  # signed with the actor's own key
        return {"signer": keys.of(actor)}

    ok_approval = {"review": p1.id, "args_digest": p1.args_digest, "rationale": ""}
    opened: dict[str, Any] = {
        "review": "rv_" + "f" * 16,
        "frontier": "fr_" + "f" * 16,
        "policy": {"role": None, "deadline_seconds": None},
        "deadline": None,
        "call": {**call("new").to_json()},
    }
    return {
        # rule 2, even for an agent, a service or a stranger who signs with a key the admin enrolled
        "agent-approves": (KEYED_AGENT, "review.approved", ok_approval, by(KEYED_AGENT), "review rule 2"),
        "service-approves": (KEYED_SERVICE, "review.approved", ok_approval, by(KEYED_SERVICE), "review rule 2"),
        "unenrolled-approves": (MALLORY, "review.approved", ok_approval, by(MALLORY), "review rule 2"),
        "disabled-approves": (CAROL, "review.approved", ok_approval, by(CAROL), "review rule 2"),
        "tool-not-covered": (BOB, "review.approved", ok_approval, by(BOB), "review rule 2"),
        # ... and a decision without the decider's signature, on a log that requires one
        "unsigned-agent-approves": (AGENT, "review.approved", ok_approval, {}, "signature"),
        "unsigned-approval": (ALICE, "review.approved", ok_approval, {}, "signature"),
        "second-outcome": (
            ALICE,
            "review.rejected",
            {"review": approved.id, "reason": "changed my mind"},
            by(ALICE),
            "review rule 1",
        ),
        "unknown-review": (
            ALICE,
            "review.approved",
            {**ok_approval, "review": "rv_" + "0" * 16},
            by(ALICE),
            "review rule 1",
        ),
        "after-deadline": (ALICE, "review.approved", ok_approval, {"at": w["deadline"], **by(ALICE)}, "review rule 4"),
        "approved-other-args": (
            ALICE,
            "review.approved",
            {**ok_approval, "args_digest": digest({"amount": 1})},
            by(ALICE),
            "review rule",
        ),
        "edit-digest-mismatch": (
            ALICE,
            "review.edited",
            {
                "review": p1.id,
                "patch": [{"op": "replace", "path": "/amount", "value": 1}],
                "args_digest": p1.args_digest,
                "rationale": "",
            },
            by(ALICE),
            "review rule 3",
        ),
        "edit-patch-fails": (
            ALICE,
            "review.edited",
            {
                "review": p1.id,
                "patch": [{"op": "remove", "path": "/nope"}],
                "args_digest": p1.args_digest,
                "rationale": "",
            },
            by(ALICE),
            "review rule 3",
        ),
        "edit-breaks-schema": (
            ALICE,
            "review.edited",
            {
                "review": p1.id,
                "patch": [{"op": "remove", "path": "/to"}],
                "args_digest": digest({"amount": 100}),
                "rationale": "",
            },
            by(ALICE),
            "review rule 3",
        ),
        "reject-without-reason": (
            ALICE,
            "review.rejected",
            {"review": p1.id, "reason": ""},
            by(ALICE),
            "review rule 1",
        ),
        "expire-early": ("service:signoff", "review.expired", {"review": p1.id}, {}, "review rule 4"),
        "human-withdraws": (ALICE, "review.withdrawn", {"review": p1.id, "reason": "x"}, by(ALICE), "review rule 2"),
        "resume-undecided": (
            AGENT,
            "run.resumed",
            {
                "frontier": w["pending"].id,
                "reviews": [r.id for r in w["pending"].reviews],
                "invocation": "inv-1",
                "session": "sess-1",
            },
            {},
            "review rule 5",
        ),
        "resume-twice": (
            AGENT,
            "run.resumed",
            {
                "frontier": w["done"].id,
                "reviews": [r.id for r in w["done"].reviews],
                "invocation": "inv-1",
                "session": "sess-1",
            },
            {},
            "review rule 5",
        ),
        "resume-partial-list": (
            AGENT,
            "run.resumed",
            {"frontier": w["decided"].id, "reviews": [approved.id], "invocation": "inv-1", "session": "sess-1"},
            {},
            "review rule 5",
        ),
        "execute-rejected": (
            AGENT,
            "tool.executed",
            {"review": rejected.id, "args_digest": rejected.args_digest},
            {},
            "review rule 6",
        ),
        "execute-pending": (
            AGENT,
            "tool.executed",
            {"review": p1.id, "args_digest": p1.args_digest},
            {},
            "review rule 6",
        ),
        "execute-other-args": (
            AGENT,
            "tool.executed",
            {"review": approved.id, "args_digest": digest({"amount": 1})},
            {},
            "review rule 6",
        ),
        "execute-before-resume": (
            AGENT,
            "tool.executed",
            {"review": approved.id, "args_digest": approved.args_digest},
            {},
            "review rule 6",
        ),
        "human-opens": (ALICE, "review.opened", opened, by(ALICE), "review rule 2"),
        "reopen-same-id": (AGENT, "review.opened", {**opened, "review": p1.id}, {}, "review rule 1"),
        "open-wrong-digest": (
            AGENT,
            "review.opened",
            {**opened, "call": {**opened["call"], "args_digest": digest({})}},
            {},
            "args digest",
        ),
        # enrolment: only an admin: actor signing with an enrolled admin key
        "non-admin-enrols": (
            ALICE,
            "reviewer.enrolled",
            {"reviewer": MALLORY, "roles": ["admin"], "tools": ["*"]},
            by(ALICE),
            "enrolment authority",
        ),
        "service-enrols": (
            "service:signoff",
            "reviewer.enrolled",
            {"reviewer": MALLORY, "roles": ["teller"], "tools": ["*"]},
            {},
            "enrolment authority",
        ),
        "service-enrols-a-key": (
            "service:signoff",
            "key.enrolled",
            {"actor": ALICE, "key": Signer.generate().public, "alg": "Ed25519"},
            {},
            "enrolment authority",
        ),
        "reviewer-enrols-own-key": (
            ALICE,
            "key.enrolled",
            {"actor": ALICE, "key": Signer.generate().public, "alg": "Ed25519"},
            by(ALICE),
            "enrolment authority",
        ),
        "admin-without-signature": (
            ADMIN,
            "reviewer.enrolled",
            {"reviewer": MALLORY, "roles": ["teller"], "tools": ["*"]},
            {},
            "signature",
        ),
        "service-revokes": (
            "service:signoff",
            "key.revoked",
            {"actor": ALICE, "key": keys.alice.fingerprint, "reason": "x"},
            {},
            "enrolment authority",
        ),
        "disable-unknown": (ADMIN, "reviewer.disabled", {"reviewer": MALLORY, "reason": "x"}, by(ADMIN), "reviewer"),
        "unknown-signer": (
            ALICE,
            "review.rejected",
            {"review": p1.id, "reason": "r"},
            {"sig": Signer.generate().sign(b"x")},
            "signature",
        ),
        "log-checkpoint-by-agent": (
            AGENT,
            "log.checkpoint",
            {"size": 1, "root": "sha256:" + "0" * 64, "at": "2026-11-30T12:00:00.000000Z", "sig": {}},
            {},
            "enrolment authority",
        ),
        "unknown-kind": (ALICE, "review.teleported", {}, {"override": {}}, "entry kind"),
        "bad-actor": ("alice", "review.rejected", {"review": p1.id, "reason": "r"}, {"override": {}}, "actor"),
        "extra-field": (
            ALICE,
            "review.rejected",
            {"review": p1.id, "reason": "r"},
            {"override": {"note": "hi"}},
            "entry fields",
        ),
        "other-log": (
            ALICE,
            "review.rejected",
            {"review": p1.id, "reason": "r"},
            {"override": {"log": "log_other"}},
            "log id",
        ),
        "version-2": (
            ALICE,
            "review.rejected",
            {"review": p1.id, "reason": "r"},
            {"override": {"v": 2}},
            "entry version",
        ),
        "bad-time": (
            ALICE,
            "review.rejected",
            {"review": p1.id, "reason": "r"},
            {"override": {"at": "yesterday"}},
            "timestamp",
        ),
        "body-not-object": (ALICE, "review.rejected", ["r"], {"override": {}}, "entry body"),
        "wrong-prev": (
            ALICE,
            "review.rejected",
            {"review": p1.id, "reason": "r"},
            {"override": {"prev": "sha256:" + "1" * 64}},
            "prev link",
        ),
        "wrong-seq": (ALICE, "review.rejected", {"review": p1.id, "reason": "r"}, {"override": {"seq": 99}}, "seq"),
    }


def test_every_rule_is_checked_again_over_the_log(world: dict[str, Any], store: Store, store_url: str) -> None:
    size = store.size()
    failures: list[str] = []
    with Db(store_url) as db:
        for name, (actor, kind, body, options, rule) in _forgeries(world).items():
            forged = forge_append(db, actor, kind, body, **options)
            report = verify_store(store)
            found = report.failure
            if report.ok or found is None or found.seq != forged.seq or not found.rule.startswith(rule):
                failures.append(f"{name}: expected seq {forged.seq} {rule!r}, found {found}")
            truncate(db, size)
    assert verify_store(store).ok
    assert not failures, "\n".join(failures)


def test_a_rule_abiding_entry_written_behind_the_services_back_fails_the_projection_check(
    world: dict[str, Any], store: Store, store_url: str
) -> None:
    """An approval that follows every rule but was not written through the service (so the
    queue never saw it) is caught by the projection check, at that entry's seq."""
    p2 = world["p2"]
    with Db(store_url) as db:
        forged = forge_append(
            db,
            ALICE,
            "review.approved",
            {"review": p2.id, "args_digest": p2.args_digest, "rationale": ""},
            signer=world["keys"].alice,
        )
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert report.failure.seq == forged.seq and "projection" in report.failure.rule


def test_failure_message_says_expected_and_found(world: dict[str, Any], store: Store, store_url: str) -> None:
    with Db(store_url) as db:
        forge_append(
            db,
            KEYED_AGENT,
            "review.approved",
            {"review": world["p1"].id, "args_digest": world["p1"].args_digest, "rationale": ""},
            signer=world["keys"].of(KEYED_AGENT),
        )
    report = verify_store(store)
    assert report.failure is not None
    text = str(report.failure)
    assert text.startswith(f"seq {report.failure.seq}: review rule 2") and "expected" in text and "found" in text
    payload = report.to_json()["failure"]
    assert payload["seq"] == report.failure.seq and payload["rule"] == "review rule 2" and payload["found"]


def test_an_enrolled_key_that_is_not_an_ed25519_key_fails_verification(
    world: dict[str, Any], store: Store, store_url: str
) -> None:
    with Db(store_url) as db:  # the admin's own (signed) entry: only the key itself is wrong
        forged = forge_append(
            db,
            ADMIN,
            "key.enrolled",
            {"actor": AGENT, "key": "ed25519:AAAA", "alg": "Ed25519"},
            signer=world["keys"].admin,
        )
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert (report.failure.seq, report.failure.rule) == (forged.seq, "key enrolment")
