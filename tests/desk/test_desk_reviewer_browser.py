"""The reviewer's desk in real headless Chromium (issue 10): the summary read first, editing by
form, the outcome live, the Decided history, keyboard shortcuts, the log page at 1280 px, and
the hardening a browser sees (roles, streams that end).

Two harnesses: ``desk demo`` with its scripted ADK agent (browserkit.py), where the tools really
run; and a desk served in this process on a log the test drives itself (livekit.py), where the
test decides when the run resumes, the tool runs and the agent replies, and which schemas the
tools declare.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browserkit import ARTIFACTS, Demo, running_demo, sign_in, wait_until
from deskkit import ALICE, BOB, PASSWORD, Env, make_env
from livekit import serving

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")

IBAN = "DE89 3704 0044 0532 0130 00"


# == with the demo's agent ==========================================================================


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("reviewer")) as d:
        yield d


@pytest.fixture(scope="module")
def sam(browser: Any, demo: Demo) -> Any:
    return sign_in(browser, demo, demo.email, demo.password)


def test_queue_and_review_say_what_the_agent_wants_in_plain_words(sam: Any, demo: Demo) -> None:
    memo = "Invoice " + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 1250.0, "currency": "EUR", "to_account": IBAN, "memo": memo}))
    review = demo.review_with(memo)
    sam.goto(demo.url + "/queue")
    row = sam.locator(f'tr[data-review="{review.id}"]')
    assert row.locator("a.headline").inner_text() == f"back_office wants to transfer_money: 1,250.00 EUR to {IBAN}"
    assert row.locator(".key").inner_text() == f"memo{memo}"  # the other key argument, named
    assert "Please approve or reject" not in sam.content()
    sam.goto(f"{demo.url}/reviews/{review.id}")
    assert (
        sam.locator("h1").inner_text() == f"back_office wants to transfer_money: 1,250.00 EUR to {IBAN} (memo: {memo})"
    )
    assert "Transfer money from the company account" in sam.locator(".sub").inner_text()
    assert "FunctionResponse" not in sam.content() and sam.locator("#question-card").count() == 0
    table = sam.locator("#args-table").inner_text()
    assert table.index("amount") < table.index("currency") < table.index("to_account") < table.index("memo")


def test_the_tools_own_question_is_shown_and_answered_with_a_form(sam: Any, demo: Demo) -> None:
    account = "ACC-" + secrets.token_hex(3)
    demo.propose(("set_daily_limit", {"account": account}))
    review = demo.review_with(account)
    sam.goto(demo.url + "/queue")
    assert (
        f"Asks you: Which daily limit should account {account} get?"
        in sam.locator(f'tr[data-review="{review.id}"]').inner_text()
    )
    sam.goto(f"{demo.url}/reviews/{review.id}")
    assert sam.locator("#question").inner_text() == f"Which daily limit should account {account} get?"
    form = sam.locator('[data-editor="approve-payload"] [data-fields]')
    assert form.is_visible()
    limit, currency = form.locator('[data-name="limit"] input'), form.locator('[data-name="currency"] input')
    assert limit.get_attribute("type") == "number" and limit.input_value() == "500"
    assert currency.input_value() == "EUR"
    limit.fill("750")
    assert json.loads(sam.locator("#approve-form textarea[name=payload]").input_value()) == {
        "limit": 750,
        "currency": "EUR",
    }
    sam.click("#approve-btn")
    sam.wait_for_selector("#decision-done")
    run = demo.run_with(account)
    assert run["payload"] == {"limit": 750, "currency": "EUR"}


def test_editing_by_form_shows_the_patch_and_diff_and_the_tool_runs_with_it(sam: Any, demo: Demo) -> None:
    memo = "edit-form-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 900.0, "currency": "EUR", "to_account": "ACC-2", "memo": memo}))
    review = demo.review_with(memo)
    sam.goto(f"{demo.url}/reviews/{review.id}")
    sam.click(".tab[data-tab=edit]")
    fields = sam.locator('[data-editor="args"] [data-fields]')
    amount = fields.locator('[data-name="amount"] input')
    assert amount.get_attribute("type") == "number" and amount.input_value() in ("900", "900.0")
    amount.fill("90")
    assert json.loads(sam.locator("#patch-view").text_content() or "") == [
        {"op": "replace", "path": "/amount", "value": 90}
    ]  # under "details"; what a person reads is the change list
    assert sam.locator("#change-list").inner_text() == "amount 900 → 90"
    assert '"amount": 90' in (sam.locator("#diff-view .add").first.text_content() or "")
    assert "Matches the tool's parameters" in sam.locator("#schema-check").inner_text()
    amount.fill("")  # a required number left empty: caught before anything is sent
    assert "amount: required parameter is missing" in sam.locator("#schema-check").inner_text()
    assert sam.locator("#edit-btn").is_disabled()
    amount.fill("90")
    sam.click('[data-editor="args"] .mode[data-mode=json]')  # the JSON mode shows the same args
    assert json.loads(sam.locator("#args-editor").input_value())["amount"] == 90
    sam.click('[data-editor="args"] .mode[data-mode=form]')
    sam.click("#edit-btn")
    sam.wait_for_selector("#decision-done")
    assert demo.run_with(memo)["args"]["amount"] == 90.0


def test_after_approving_the_page_shows_the_run_the_result_and_the_reply_live(sam: Any, demo: Demo) -> None:
    memo = "outcome-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 12.5, "currency": "EUR", "to_account": "ACC-1", "memo": memo}))
    review = demo.review_with(memo)
    sam.goto(f"{demo.url}/reviews/{review.id}")
    sam.click("#approve-btn")
    sam.wait_for_selector("#decision-done")
    sam.wait_for_selector("#o-resumed.done", timeout=15_000)
    sam.wait_for_selector("#o-tool.done", timeout=15_000)
    assert "The tool ran, with these arguments" in sam.locator("#o-tool").inner_text()
    assert memo in sam.locator("#ran-args").inner_text()
    assert '"transferred": 12.5' in sam.locator("#result-preview").inner_text()
    sam.wait_for_selector("#reply-text", timeout=15_000)
    assert sam.locator("#reply-text").inner_text().startswith("Done. transfer_money:")
    kinds = sam.locator("#timeline-card [data-kind]").evaluate_all("els => els.map(e => e.dataset.kind)")
    assert kinds[-3:] == ["run.resumed", "tool.executed", "run.replied"]


# == a desk this test drives =========================================================================

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "CHF"]},
        "urgent": {"type": "boolean"},
        "count": {"type": "integer"},
        "meta": {"type": "object"},
        "to": {"type": "string"},
    },
    "required": ["amount", "currency", "to"],
}


@pytest.fixture
def driven(tmp_path: Path) -> Iterator[tuple[Env, str]]:
    env = make_env(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path, signed=False)
    with serving(env.app) as base:
        yield env, base
    env.desk.store.close()


def open_page(browser: Any, base: str, who: str = ALICE, **context: Any) -> Any:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, **context)
    page = ctx.new_page()
    page.goto(base + "/signin")
    page.fill("input[name=email]", who.removeprefix("human:"))
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/queue")
    return page


def test_the_form_has_a_widget_per_kind_of_parameter(browser: Any, driven: tuple[Env, str]) -> None:
    env, base = driven
    args = {"amount": 10.5, "currency": "EUR", "urgent": True, "count": 2, "meta": {"k": [1]}, "to": "acct-1"}
    review = env.open("pay", args, schema=SCHEMA)[0]
    page = open_page(browser, base)
    page.goto(f"{base}/reviews/{review.id}")
    page.keyboard.press("e")
    box = page.locator('[data-editor="args"] [data-fields]')
    assert box.locator('[data-name="currency"] select').input_value() == '"EUR"'
    assert box.locator('[data-name="urgent"] input').get_attribute("type") == "checkbox"
    assert box.locator('[data-name="count"] input').get_attribute("step") == "1"
    assert box.locator('[data-name="meta"] textarea').get_attribute("class") == "code"
    box.locator('[data-name="currency"] select').select_option('"CHF"')
    box.locator('[data-name="urgent"] input').uncheck()
    box.locator('[data-name="count"] input').fill("5")
    box.locator('[data-name="meta"] textarea').fill('{"k": [1, 2]}')
    expected = {**args, "currency": "CHF", "urgent": False, "count": 5, "meta": {"k": [1, 2]}}
    patch = json.loads(page.locator("#patch-view").text_content() or "")
    assert {op["path"] for op in patch} == {"/currency", "/urgent", "/count", "/meta/k"}
    box.locator('[data-name="count"] input').fill("2.5")  # not a whole number
    assert "expected a whole number" in page.locator('[data-editor="args"] [data-errors]').inner_text()
    assert page.locator("#edit-btn").is_disabled()
    box.locator('[data-name="count"] input').fill("5")
    # JSON mode, a change there, and back: the form shows it.
    page.click('[data-editor="args"] .mode[data-mode=json]')
    editor = page.locator("#args-editor")
    assert json.loads(editor.input_value()) == expected
    editor.fill(json.dumps({**expected, "amount": 11}))
    page.click('[data-editor="args"] .mode[data-mode=form]')
    assert box.locator('[data-name="amount"] input').input_value() == "11"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "edit-form-widgets.png"), full_page=True)
    page.click("#edit-btn")
    page.wait_for_selector("#decision-done")
    assert env.svc.get(review.id).final_args == {**expected, "amount": 11}


def test_before_the_tool_runs_the_page_says_what_will_run_then_updates_live(
    browser: Any, driven: tuple[Env, str]
) -> None:
    env, base = driven
    review = env.open("transfer", {"amount": 42, "to": "acct-9", "memo": "m"})[0]
    queue = open_page(browser, base)
    page = queue.context.new_page()
    page.goto(f"{base}/reviews/{review.id}")
    page.click("#approve-btn")
    page.wait_for_selector("#decision-done")
    outcome = page.locator("#outcome")
    assert (
        "Will run with these arguments" in outcome.inner_text() and "acct-9" in page.locator("#will-run").inner_text()
    )
    assert "Ran with" not in page.content() and "The tool ran" not in outcome.inner_text()
    assert "Waiting for the agent to resume the run" in outcome.inner_text()
    queue.goto(base + "/queue")
    queue.wait_for_selector("#live[data-state=live]")
    page.wait_for_function("document.body.dataset.stream === 'open'")
    env.svc.claim_resume(review.frontier, actor="agent:teller")
    page.wait_for_selector("#o-resumed.done", timeout=5_000)
    assert "Will run with" in page.locator("#o-tool").inner_text()
    env.svc.record_execution(review.id, actor="agent:teller", args=review.call.args, result={"receipt": "R-1"})
    page.wait_for_selector("#o-tool.done", timeout=5_000)
    assert page.locator("#result-preview").inner_text() == '{"receipt": "R-1"}'
    assert "acct-9" in page.locator("#ran-args").inner_text()
    env.svc.record_reply(review.frontier, actor="agent:teller", text="Paid, receipt R-1.")
    page.wait_for_selector("#reply-text", timeout=5_000)
    assert page.locator("#reply-text").inner_text() == "Paid, receipt R-1."
    # The queue's "Just decided" panel followed along, without a reload.
    item = queue.locator(f'.recent-item[data-review="{review.id}"]')
    wait_until(lambda: "Agent replied" in item.inner_text(), 5, "the queue's panel to show the reply")
    assert "Tool ran" in item.inner_text() and "R-1" in item.inner_text()


def test_approved_not_yet_run_says_so_with_where_to_look(browser: Any, tmp_path: Path) -> None:
    from signoff.desk.app import create_app

    env = make_env(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path, signed=False)
    app = create_app(env.url, env.key, access_log=False, stalled_after=1)
    review = env.open()[0]
    with serving(app) as base:
        page = open_page(browser, base)
        page.goto(f"{base}/reviews/{review.id}")
        page.click("#approve-btn")
        page.wait_for_selector("#decision-done")
        env.svc.claim_resume(review.frontier, actor="agent:teller")
        time.sleep(1.1)
        page.goto(f"{base}/stalled")
        row = page.locator(f'tr[data-review="{review.id}"]')
        assert review.call.session in row.inner_text() and review.call.invocation in row.inner_text()
        page.goto(f"{base}/reviews/{review.id}")
        assert "Approved, not yet run" in page.locator("#stalled-here").inner_text()
        page.goto(f"{base}/queue")
        assert "1 approved call not yet run" in page.locator("#stalled-note").inner_text()
    app.state.desk.store.close()
    env.desk.store.close()


def test_decided_view_filters_and_search(browser: Any, driven: tuple[Env, str]) -> None:
    env, base = driven
    a, b, c = env.open()[0], env.open()[0], env.open("send_email", {"to": "z"}, role="ops", schema=None)[0]
    env.svc.approve(a.id, reviewer=ALICE)
    env.svc.reject(b.id, reviewer="human:carol@example.org", reason="no")
    env.svc.approve(c.id, reviewer=BOB)
    page = open_page(browser, base)
    page.goto(base + "/decided")
    ids = lambda: page.locator("#decided tr[data-review]").evaluate_all("r => r.map(e => e.dataset.review)")  # noqa: E731
    assert ids() == [c.id, b.id, a.id]
    page.check("#f-mine")
    page.click("#decided-filters button[type=submit]")
    assert ids() == [a.id]
    page.goto(base + "/decided")
    page.select_option("#f-outcome", "rejected")
    page.click("#decided-filters button[type=submit]")
    assert ids() == [b.id]
    page.goto(base + "/decided")
    page.fill("#f-q", c.call.session)
    page.press("#f-q", "Enter")
    assert ids() == [c.id]
    page.goto(base + "/decided")
    page.fill("input[name=tool]", "send_email")
    page.fill("#f-since", time.strftime("%Y-%m-%d", time.gmtime()))
    page.click("#decided-filters button[type=submit]")
    assert ids() == [c.id]
    page.click(f'#decided tr[data-review="{c.id}"] a.headline')
    page.wait_for_url(f"**/reviews/{c.id}")


def test_keyboard_shortcuts(browser: Any, driven: tuple[Env, str]) -> None:
    env, base = driven
    first, second, third = env.open()[0], env.open()[0], env.open()[0]
    page = open_page(browser, base)
    page.goto(base + "/queue")
    page.keyboard.press("?")
    assert (
        page.locator("#keys-help").is_visible() and "next / previous review" in page.locator("#keys-help").inner_text()
    )
    page.keyboard.press("Escape")
    assert not page.locator("#keys-help").is_visible()
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.locator("tr.selected").get_attribute("data-review") == second.id
    page.keyboard.press("k")
    assert page.locator("tr.selected").get_attribute("data-review") == first.id
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/reviews/{first.id}")
    page.keyboard.press("j")  # next review
    page.wait_for_url(f"**/reviews/{second.id}")
    page.keyboard.press("k")  # previous review
    page.wait_for_url(f"**/reviews/{first.id}")
    page.keyboard.press("r")  # reject, with the focus on the reason
    assert page.locator("#reject-form").is_visible()
    assert page.evaluate("document.activeElement.name") == "reason"
    page.keyboard.type("jk typed, not shortcuts")  # keys in a field are text
    assert page.url.endswith(first.id) and page.locator("#reject-form textarea").input_value().startswith("jk typed")
    page.keyboard.press("Escape")  # leave the field
    page.keyboard.press("e")  # edit, with the focus on the first argument
    assert page.locator("#edit-form").is_visible()
    assert page.evaluate("document.activeElement.closest('[data-field]').dataset.name") == "amount"
    page.keyboard.press("Escape")
    page.keyboard.press("a")  # approve: the focus on its button, nothing decided yet
    assert page.locator("#approve-form").is_visible() and page.evaluate("document.activeElement.id") == "approve-btn"
    assert env.svc.get(first.id).status == "pending"
    page.keyboard.press("w")  # the "why": the open pane's rationale
    assert page.evaluate("document.activeElement.name") == "rationale"
    page.keyboard.type("Checked")
    page.keyboard.press("Escape")
    page.keyboard.press("a")
    page.keyboard.press("Enter")  # confirms
    page.wait_for_selector("#decision-done")
    got = env.svc.get(first.id)
    assert got.status == "approved" and got.rationale == "Checked"
    page.keyboard.press("u")
    page.wait_for_url("**/queue")
    assert third.id in page.content()


def test_log_page_fits_1280_px_and_copies_full_ids(browser: Any, driven: tuple[Env, str]) -> None:
    env, base = driven
    review = env.open(args={"amount": 1, "to": "acct-" + "9" * 400, "memo": "m" * 3000})[0]
    env.svc.reject(review.id, reviewer=ALICE, reason="r" * 2000)
    page = open_page(browser, base, permissions=["clipboard-read", "clipboard-write"])
    page.goto(base + "/log")
    page.evaluate("document.querySelectorAll('#log-table details').forEach(d => d.open = true)")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    for cell in page.locator("#log-table tbody tr td:last-child a").all()[:3]:
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280  # the proof column stays on screen
    assert page.locator(f'#log-table a[href="/reviews/{review.id}"]').first.inner_text() == review.id  # in full
    page.locator(f'#log-table button.copy[data-copy="{review.id}"]').first.click()
    assert page.evaluate("navigator.clipboard.readText()") == review.id
    actor = page.locator("#log-table .actor.copyable").first
    assert actor.inner_text().startswith(("human:", "agent:", "admin:", "service:"))
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "log-1280.png"), full_page=False)


def test_a_reviewer_sees_only_their_reviews_and_their_stream_ends_when_disabled(
    browser: Any, driven: tuple[Env, str]
) -> None:
    env, base = driven
    transfer = env.open("transfer", {"amount": 5, "to": "acct-secret"})[0]
    page = open_page(browser, base, BOB)
    page.wait_for_selector("#live[data-state=live]")
    email = env.open("send_email", {"to": "ops@example.org"}, role="ops", schema=None)[0]
    page.wait_for_selector(f'tr[data-review="{email.id}"]', timeout=5_000)  # live, and his
    env.open("transfer", {"amount": 6, "to": "acct-secret-2"})
    time.sleep(0.5)
    assert "acct-secret" not in page.content() and transfer.id not in page.content()
    assert page.goto(f"{base}/reviews/{transfer.id}").status == 404
    page.goto(base + "/queue")
    page.wait_for_selector("#live[data-state=live]")
    start = time.monotonic()
    env.svc.disable_reviewer(BOB, reason="moved teams", admin=env.admin)
    page.wait_for_selector("#live[data-state=ended]", timeout=3_000)
    assert time.monotonic() - start < 1.5
    assert "disabled" in page.locator("#live").inner_text()
