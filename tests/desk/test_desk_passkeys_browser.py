"""Passkeys in real headless Chromium: a reviewer registers one on the account page and signs every
decision with it, through Chromium's own WebAuthn stack and its CDP virtual authenticator (CTAP2,
internal transport, resident keys, user verification).

The desk is a real ``desk demo`` subprocess (browserkit.py) served as http://localhost:PORT, a
valid RP ID; its scripted ADK agent runs each tool through the bridge's gate, which proves the
decision from the log (:func:`signoff.audit.decided.prove_decision`) before it sets the args.
The demo's log accepts unsigned decisions, but a reviewer with a passkey must sign each one:
these tests sign with EdDSA and ES256 passkeys, check that each tool ran with exactly the signed
args, that ``audit verify`` passes offline on the export (kept as tests/audit/fixtures/
webauthn_log.jsonl), and that args changed in the database, before or after the signature, never
reach a tool.

The signing tests' log writes the values into its entries (``desk demo --values-in-entries``), so that
each entry can be checked against the values signed and the export stays the audit tests' fixture;
test_desk_sealed_browser.py signs the same decisions on a log that keeps the values beside it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browserkit import (
    ARTIFACTS,
    ROOT,
    Demo,
    register,
    reviewer_page,
    running_demo,
    wait_until,
    with_authenticator,
)

from signoff.audit import ReviewService, open_store
from signoff.audit.canonical import canonical, digest
from signoff.audit.decided import DecisionNotProven, prove_decision
from signoff.audit.merkle import leaf_hash
from signoff.audit.reader import parse_entry
from signoff.audit.verify import verify_file

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")

FIXTURE = ROOT / "tests" / "audit" / "fixtures" / "webauthn_log.jsonl"
# Chromium's virtual authenticator makes EdDSA keys when the desk offers them first; this page
# script leaves it only ES256 to choose, so the log gets a credential of each algorithm.
ES256_ONLY = """(() => {
  const create = navigator.credentials.create.bind(navigator.credentials);
  navigator.credentials.create = (options) => {
    if (options && options.publicKey) {
      options.publicKey.pubKeyCredParams = options.publicKey.pubKeyCredParams.filter((p) => p.alg === -7);
    }
    return create(options);
  };
})();"""


def es256_authenticator(page: Any) -> None:
    page.context.add_init_script(ES256_ONLY)
    with_authenticator(page)


def decided(demo: Demo, review_id: str) -> tuple[Any, Any]:
    """The decision entry and what the gate proves from the log."""
    store = open_store(demo.store_url)
    try:
        review = ReviewService(store).get(review_id)
        assert review.decision_seq is not None, f"review {review_id} is still {review.status}"
        return store.entry(review.decision_seq), prove_decision(store, review_id)
    finally:
        store.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("passkeys"), host="localhost", sealed=False) as d:
        yield d


@pytest.fixture(scope="module")
def pat(browser: Any, demo: Demo) -> Any:
    return reviewer_page(browser, demo, "pat@example.org")


@pytest.fixture(scope="module")
def pat_key(pat: Any, demo: Demo) -> dict[str, Any]:
    return register(pat, demo, shot="passkey-registered.png")


def test_register_a_passkey(pat: Any, pat_key: dict[str, Any], demo: Demo) -> None:
    assert pat_key["algorithm"] == "Ed25519"  # EdDSA, offered first
    pat.goto(demo.url + "/account")
    assert "Ed25519" in pat.locator("#passkey-list").inner_text()


CANONICAL_VECTORS: list[Any] = [
    # RFC 8785 §3.2.2: numbers, literals and string escapes.
    {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": '\u20ac$\u000f\nA\'B"\\\\"/',
        "literals": [None, True, False],
    },
    # RFC 8785 §3.2.3: member names sorted by UTF-16 code units.
    {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    },
    {"a": [1250.0, 0.1, 1e21, 5e-324, 0.30000000000000004, 9007199254740991, -1.5], "z": {"b": {}, "a": []}},
    {"memo": "line\u2028sep 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 مرحبا <script>", "amount": 12.5, "nested": [{"y": 1, "x": None}]},
]


def test_the_page_writes_the_same_canonical_json_and_digest_as_audit(pat: Any, pat_key: dict[str, Any]) -> None:
    for value in CANONICAL_VECTORS:
        assert pat.evaluate("v => window.signoff.canonicalJSON(v)", value) == canonical(value).decode("utf-8")
        assert pat.evaluate("v => window.signoff.digestOf(v)", value) == digest(value)
    for bad in ("NaN", "Infinity", "'\\ud800'"):
        call = f"window.signoff.canonicalJSON({{x: {bad}}})"
        message = pat.evaluate(f"() => {{ try {{ {call}; return ''; }} catch (e) {{ return e.message; }} }}")
        assert "$.x" in message and "RFC 8785" in message


def test_signed_approve_runs_the_tool_with_the_signed_args(pat: Any, pat_key: dict[str, Any], demo: Demo) -> None:
    marker = "signed-approve-" + secrets.token_hex(3)
    args = {"amount": 1234.5, "currency": "EUR", "to_account": "DE89 3704", "memo": f"{marker} 𝔘𝔫𝔦 é\u2028x"}
    demo.propose(("transfer_money", args), prompt=f"Pay {marker}")
    review = demo.review_with(marker)
    pat.goto(f"{demo.url}/reviews/{review.id}")
    assert pat.locator("#sign-note").is_visible()
    pat.fill("#approve-form textarea[name=rationale]", "Invoice checked\nagainst the PO")
    ARTIFACTS.mkdir(exist_ok=True)
    pat.screenshot(path=str(ARTIFACTS / "review-sign.png"), full_page=True)
    pat.click("#approve-btn")
    done = pat.wait_for_selector("#decision-done", timeout=15_000)
    assert "signed with your passkey" in done.inner_text()
    pat.screenshot(path=str(ARTIFACTS / "review-signed.png"), full_page=True)
    assert "passkey" in pat.locator("#decision-sig").inner_text()
    run = demo.run_with(marker)
    assert run["tool"] == "transfer_money" and run["args"] == args  # exactly what was shown and signed
    entry, proven = decided(demo, review.id)
    assert entry.kind == "review.approved" and entry.actor == pat.actor and entry.sig["alg"] == "WebAuthn"
    assert entry.body["rationale"] == "Invoice checked\nagainst the PO" and entry.body["args_digest"] == digest(args)
    assert proven.signed_by == pat_key["fingerprint"] and proven.review.final_args == args
    wait_until(lambda: "tool.executed" in demo.review(review.id)[1], 10, "tool.executed on the log")


def test_signed_edit_runs_the_tool_with_the_signed_patch(pat: Any, pat_key: dict[str, Any], demo: Demo) -> None:
    marker = "signed-edit-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 900.0, "currency": "EUR", "to_account": "ACC-2", "memo": marker}))
    review = demo.review_with(marker)
    pat.goto(f"{demo.url}/reviews/{review.id}")
    pat.click(".tab[data-tab=edit]")
    edited = {"amount": 90.0, "currency": "EUR", "to_account": "ACC-2b", "memo": marker}
    pat.click('[data-editor="args"] .mode[data-mode=json]')  # the JSON mode; the form is tested below
    pat.locator("#args-editor").fill(json.dumps(edited, indent=2))
    pat.fill("#edit-form textarea[name=rationale]", "Ten times too much; other account")
    pat.screenshot(path=str(ARTIFACTS / "review-edit-sign.png"), full_page=True)
    pat.click("#edit-btn")
    pat.wait_for_selector("#decision-done", timeout=15_000)
    run = demo.run_with(marker)
    assert run["args"] == edited
    entry, proven = decided(demo, review.id)
    assert entry.kind == "review.edited" and entry.sig["alg"] == "WebAuthn"
    assert entry.body["patch"] == [
        {"op": "replace", "path": "/amount", "value": 90},
        {"op": "replace", "path": "/to_account", "value": "ACC-2b"},
    ]
    assert proven.signed_by == pat_key["fingerprint"] and proven.review.final_args == edited


def test_signed_edit_made_in_the_form_signs_exactly_the_patch_it_shows(
    pat: Any, pat_key: dict[str, Any], demo: Demo
) -> None:
    marker = "signed-form-" + secrets.token_hex(3)
    body = "Hi Dana,\r\n\r\nthe numbers: 𝔘𝔫𝔦 é\u2028x\n\nBest"  # CR LF, a line separator: kept as sent
    demo.propose(("send_email", {"to": "dana@example.com", "subject": marker, "body": body}))
    review = demo.review_with(marker)
    pat.goto(f"{demo.url}/reviews/{review.id}")
    pat.click(".tab[data-tab=edit]")
    fields = pat.locator('[data-editor="args"] [data-fields]')
    assert fields.is_visible() and fields.locator('[data-name="body"] textarea').count() == 1
    fields.locator('[data-name="to"] input').fill("dana.k@example.com")
    shown = json.loads(pat.locator("#patch-view").text_content() or "")  # the raw patch: under "details"
    assert shown == [{"op": "replace", "path": "/to", "value": "dana.k@example.com"}]  # the body is untouched
    pat.click("#edit-btn")
    pat.wait_for_selector("#decision-done", timeout=15_000)
    run = demo.run_with(marker)
    assert run["args"] == {"to": "dana.k@example.com", "subject": marker, "body": body}
    entry, proven = decided(demo, review.id)
    assert entry.kind == "review.edited" and entry.sig["alg"] == "WebAuthn" and entry.body["patch"] == shown
    assert proven.review.final_args == run["args"]


def test_signed_reject_stops_the_tool(pat: Any, pat_key: dict[str, Any], demo: Demo) -> None:
    marker = "signed-reject-" + secrets.token_hex(3)
    demo.propose(("delete_record", {"table": "customers", "record_id": marker}))
    review = demo.review_with(marker)
    pat.goto(f"{demo.url}/reviews/{review.id}")
    pat.click(".tab[data-tab=reject]")
    pat.fill("#reject-form textarea[name=reason]", "Keep this customer:\nthe request was withdrawn")
    pat.click("#reject-btn")
    pat.wait_for_selector("#decision-done", timeout=15_000)
    wait_until(lambda: "run.resumed" in demo.review(review.id)[1], 10, "the run to resume")
    time.sleep(0.5)
    entry, proven = decided(demo, review.id)
    assert entry.kind == "review.rejected" and entry.sig["alg"] == "WebAuthn"
    assert entry.body == {"review": review.id, "reason": "Keep this customer:\nthe request was withdrawn"}
    assert proven.status == "rejected" and proven.signed_by == pat_key["fingerprint"]
    assert not [r for r in demo.runs() if marker in json.dumps(r["args"])]
    assert "tool.executed" not in demo.review(review.id)[1]


def test_signed_answer_to_the_tools_own_question(pat: Any, pat_key: dict[str, Any], demo: Demo) -> None:
    account = "ACC-" + secrets.token_hex(3)
    demo.propose(("set_daily_limit", {"account": account}))
    review = demo.review_with(account)
    pat.goto(f"{demo.url}/reviews/{review.id}")
    # The tool's own question, answered in its form (a number field for the limit).
    limit = pat.locator('[data-editor="approve-payload"] [data-field][data-name="limit"] input')
    assert limit.get_attribute("type") == "number" and limit.input_value() == "500"
    limit.fill("750.0")
    pat.click("#approve-btn")
    pat.wait_for_selector("#decision-done", timeout=15_000)
    run = demo.run_with(account)
    assert run["payload"] == {"limit": 750, "currency": "EUR"}
    entry, proven = decided(demo, review.id)
    assert entry.body["payload"] == {"limit": 750, "currency": "EUR"} and proven.review.answer_payload == run["payload"]


def test_an_es256_passkey_signs_too(browser: Any, demo: Demo) -> None:
    quinn = reviewer_page(browser, demo, "quinn@example.org", setup=es256_authenticator)
    key = register(quinn, demo)
    assert key["algorithm"] == "ES256"
    marker = "es256-" + secrets.token_hex(3)
    demo.propose(("send_email", {"to": "dana@example.com", "subject": marker, "body": "Q3 is final"}))
    review = demo.review_with(marker)
    quinn.goto(f"{demo.url}/reviews/{review.id}")
    quinn.click("#approve-btn")
    quinn.wait_for_selector("#decision-done", timeout=15_000)
    assert demo.run_with(marker)["args"]["subject"] == marker
    entry, proven = decided(demo, review.id)
    assert entry.sig["alg"] == "WebAuthn" and proven.signed_by == key["fingerprint"]
    quinn.context.close()


def test_cancelled_passkey_sends_nothing(pat: Any, pat_key: dict[str, Any], demo: Demo) -> None:
    marker = "cancel-" + secrets.token_hex(3)
    demo.propose(("send_email", {"to": "x@example.com", "subject": marker, "body": "b"}))
    review = demo.review_with(marker)
    pat.goto(f"{demo.url}/reviews/{review.id}")
    pat.cdp.send("WebAuthn.setUserVerified", {"authenticatorId": pat.authenticator, "isUserVerified": False})
    try:
        pat.click("#approve-btn")
        status = pat.locator("#sign-status.bad")
        status.wait_for(timeout=20_000)
        assert "Nothing was sent; nothing was recorded." in status.inner_text()
    finally:
        pat.cdp.send("WebAuthn.setUserVerified", {"authenticatorId": pat.authenticator, "isUserVerified": True})
    assert demo.review(review.id)[0].status == "pending"


def test_the_log_verifies_offline_and_is_kept_as_a_fixture(pat_key: dict[str, Any], demo: Demo) -> None:
    """`audit export` then `audit verify FILE` (no database); the export becomes the audit tests' fixture."""
    ARTIFACTS.mkdir(exist_ok=True)
    exported = ARTIFACTS / "webauthn_log.jsonl"
    # A values file beside it (an earlier export of a sealed log) would be read with it: none here.
    exported.with_name(exported.name + ".values.jsonl").unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    audit = [sys.executable, "-m", "signoff.audit.cli", "--store", demo.store_url]
    subprocess.run([*audit, "export", "-o", str(exported)], check=True, cwd=ROOT, env=env)
    verified = subprocess.run(
        [sys.executable, "-m", "signoff.audit.cli", "verify", str(exported)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert verified.returncode == 0, verified.stderr
    assert verify_file(exported).ok
    entries = [parse_entry(line) for line in exported.read_bytes().splitlines()]
    passkeys = [e for e in entries if e.kind == "key.enrolled" and e.body.get("alg") == "WebAuthn"]
    signed = {e.kind for e in entries if e.sig and e.sig.get("alg") == "WebAuthn"}
    assert len(passkeys) == 2 and signed >= {"review.approved", "review.edited", "review.rejected"}
    if not FIXTURE.exists() or os.environ.get("SIGNOFF_REFRESH_FIXTURES") == "1":
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(exported, FIXTURE)


# -- args changed in the database never reach a tool ------------------------------------------------


@pytest.fixture(scope="module")
def tamper_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with running_demo(tmp_path_factory.mktemp("tamper"), host="localhost") as d:
        yield d


@pytest.fixture(scope="module")
def rex(browser: Any, tamper_demo: Demo) -> Any:
    page = reviewer_page(browser, tamper_demo, "rex@example.org")
    register(page, tamper_demo)
    return page


def _rewrite_queue_row(demo: Demo, review_id: str, change: dict[str, Any]) -> dict[str, Any]:
    """What a database writer can do to the review projection: new args, with their digest."""
    from sqlalchemy import text

    store = open_store(demo.store_url)
    try:
        with store.write_engine.begin() as conn:
            row = conn.execute(text("SELECT data FROM signoff_review WHERE id = :i"), {"i": review_id}).scalar_one()
            data = json.loads(row)
            args = {**data["call"]["args"], **change}
            data["call"]["args"] = args
            if isinstance(data.get("final_args"), dict):
                data["final_args"] = {**data["final_args"], **change}
            conn.execute(
                text("UPDATE signoff_review SET data = :d, args_digest = :g WHERE id = :i"),
                {"d": json.dumps(data), "g": digest(args), "i": review_id},
            )
        return args
    finally:
        store.close()


def _rewrite_opened_entry(demo: Demo, review_id: str, change: dict[str, Any]) -> None:
    """Rewrite the review.opened entry's args (and their digest), with its stored hash recomputed."""
    from sqlalchemy import text

    store = open_store(demo.store_url)
    try:
        seq = ReviewService(store).get(review_id).opened_seq
        with store.write_engine.begin() as conn:
            raw = conn.execute(text("SELECT raw FROM signoff_entry WHERE seq = :s"), {"s": seq}).scalar_one()
            entry = json.loads(bytes(raw))
            entry["body"]["call"]["args"] = {**entry["body"]["call"]["args"], **change}
            entry["body"]["call"]["args_digest"] = digest(entry["body"]["call"]["args"])
            new = canonical(entry)
            conn.execute(
                text("UPDATE signoff_entry SET raw = :r, hash = :h WHERE seq = :s"),
                {"r": new, "h": "sha256:" + leaf_hash(new).hex(), "s": seq},
            )
    finally:
        store.close()


def test_args_changed_after_display_get_no_signature(rex: Any, tamper_demo: Demo) -> None:
    demo = tamper_demo
    marker = "shown-" + secrets.token_hex(3)
    demo.propose(("transfer_money", {"amount": 50.0, "currency": "EUR", "to_account": "ACC-5", "memo": marker}))
    review = demo.review_with(marker)
    rex.goto(f"{demo.url}/reviews/{review.id}")
    assert "ACC-5" in rex.locator("#args-table").inner_text()
    _rewrite_queue_row(demo, review.id, {"to_account": "ATTACKER-1"})  # after the page showed ACC-5
    rex.click("#approve-btn")
    error = rex.wait_for_selector("#decision-error", timeout=15_000)
    text = error.inner_text()
    assert "What you saw differs from the record." in text and "Nothing was recorded" in text
    assert rex.locator("#reload-review").is_visible() and rex.locator("#approve-btn").count() == 0
    rex.screenshot(path=str(ARTIFACTS / "signature-refused.png"), full_page=True)
    assert demo.review(review.id)[0].status == "pending"
    assert not [r for r in demo.runs() if marker in json.dumps(r["args"])]


def test_entry_rewritten_after_signing_stops_the_tool(rex: Any, tamper_demo: Demo) -> None:
    demo = tamper_demo
    marker = "entry-" + secrets.token_hex(3)
    demo.propose(
        ("transfer_money", {"amount": 5.0, "currency": "EUR", "to_account": "ACC-6", "memo": marker}),
        ("send_email", {"to": "c@example.net", "subject": marker, "body": "refund sent"}),
    )
    transfer = demo.review_with(marker)
    assert transfer.call.tool == "transfer_money"
    rex.goto(f"{demo.url}/reviews/{transfer.id}")
    rex.click("#approve-btn")
    rex.wait_for_selector("#decision-done", timeout=15_000)
    # Signed: now the log's own entry is rewritten (a consistent forgery: args, digest, stored hash).
    _rewrite_opened_entry(demo, transfer.id, {"to_account": "ATTACKER-2"})
    _rewrite_queue_row(demo, transfer.id, {"to_account": "ATTACKER-2"})
    email = demo.review_with(marker, skip=(transfer.id,))
    rex.goto(f"{demo.url}/reviews/{email.id}")
    rex.click("#approve-btn")
    rex.wait_for_selector("#decision-done", timeout=15_000)
    assert demo.run_with(marker)["tool"] == "send_email"  # the frontier resumed: the gate ran on both
    time.sleep(0.5)
    assert not [r for r in demo.runs() if r["tool"] == "transfer_money" and marker in json.dumps(r["args"])]
    assert not [r for r in demo.runs() if "ATTACKER-2" in json.dumps(r["args"])]
    assert "tool.executed" not in demo.review(transfer.id)[1]
    store = open_store(demo.store_url)
    try:
        with pytest.raises(DecisionNotProven, match="expected the decision at seq"):
            prove_decision(store, transfer.id)
    finally:
        store.close()


def test_queue_row_rewritten_after_signing_changes_nothing(rex: Any, tamper_demo: Demo) -> None:
    demo = tamper_demo
    marker = "row-" + secrets.token_hex(3)
    args = {"amount": 7.0, "currency": "EUR", "to_account": "ACC-7", "memo": marker}
    demo.propose(
        ("transfer_money", args),
        ("send_email", {"to": "d@example.net", "subject": marker, "body": "paid"}),
    )
    transfer = demo.review_with(marker)
    rex.goto(f"{demo.url}/reviews/{transfer.id}")
    rex.click("#approve-btn")
    rex.wait_for_selector("#decision-done", timeout=15_000)
    _rewrite_queue_row(demo, transfer.id, {"to_account": "ATTACKER-3"})
    email = demo.review_with(marker, skip=(transfer.id,))
    rex.goto(f"{demo.url}/reviews/{email.id}")
    rex.click("#approve-btn")
    rex.wait_for_selector("#decision-done", timeout=15_000)
    wait_until(lambda: len([r for r in demo.runs() if marker in json.dumps(r["args"])]) == 2, 15, "both tools")
    ran = next(r for r in demo.runs() if r["tool"] == "transfer_money" and marker in json.dumps(r["args"]))
    assert ran["args"] == args  # what was signed, not the row


def test_fixture_file_is_in_place() -> None:
    """The export above is what tests/desk/test_desk_webauthn_fixture.py verifies."""
    assert Path(FIXTURE).exists()
