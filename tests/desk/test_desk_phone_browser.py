"""The review page on a phone (issue 22 §2), in real Chromium with mobile emulation (390 x 844, touch)
and a CDP virtual authenticator as the phone's platform passkey (internal transport, user verified).

A reviewer opens a review link from Slack or an e-mail while signed out, signs in, and lands on that
review. Above the fold: what is asked, the args and one large Approve button; Edit and Reject are one
tap away. With the live stream cut off, one tap signs with the passkey and the tool runs with exactly
what was shown; the log then verifies. The page and everything it loads come from the desk and weigh
under 100 KB.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from browserkit import ARTIFACTS, ROOT, Demo, register, running_demo, wait_until, with_authenticator

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")

PHONE = {"width": 390, "height": 844}
PAGE_BUDGET = 100_000  # bytes: the page, its JS and its CSS
TAP = 44  # px: the smallest comfortable touch target (Apple HIG; WCAG 2.5.5 asks for 44 x 44 CSS px)
# Where the two phone screenshots go: the repository's with SIGNOFF_UPDATE_SCREENSHOTS=1 (as
# test_desk_screenshots.py), else test-artifacts/.
SCREENSHOTS = ROOT / "examples" / "screenshots" if os.environ.get("SIGNOFF_UPDATE_SCREENSHOTS") == "1" else ARTIFACTS


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("phone"), host="localhost") as d:
        yield d


def phone_page(browser: Any) -> Any:
    ctx = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2)
    page = ctx.new_page()
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    return page


def test_a_link_signs_in_on_a_phone_and_one_tap_approves_with_the_passkey(browser: Any, demo: Demo) -> None:
    email = f"phone-{secrets.token_hex(2)}@example.org"
    code = demo.add_reviewer(email, ["finance", "ops"], [])
    marker = "phone-" + secrets.token_hex(3)
    args = {"amount": 420.0, "currency": "EUR", "to_account": "DE89 3704 0044", "memo": f"{marker} rent"}
    demo.propose(("transfer_money", args), prompt=f"Pay {marker}")
    review = demo.review_with(marker)
    link = f"{demo.url}/reviews/{review.id}"

    page = phone_page(browser)
    with_authenticator(page)
    # The link from Slack or an e-mail, signed out: sign in (a first sign-in sets a new password) ...
    page.goto(link)
    assert "/signin" in page.url
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", code)
    page.click("button[type=submit]")
    page.wait_for_selector("input[name=new_password]")
    page.fill("input[name=password]", code)
    page.fill("input[name=new_password]", f"{email} new password")
    page.click("button[type=submit]")
    # ... and land on the review, not on the queue.
    page.wait_for_url(f"**/reviews/{review.id}")
    page.code, page.actor = code, "human:" + email
    register(page, demo)  # the phone's own passkey, enrolled with the code

    # The live stream cut off (a slow or flaky connection): the decision must not need it.
    page.route("**/events*", lambda route: route.abort())
    outside: list[str] = []
    page.on(
        "request",
        lambda request: outside.append(request.url) if urlsplit(request.url).hostname != "localhost" else None,
    )
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})  # weigh everything, as a first visit does
    page.goto(link)
    page.wait_for_load_state("load")
    # Bytes of every body the page loaded: on the wire (the JS and CSS go gzipped) and as read.
    loaded: dict[str, list[int]] = page.evaluate(
        """() => Object.fromEntries(performance.getEntries()
            .filter((e) => e.entryType === 'navigation' || e.entryType === 'resource')
            .map((e) => [new URL(e.name).pathname, [e.encodedBodySize, e.decodedBodySize]]))"""
    )
    assert outside == [], f"external assets: {outside}"
    wire, read = sum(n for n, _ in loaded.values()), sum(n for _, n in loaded.values())
    assert {"/static/desk.js", "/static/desk.css"} <= set(loaded), loaded
    assert wire < PAGE_BUDGET, f"{wire} bytes on the wire: {loaded}"
    print(json.dumps({"phone_review_page": {"wire_bytes": wire, "decoded_bytes": read, "budget": PAGE_BUDGET}}))
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "phone-review-full.png"), full_page=True)
    # Above the fold at 390 x 844: what is asked, the args, and one large Approve button.
    fold = PHONE["height"]
    for selector in ("#headline", "#args-card", "#approve-btn"):
        box = page.locator(selector).first.bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + min(box["height"], 80) <= fold, (selector, box)
    button = page.locator("#approve-btn").bounding_box()
    assert button is not None and button["height"] >= TAP and button["width"] >= PHONE["width"] * 0.6, button
    assert marker in page.locator("#args-card").inner_text()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "phone-review.png"))

    # Edit and Reject are one tap away; Reject asks for a reason.
    for tab in ("edit", "reject"):
        target = page.locator(f".tab[data-tab={tab}]").bounding_box()
        assert target is not None and target["y"] + target["height"] <= fold and target["height"] >= TAP, (tab, target)
    page.tap(".tab[data-tab=reject]")
    assert page.locator("#reject-form").is_visible()
    assert page.locator("#reject-form [name=reason]").get_attribute("required") is not None
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "phone-reject.png"))
    page.tap(".tab[data-tab=approve]")

    page.tap("#approve-btn")  # one tap: the platform passkey signs
    done = page.wait_for_selector("#decision-done", timeout=15_000)
    assert "signed with your passkey" in done.inner_text()
    page.screenshot(path=str(SCREENSHOTS / "phone-approved.png"))
    run = demo.run_with(marker)
    assert run["args"] == args  # exactly what the phone showed and signed
    wait_until(lambda: "tool.executed" in demo.review(review.id)[1], 15, "tool.executed on the log")
    found, kinds = demo.review(review.id)
    assert found.decided_by == page.actor and kinds.count("tool.executed") == 1
    verified = subprocess.run(
        [str(Path(sys.executable).parent / "audit"), "--store", demo.store_url, "verify"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    page.context.close()


def test_a_sign_in_link_from_slack_lands_a_phone_on_the_review(browser: Any, demo: Demo) -> None:
    """The one-time link a Slack DM or a reminder e-mail carries (desk/signin_links.py): one tap signs in and
    opens the review, not the queue; the link then works no more."""
    from signoff.audit import open_store
    from signoff.desk import signin_links
    from signoff.desk.db import make_engine

    email = f"link-{secrets.token_hex(2)}@example.org"
    demo.add_reviewer(email, ["finance", "ops"], [])
    marker = "link-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 12.5, "currency": "EUR", "to_account": "NL91", "memo": marker}))
    review = demo.review_with(marker)
    store = open_store(demo.store_url)
    engine = make_engine(demo.store_url)
    try:
        with engine.begin() as conn:
            token = signin_links.mint(conn, store.log_id, "human:" + email, review.id)
    finally:
        engine.dispose()
        store.close()
    link = signin_links.url(demo.url, token)
    page = phone_page(browser)
    page.goto(link)
    go = page.locator("#signin-link-go")
    box = go.bounding_box()
    assert box is not None and box["height"] >= TAP and box["y"] + box["height"] <= PHONE["height"], box
    assert email in page.locator("#signin-link").inner_text()
    page.tap("#signin-link-go")
    page.wait_for_url(f"**/reviews/{review.id}")
    assert marker in page.locator("#args-card").inner_text() and page.locator("#approve-btn").is_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "phone-signin-link.png"))
    page.tap("#approve-btn")
    run = demo.run_with(marker)
    assert run["args"]["memo"] == marker
    again = page.context.browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
    again.goto(link)
    assert "no longer works" in again.locator("#signin-link").inner_text()
    page.context.close()
