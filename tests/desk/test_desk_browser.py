"""Browser tests: headless Debian Chromium (Playwright) against a real ``desk demo`` subprocess,
whose scripted ADK agent proposes calls through the bridge and resumes as people decide.

Scenarios are fed through the demo's inbox file, so each test knows exactly which call it
is reviewing; the tools' runs are read back from ``tool-runs.jsonl``. Screenshots of the
queue and of one review go to ``test-artifacts/``.

The demo's log accepts unsigned decisions and its reviewer holds no passkey, so these forms post
unsigned; test_desk_passkeys_browser.py decides with passkeys in the same harness (browserkit.py).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from browserkit import ARTIFACTS, Demo, running_demo, sign_in
from browserkit import wait_until as _wait_until

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("demo")) as d:
        yield d


@pytest.fixture(scope="module")
def alice(browser: Any, demo: Demo) -> Any:
    return sign_in(browser, demo, demo.email, demo.password)


def test_sign_in_shows_the_queue(alice: Any) -> None:
    assert alice.locator("h1").first.inner_text().startswith("Waiting for you")
    # The demo's log accepts unsigned decisions, and every page says so.
    assert "Decisions on this log need no signature" in alice.locator("#unsigned-banner").inner_text()
    assert "may be unsigned" in alice.locator("#foot").inner_text()
    cookies = {c["name"]: c for c in alice.context.cookies()}
    assert cookies["desk_session"]["httpOnly"] and cookies["desk_session"]["sameSite"] == "Strict"


def test_wrong_password_is_refused(browser: Any, demo: Demo) -> None:
    page = browser.new_page()
    page.goto(demo.url + "/signin")
    page.fill("input[name=email]", demo.email)
    page.fill("input[name=password]", "not the password")
    page.click("button[type=submit]")
    assert "Wrong e-mail or password" in page.locator("[role=alert]").inner_text()
    page.close()


def test_review_appears_in_the_queue_live_and_leaves_when_decided(alice: Any, demo: Demo) -> None:
    alice.goto(demo.url + "/queue")
    alice.wait_for_selector("#live[data-state=live]")
    marker = "live-" + secrets.token_hex(3)
    demo.propose(("send_email", {"to": "ops@example.com", "subject": marker, "body": "Hello"}))
    review = demo.review_with(marker)
    row = alice.locator(f'tr[data-review="{review.id}"]')
    row.wait_for(timeout=10_000)  # appended by SSE, no reload
    assert "send_email" in row.inner_text()
    # What tells it from a like call: its session and its review id (and the age, in its own column).
    shown = review.call.session if len(review.call.session) <= 16 else review.call.session[-7:]
    ids = row.locator(".ids").inner_text()
    assert ids.startswith("session ") and shown in ids and ids.endswith(review.id[:9])
    assert row.locator(".ids [title]").first.get_attribute("title") == f"session {review.call.session}"
    ARTIFACTS.mkdir(exist_ok=True)
    alice.screenshot(path=str(ARTIFACTS / "queue.png"), full_page=True)
    # Someone decides it elsewhere (the API); the row leaves without a reload.
    from signoff.audit import ReviewService, open_store

    store = open_store(demo.store_url)
    ReviewService(store).reject(review.id, reviewer="human:" + demo.email, reason="done elsewhere")
    store.close()
    row.wait_for(state="detached", timeout=10_000)


def test_review_page_says_when_someone_else_decided(alice: Any, demo: Demo) -> None:
    marker = "elsewhere-" + secrets.token_hex(3)
    demo.propose(("send_email", {"to": "x@example.com", "subject": marker, "body": "b"}))
    review = demo.review_with(marker)
    alice.goto(f"{demo.url}/reviews/{review.id}")
    alice.wait_for_timeout(300)  # the page's SSE connection is open
    from signoff.audit import ReviewService, open_store

    store = open_store(demo.store_url)
    ReviewService(store).reject(review.id, reviewer="human:" + demo.email, reason="decided in another tab")
    store.close()
    banner = alice.locator("#closed-live")
    banner.wait_for(state="visible", timeout=10_000)
    assert "just rejected" in banner.inner_text()
    assert alice.locator("#approve-btn").is_disabled()


def test_approve_then_the_tool_runs(alice: Any, demo: Demo) -> None:
    marker = "approve-" + secrets.token_hex(3)
    demo.propose(
        ("transfer_money", {"amount": 12.5, "currency": "EUR", "to_account": "ACC-1", "memo": marker}),
        prompt=f"Pay the {marker} invoice",
    )
    review = demo.review_with(marker)
    alice.goto(f"{demo.url}/reviews/{review.id}")
    assert "transfer_money" in alice.locator("h1").inner_text()
    assert marker in alice.locator("#args-table").inner_text()
    assert f"Pay the {marker} invoice" in alice.locator(".bubble.user").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    alice.screenshot(path=str(ARTIFACTS / "review.png"), full_page=True)
    alice.fill("#approve-form textarea[name=rationale]", "Invoice checked")
    alice.click("#approve-btn")
    alice.wait_for_selector("#decision-done")
    run = demo.run_with(marker)
    assert run["tool"] == "transfer_money" and run["args"]["amount"] == 12.5
    _wait_until(lambda: "tool.executed" in demo.review(review.id)[1], 10, "tool.executed on the log")
    alice.goto(f"{demo.url}/log")
    assert "verified up to seq" in alice.locator("#verify-badge").inner_text()
    alice.screenshot(path=str(ARTIFACTS / "log.png"), full_page=False)


def test_edit_shows_patch_and_diff_then_the_tool_runs_edited(alice: Any, demo: Demo) -> None:
    marker = "edit-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 900.0, "currency": "EUR", "to_account": "ACC-2", "memo": marker}))
    review = demo.review_with(marker)
    alice.goto(f"{demo.url}/reviews/{review.id}")
    alice.click(".tab[data-tab=edit]")
    alice.click('[data-editor="args"] .mode[data-mode=json]')  # the JSON mode (the form: test_desk_reviewer_browser.py)
    editor = alice.locator("#args-editor")
    edited = {"amount": 90.0, "currency": "EUR", "to_account": "ACC-2", "memo": marker}
    editor.fill(json.dumps(edited, indent=2))
    # What you change, argument by argument; the raw patch (what is signed) one click away under "details".
    assert alice.locator("#change-list").inner_text() == "amount 900 → 90"
    patch = json.loads(alice.locator("#patch-view").text_content() or "")
    assert (
        patch == [{"op": "replace", "path": "/amount", "value": 90}] and not alice.locator("#patch-view").is_visible()
    )
    diff = alice.locator("#diff-view")  # the line diff, for values too long for one line
    assert (diff.locator(".del").first.text_content() or "").strip().startswith("-")
    assert '"amount": 90' in (diff.locator(".add").first.text_content() or "")
    assert "Matches the tool's parameters" in alice.locator("#schema-check").inner_text()
    # A schema break is caught before submit.
    editor.fill(json.dumps({**edited, "amount": "ninety"}))
    assert "expected type number" in alice.locator("#schema-check").inner_text()
    assert alice.locator("#edit-btn").is_disabled()
    editor.fill(json.dumps(edited, indent=2))
    ARTIFACTS.mkdir(exist_ok=True)
    alice.screenshot(path=str(ARTIFACTS / "review-edit.png"), full_page=True)
    alice.click("#edit-btn")
    alice.wait_for_selector("#decision-done")
    run = demo.run_with(marker)
    assert run["args"]["amount"] == 90.0
    got, kinds = demo.review(review.id)
    assert got.status == "edited" and got.patch == [{"op": "replace", "path": "/amount", "value": 90}]


def test_reject_then_the_tool_does_not_run(alice: Any, demo: Demo) -> None:
    marker = "reject-" + secrets.token_hex(3)
    demo.propose(("delete_record", {"table": "customers", "record_id": marker}))
    review = demo.review_with(marker)
    alice.goto(f"{demo.url}/reviews/{review.id}")
    alice.click(".tab[data-tab=reject]")
    alice.fill("#reject-form textarea[name=reason]", "Keep this customer")
    alice.click("#reject-btn")
    alice.wait_for_selector("#decision-done")
    _wait_until(lambda: "run.resumed" in demo.review(review.id)[1], 10, "the run to resume")
    time.sleep(0.5)
    got, kinds = demo.review(review.id)
    assert got.status == "rejected" and "tool.executed" not in kinds
    assert not [r for r in demo.runs() if marker in json.dumps(r["args"])]


def test_the_approve_edit_and_reject_flow_logs_no_console_error(alice: Any) -> None:
    """Issue 34 item 9: every decided review page asked for its receipt before a checkpoint covered it,
    and Chromium logged "Failed to load resource: 404" for each (nine in the three flows above, which
    this module's page ran). "Not in a checkpoint yet" is a normal state: the page says it, and asks
    for nothing."""
    assert alice.console_errors == []


def test_frontier_of_two_resumes_once_both_are_decided(alice: Any, demo: Demo) -> None:
    marker = "pair-" + secrets.token_hex(3)
    demo.propose(
        ("transfer_money", {"amount": 5.0, "currency": "EUR", "to_account": "ACC-3", "memo": marker}),
        ("send_email", {"to": "c@example.net", "subject": marker, "body": "refund sent"}),
    )
    first = demo.review_with(marker)
    alice.goto(f"{demo.url}/reviews/{first.id}")
    others = alice.locator("text=Same frontier")
    assert others.count() == 1
    alice.click("#approve-btn")
    alice.wait_for_selector("#decision-done")
    time.sleep(0.3)
    assert not demo.runs() or not [r for r in demo.runs() if marker in json.dumps(r["args"])]  # waits for both
    second = demo.review_with(marker)
    alice.goto(f"{demo.url}/reviews/{second.id}")
    alice.click("#approve-btn")
    alice.wait_for_selector("#decision-done")
    demo.run_with(marker)
    _wait_until(lambda: len([r for r in demo.runs() if marker in json.dumps(r["args"])]) == 2, 10, "both tools")


def test_tool_with_its_own_question_gets_the_answer(alice: Any, demo: Demo) -> None:
    account = "ACC-" + secrets.token_hex(3)
    demo.propose(("set_daily_limit", {"account": account}))
    review = demo.review_with(account)
    assert review.call.payload == {"limit": 500, "currency": "EUR"}
    alice.goto(f"{demo.url}/reviews/{review.id}")
    assert '"limit": 500' in alice.locator("#payload-view").inner_text()
    alice.click('[data-editor="approve-payload"] .mode[data-mode=json]')
    alice.fill("#approve-form textarea[name=payload]", '{"limit": 750, "currency": "EUR"}')
    alice.click("#approve-btn")
    alice.wait_for_selector("#decision-done")
    run = demo.run_with(account)
    assert run["tool"] == "set_daily_limit" and run["payload"] == {"limit": 750, "currency": "EUR"}


def test_hostile_strings_are_inert(alice: Any, demo: Demo) -> None:
    marker = "hostile-" + secrets.token_hex(3)
    evil = f"<script>alert('{marker}')</script>\"'><img src=x onerror=alert(1)> ✓ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 مرحبا "
    demo.propose(
        ("send_email", {"to": "x@example.com", "subject": marker + evil, "body": evil + "B" * 20_000}),
        prompt=f"<script>alert('prompt')</script> {marker}",
    )
    review = demo.review_with(marker)
    alice.goto(demo.url + "/queue")
    alice.goto(f"{demo.url}/reviews/{review.id}")
    text = alice.locator("#args-table").inner_text()
    assert "<script>alert(" in text and "𝔘𝔫𝔦𝔠𝔬𝔡𝔢" in text and "مرحبا" in text
    assert alice.locator("main script:not([type='application/json'])").count() == 0
    assert alice.locator("main img").count() == 0
    assert "<script>alert('prompt')</script>" in alice.locator(".bubble.user").inner_text()
    alice.click(".tab[data-tab=edit]")
    alice.locator('[data-editor="args"] [data-name="body"] textarea').press("End")
    alice.wait_for_timeout(200)
    assert alice.dialogs == []
    # The page stays usable: the long value wraps instead of widening the page.
    width = alice.evaluate("document.documentElement.scrollWidth")
    assert width <= 1300
    alice.click(".tab[data-tab=approve]")
    alice.click("#approve-btn")
    alice.wait_for_selector("#decision-done")
    run = demo.run_with(marker)
    assert run["args"]["body"].startswith(evil)


def test_post_without_csrf_is_refused(alice: Any, demo: Demo) -> None:
    marker = "csrf-" + secrets.token_hex(3)
    demo.propose(("send_email", {"to": "x@example.com", "subject": marker, "body": "b"}))
    review = demo.review_with(marker)
    alice.goto(f"{demo.url}/reviews/{review.id}")
    alice.evaluate(
        """id => {
        const f = document.createElement('form');
        f.method = 'post'; f.action = '/reviews/' + id + '/approve';
        document.body.appendChild(f); f.submit();
    }""",
        review.id,
    )
    alice.wait_for_load_state()
    assert "Form refused" in alice.locator("h1").inner_text()
    got, _ = demo.review(review.id)
    assert got.status == "pending"


def test_reviewer_outside_the_role_cannot_see_or_decide(browser: Any, demo: Demo) -> None:
    password = demo.add_reviewer("bob@example.org", "ops", ["send_*"])
    bob = sign_in(browser, demo, "bob@example.org", password, new_password="bob's new password")
    marker = "role-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 1.0, "currency": "EUR", "to_account": "ACC-9", "memo": marker}))
    review = demo.review_with(marker)
    bob.goto(f"{demo.url}/queue")
    assert review.id not in bob.content()  # not listed
    response = bob.goto(f"{demo.url}/reviews/{review.id}")
    assert response.status == 404 and "ACC-9" not in bob.content()
    assert bob.locator("#approve-form").count() == 0
    # Forging the form with Bob's own valid CSRF token gets the same 404 and records nothing.
    bob.goto(f"{demo.url}/queue")
    bob.evaluate(
        """id => {
        const token = document.querySelector('input[name=csrf]').value;
        const f = document.createElement('form');
        f.method = 'post'; f.action = '/reviews/' + id + '/approve';
        const i = document.createElement('input'); i.type = 'hidden'; i.name = 'csrf'; i.value = token;
        f.appendChild(i); document.body.appendChild(f); f.submit();
    }""",
        review.id,
    )
    bob.wait_for_load_state()
    assert "No such review" in bob.locator("h1").inner_text() and "ACC-9" not in bob.content()
    assert demo.review(review.id)[0].status == "pending"
    bob.context.close()


def test_two_reviewers_at_once_exactly_one_wins(browser: Any, alice: Any, demo: Demo) -> None:
    password = demo.add_reviewer("carol@example.org", "finance", [])
    carol = sign_in(browser, demo, "carol@example.org", password, new_password="carol's new password")
    marker = "race-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 3.0, "currency": "EUR", "to_account": "ACC-7", "memo": marker}))
    review = demo.review_with(marker)
    for page in (alice, carol):
        page.goto(f"{demo.url}/reviews/{review.id}")
    submit = "() => document.getElementById('approve-form').submit()"
    alice.evaluate(submit)
    carol.evaluate(submit)
    for page in (alice, carol):
        page.wait_for_load_state()
        page.wait_for_selector("#decision-done, #decision-error")
    done = [p for p in (alice, carol) if p.locator("#decision-done").count()]
    refused = [p for p in (alice, carol) if p.locator("#decision-error").count()]
    assert len(done) == 1 and len(refused) == 1
    assert "already decided" in refused[0].locator("#decision-error").inner_text()
    got, kinds = demo.review(review.id)
    assert kinds.count("review.approved") == 1
    demo.run_with(marker)
    carol.context.close()


def test_a_question_is_answered_on_its_page_and_the_agent_reads_the_answer(
    alice: Any, browser: Any, demo: Demo
) -> None:
    """Issue 21: the demo agent asks a person (ADK's ``request_input``): its page asks the question, the
    answer is typed into the form the response schema started, sent, and the agent reads exactly it."""
    marker = "lease-" + secrets.token_hex(3)
    schema = {"type": "object", "properties": {"account": {"type": "string"}, "first_month": {"type": "string"}}}
    demo.propose(
        ("adk_request_input", {"message": f"Which account pays the {marker} rent?", "response_schema": schema})
    )
    review = demo.review_with(marker)
    assert (review.call.kind, review.call.payload) == ("input", {"account": "", "first_month": ""})
    alice.goto(f"{demo.url}/reviews/{review.id}")
    assert f"asks you: Which account pays the {marker} rent?" in alice.locator("#headline").inner_text()
    assert alice.locator("#approve-btn").inner_text().strip().endswith("the answer")
    ARTIFACTS.mkdir(exist_ok=True)
    alice.screenshot(path=str(ARTIFACTS / "question.png"), full_page=False)
    phone = browser.new_page(viewport={"width": 390, "height": 844}, storage_state=alice.context.storage_state())
    phone.goto(f"{demo.url}/reviews/{review.id}")
    phone.screenshot(path=str(ARTIFACTS / "question-phone.png"), full_page=False)
    phone.close()
    alice.click('[data-editor="approve-payload"] .mode[data-mode=json]')
    answer = {"account": "DE02 1203 0000 0000 2020 51", "first_month": "2027-01"}
    alice.fill("#approve-form textarea[name=payload]", json.dumps(answer))
    alice.click("#approve-btn")
    alice.wait_for_selector("#decision-done")
    _wait_until(lambda: demo.review(review.id)[0].executed, 15, "the answer delivered (tool.executed)")
    done, kinds = demo.review(review.id)
    assert done.answer_payload == answer, kinds
    from signoff.audit import open_store, sealing, values

    def reply() -> str | None:
        store = open_store(demo.store_url)
        try:
            about = [e for e in store.entries(kind="run.replied") if e.body.get("frontier") == review.frontier]
            if not about:
                return None
            text = about[0].body.get("text")
            if sealing.is_commitment(text):  # the demo's log keeps values beside it
                look = values.lookup_for(store.read_rows, store.log_id, [review.frontier])
                text = sealing.reveal(str(text), look, "run.replied text")
            return str(text)
        finally:
            store.close()

    said = _wait_until(reply, 15, "the agent's reply")
    assert "DE02 1203 0000 0000 2020 51" in said, said  # what the agent read
