"""Bounds on every span the record accepts, and logs that hold one from before them (issue 34 item 2).

A retention of ``1e999d`` was signed into force and then made every ``open_frontier`` fail (its
``retain_seconds`` was infinite); ``3000000d`` made ``audit verify`` and ``audit retention run`` fail
with ``OverflowError`` for good. Each span is now bounded at the write (100 years, ``limits.MAX_SECONDS``)
with an error that names the field and the bound; a log that already holds a longer one still takes new
entries and still verifies, its times stopping at ``entry.END_OF_TIME``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from auditkit import ADMIN, AGENT, ALICE, FakeClock, Keys, call, refused, run_cli

from signoff.audit import InvalidEntry, Policy, ReviewService, Store, decision, erasure
from signoff.audit.cli_delegate import parse_until
from signoff.audit.entry import END_OF_TIME, format_time, later
from signoff.audit.errors import UnusableInput
from signoff.audit.limits import MAX_DAYS, MAX_SECONDS
from signoff.audit.verify import verify_store

BOUND = f"at most {MAX_SECONDS:,.0f} ({MAX_DAYS:,} days)"


def _refused(store: Store, url: str, action: Any, *words: str) -> None:
    refused(store, url, InvalidEntry, action, *words)


@pytest.mark.parametrize(
    ("change", "field", "bound"),
    [
        ({"retain_values": "1e999d"}, "policy.retain_values", f"at most {MAX_DAYS:,}d"),
        ({"retain_values": "3000000d"}, "policy.retain_values", f"at most {MAX_DAYS:,}d"),
        ({"retain_values": MAX_SECONDS + 1}, "policy.retain_values", f"at most {MAX_DAYS:,}d"),
        ({"deadline_seconds": MAX_SECONDS + 1}, "policy.deadline_seconds", BOUND),
        ({"claim_seconds": 1e300}, "policy.claim_seconds", BOUND),
        ({"escalate": {"to_role": "boss", "after_seconds": 1e12}}, "policy.escalate.after_seconds", BOUND),
    ],
)
def test_a_policy_span_beyond_the_bound_is_refused_by_name_and_writes_nothing(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, change: dict[str, Any], field: str, bound: str
) -> None:
    body = {"policy": "long", "tools": "*", **change}
    _refused(store, store_url, lambda: svc.set_policy(body, admin=keys.admin), field, bound)


def test_a_policy_at_the_bound_is_taken(svc: ReviewService, keys: Keys) -> None:
    body = {
        "policy": "longest",
        "tools": "*",
        "retain_values": f"{MAX_DAYS}d",
        "deadline_seconds": MAX_SECONDS,
        "claim_seconds": MAX_SECONDS,
        "escalate": {"to_role": "boss", "after_seconds": MAX_SECONDS},
    }
    svc.set_policy(body, admin=keys.admin)
    front = svc.open_frontier([call("c-longest")], actor=AGENT)
    review = svc.get(front.reviews[0].id)
    assert review.deadline is not None and review.deadline.year == 2126  # 100 years on the test clock
    assert verify_store(svc.store).ok


def test_an_apps_own_deadline_and_a_claim_beyond_the_bound_are_refused(
    svc: ReviewService, store: Store, store_url: str
) -> None:
    _refused(
        store,
        store_url,
        lambda: svc.open_frontier([call("c-app")], actor=AGENT, policies=[Policy(deadline_seconds=1e12)]),
        "policies[0].deadline_seconds",
        BOUND,
    )
    front = svc.open_frontier([call("c-claim")], actor=AGENT)
    rid = front.reviews[0].id
    _refused(store, store_url, lambda: svc.claim(rid, reviewer=ALICE, seconds=1e12), "$.seconds", BOUND)


def test_a_delegation_span_beyond_the_bound_is_unusable_input() -> None:
    now = datetime(2026, 12, 8, tzinfo=UTC)
    assert parse_until(f"{MAX_DAYS}d", now).year == 2126
    with pytest.raises(UnusableInput, match=f"--until: expected a span of at most {MAX_DAYS:,}d"):
        parse_until("99999999d", now)


def test_later_stops_at_the_end_of_time() -> None:
    start = datetime(2026, 12, 8, tzinfo=UTC)
    assert later(start, 60).isoformat() == "2026-12-08T00:01:00+00:00"
    for span in (3000000 * 86400.0, 1e300, float("inf"), float("nan")):
        assert later(start, span) == END_OF_TIME
    assert format_time(END_OF_TIME) == "9999-12-31T23:59:59.999999Z"


def test_the_cli_refuses_an_endless_retention_and_says_the_bound(store: Store, store_url: str, key_path: Path) -> None:
    """The report's command, word for word: exit 2, one line naming the field and the bound, nothing written."""
    admin = str(key_path.with_name(key_path.stem + ".admin" + key_path.suffix))
    size = store.size()
    for span in ("1e999d", "3000000d"):
        done = run_cli(
            store_url, None, "policy", "set", "P", "--tools", "*", "--retain-values", span, "--admin-key", admin
        )
        assert done.returncode == 2, (done.stdout, done.stderr)
        [line] = done.stderr.strip().splitlines()
        assert "policy.retain_values" in line and f"at most {MAX_DAYS:,}d" in line and span in line, line
    assert store.size() == size


def _written_before_the_bound(store: Store, keys: Keys, body: dict[str, Any]) -> None:
    """``policy.set`` as a version without the bound wrote it: the admin's signature, no span check."""
    store.transact(
        lambda tx: tx.append(ADMIN, "policy.set", body, tx.signature(ADMIN, "policy.set", body, None, keys.admin))
    )


@pytest.mark.parametrize(
    "long",
    [
        {"retain_values": "1e999d"},
        {"retain_values": "3000000d"},
        {"deadline_seconds": 1e12, "escalate": {"to_role": "teller", "after_seconds": 1e12}, "claim_seconds": 1e12},
    ],
    ids=["endless-retention", "retention-past-9999", "deadline-escalation-claim"],
)
def test_a_log_that_holds_a_span_from_before_the_bound_still_works_and_verifies(
    svc: ReviewService, keys: Keys, store: Store, store_url: str, clock: FakeClock, long: dict[str, Any]
) -> None:
    """The write path opens, claims, decides and runs under it; ``audit verify`` and ``audit retention
    run`` exit 0 (nothing is due), where they failed with OverflowError for good."""
    _written_before_the_bound(store, keys, {"policy": "old", "tools": "*", **long})
    front = svc.open_frontier([call("c-old")], actor=AGENT)
    review = svc.get(front.reviews[0].id)
    if "deadline_seconds" in long:
        assert review.deadline == END_OF_TIME
        assert svc.claim(review.id, reviewer=ALICE) == format_time(END_OF_TIME)
    svc.approve(review.id, reviewer=ALICE, sig=decision.prepare_approve(review).sign(keys.alice, store.log_id, ALICE))
    svc.claim_resume(front.id, actor=AGENT)
    svc.record_execution(review.id, actor=AGENT, args=review.call.args, result={"ok": True})
    clock.advance(400 * 86400)
    assert [item for item in erasure.retention_run(store) if item.entry is not None] == []
    report = verify_store(store)
    assert report.ok, report.failure
    assert run_cli(store_url, None, "verify").returncode == 0
    ran = run_cli(store_url, None, "retention", "run", "--json")
    assert ran.returncode == 0, ran.stderr
    assert all("seq" not in row for row in json.loads(ran.stdout).get("erased", [])), ran.stdout
