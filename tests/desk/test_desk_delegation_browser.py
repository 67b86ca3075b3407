"""Delegation in real Chromium (issue 22 §3), each step signed with a passkey (a CDP virtual authenticator):
Alice, away next week, lends her finance role to Bob on her Account page; Bob, an observer who decides
nothing of his own, then finds her transfer in his queue, reads "You decide this for alice", and approves it
with his own passkey. The tool runs with what he signed, the log shows "Bob, for Alice", and ``audit verify``
exits 0. Alice then ends the delegation, and Bob's queue no longer shows her reviews.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from browserkit import ARTIFACTS, ROOT, Demo, register, reviewer_page, running_demo, wait_until

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("delegation"), host="localhost") as d:
        yield d


def _observer(browser: Any, demo: Demo, email: str) -> Any:
    from browserkit import sign_in, with_authenticator

    code = demo.add_reviewer(email, ["observer"], [])
    page = sign_in(browser, demo, email, code, new_password=f"{email} new password", setup=with_authenticator)
    page.code, page.actor = code, "human:" + email
    return page


def test_a_delegate_decides_for_the_delegator_with_their_own_passkey(browser: Any, demo: Demo) -> None:
    tag = secrets.token_hex(2)
    alice = reviewer_page(browser, demo, f"alice-{tag}@example.org")
    register(alice, demo)
    bob = _observer(browser, demo, f"bob-{tag}@example.org")
    register(bob, demo)

    marker = "lend-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 75.0, "currency": "EUR", "to_account": "NL02", "memo": marker}))
    review = demo.review_with(marker)
    bob.goto(f"{demo.url}/reviews/{review.id}")  # an observer reads it, and may not decide it
    assert bob.locator("#observer-note").is_visible() and bob.locator("#decide").count() == 0

    # Alice lends finance to Bob until the day after tomorrow, signing with her passkey.
    alice.goto(demo.url + "/account#delegations")
    alice.click("#delegate-box summary")
    alice.select_option("#delegate-form [name=delegate]", bob.actor)
    alice.uncheck("#delegate-form [name=roles][value=ops]")
    until = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    alice.fill("#delegate-form [name=until]", until)
    alice.fill("#delegate-form [name=reason]", "on leave")
    alice.click("#delegate-btn")
    alice.wait_for_selector("#delegated")
    assert bob.actor in alice.locator("#delegation-list").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    alice.locator("#delegations").screenshot(path=str(ARTIFACTS / "delegation-account.png"))

    from signoff.audit import ReviewService, open_store

    store = open_store(demo.store_url)
    try:
        [granted] = [d for d in ReviewService(store).delegations() if d.delegate == bob.actor]
        entry = store.entry(granted.seq)
        assert (entry.actor, entry.sig["alg"], granted.roles) == (alice.actor, "WebAuthn", ("finance",))
        assert granted.until == f"{until}T00:00:00.000000Z"
    finally:
        store.close()

    # Bob now decides it, for Alice, with his own passkey.
    bob.goto(f"{demo.url}/reviews/{review.id}")
    note = bob.locator("#acting-for")
    assert note.is_visible() and alice.actor in note.inner_text()
    bob.fill("#approve-form [name=rationale]", "Alice is away; invoice on file")
    bob.click("#approve-btn")
    bob.wait_for_url(f"**/reviews/{review.id}?done=approved")
    run = demo.run_with(marker)
    assert run["args"]["memo"] == marker and run["args"]["amount"] == 75.0
    outcome = bob.locator("#outcome").inner_text()
    assert f"{bob.actor}, for {alice.actor}" in outcome.replace("\n", " "), outcome
    bob.screenshot(path=str(ARTIFACTS / "delegation-decided.png"), full_page=True)
    got, kinds = demo.review(review.id)
    assert got.status == "approved" and got.acting_for(got.decision_seq) == alice.actor and "tool.executed" in kinds
    verified = subprocess.run(
        [sys.executable, "-m", "signoff.audit.cli", "--store", demo.store_url, "verify"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr

    # Alice ends it; Bob's next look shows none of her reviews to decide.
    alice.goto(demo.url + "/account#delegations")
    alice.fill(".delegation-revoke [name=reason]", "back early")
    alice.click(".delegation-revoke button[type=submit]")
    alice.wait_for_selector("#delegation-revoked")
    marker2 = "lend2-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 5.0, "currency": "EUR", "to_account": "NL02", "memo": marker2}))
    second = demo.review_with(marker2)

    def refused() -> bool:
        bob.goto(f"{demo.url}/reviews/{second.id}")
        return bob.locator("#acting-for").count() == 0 and bob.locator("#decide").count() == 0

    wait_until(refused, 10, "Bob offered no decision once the delegation ended")


def test_a_standing_rule_is_proposed_from_a_review_with_a_passkey(browser: Any, demo: Demo) -> None:
    """Issue 22 §5 in the browser: "Allow calls like this from now on" previews the CEL rule, and the
    reviewer's passkey signs the proposal; the Rules page shows it waiting for an administrator."""
    tag = secrets.token_hex(2)
    carol = reviewer_page(browser, demo, f"carol-{tag}@example.org")
    register(carol, demo)
    marker = "rule-" + secrets.token_hex(3)
    demo.propose(("send_email", {"to": f"{marker}@partner.example", "subject": "Invoice", "body": "Hi"}))
    review = demo.review_with(marker)
    carol.goto(f"{demo.url}/reviews/{review.id}")
    carol.click("#proposal summary")
    assert carol.locator("input[name='value:to']").input_value() == "@partner.example"
    carol.check("#proposal-form input[name=cond][value=to]")
    carol.click("#proposal-preview")
    allow = carol.locator("#proposal-allow").inner_text()
    assert allow == 'tool == "send_email" && agent == "back_office" && args["to"].endsWith("@partner.example")'
    carol.locator("#proposal").screenshot(path=str(ARTIFACTS / "proposal-preview.png"))
    carol.click("#proposal-sign")
    carol.wait_for_url("**/rules?proposed=*")
    assert "@partner.example" in carol.locator("#open-proposals").inner_text()

    from signoff.audit import ReviewService, open_store

    store = open_store(demo.store_url)
    try:
        [made] = [p for p in ReviewService(store).proposals() if p.from_review == review.id]
        entry = store.entry(made.seq)
        assert (entry.kind, entry.actor, entry.sig["alg"], made.state) == (
            "policy.proposed", carol.actor, "WebAuthn", "open",
        )  # fmt: skip
    finally:
        store.close()
