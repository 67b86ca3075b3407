"""The reviewer sees their decision witnessed, checked in their own browser (issue 18): real Chromium on
the review page of a real ``desk demo``, two real witness processes cosigning the log's checkpoints. The
page fetches the decision's receipt (c2sp.org/tlog-proof) and checks the RFC 6962 path with WebCrypto
SHA-256 and the log's and witnesses' Ed25519 signatures with WebCrypto Ed25519; a server that lies (a
wrong root, a bad cosignature) makes the page say "Not verified"."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browserkit import ARTIFACTS, ROOT, Demo, running_demo, sign_in

from signoff.audit import ReviewService, open_store, witnessing
from signoff.audit.c2sp import log_vkey
from signoff.audit.keys import read_private_key
from signoff.audit.publisher import Publisher

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")

NAMES = ("witness.example.org/w1", "witness.example.org/w2")


class WitnessProc:
    def __init__(self, directory: Path, name: str, vkey_of_log: str) -> None:
        key = directory / f"{name.rsplit('/', 1)[1]}.pem"
        subprocess.run(
            [sys.executable, "-m", "signoff.audit.cli_witness", "keygen", "--name", name, "--out", str(key)],
            check=True, capture_output=True, cwd=ROOT,
        )  # fmt: skip
        self.vkey = Path(f"{key}.vkey").read_text().strip()
        argv = [sys.executable, "-m", "signoff.audit.cli_witness", "serve", "--key", str(key), "--port", "0"]
        argv += ["--store", str(directory / f"{key.stem}.db"), "--log", vkey_of_log, "--quiet"]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        found = re.search(r"listening on (http://\S+)", self.proc.stdout.readline().decode())
        assert found, "the witness did not start"
        self.url = found.group(1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("demo"), host="localhost") as d:  # WebCrypto needs a secure context
        yield d


@pytest.fixture(scope="module")
def witnesses(demo: Demo) -> Iterator[list[WitnessProc]]:
    store = open_store(demo.store_url)
    try:
        vkey = log_vkey(store.rules.origin, store.public_key)
        procs = [WitnessProc(demo.dir, name, vkey) for name in NAMES]
        admin = read_private_key(demo.dir / "log.admin.key")
        for proc in procs:
            witnessing.add_witness(store, proc.url, proc.vkey, admin=admin)
        witnessing.set_quorum(store, 2, admin=admin)
    finally:
        store.close()
    yield procs
    for proc in procs:
        proc.stop()


def _decide_and_publish(demo: Demo, marker: str) -> str:
    demo.propose(("send_email", {"to": f"{marker}@example.org", "subject": "Hello", "body": marker}))
    review = demo.review_with(marker)
    store = open_store(demo.store_url)
    try:
        ReviewService(store).approve(review.id, reviewer="human:" + demo.email)
        publisher = Publisher(store, read_private_key(demo.dir / "log.key"))
        try:
            report = publisher.publish_once()
        finally:
            publisher.close()
        assert [p.outcome for p in report.pushed] == ["cosigned", "cosigned"], report.to_json()
    finally:
        store.close()
    return str(review.id)


def _status(page: Any, review_id: str, demo: Demo) -> tuple[str, str]:
    page.goto(f"{demo.url}/reviews/{review_id}")
    page.wait_for_function("() => { const c = document.getElementById('witnessed'); return c && c.dataset.state; }")
    return page.inner_text("#witnessed-status"), str(page.get_attribute("#witnessed-status", "class"))


def test_the_page_checks_the_decisions_receipt_itself_and_a_lying_server_is_caught(
    browser: Any, demo: Demo, witnesses: list[WitnessProc]
) -> None:
    review_id = _decide_and_publish(demo, "witnessed1")
    page = sign_in(browser, demo, demo.email, demo.password)
    text, cls = _status(page, review_id, demo)
    assert cls == "good", text
    assert re.search(r"In the log at seq \d+; checkpoint of size \d+, cosigned by witness\.example\.org/w1 and "
                     r"witness\.example\.org/w2\. Checked in this browser\.", text), text  # fmt: skip
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "witnessed-desktop.png"), full_page=True)
    phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    small = phone.new_page()
    small.goto(f"{demo.url}/queue")
    small.fill("input[name=email]", demo.email)
    small.fill("input[name=password]", demo.password)
    small.click("button[type=submit]")
    small.wait_for_url("**/queue")
    text_small, _ = _status(small, review_id, demo)
    assert "cosigned by" in text_small
    small.screenshot(path=str(ARTIFACTS / "witnessed-phone.png"), full_page=True)
    phone.close()

    db = sqlite3.connect(demo.store_url.removeprefix("sqlite:///"))
    size, original = db.execute("SELECT size, signed FROM signoff_checkpoint ORDER BY size DESC LIMIT 1").fetchone()
    row = json.loads(original)
    try:
        # The server lies about the root: the third line of the checkpoint says another tree.
        lines = row["note"].split("\n")
        lines[2] = "A" * 43 + "="
        lied = json.dumps({**row, "note": "\n".join(lines)})
        db.execute("UPDATE signoff_checkpoint SET signed = ? WHERE size = ?", (lied, size))
        db.commit()
        text, cls = _status(page, review_id, demo)
        assert cls == "bad" and text.startswith("Not verified:"), text
        # The server lies about a cosignature: one byte of the second witness's changed.
        sig_lines = row["note"].split("\n")
        last = next(i for i, line in enumerate(sig_lines) if line.startswith("\u2014 witness.example.org/w2 "))
        head, value = sig_lines[last].rsplit(" ", 1)
        sig_lines[last] = f"{head} {value[:20]}{'A' if value[20] != 'A' else 'B'}{value[21:]}"
        lied = json.dumps({**row, "note": "\n".join(sig_lines)})
        db.execute("UPDATE signoff_checkpoint SET signed = ? WHERE size = ?", (lied, size))
        db.commit()
        text, cls = _status(page, review_id, demo)
        assert cls == "bad" and "cosignature by witness.example.org/w2 does not verify" in text, text
    finally:
        db.execute("UPDATE signoff_checkpoint SET signed = ? WHERE size = ?", (original, size))
        db.commit()
        db.close()
    text, cls = _status(page, review_id, demo)
    assert cls == "good", text
    page.context.close()


def test_a_decision_not_yet_in_a_checkpoint_says_so(browser: Any, demo: Demo, witnesses: list[WitnessProc]) -> None:
    demo.propose(("send_email", {"to": "later@example.org", "subject": "Later", "body": "later"}))
    review = demo.review_with("later@example.org")
    store = open_store(demo.store_url)
    try:
        ReviewService(store).approve(review.id, reviewer="human:" + demo.email)
    finally:
        store.close()
    page = sign_in(browser, demo, demo.email, demo.password)
    text, cls = _status(page, review.id, demo)
    assert cls == "muted" and text.startswith("Not in a checkpoint yet"), text
    # The server knew it: the page asks for no receipt (Chromium logged each 404 as an error), and offers
    # no download of one that cannot be made yet.
    assert page.locator("#witnessed a[download]").count() == 0
    assert page.console_errors == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "witnessed-not-yet.png"), full_page=False)
    page.context.close()
