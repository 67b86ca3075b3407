"""A passkey signature refused because the page and the record differ (issue 14), in real headless Chromium
with its CDP virtual authenticator, against a real ``desk demo`` (browserkit.py).

The attack: after the review page loaded, someone with the database rewrites the review's projection row
(its args and their digest), so the statement the server builds is not the one the page showed and the
reviewer's passkey signed (the WebAuthn challenge is SHA-256 of the page's statement). The server refuses
it, as always; what this test holds is what the people see: the reviewer a plain sentence and a way to a
fresh copy of the review (no button that fails again), the operator a JSON warning line on stderr naming
the review and the reviewer, and ``signoff_signature_mismatches_total`` counting it.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import httpx
import pytest
from browserkit import ARTIFACTS, Demo, register, reviewer_page, running_demo, wait_until

from signoff.audit.canonical import digest

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")

SAID = "What you saw differs from the record. Nothing was recorded. This may be tampering: tell your administrator."


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("mismatch"), host="localhost") as d:
        yield d


def _row(demo: Demo, review_id: str) -> tuple[str, str]:
    with closing(sqlite3.connect(demo.dir / "signoff.db", timeout=30)) as db:
        data, found = db.execute("SELECT data, args_digest FROM signoff_review WHERE id = ?", (review_id,)).fetchone()
    return str(data), str(found)


def _write_row(demo: Demo, review_id: str, data: str, args_digest: str) -> None:
    with closing(sqlite3.connect(demo.dir / "signoff.db", timeout=30)) as db:
        db.execute("UPDATE signoff_review SET data = ?, args_digest = ? WHERE id = ?", (data, args_digest, review_id))
        db.commit()


def _warnings(demo: Demo) -> list[dict[str, Any]]:
    lines = (demo.dir / "demo.out").read_text(encoding="utf-8", errors="replace").splitlines()
    return [json.loads(x) for x in lines if x.startswith("{") and '"signature_mismatch"' in x]


def _mismatches(demo: Demo) -> str:
    text = httpx.get(demo.url + "/metrics", timeout=5).text
    return next(x for x in text.splitlines() if x.startswith('signoff_signature_mismatches_total{kind="approved"}'))


def test_a_page_that_differs_from_the_record_is_refused_plainly_and_flagged(browser: Any, demo: Demo) -> None:
    mia = reviewer_page(browser, demo, "mia@example.org")
    register(mia, demo)
    marker = "mismatch-" + secrets.token_hex(3)
    args = {"amount": 100.0, "currency": "EUR", "to_account": "DE89 3704", "memo": marker}
    demo.propose(("transfer_money", args))
    review = demo.review_with(marker)
    mia.goto(f"{demo.url}/reviews/{review.id}")
    assert mia.locator("#approve-btn").is_visible()
    assert _mismatches(demo).endswith(" 0.0")

    # Behind the page's back: the server's copy of the review now sends the money elsewhere.
    kept = _row(demo, review.id)
    data = json.loads(kept[0])
    forged = {**args, "to_account": "ATTACKER-D"}
    data["call"]["args"] = forged
    _write_row(demo, review.id, json.dumps(data), digest(forged))

    mia.click("#approve-btn")  # the virtual authenticator signs what the page shows
    notice = mia.wait_for_selector("#decision-error[data-problem=mismatch]", timeout=15_000)
    assert " ".join(notice.inner_text().split()).startswith(SAID)
    reload = mia.locator("#reload-review")
    assert reload.is_visible() and reload.inner_text() == "Reload the review"
    assert reload.get_attribute("href") == f"/reviews/{review.id}"
    assert mia.locator("#approve-btn, #edit-btn, #reject-btn, #decide").count() == 0  # nothing that fails again
    assert "challenge" not in notice.inner_text()  # the technical words wait behind "details", for the admin
    ARTIFACTS.mkdir(exist_ok=True)
    mia.screenshot(path=str(ARTIFACTS / "review-signature-mismatch.png"), full_page=True)
    assert demo.review(review.id)[0].status == "pending"  # nothing was recorded
    assert not demo.runs() or all(marker not in json.dumps(r["args"]) for r in demo.runs())

    # The operator hears of it: one structured warning line, one count.
    [line] = wait_until(lambda: _warnings(demo), 10, "the signature_mismatch warning line")
    assert line["level"] == "warning" and line["review"] == review.id and line["reviewer"] == mia.actor
    assert line["decision"] == "approved" and "tampering" in line["message"]
    assert _mismatches(demo).endswith(" 1.0")

    # Once the administrator has put the row right, a fresh copy of the review signs and runs.
    _write_row(demo, review.id, *kept)
    reload.click()
    mia.wait_for_selector("#approve-btn")
    mia.click("#approve-btn")
    done = mia.wait_for_selector("#decision-done", timeout=15_000)
    assert "signed with your passkey" in done.inner_text()
    assert demo.run_with(marker)["args"] == args
    assert _mismatches(demo).endswith(" 1.0") and len(_warnings(demo)) == 1
