"""Four eyes in real headless Chromium (issue 13): two reviewers, each signing with their own passkey,
approve one call; a claim and every approval reach the other reviewer's open page live.

The desk is a real ``desk demo`` (browserkit.py) on http://localhost:PORT; an admin's ``policy.set``
(signed with the admin key ``Store.init_log`` wrote next to the log key) asks two people to approve
every ``transfer*`` call. The demo's scripted ADK agent runs the tool through the bridge's gate, which
proves every approval of the deciding round from the log before the tool runs. Screenshots of the
quorum review page go to test-artifacts/.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browserkit import ARTIFACTS, Demo, register, reviewer_page, running_demo, wait_until
from deskkit import CAROL, PASSWORD, make_env
from livekit import serving

from signoff.audit import ReviewService, open_store
from signoff.audit.canonical import digest
from signoff.audit.decided import prove_decision, review_from_sealed
from signoff.audit.keys import read_private_key
from signoff.audit.store import default_admin_key

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")

FOUR_EYES = {"policy": "four-eyes", "tools": "transfer*", "approvals": 2}
ESCALATING = {"policy": "escalating", "tools": "transfer*", "escalate": {"to_role": "supervisor", "after_seconds": 1}}
ERIN = "human:erin@example.org"  # supervisor: where reviews escalate


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("quorum"), host="localhost") as d:
        store = open_store(d.store_url)
        try:
            admin = read_private_key(default_admin_key(d.dir / "log.key"))
            ReviewService(store).set_policy(FOUR_EYES, admin=admin)
        finally:
            store.close()
        yield d


@pytest.fixture(scope="module")
def quinn(browser: Any, demo: Demo) -> Any:
    page = reviewer_page(browser, demo, "quinn@example.org")
    register(page, demo)
    return page


@pytest.fixture(scope="module")
def rudi(browser: Any, demo: Demo) -> Any:
    page = reviewer_page(browser, demo, "rudi@example.org")
    register(page, demo)
    return page


def _log(demo: Demo, review_id: str) -> tuple[Any, list[Any]]:
    store = open_store(demo.store_url)
    try:
        svc = ReviewService(store)
        return svc.get(review_id), svc.history(review_id)
    finally:
        store.close()


def _held(entries: list[Any], review_id: str) -> dict[str, Any]:
    """The round's args (once decided, the final ones) as the review's entries hold them: what an approval
    signs the digest of (commitments in place of the values, on a log that keeps them beside it)."""
    held = review_from_sealed(review_id, [e for e in entries if e.body.get("review") == review_id], False)
    return dict(held.sealed_round_args if held.sealed_round_args is not None else held.final_args or {})


def _proven(demo: Demo, review_id: str) -> Any:
    store = open_store(demo.store_url)
    try:
        return prove_decision(store, review_id)
    finally:
        store.close()


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_two_passkeys_approve_one_call_and_each_page_shows_the_progress(quinn: Any, rudi: Any, demo: Demo) -> None:
    marker = "four-eyes-" + secrets.token_hex(3)
    args = {"amount": 4200.0, "currency": "EUR", "to_account": "DE89 3704 0044", "memo": marker}
    demo.propose(("transfer_money", args), prompt=f"Pay {marker}")
    review = demo.review_with(marker)
    assert review.approvals_needed == 2

    # rudi watches the queue and the review while quinn works on it.
    rudi.goto(demo.url + "/queue")
    row = rudi.locator(f'tr[data-review="{review.id}"]')
    assert row.locator(".coord .q").inner_text() == "needs 2 approvals"

    quinn.goto(f"{demo.url}/reviews/{review.id}")
    assert quinn.locator("#quorum-line").inner_text() == "0 of 2 approvals"
    assert "approved once 2 different people" in quinn.locator("#approve-note").inner_text()
    quinn.click("#claim-btn")  # "I'm on it"
    quinn.wait_for_selector("#claim-line")
    assert quinn.locator("#claim-line").inner_text().startswith("You are on it until ")
    claim = rudi.locator(f'tr[data-review="{review.id}"] .coord .claim')
    claim.wait_for(timeout=10_000)  # live, in rudi's queue
    until = _log(demo, review.id)[0].claim[1]
    assert claim.inner_text() == f"{quinn.actor} is on it until {until[11:16]} UTC"
    _shot(rudi, "quorum-queue.png")

    queue = rudi.context.new_page()  # rudi keeps the queue open in a second tab
    queue.goto(demo.url + "/queue")
    queue.wait_for_selector("#live[data-state=live]")
    rudi.goto(f"{demo.url}/reviews/{review.id}")
    assert rudi.locator("#claim-line").inner_text() == f"{quinn.actor} is on it until {until[11:16]} UTC"
    assert rudi.locator("#approve-btn").is_enabled()  # a claim is shown, never blocking
    assert rudi.locator("#quorum-line").inner_text() == "0 of 2 approvals"

    quinn.fill("#approve-form textarea[name=rationale]", "Invoice matches the PO")
    quinn.click("#approve-btn")  # signed with quinn's passkey, over round 0
    recorded = quinn.wait_for_selector("#approval-recorded", timeout=15_000)
    assert "1 of 2 approvals" in recorded.inner_text() and "signed with your passkey" in recorded.inner_text()
    assert quinn.locator("#quorum-line").inner_text() == f"1 of 2 approvals: {quinn.actor}"
    assert "You approved this call" in quinn.locator("#quorum-you").inner_text()
    assert quinn.locator("#approve-form").count() == 0 and quinn.locator(".tab[data-tab=approve]").count() == 0
    assert quinn.locator(".tab[data-tab=edit]").count() == 1 and quinn.locator(".tab[data-tab=reject]").count() == 1
    assert quinn.locator("#status").inner_text().lower() == "pending"
    assert quinn.locator("#decision-done").count() == 0
    _shot(quinn, "quorum-1-of-2-approver.png")

    # rudi's open page follows without a reload: the progress, and still "pending".
    rudi.wait_for_function(
        "t => (document.getElementById('quorum-line') || {}).textContent === t",
        arg=f"1 of 2 approvals: {quinn.actor}",
        timeout=10_000,
    )
    assert "yours would be the last" in rudi.locator("#quorum-need").inner_text()
    assert rudi.locator("#closed-live").is_hidden() and rudi.locator("#status").inner_text().lower() == "pending"
    assert rudi.locator("#timeline-card [data-kind='review.approved']").count() == 1
    progress = queue.locator(f'tr[data-review="{review.id}"] .coord .q')
    wait_until(lambda: progress.inner_text() == f"1 of 2 approvals: {quinn.actor}", 10, "the queue row's progress")
    assert queue.locator("#pending-count").inner_text() == "1"  # still waiting: a partial approval closes nothing
    _shot(rudi, "quorum-1-of-2-second.png")
    approved, entries = _log(demo, review.id)
    first = next(e for e in entries if e.kind == "review.approved")
    assert approved.status == "pending" and first.actor == quinn.actor and first.sig["alg"] == "WebAuthn"
    assert first.body["round"] == 0 and first.body["args_digest"] == digest(_held(entries, review.id))

    rudi.click("#approve-btn")  # the second pair of eyes, signed with rudi's passkey
    queue.locator(f'tr[data-review="{review.id}"]').wait_for(state="detached", timeout=15_000)
    queue.close()
    done = rudi.wait_for_selector("#decision-done", timeout=15_000)
    assert "approved" in done.inner_text() and "signed with your passkey" in done.inner_text()
    assert f"2 of 2 approvals: {quinn.actor}" in rudi.locator("#decided-approvals").inner_text()
    run = demo.run_with(marker)
    assert run["args"] == args
    decided, entries = _log(demo, review.id)
    assert decided.status == "approved" and [by for by, _ in decided.approvals] == [quinn.actor, rudi.actor]
    second = entries[[e.seq for e in entries].index(decided.decision_seq)]
    assert second.actor == rudi.actor and second.sig["alg"] == "WebAuthn" and second.body["round"] == 0
    assert _proven(demo, review.id).review.final_args == args
    # quinn's page hears that it was decided.
    quinn.wait_for_selector("#closed-live:not([hidden])", timeout=10_000)
    told = quinn.locator("#closed-live").inner_text()
    assert told.startswith(f"This review is now approved: {rudi.actor} gave the approval it still needed.")


def test_an_edit_starts_a_round_that_the_other_passkey_signs_on_the_changed_args(
    quinn: Any, rudi: Any, demo: Demo
) -> None:
    marker = "four-eyes-edit-" + secrets.token_hex(3)
    args = {"amount": 900.0, "currency": "EUR", "to_account": "ACC-9", "memo": marker}
    demo.propose(("transfer_money", args), prompt=f"Pay {marker}")
    review = demo.review_with(marker)
    queue = rudi.context.new_page()  # rudi's queue, in a second tab: its row follows the edit live
    queue.goto(demo.url + "/queue")
    queue.wait_for_selector("#live[data-state=live]")
    row = queue.locator(f'tr[data-review="{review.id}"]')
    assert row.locator("a.headline .lead").inner_text() == "900.00 EUR to ACC-9"
    rudi.goto(f"{demo.url}/reviews/{review.id}")  # open before the edit: it shows round 1's args

    quinn.goto(f"{demo.url}/reviews/{review.id}")
    quinn.click(".tab[data-tab=edit]")
    assert "An edit starts a new round" in quinn.locator("#edit-note").inner_text()
    quinn.locator('[data-editor="args"] [data-name="amount"] input').fill("90")
    quinn.click("#edit-btn")  # signed: the patch on round 0's args, naming round 0
    recorded = quinn.wait_for_selector("#approval-recorded", timeout=15_000)
    assert "edit and approval" in recorded.inner_text()
    assert "You approved these arguments" in quinn.locator("#quorum-you").inner_text()
    edited = {**args, "amount": 90}

    # rudi's queue row now reads as what will run, the proposal struck through beside it (issue 13).
    row.locator("a.headline .lead del").wait_for(timeout=10_000)
    assert row.locator("a.headline .lead del").inner_text() == "900.00 EUR"
    assert row.locator("a.headline .lead ins").inner_text() == "90.00 EUR"
    _shot(queue, "quorum-queue-edited.png")
    queue.close()

    # rudi's page was showing the old args: it says so, and will not sign them.
    rudi.wait_for_selector("#closed-live:not([hidden])", timeout=10_000)
    assert "changed the arguments" in rudi.locator("#closed-live").inner_text()
    assert rudi.locator("#approve-btn").is_disabled() and rudi.locator("#edit-btn").is_disabled()

    rudi.reload()
    assert rudi.locator("#headline del").inner_text() == "900.00 EUR"
    assert rudi.locator("#headline ins").inner_text() == "90.00 EUR"
    assert rudi.locator("#round-badge").inner_text() == "changed"
    assert f"as {quinn.actor} changed them" in rudi.locator("#args-card h2").inner_text()
    assert rudi.locator("#round-changes").inner_text() == "amount 900 → 90"
    assert '"value": 90' in (rudi.locator("#round-patch").text_content() or "")
    assert "90" in rudi.locator("#args-table").inner_text()
    assert rudi.locator("#quorum-line").inner_text() == f"1 of 2 approvals: {quinn.actor}"
    _shot(rudi, "quorum-round-2.png")
    rudi.click("#approve-btn")  # signs the digest of round 2's args, naming round 1
    rudi.wait_for_selector("#decision-done", timeout=15_000)
    assert demo.run_with(marker)["args"] == edited
    decided, entries = _log(demo, review.id)
    assert decided.status == "edited" and decided.final_args == edited
    last = entries[[e.seq for e in entries].index(decided.decision_seq)]
    assert last.kind == "review.approved" and last.body["round"] == 1
    assert last.body["args_digest"] == digest(_held(entries, review.id))
    wait_until(lambda: _proven(demo, review.id).review.final_args == edited, 5, "the gate's proof")


def test_an_escalation_reaches_the_new_roles_queue_and_the_open_review_live(browser: Any, tmp_path: Path) -> None:
    """A desk served in this process (livekit.py) on a log this test drives: the review escalates while
    erin (role supervisor) watches her empty queue and carol (finance) has the review open."""
    env = make_env(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path, signed=False)
    env.add_reviewer(ERIN, ["supervisor"], ["*"])
    env.set_policy(ESCALATING)
    try:
        with serving(env.app) as base:
            erin = _signed_in(browser, base, ERIN)
            carol = _signed_in(browser, base, CAROL)
            erin.wait_for_selector("#live[data-state=live]")
            review = env.open()[0]
            carol.goto(f"{base}/reviews/{review.id}")
            assert carol.locator("#escalated").count() == 0
            end = time.monotonic() + 10
            while not env.svc.escalate_due():
                assert time.monotonic() < end, "the review never escalated"
                time.sleep(0.1)
            row = erin.locator(f'tr[data-review="{review.id}"]')
            row.wait_for(timeout=10_000)  # new to her: it arrives live, as an opened review would
            assert row.locator(".coord .esc").inner_text() == "escalated to role supervisor"
            assert erin.locator("#pending-count").inner_text() == "1"
            carol.wait_for_selector("#escalated", timeout=10_000)
            assert carol.locator("#escalated").inner_text().startswith("Escalated to role supervisor")
            erin.goto(f"{base}/reviews/{review.id}")
            erin.click("#approve-btn")
            erin.wait_for_selector("#decision-done")
            assert env.svc.get(review.id).decided_by == ERIN
    finally:
        env.desk.store.close()


def _signed_in(browser: Any, base: str, who: str) -> Any:
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(base + "/signin")
    page.fill("input[name=email]", who.removeprefix("human:"))
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/queue")
    return page
