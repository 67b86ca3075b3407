"""Screenshots of the real desk in Chromium, for the README: the queue, a review, the edit form,
the outcome, and the Decided history.

    .venv/bin/python tests/desk/screenshots.py [--out examples/screenshots]
    .venv/bin/python tests/desk/screenshots.py --phone     # 390 x 844 views into test-artifacts/
    .venv/bin/python tests/desk/screenshots.py --sealed    # a sealed log's views, desktop and phone

It runs ``desk demo`` (its scripted ADK agent proposes calls through the bridge and resumes as
people decide), feeds it the scenarios below, decides some of them in headless Chromium through
the pages, and saves one PNG per view (1280 px wide). ``tests/desk/test_desk_screenshots.py`` runs
it, so the script keeps working and the pictures keep matching the pages.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (HERE, ROOT):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from browserkit import Demo, launch, running_demo, sign_in, wait_until  # noqa: E402

OUT = ROOT / "examples" / "screenshots"
SHOTS = ("queue.png", "review.png", "edit.png", "outcome.png", "history.png")
WIDTH, HEIGHT = 1280, 860

SCENARIOS: list[dict[str, Any]] = [
    {
        "prompt": "Pay invoice #1042 from ACME GmbH, it's due today.",
        "say": "Invoice #1042 is EUR 1,250.00 to ACME GmbH. I'll transfer it now.",
        "calls": [
            (
                "transfer_money",
                {
                    "amount": 1250.0,
                    "currency": "EUR",
                    "to_account": "DE89 3704 0044 0532 0130 00",
                    "memo": "Invoice 1042",
                },
            )
        ],
    },
    {
        "prompt": "Tell Dana the Q3 numbers are final.",
        "say": "I'll e-mail Dana.",
        "calls": [
            (
                "send_email",
                {
                    "to": "dana@example.com",
                    "subject": "Q3 numbers are final",
                    "body": "Hi Dana,\n\nthe Q3 numbers are final and in the shared folder.\n\nBest",
                },
            )
        ],
    },
    {
        "prompt": "Refund order 5512 and let the customer know.",
        "say": "Two steps: refund EUR 89.90 and send the customer an e-mail.",
        "calls": [
            (
                "transfer_money",
                {
                    "amount": 89.9,
                    "currency": "EUR",
                    "to_account": "NL91 ABNA 0417 1643 00",
                    "memo": "Refund order 5512",
                },
            ),
            (
                "send_email",
                {
                    "to": "customer5512@example.net",
                    "subject": "Your refund",
                    "body": "We refunded EUR 89.90 for order 5512.",
                },
            ),
        ],
    },
    {
        "prompt": "Customer 7781 asked us to erase their data (GDPR).",
        "say": "Deleting customer 7781's record as requested.",
        "calls": [("delete_record", {"table": "customers", "record_id": "7781"})],
    },
    {
        "prompt": "Raise the card limit on account ACC-204.",
        "say": "The tool will ask which daily limit to set.",
        "calls": [("set_daily_limit", {"account": "ACC-204"})],
    },
    {
        "prompt": "Send the weekly status report to the team.",
        "say": "Sending the weekly report.",
        "calls": [
            (
                "send_email",
                {"to": "team@example.com", "subject": "Weekly status, week 48", "body": "All green; details attached."},
            )
        ],
    },
    {
        "prompt": "Wire the quarterly rent to the landlord.",
        "say": "Transferring the Q4 rent.",
        "calls": [
            (
                "transfer_money",
                {
                    "amount": 99999.0,
                    "currency": "EUR",
                    "to_account": "FR76 3000 6000 0112 3456 7890 189",
                    "memo": "Rent Q4",
                },
            )
        ],
    },
]


def _pending(demo: Demo) -> list[Any]:
    from signoff.audit import ReviewService, open_store
    from signoff.desk.reveal import revealed

    store = open_store(demo.store_url)
    try:
        return revealed(store, ReviewService(store).pending(limit=100))  # a sealed log's values, from beside it
    finally:
        store.close()


def _find(demo: Demo, tool: str, marker: str) -> Any:  # markers are ASCII
    return wait_until(
        lambda: next(
            (
                r
                for r in _pending(demo)
                if r.call.tool == tool and marker in json.dumps(r.call.args, ensure_ascii=False)
            ),
            None,
        ),
        20,
        f"the {tool} review with {marker!r}",
    )


def _shot(page: Any, path: Path, *, full: bool = False) -> None:
    page.wait_for_timeout(150)  # countdowns and live badges settle
    page.screenshot(path=str(path), full_page=full)


def take(out: Path, directory: Path) -> list[Path]:
    """Run the demo in ``directory`` and write the screenshots to ``out``."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    with running_demo(directory, host="localhost") as demo, sync_playwright() as p:
        browser = launch(p)
        page = sign_in(browser, demo, demo.email, demo.password)
        page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
        for s in SCENARIOS:
            demo.propose(*[(name, args) for name, args in s["calls"]], prompt=s["prompt"])
            time.sleep(0.15)  # keep the queue in the scenarios' order
        transfer = _find(demo, "transfer_money", "Invoice 1042")
        email = _find(demo, "send_email", "Dana")
        _find(demo, "transfer_money", "Refund order 5512")
        _find(demo, "send_email", "customer5512")
        delete = _find(demo, "delete_record", "7781")
        weekly = _find(demo, "send_email", "Weekly status")
        limit = _find(demo, "set_daily_limit", "ACC-204")
        rent = _find(demo, "transfer_money", "Rent Q4")

        # Decide a few first, so the queue's "Just decided" panel and the history have something to show.
        page.goto(f"{demo.url}/reviews/{delete.id}")
        page.click(".tab[data-tab=reject]")
        page.fill("#reject-form textarea[name=reason]", "We keep records for 10 years (HGB §257); ask Legal first.")
        page.click("#reject-btn")
        page.wait_for_selector("#decision-done")
        page.goto(f"{demo.url}/reviews/{weekly.id}")
        page.click("#approve-btn")
        page.wait_for_selector("#decision-done")
        page.wait_for_selector("#o-reply.done", timeout=20_000)

        page.goto(f"{demo.url}/queue")
        page.wait_for_selector("#live[data-state=live]")
        page.wait_for_selector(".recent-item")
        _shot(page, out / "queue.png", full=True)

        page.goto(f"{demo.url}/reviews/{transfer.id}")
        _shot(page, out / "review.png")

        page.goto(f"{demo.url}/reviews/{email.id}")
        page.click(".tab[data-tab=edit]")
        body = page.locator('[data-editor="args"] [data-field][data-name="body"] textarea')
        body.fill("Hi Dana,\n\nthe Q3 numbers are final; they are in Finance › Reports › Q3.\n\nBest,\nSam")
        page.fill("#edit-form textarea[name=rationale]", "Point Dana to the right folder.")
        page.evaluate(
            "window.scrollTo(0, document.getElementById('decide').getBoundingClientRect().top + window.scrollY - 70)"
        )
        _shot(page, out / "edit.png")

        page.click("#edit-btn")
        page.wait_for_selector("#decision-done")
        page.wait_for_selector("#o-tool.done", timeout=20_000)
        page.wait_for_selector("#o-reply.done", timeout=20_000)
        page.evaluate("window.scrollTo(0, 0)")
        _shot(page, out / "outcome.png", full=True)

        # Two more decisions, so the history shows an answer to a tool's own question and a refusal.
        page.goto(f"{demo.url}/reviews/{limit.id}")
        page.locator('[data-editor="approve-payload"] [data-name="limit"] input').fill("750")
        page.fill("#approve-form textarea[name=rationale]", "Agreed with the account owner.")
        page.click("#approve-btn")
        page.wait_for_selector("#decision-done")
        page.goto(f"{demo.url}/reviews/{rent.id}")
        page.click(".tab[data-tab=reject]")
        page.fill("#reject-form textarea[name=reason]", "Rent is EUR 9,999.00, not 99,999.00; please check the lease.")
        page.click("#reject-btn")
        page.wait_for_selector("#decision-done")
        page.wait_for_selector("#o-resumed.done", timeout=20_000)

        page.goto(f"{demo.url}/decided")
        _shot(page, out / "history.png")
        browser.close()
    return [out / name for name in SHOTS]


PHONE = {"width": 390, "height": 844}
PHONE_SHOTS = ("queue-phone.png", "review-edited-phone.png", "review-edited-phone-full.png")


def take_phone(out: Path, directory: Path) -> list[Path]:
    """Phone-sized (390 x 844) views for checking the pages on a small screen: the queue with two identical
    calls (told apart by session, review id and age), and a review after an edit (what runs, the proposal
    struck through)."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    with running_demo(directory, host="localhost") as demo, sync_playwright() as p:
        browser = launch(p)
        page = sign_in(browser, demo, demo.email, demo.password)
        page.set_viewport_size(PHONE)
        same = {"amount": 100.0, "currency": "EUR", "to_account": "DE89 3704 0044 0532 0130 00", "memo": "Rent"}
        demo.propose(("transfer_money", same), prompt="Pay the rent.")
        time.sleep(0.15)
        demo.propose(("transfer_money", same), prompt="Pay the rent (again).")
        time.sleep(0.15)
        demo.propose(SCENARIOS[1]["calls"][0], prompt=SCENARIOS[1]["prompt"])
        wait_until(lambda: len(_pending(demo)) >= 3, 20, "three reviews")
        first = sorted(_pending(demo), key=lambda r: r.opened_seq)[0]
        page.goto(f"{demo.url}/queue")
        page.wait_for_selector("#live[data-state=live]")
        _shot(page, out / PHONE_SHOTS[0], full=True)
        page.goto(f"{demo.url}/reviews/{first.id}")
        page.click(".tab[data-tab=edit]")
        page.locator('[data-editor="args"] [data-field][data-name="amount"] input').fill("50")
        page.fill("#edit-form textarea[name=rationale]", "Half now, half next month.")
        page.click("#edit-btn")
        page.wait_for_selector("#decision-done")
        page.wait_for_selector("#o-tool.done", timeout=20_000)
        page.evaluate("window.scrollTo(0, 0)")
        _shot(page, out / PHONE_SHOTS[1])
        _shot(page, out / PHONE_SHOTS[2], full=True)
        browser.close()
    return [out / name for name in PHONE_SHOTS]


SEALED_SHOTS = (
    "sealed-queue.png",
    "sealed-review.png",
    "sealed-erased.png",
    "sealed-tampered.png",
    "sealed-queue-phone.png",
    "sealed-review-phone.png",
    "sealed-erased-phone.png",
    "sealed-tampered-phone.png",
)


def _erase(demo: Demo, review_id: str, reason: str) -> None:
    from signoff.audit import erasure, open_store
    from signoff.audit.keys import read_private_key

    store = open_store(demo.store_url)
    try:
        erasure.erase(store, review_id, reason=reason, admin=read_private_key(demo.dir / "log.admin.key"))
    finally:
        store.close()


def _tamper(demo: Demo, review_id: str, name: str, value: Any) -> None:
    """A value changed in ``signoff_value`` behind the service's back."""
    from sqlalchemy import text

    from signoff.audit import ReviewService, open_store, sealing

    store = open_store(demo.store_url)
    try:
        commitment = store.entry(ReviewService(store).get(review_id).opened_seq).body["call"]["args"][name]
        with store.write_engine.begin() as conn:
            conn.execute(
                text("UPDATE signoff_value SET value = :v WHERE commitment = :c"),
                {"v": sealing.value_json(value), "c": commitment},
            )
    finally:
        store.close()


def take_sealed(out: Path, directory: Path) -> list[Path]:
    """``desk demo --sealed-values``, desktop and phone: the queue, a review (its values revealed from beside
    the log), an erased review (when, by whom and why, in place of its values) and a review whose value
    was changed behind the service's back (none of its values shown)."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    with running_demo(directory, host="localhost", sealed=True) as demo, sync_playwright() as p:
        browser = launch(p)
        page = sign_in(browser, demo, demo.email, demo.password)
        page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
        for s in SCENARIOS[:2] + SCENARIOS[5:6] + SCENARIOS[3:4]:
            demo.propose(*[(name, args) for name, args in s["calls"]], prompt=s["prompt"])
            time.sleep(0.15)
        transfer = _find(demo, "transfer_money", "Invoice 1042")
        email = _find(demo, "send_email", "Dana")
        weekly = _find(demo, "send_email", "Weekly status")
        delete = _find(demo, "delete_record", "7781")
        page.goto(f"{demo.url}/reviews/{weekly.id}")
        page.click("#approve-btn")
        page.wait_for_selector("#decision-done")
        page.wait_for_selector("#o-reply.done", timeout=20_000)
        page.goto(f"{demo.url}/reviews/{delete.id}")
        page.click(".tab[data-tab=reject]")
        page.fill("#reject-form textarea[name=reason]", "Erase it through `audit erase`, not the tool.")
        page.click("#reject-btn")
        page.wait_for_selector("#decision-done")
        _erase(demo, weekly.id, "Customer 7781 asked us to erase their data (GDPR Art. 17), ticket #5512")
        _tamper(demo, email.id, "to", "attacker@example.net")
        views = [
            ("queue", f"{demo.url}/queue", "#live[data-state=live]"),
            ("review", f"{demo.url}/reviews/{transfer.id}", "#args-table"),
            ("erased", f"{demo.url}/reviews/{weekly.id}", "#values-erased"),
            ("tampered", f"{demo.url}/reviews/{email.id}", "#values-withheld"),
        ]
        for size, suffix in (({"width": WIDTH, "height": HEIGHT}, ""), (PHONE, "-phone")):
            page.set_viewport_size(size)
            for name, url, ready in views:
                page.goto(url)
                page.wait_for_selector(ready)
                _shot(page, out / f"sealed-{name}{suffix}.png", full=True)
        browser.close()
    return [out / name for name in SEALED_SHOTS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the PNGs go (default {OUT.relative_to(ROOT)})")
    parser.add_argument(
        "--phone", action="store_true", help="phone-sized views instead (390 x 844; default --out test-artifacts)"
    )
    parser.add_argument(
        "--sealed",
        action="store_true",
        help="a sealed log's views (desk demo --sealed-values: revealed, erased, tampered), desktop and phone "
        "(default --out test-artifacts)",
    )
    a = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="signoff-shots-") as tmp:
        if a.sealed:
            out = a.out if a.out != OUT else ROOT / "test-artifacts"
            for path in take_sealed(out, Path(tmp)):
                print(path)
            return 0
        if a.phone:
            out = a.out if a.out != OUT else ROOT / "test-artifacts"
            for path in take_phone(out, Path(tmp)):
                print(path)
            return 0
        for path in take(a.out, Path(tmp)):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
