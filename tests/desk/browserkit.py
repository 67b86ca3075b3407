"""The browser tests' harness: a real ``desk demo`` subprocess (its scripted ADK agent proposes
calls through the bridge and resumes as people decide) and headless Debian Chromium through
Playwright.

Scenarios are fed through the demo's inbox file, so each test knows exactly which call it is
reviewing; the tools' runs are read back from ``tool-runs.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("SIGNOFF_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_or_skip() -> None:
    """Skip without Chromium, except under CI=true, where a missing browser is a failure."""
    if Path(CHROMIUM).exists():
        return
    reason = f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class Demo:
    url: str
    dir: Path
    store_url: str
    email: str
    password: str
    proc: subprocess.Popen[bytes]

    def propose(self, *calls: tuple[str, dict[str, Any]], prompt: str = "") -> None:
        line = {
            "prompt": prompt or f"Please do task {secrets.token_hex(4)}",
            "say": "On it.",
            "calls": [{"name": n, "args": a} for n, a in calls],
        }
        with (self.dir / "inbox.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")

    def review_with(self, marker: str, timeout: float = 15.0, *, skip: tuple[str, ...] = ()) -> Any:
        from signoff.audit import ReviewService, open_store

        store = open_store(self.store_url)
        svc = ReviewService(store)
        try:

            def find() -> Any:
                from signoff.desk.reveal import revealed

                for r in revealed(store, svc.pending(limit=500)):  # a sealed log's values, from beside it
                    if r.id not in skip and marker in json.dumps(r.call.args, ensure_ascii=False):
                        return r
                return None

            return wait_until(find, timeout, f"a review with {marker!r}")
        finally:
            store.close()

    def review(self, review_id: str) -> Any:
        from signoff.audit import ReviewService, open_store

        store = open_store(self.store_url)
        try:
            svc = ReviewService(store)
            return svc.get(review_id), [e.kind for e in svc.history(review_id)]
        finally:
            store.close()

    def runs(self) -> list[dict[str, Any]]:
        path = self.dir / "tool-runs.jsonl"
        if not path.exists():
            return []
        # split on "\n" only: str.splitlines() also splits inside a value at U+2028 and friends
        return [json.loads(x) for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]

    def run_with(self, marker: str, timeout: float = 15.0) -> dict[str, Any]:
        return wait_until(
            lambda: next((r for r in self.runs() if marker in json.dumps(r["args"], ensure_ascii=False)), None),
            timeout,
            f"the tool run with {marker!r}",
        )

    def desk_cli(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "desk", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        return out.stdout

    def add_reviewer(self, email: str, role: str | list[str], tools: list[str]) -> str:
        """``desk reviewer add`` with the demo's admin key; returns the enrolment code (the initial password)."""
        roles = [role] if isinstance(role, str) else role
        out = self.desk_cli(
            "reviewer",
            "add",
            email,
            *[x for r in roles for x in ("--role", r)],
            *(["--tools", *tools] if tools else ["--any-tool"]),
            "--store",
            self.store_url,
            "--admin-key",
            str(self.dir / "log.admin.key"),
        )
        return re.search(r"enrolment code .*: (\S+)$", out, re.M).group(1)  # type: ignore[union-attr]


@contextmanager
def running_demo(directory: Path, host: str = "127.0.0.1", *, sealed: bool | None = None) -> Iterator[Demo]:
    """``desk demo`` on ``directory``; ``host`` is the name the browser uses (``localhost`` for passkeys:
    an IP address is not a valid WebAuthn RP ID); ``sealed``: its log keeps the values beside it
    (``--sealed-values``) or in its entries (``--values-in-entries``); by default, as ``audit init``."""
    chromium_or_skip()
    port = free_port()
    log = (directory / "demo.out").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "desk",
            "demo",
            "--dir",
            str(directory),
            "--port",
            str(port),
            "--interval",
            "0",
            "--quiet",
            *([] if sealed is None else ["--sealed-values" if sealed else "--values-in-entries"]),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    url = f"http://{host}:{port}"
    import httpx

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise AssertionError((directory / "demo.out").read_text()) from None
            return False

    try:
        wait_until(up, 30, "desk demo to start")
        email, password = (directory / "demo-credentials.txt").read_text().split("\n")[:2]
        yield Demo(url, directory, f"sqlite:///{directory / 'signoff.db'}", email, password, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)


def sign_in(
    browser: Any,
    demo: Demo,
    email: str,
    password: str,
    new_password: str | None = None,
    *,
    setup: Callable[[Any], None] | None = None,
    landing: str = "**/queue",
) -> Any:
    """A new browser context signed in as ``email``; ``setup(page)`` runs before the first page loads."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.console_errors = []  # what Chromium reports as errors (a failed resource load is one)
    page.on("console", lambda m: page.console_errors.append(f"{m.text} ({page.url})") if m.type == "error" else None)
    if setup is not None:
        setup(page)
    page.goto(demo.url + "/queue")
    assert "/signin" in page.url
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    if new_password is not None:
        page.wait_for_selector("input[name=new_password]")
        page.fill("input[name=password]", password)
        page.fill("input[name=new_password]", new_password)
        page.click("button[type=submit]")
    page.wait_for_url(landing)
    return page


# -- passkeys: Chromium's CDP virtual authenticator -----------------------------------------------------

AUTHENTICATOR = {
    "protocol": "ctap2",
    "transport": "internal",
    "hasResidentKey": True,
    "hasUserVerification": True,
    "isUserVerified": True,
    "automaticPresenceSimulation": True,
}


def with_authenticator(page: Any) -> None:
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    page.authenticator = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": AUTHENTICATOR})["authenticatorId"]
    page.cdp = cdp


def reviewer_page(browser: Any, demo: Demo, email: str, *, setup: Any = with_authenticator) -> Any:
    """``desk reviewer add`` → first sign-in with the enrolment code → a page with an authenticator."""
    code = demo.add_reviewer(email, ["finance", "ops"], [])
    page = sign_in(browser, demo, email, code, new_password=f"{email} new password", setup=setup)
    page.code = code
    page.actor = "human:" + email
    return page


def register(page: Any, demo: Demo, *, shot: str | None = None) -> dict[str, Any]:
    """Register a passkey on the account page with the enrolment code; the log's key.enrolled for it."""
    from signoff.audit import ReviewService, open_store

    page.goto(demo.url + "/account")
    # The enrolment code was the initial password: the sign-in page left it to this tab, not the server.
    assert page.locator("#enrol-code").input_value() == page.code
    if shot:
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#passkeys").screenshot(path=str(ARTIFACTS / "passkey-register.png"))
    page.click("#passkey-register")
    page.wait_for_selector("#passkey-registered", timeout=15_000)
    if shot:
        ARTIFACTS.mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
    assert page.evaluate("sessionStorage.getItem('signoff.enrolment-code')") is None
    store = open_store(demo.store_url)
    try:
        keys = ReviewService(store).keys(page.actor)
        assert len(keys) == 1 and keys[0].passkey is not None and keys[0].passkey.rp_id == "localhost"
        entry = store.entry(keys[0].seq)
        assert entry.kind == "key.enrolled" and entry.actor == page.actor and entry.body["enrolment"] == "code"
        return {"fingerprint": keys[0].fingerprint, "algorithm": keys[0].passkey.algorithm}
    finally:
        store.close()
