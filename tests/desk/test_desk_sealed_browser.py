"""A sealed log in real headless Chromium (issue 20, SPEC.md "Values beside the log").

``desk demo --sealed-values`` keeps each call's values beside the log, under salted commitments; its
scripted ADK agent runs each tool through the bridge's gate. A reviewer signs with a passkey through
Chromium's CDP virtual authenticator, and the page builds the body the service records (desk.js
``sealedBody``): an approval over the commitments' digest, an edit as the sealed patch with salts it
made, an answer as its commitment. What is proved here:

* the tool runs with the plain values the person saw and signed; the entries hold none of them;
  ``prove_decision`` gives them, and ``audit verify`` passes;
* the page seals exactly as ``signoff.audit.sealing`` does, vector by vector;
* a value changed in ``signoff_value`` behind the service's back: the desk shows none of the review's
  values and records no approval; a page that shows other values than the log committed to refuses to
  sign before it asks the passkey;
* an erased review says when, by whom and why its values were erased, in their place.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from browserkit import ARTIFACTS, Demo, register, reviewer_page, running_demo, wait_until

from signoff.audit import ReviewService, erasure, open_store, sealing
from signoff.audit.canonical import canonical, digest
from signoff.audit.decided import prove_decision
from signoff.audit.keys import read_private_key
from signoff.audit.rules import patched_args
from signoff.audit.verify import verify_store

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("sealed"), host="localhost", sealed=True) as d:
        yield d


@pytest.fixture(scope="module")
def sam(browser: Any, demo: Demo) -> Any:
    page = reviewer_page(browser, demo, "sam@example.org")
    register(page, demo)
    return page


def _store(demo: Demo) -> Any:
    return open_store(demo.store_url)


def decided(demo: Demo, review_id: str) -> tuple[Any, Any]:
    """The decision entry and what the gate proves from the log."""
    store = _store(demo)
    try:
        review = ReviewService(store).get(review_id)
        assert review.decision_seq is not None, f"review {review_id} is still {review.status}"
        return store.entry(review.decision_seq), prove_decision(store, review_id)
    finally:
        store.close()


def opened_call(demo: Demo, review_id: str) -> tuple[dict[str, Any], bytes]:
    """The call as the ``review.opened`` entry holds it, and the entry's bytes."""
    store = _store(demo)
    try:
        entry = store.entry(ReviewService(store).get(review_id).opened_seq)
        return entry.body["call"], bytes(entry.raw)
    finally:
        store.close()


def set_value(demo: Demo, commitment: str, value: Any) -> Any:
    """What a database writer can do behind the service's back: another value for a commitment.
    Returns the value it held."""
    from sqlalchemy import text

    store = _store(demo)
    try:
        with store.write_engine.begin() as conn:
            was = conn.execute(
                text("SELECT value FROM signoff_value WHERE commitment = :c"), {"c": commitment}
            ).scalar_one()
            conn.execute(
                text("UPDATE signoff_value SET value = :v WHERE commitment = :c"),
                {"v": sealing.value_json(value), "c": commitment},
            )
        return json.loads(was)
    finally:
        store.close()


def sign_count(page: Any) -> int:
    found = page.cdp.send("WebAuthn.getCredentials", {"authenticatorId": page.authenticator})["credentials"]
    return sum(int(c.get("signCount", 0)) for c in found)


# -- deciding with a passkey ---------------------------------------------------------------------------


def test_signed_approve_runs_the_tool_with_the_values_shown(sam: Any, demo: Demo) -> None:
    marker = "sealed-approve-" + secrets.token_hex(3)
    args = {"amount": 1234.5, "currency": "EUR", "to_account": f"DE89 {marker}", "memo": f"{marker} 𝔘𝔫𝔦 é\u2028x"}
    demo.propose(("transfer_money", args), prompt=f"Pay {marker}")
    review = demo.review_with(marker)
    call, raw = opened_call(demo, review.id)
    assert marker.encode() not in raw and all(sealing.is_commitment(v) for v in call["args"].values())
    sam.goto(f"{demo.url}/reviews/{review.id}")
    assert f"DE89 {marker}" in sam.locator("#args-table").inner_text()  # revealed from beside the log
    data = json.loads(sam.locator("#review-data").text_content() or "")
    assert data["sealed"] is True and data["sealed_args"] == call["args"] and set(data["round_salts"]) == set(args)
    sam.click("#approve-btn")
    done = sam.wait_for_selector("#decision-done", timeout=15_000)
    assert "signed with your passkey" in done.inner_text()
    assert demo.run_with(marker)["args"] == args  # exactly what was shown and signed
    entry, proven = decided(demo, review.id)
    assert entry.kind == "review.approved" and entry.sig["alg"] == "WebAuthn"
    assert entry.body["args_digest"] == digest(call["args"]) != digest(args)  # over the commitments
    assert proven.review.final_args == args and marker.encode() not in bytes(entry.raw)
    wait_until(lambda: "tool.executed" in demo.review(review.id)[1], 10, "tool.executed on the log")
    sam.goto(f"{demo.url}/reviews/{review.id}")
    sam.wait_for_selector("#o-tool.done", timeout=15_000)
    assert f"DE89 {marker}" in sam.locator("#ran-args").inner_text()


def test_signed_edit_records_the_sealed_patch_and_runs_the_edit(sam: Any, demo: Demo) -> None:
    marker = "sealed-edit-" + secrets.token_hex(3)
    # The agent's order (amount, currency, to_account, memo) is not the canonical one: the page walks the
    # members in the order the service does.
    demo.propose(("transfer_money", {"amount": 900.0, "currency": "EUR", "to_account": "ACC-2", "memo": marker}))
    review = demo.review_with(marker)
    sam.goto(f"{demo.url}/reviews/{review.id}")
    sam.click(".tab[data-tab=edit]")
    edited = {"amount": 90.0, "currency": "EUR", "to_account": "ACC-2b", "memo": f"{marker} (corrected)"}
    sam.click('[data-editor="args"] .mode[data-mode=json]')
    sam.locator("#args-editor").fill(json.dumps(edited, indent=2))
    sam.fill("#edit-form textarea[name=rationale]", "Ten times too much; other account")
    ARTIFACTS.mkdir(exist_ok=True)
    sam.screenshot(path=str(ARTIFACTS / "sealed-browser-edit-sign.png"), full_page=True)
    sam.click("#edit-btn")
    sam.wait_for_selector("#decision-done", timeout=15_000)
    assert demo.run_with(marker)["args"] == edited
    entry, proven = decided(demo, review.id)
    assert entry.kind == "review.edited" and entry.sig["alg"] == "WebAuthn"
    patch = entry.body["patch"]
    assert sorted(op["path"] for op in patch) == ["/amount", "/memo", "/to_account"]
    assert all(op["op"] == "replace" and sealing.is_commitment(op["value"]) for op in patch)
    assert proven.review.final_args == edited and marker.encode() not in bytes(entry.raw)
    sam.goto(f"{demo.url}/reviews/{review.id}")
    assert "/amount" not in sam.locator("#decided-changed").inner_text()  # said as names: amount, memo, …
    assert "ACC-2b" in sam.locator("#o-tool").inner_text()


def test_signed_answer_to_the_tools_own_question_is_sealed(sam: Any, demo: Demo) -> None:
    account = "ACC-" + secrets.token_hex(3)
    demo.propose(("set_daily_limit", {"account": account}))
    review = demo.review_with(account)
    sam.goto(f"{demo.url}/reviews/{review.id}")
    assert "Which daily limit" in sam.locator("#question").inner_text()  # its hint, revealed
    sam.locator('[data-editor="approve-payload"] [data-field][data-name="limit"] input').fill("750")
    sam.click("#approve-btn")
    sam.wait_for_selector("#decision-done", timeout=15_000)
    assert demo.run_with(account)["payload"] == {"limit": 750, "currency": "EUR"}
    entry, proven = decided(demo, review.id)
    assert sealing.is_commitment(entry.body["payload"])
    assert proven.review.answer_payload == {"limit": 750, "currency": "EUR"}


def test_the_page_seals_as_audit_does(sam: Any, demo: Demo) -> None:
    """desk.js ``commit`` and ``sealedEdit`` against ``sealing.commit`` and ``sealing.edit_patch``."""
    sam.goto(f"{demo.url}/queue")
    salt = bytes(range(32))
    for value in ({"b": [1250.0, 0.1, "é"], "a": None}, "Alice Smith", 50, "line\u2028sep 𝔘𝔫𝔦", [True]):
        js = sam.evaluate("([v, s]) => window.signoff.sealing.commit(v, s)", [value, salt.hex()])
        assert js == sealing.commit(value, salt)
    big = "x" * 600
    cases: list[tuple[dict[str, Any], dict[str, Any], list[str] | None]] = [
        ({"to": "Alice", "amount": 50, "memo": "m"}, {"to": "Bob", "amount": 50, "note": "added"}, None),
        ({"to": "Alice", "amount": 50, "memo": "m"}, {"to": "Bob", "amount": 60, "memo": big}, ["to"]),
        ({"to": "Alice", "amount": 50}, {"to": "Alice", "amount": "sealed:not-a-commitment"}, []),
        ({f"k{i:02d}": i for i in range(64)}, {**{f"k{i:02d}": i for i in range(64)}, "k99": 1}, None),
        ({f"k{i:02d}": "y" * 500 for i in range(60)}, {**{f"k{i:02d}": "y" * 500 for i in range(60)}, "k00": "z"}, []),
        ({"to": "Alice"}, {"to": "Alice", "": "whole"}, None),
        ({f"k{i:03d}": i for i in range(70)}, {f"k{i:03d}": i + 1 for i in range(70)}, None),  # sealed whole
    ]
    for index, (before, after, private) in enumerate(cases):
        salts = {name: bytes([index, n % 256]) * 16 for n, name in enumerate([*after, ""])}
        first = {n: bytes([9, i]) * 16 for i, n in enumerate([*before, ""])}
        round_sealed, _kept = sealing.seal_args(before, private, first)
        patch, _kept = sealing.edit_patch(before, after, round_sealed, private, salts)
        final = patched_args(round_sealed, patch)
        data = {
            "args": before,
            "sealed_args": round_sealed,
            "order": list(before),
            "private": private,
            "limits": {"MAX_MEMBERS": sealing.MAX_MEMBERS, "MAX_SEALED_ARGS": sealing.MAX_SEALED_ARGS,
                       "MAX_CLEAR": sealing.MAX_CLEAR},
        }  # fmt: skip
        got = sam.evaluate(
            "([d, a, s]) => window.signoff.sealing.editPatch(d, a, s)",
            [data, after, {n: s.hex() for n, s in salts.items()}],
        )
        assert got["patch"] == patch, index
        assert canonical(got["final"]) == canonical(final), index


# -- values changed behind the service's back ------------------------------------------------------------


def test_a_value_changed_beside_the_log_is_never_shown_or_decided(sam: Any, demo: Demo) -> None:
    marker = "sealed-tamper-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 50.0, "currency": "EUR", "to_account": "ACC-5", "memo": marker}))
    review = demo.review_with(marker)
    call, _raw = opened_call(demo, review.id)
    was = set_value(demo, call["args"]["to_account"], "ATTACKER-1")
    try:
        sam.goto(f"{demo.url}/reviews/{review.id}")
        notice = sam.locator("#values-withheld")
        assert notice.is_visible() and "differs from the record" in notice.inner_text()
        text = sam.locator("main").inner_text()
        assert "ATTACKER-1" not in text and "ACC-5" not in text and marker not in text
        assert sam.locator("#approve-btn").count() == 0 and sam.locator("#edit-btn").count() == 0
        ARTIFACTS.mkdir(exist_ok=True)
        sam.screenshot(path=str(ARTIFACTS / "sealed-browser-tampered.png"), full_page=True)
        sam.goto(f"{demo.url}/queue")
        row = sam.locator(f'tr[data-review="{review.id}"]')
        assert "withheld" in (row.get_attribute("class") or "") and "do not match the record" in row.inner_text()
        assert "ATTACKER-1" not in row.inner_text() and marker not in row.inner_text()
    finally:
        set_value(demo, call["args"]["to_account"], was)
    assert demo.review(review.id)[0].status == "pending"


def test_a_value_changed_after_the_page_showed_it_records_nothing(sam: Any, demo: Demo) -> None:
    marker = "sealed-after-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 60.0, "currency": "EUR", "to_account": "ACC-6", "memo": marker}))
    review = demo.review_with(marker)
    sam.goto(f"{demo.url}/reviews/{review.id}")
    assert "ACC-6" in sam.locator("#args-table").inner_text()
    call, _raw = opened_call(demo, review.id)
    was = set_value(demo, call["args"]["to_account"], "ATTACKER-2")
    try:
        sam.click("#approve-btn")  # what the page shows checks against its own data: it signs; the desk refuses
        notice = sam.wait_for_selector("#values-withheld", timeout=15_000)
        assert "differs from the record" in notice.inner_text()
        assert "ATTACKER-2" not in sam.locator("main").inner_text()
    finally:
        set_value(demo, call["args"]["to_account"], was)
    assert demo.review(review.id)[0].status == "pending"
    assert "review.approved" not in demo.review(review.id)[1]


def test_the_page_refuses_to_sign_values_the_log_did_not_commit_to(sam: Any, demo: Demo) -> None:
    """A page that shows other values than the commitments it is given (a server, or anything between, that
    lies): desk.js checks each value against its commitment and asks the passkey nothing."""
    marker = "sealed-lie-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 70.0, "currency": "EUR", "to_account": "ACC-7", "memo": marker}))
    review = demo.review_with(marker)
    url = f"{demo.url}/reviews/{review.id}"

    def lie(route: Any) -> None:
        page = route.fetch()
        html = page.text().replace("ACC-7", "ATTACKER-3")
        route.fulfill(response=page, body=html)

    sam.route(url, lie)
    try:
        sam.goto(url)
        assert "ATTACKER-3" in sam.locator("#args-table").inner_text()
        before = sign_count(sam)
        sam.click("#approve-btn")
        status = sam.locator("#sign-status.bad")
        status.wait_for(timeout=15_000)
        said = status.inner_text()
        assert "Not signed" in said and "to_account" in said and "Nothing was sent" in said
        assert sign_count(sam) == before  # the passkey was never asked
        sam.click(".tab[data-tab=edit]")
        sam.locator('[data-editor="args"] [data-field][data-name="amount"] input').fill("7")
        sam.click("#edit-btn")
        wait_until(lambda: "Not signed" in status.inner_text() and sign_count(sam) == before, 10, "edit refused")
    finally:
        sam.unroute(url)
    assert demo.review(review.id)[0].status == "pending"


# -- erased ------------------------------------------------------------------------------------------------


def test_an_erased_review_says_when_by_whom_and_why(sam: Any, demo: Demo) -> None:
    marker = "sealed-erase-" + secrets.token_hex(3)
    demo.propose(("send_email", {"to": f"{marker}@example.com", "subject": "Your data", "body": "Hello"}))
    review = demo.review_with(marker)
    sam.goto(f"{demo.url}/reviews/{review.id}")
    sam.click("#approve-btn")
    sam.wait_for_selector("#decision-done", timeout=15_000)
    demo.run_with(marker)
    # Done: the tool ran and the agent replied (a reply written after the erasure would be a new value).
    wait_until(lambda: "tool.executed" in demo.review(review.id)[1], 10, "tool.executed on the log")
    sam.wait_for_selector("#o-reply.done", timeout=20_000)  # the outcome card follows the run live
    store = _store(demo)
    try:
        admin = read_private_key(demo.dir / "log.admin.key")
        erasure.erase(store, review.id, reason="The customer asked (GDPR Art. 17)", admin=admin)
    finally:
        store.close()
    sam.goto(f"{demo.url}/reviews/{review.id}")
    notice = sam.locator("#values-erased").inner_text()
    assert re.search(r"Values erased on \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC by admin:root: The customer asked", notice)
    text = sam.locator("main").inner_text()
    assert marker not in text and "sealed:sha256" not in text and sam.locator("#args-erased").is_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    sam.screenshot(path=str(ARTIFACTS / "sealed-browser-erased.png"), full_page=True)
    sam.goto(f"{demo.url}/decided?q={review.id}")
    row = sam.locator(f'tr[data-review="{review.id}"]').inner_text()
    assert "Values erased" in row and marker not in row


def test_the_sealed_log_verifies(demo: Demo) -> None:
    store = _store(demo)
    try:
        report = verify_store(store)
        assert report.ok, report.failure
        assert any("beside the log" in note for note in report.notes), report.notes
    finally:
        store.close()


def test_the_sealed_export_verifies_offline(demo: Demo, tmp_path: Any) -> None:
    """``audit export`` (the entries, and the values beside them in a file of their own), then ``audit verify``."""
    import os
    import subprocess
    import sys

    from browserkit import ROOT

    exported = tmp_path / "sealed.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    audit = [sys.executable, "-m", "signoff.audit.cli"]
    subprocess.run([*audit, "--store", demo.store_url, "export", "-o", str(exported)], check=True, cwd=ROOT, env=env)
    verified = subprocess.run([*audit, "verify", str(exported)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
