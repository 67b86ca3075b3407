"""Passkeys in the desk (desk/passkeys.py, the account page, signed decision forms and the API's
``sig``), on a log that requires signed decisions, with a software authenticator
(tests/desk/softkey.py) in front of the real desk, fido2 and audit code.

What is proved here: a passkey is registered only with the reviewer's one-time enrolment code
and lands on the log as the reviewer's own ``key.enrolled``; a decision form or API request
carrying the person's signature is recorded and proven as the gate proves it; a decision the
server would record differently from what was signed is refused with nothing recorded; and a
reviewer who cannot sign is told so instead of being shown forms that would fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from deskkit import ALICE, CAROL, PASSWORD, BrowserClient, Env, csrf_of, make_env, page_body, sign_in
from fastapi.testclient import TestClient
from softkey import SoftPasskey
from sqlalchemy import text

from signoff.audit import decision as decisions
from signoff.audit import trust
from signoff.audit.decided import prove_decision
from signoff.audit.verify import verify_store
from signoff.audit.webauthn import Passkey, assertion_sig

DANA = "human:dana@example.org"
CODE = "one-time-code-for-dana"


@pytest.fixture
def env(sqlite_env: Env) -> Env:
    """The signed log, plus Dana: enrolled by the admin with an enrolment code and no key yet."""
    sqlite_env.svc.enroll_reviewer(DANA, roles=["finance"], tools=["*"], code=CODE, admin=sqlite_env.admin)
    sqlite_env.desk.accounts.set_password(DANA, PASSWORD, must_change=False)
    return sqlite_env


@pytest.fixture
def client(env: Env) -> Any:
    with BrowserClient(env.app, base_url="http://localhost") as c:
        yield c


def _csrf(client: TestClient) -> dict[str, str]:
    return {"X-CSRF-Token": csrf_of(client.get("/account").text)}


def register(client: TestClient, key: SoftPasskey, code: str = CODE) -> Any:
    headers = _csrf(client)
    options = client.post("/account/passkeys/options", json={"code": code}, headers=headers)
    if options.status_code != 200:
        return options
    credential = key.create(options.json()["publicKey"])
    return client.post("/account/passkeys", json={"code": code, "credential": credential}, headers=headers)


def test_register_a_passkey_with_the_enrolment_code(env: Env, client: TestClient) -> None:
    sign_in(client, DANA)
    page = client.get("/account").text
    assert 'id="passkey-form"' in page and 'id="no-passkeys"' in page and "You cannot decide until" in page
    key = SoftPasskey("ES256")
    size = env.desk.store.size()
    r = register(client, key)
    assert r.status_code == 201, r.text
    assert r.json()["alg"] == "ES256" and r.json()["rp_id"] == "localhost"
    # On the log: Dana's own key.enrolled, signed with the key derived from her code (never the code itself).
    entry = env.desk.store.entry(size)
    assert entry.kind == "key.enrolled" and entry.actor == DANA and entry.body["alg"] == "WebAuthn"
    assert entry.body["rp_id"] == "localhost" and entry.body["enrolment"] == "code"
    assert entry.sig is not None and entry.sig["key"] == trust.code_signer(CODE).fingerprint
    assert CODE not in entry.raw.decode()
    keys = env.svc.keys(DANA)
    assert [k.passkey.credential_id for k in keys if k.passkey] == [key.credential_id]
    page = client.get("/account?registered=1").text
    assert 'id="passkey-registered"' in page and "ES256" in page and 'class="passkey"' in page
    assert verify_store(env.desk.store).ok


def test_an_eddsa_passkey_works_too(env: Env, client: TestClient) -> None:
    sign_in(client, DANA)
    assert register(client, SoftPasskey("EdDSA")).json()["alg"] == "Ed25519"


def test_a_wrong_or_used_code_is_refused_before_the_authenticator_is_asked(env: Env, client: TestClient) -> None:
    sign_in(client, DANA)
    size = env.desk.store.size()
    r = register(client, SoftPasskey(), code="not-the-code")
    assert r.status_code == 403 and "does not open a passkey registration" in r.json()["detail"]
    assert register(client, SoftPasskey()).status_code == 201
    again = register(client, SoftPasskey())  # one code, one passkey
    assert again.status_code == 403 and "used already" in again.json()["detail"]
    assert env.desk.store.size() == size + 1
    # Another reviewer's code is not Dana's either; nor does Alice (no code) get one.
    sign_in(client, ALICE)
    assert register(client, SoftPasskey()).status_code == 403


def test_registration_checks_challenge_origin_and_csrf(env: Env, client: TestClient) -> None:
    sign_in(client, DANA)
    headers = _csrf(client)
    key = SoftPasskey()
    options = client.post("/account/passkeys/options", json={"code": CODE}, headers=headers).json()["publicKey"]
    assert options["rp"]["id"] == "localhost" and [p["alg"] for p in options["pubKeyCredParams"]] == [-8, -7]
    assert options["authenticatorSelection"]["userVerification"] == "required" and options["attestation"] == "none"
    # Another origin (a phishing page) is refused, and the challenge is then spent.
    wrong = key.create(options, origin="https://evil.example")
    r = client.post("/account/passkeys", json={"code": CODE, "credential": wrong}, headers=headers)
    assert r.status_code == 400 and "origin" in r.json()["detail"]
    replay = client.post("/account/passkeys", json={"code": CODE, "credential": key.create(options)}, headers=headers)
    assert replay.status_code == 400 and "challenge" in replay.json()["detail"]
    # A made-up challenge is refused too.
    made_up = key.create({"challenge": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
    r = client.post("/account/passkeys", json={"code": CODE, "credential": made_up}, headers=headers)
    assert r.status_code == 400
    # Without the session's CSRF token nothing happens.
    assert client.post("/account/passkeys/options", json={"code": CODE}).status_code == 403
    assert (
        client.post("/account/passkeys/options", json={"code": CODE}, headers={"X-CSRF-Token": "x"}).status_code == 403
    )
    # Without user verification, no passkey.
    options = client.post("/account/passkeys/options", json={"code": CODE}, headers=headers).json()["publicKey"]
    lazy = SoftPasskey(user_verified=False)
    r = client.post("/account/passkeys", json={"code": CODE, "credential": lazy.create(options)}, headers=headers)
    assert r.status_code == 400 and "verif" in r.json()["detail"].lower()
    assert env.svc.keys(DANA) == []


def test_passkeys_need_a_domain(env: Env) -> None:
    with BrowserClient(env.app, base_url="http://127.0.0.1:8080") as c:
        sign_in(c, DANA)
        page = c.get("/account").text
        assert 'id="passkey-unusable"' in page and 'id="passkey-form"' not in page
        r = c.post("/account/passkeys/options", json={"code": CODE}, headers={"X-CSRF-Token": csrf_of(page)})
        assert r.status_code == 400 and "domain name" in r.json()["detail"]


def test_rp_id_and_origin_options_fix_the_relying_party(env: Env) -> None:
    from signoff.desk.app import create_app

    app = create_app(env.url, env.key, access_log=False, origin="https://desk.example.org/")
    proxied = {"origin": "https://desk.example.org"}  # what the browser sends: the public origin
    with BrowserClient(app, base_url="http://10.0.0.7:8080", headers=proxied) as c:  # the request's host differs
        sign_in(c, DANA)
        headers = {"X-CSRF-Token": csrf_of(c.get("/account").text)}
        options = c.post("/account/passkeys/options", json={"code": CODE}, headers=headers).json()["publicKey"]
        assert options["rp"]["id"] == "desk.example.org"
        key = SoftPasskey(rp_id="desk.example.org", origin="https://desk.example.org")
        r = c.post("/account/passkeys", json={"code": CODE, "credential": key.create(options)}, headers=headers)
        assert r.status_code == 201 and r.json()["rp_id"] == "desk.example.org"
    app.state.desk.store.close()
    app = create_app(env.url, env.key, access_log=False, origin="https://desk.example.org", rp_id="example.org")
    with BrowserClient(app, base_url="http://10.0.0.7:8080", headers=proxied) as c:
        sign_in(c, ALICE)
        page = c.get("/account").text
        assert 'data-rp-id="example.org"' in page
    app.state.desk.store.close()


# -- signed decisions through the page's forms -------------------------------------------------


def _review_data(client: TestClient, review_id: str) -> dict[str, Any]:
    html = client.get(f"/reviews/{review_id}").text
    return dict(json.loads(html.split('id="review-data">', 1)[1].split("</script>", 1)[0]))


def _signed_form(env: Env, key: SoftPasskey, data: dict[str, Any], kind: str, body: dict[str, Any]) -> dict[str, str]:
    """What desk.js posts: the statement built from the page's own data, signed by the passkey."""
    statement = decisions.decision_statement(data["log"], kind, data["actor"], body)
    return key.form_fields(statement)


def test_signed_approve_edit_reject_through_the_forms(env: Env, client: TestClient) -> None:
    sign_in(client, DANA)
    key = SoftPasskey("ES256")
    assert register(client, key).status_code == 201
    csrf = csrf_of(client.get("/account").text)
    a, e, r = env.open()[0], env.open(payload={"limit": 1})[0], env.open()[0]

    data = _review_data(client, a.id)
    assert data["sign"]["must"] and data["sign"]["rp_id"] == "localhost" and data["actor"] == DANA
    assert [p["alg"] for p in data["sign"]["passkeys"]] == ["ES256"] and data["log"] == env.desk.store.log_id
    body, extra = page_body(data, decisions.APPROVED, rationale="checked\nthe invoice")
    fields = {**_signed_form(env, key, data, decisions.APPROVED, body), **extra}
    # The form sends the rationale with CR LF line breaks (HTML form submission); the page signed LF.
    resp = client.post(f"/reviews/{a.id}/approve", data={"csrf": csrf, "rationale": "checked\r\nthe invoice", **fields})
    assert resp.status_code == 200 and "Recorded" in resp.text and "signed with your passkey" in resp.text

    data = _review_data(client, e.id)
    edited = {**data["args"], "amount": 3}
    patch = jsonpatch.make_patch(data["args"], edited).patch
    body, extra = page_body(data, decisions.EDITED, payload={"limit": 7}, patch=patch)
    fields = {**_signed_form(env, key, data, decisions.EDITED, body), **extra}
    resp = client.post(
        f"/reviews/{e.id}/edit",
        data={"csrf": csrf, "patch": json.dumps(patch), "payload": '{"limit": 7}', **fields},
    )
    assert resp.status_code == 200 and "Recorded" in resp.text, resp.text[-2000:]

    data = _review_data(client, r.id)
    fields = _signed_form(env, key, data, decisions.REJECTED, decisions.reject_body(r.id, "wrong account"))
    resp = client.post(f"/reviews/{r.id}/reject", data={"csrf": csrf, "reason": "wrong account", **fields})
    assert resp.status_code == 200 and "Recorded" in resp.text

    # What the gate runs before a tool: each decision is proven by Dana's passkey signature.
    fingerprint = env.svc.keys(DANA)[0].fingerprint
    for review, status in ((a, "approved"), (e, "edited"), (r, "rejected")):
        proven = prove_decision(env.desk.store, review.id)
        assert proven.status == status and proven.signed_by == fingerprint
    assert prove_decision(env.desk.store, e.id).review.final_args == {"amount": 3, "to": "acct-1"}
    assert prove_decision(env.desk.store, a.id).review.rationale == "checked\nthe invoice"
    assert verify_store(env.desk.store).ok


def test_args_changed_on_the_server_after_display_get_no_signature(
    env: Env, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page signs the args it showed; a server whose copy differs cannot use that signature. The
    reviewer is told so plainly and offered a fresh copy, never the same failing button (issue 14); the
    operator gets a warning line and a count."""
    sign_in(client, DANA)
    key = SoftPasskey()
    assert register(client, key).status_code == 201
    csrf = csrf_of(client.get("/account").text)
    rev = env.open()[0]
    data = _review_data(client, rev.id)  # the page shows amount 10
    body, extra = page_body(data, decisions.APPROVED)
    fields = {**_signed_form(env, key, data, decisions.APPROVED, body), **extra}
    # Someone with the database rewrites the review's queue row before the form arrives.
    changed = {**data["args"], "to": "acct-attacker"}
    with env.desk.store.write_engine.begin() as conn:
        row = json.loads(
            conn.execute(text("SELECT data FROM signoff_review WHERE id = :i"), {"i": rev.id}).scalar_one()
        )
        row["call"]["args"] = changed
        conn.execute(
            text("UPDATE signoff_review SET data = :d, args_digest = :g WHERE id = :i"),
            {"d": json.dumps(row), "g": decisions.digest(changed), "i": rev.id},
        )
    size = env.desk.store.size()
    capsys.readouterr()
    resp = client.post(f"/reviews/{rev.id}/approve", data={"csrf": csrf, **fields})
    assert resp.status_code == 403
    notice = resp.text.split('id="decision-error"', 1)[1].split("</div>\n</div>", 1)[0]
    assert (
        "What you saw differs from the record.</strong> Nothing was recorded. This may be tampering: tell your "
        "administrator." in notice
    )
    assert f'id="reload-review" href="/reviews/{rev.id}">Reload the review</a>' in notice
    assert 'id="approve-btn"' not in resp.text and 'id="decide"' not in resp.text  # no button that fails again
    assert "challenge" not in notice.split("<details", 1)[0]  # the technical words are for the administrator
    assert env.desk.store.size() == size and env.svc.get(rev.id).status == "pending"
    [line] = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"signature_mismatch"' in x]
    assert line["level"] == "warning" and line["review"] == rev.id and line["reviewer"] == DANA
    assert line["decision"] == "approved" and line["detail"].startswith("sig.client_data.challenge")
    metrics = client.get("/metrics").text
    assert 'signoff_signature_mismatches_total{kind="approved"} 1.0' in metrics


def test_a_signature_for_another_decision_is_refused(env: Env, client: TestClient) -> None:
    sign_in(client, DANA)
    key = SoftPasskey()
    assert register(client, key).status_code == 201
    csrf = csrf_of(client.get("/account").text)
    rev, other = env.open()[0], env.open()[0]
    data = _review_data(client, other.id)
    fields = _signed_form(env, key, data, decisions.APPROVED, decisions.approve_body(other.id, other.args_digest))
    resp = client.post(f"/reviews/{rev.id}/approve", data={"csrf": csrf, **fields})  # replayed on another review
    assert resp.status_code == 403 and "What you saw differs from the record." in resp.text
    # A rejection's signature does not approve.
    fields = _signed_form(env, key, data, decisions.REJECTED, decisions.reject_body(other.id, "no"))
    assert client.post(f"/reviews/{other.id}/approve", data={"csrf": csrf, **fields}).status_code == 403
    # Another authenticator's credential is not Dana's.
    stranger = SoftPasskey()
    fields = _signed_form(env, stranger, data, decisions.APPROVED, decisions.approve_body(other.id, other.args_digest))
    resp = client.post(f"/reviews/{other.id}/approve", data={"csrf": csrf, **fields})
    assert resp.status_code == 403 and "not enrolled for you" in resp.text
    assert env.svc.get(rev.id).status == "pending" and env.svc.get(other.id).status == "pending"


def test_without_a_passkey_the_page_says_register_one(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    csrf = sign_in(client, DANA)
    html = client.get(f"/reviews/{rev.id}").text
    assert 'id="need-passkey"' in html and "Register a passkey to decide" in html
    assert 'id="approve-form"' not in html and 'href="/account#passkeys"' in html
    # A forged unsigned post is refused by the log's rule, with the reason on the page.
    r = client.post(f"/reviews/{rev.id}/approve", data={"csrf": csrf})
    assert r.status_code == 403 and "needs your own signature" in r.text
    assert env.svc.get(rev.id).status == "pending"
    # Alice holds a key file (enrolled by the admin): the page points her to the API for it.
    sign_in(client, ALICE)
    assert "decide with your key file through the" in client.get(f"/reviews/{rev.id}").text


def test_banner_and_footer_say_what_the_log_requires(env: Env, client: TestClient, tmp_path: Path) -> None:
    (tmp_path / "open").mkdir()
    open_env = make_env(f"sqlite:///{tmp_path / 'open' / 'signoff.db'}", tmp_path / "open", signed=False)
    sign_in(client, ALICE)
    html = client.get("/queue").text
    assert 'id="unsigned-banner"' not in html and "carries the reviewer's own signature" in html
    with BrowserClient(open_env.app) as c:
        for path in ("/signin",):
            assert 'id="unsigned-banner"' in c.get(path).text
        sign_in(c, ALICE)
        for path in ("/queue", "/log", "/account", f"/reviews/{open_env.open()[0].id}"):
            html = c.get(path).text
            assert "Decisions on this log need no signature" in html, path
            assert "they may be unsigned" in html and "carries the reviewer" not in html
    open_env.desk.store.close()


# -- the JSON API's sig ------------------------------------------------------------------------


def test_api_takes_a_webauthn_assertion(env: Env, client: TestClient) -> None:
    sign_in(client, DANA)
    key = SoftPasskey("EdDSA")
    assert register(client, key).status_code == 201
    token = env.desk.accounts.new_token(DANA, "script")
    passkey = next(k.passkey for k in env.svc.keys(DANA) if k.passkey)
    rev = env.open()[0]
    body = decisions.reject_body(rev.id, "not today")
    statement = decisions.decision_statement(env.desk.store.log_id, decisions.REJECTED, DANA, body)
    sig = assertion_sig(passkey, *key.assertion(statement))
    r = client.post(
        f"/api/reviews/{rev.id}/reject",
        json={"reason": "not today", "sig": sig},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200, r.text
    assert env.svc.history(rev.id)[-1].sig == sig
    assert isinstance(passkey, Passkey)


def test_api_refuses_unsigned_and_mismatched_signatures(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    size = env.desk.store.size()
    r = client.post(f"/api/reviews/{rev.id}/approve", json={}, headers=env.bearer())
    assert (
        r.status_code == 403 and r.json()["error"] == "NotAllowed" and "needs your own signature" in r.json()["summary"]
    )
    # Signed over other args than the review's: the signature does not verify.
    other = {**rev.call.args, "to": "acct-2"}
    body = decisions.approve_body(rev.id, decisions.digest(other))
    sig = decisions.sign_decision(env.signers[ALICE], env.desk.store.log_id, decisions.APPROVED, ALICE, body)
    r = client.post(f"/api/reviews/{rev.id}/approve", json={"sig": sig}, headers=env.bearer())
    assert r.status_code == 403 and "does not match" in r.json()["summary"] and r.json()["recorded"] is False
    # Carol's key does not sign for Alice.
    good = decisions.approve_body(rev.id, rev.args_digest)
    sig = decisions.sign_decision(env.signers[CAROL], env.desk.store.log_id, decisions.APPROVED, ALICE, good)
    r = client.post(f"/api/reviews/{rev.id}/approve", json={"sig": sig}, headers=env.bearer())
    assert r.status_code == 403 and "sig.key" in r.json()["detail"]
    # Malformed sig objects are 422 before anything is tried.
    for bad in ({"key": "x", "alg": "RSA", "value": "x"}, {"key": "x", "alg": "Ed25519", "value": "x", "extra": 1}):
        assert client.post(f"/api/reviews/{rev.id}/approve", json={"sig": bad}, headers=env.bearer()).status_code == 422
    assert env.desk.store.size() == size and env.svc.get(rev.id).status == "pending"


def test_openapi_documents_the_sig(env: Env, client: TestClient) -> None:
    spec = client.get("/api/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert {"Ed25519Sig", "WebAuthnSig"} <= set(schemas)
    assert set(schemas["WebAuthnSig"]["required"]) == {"key", "alg", "authenticator_data", "client_data", "value"}
    sig = schemas["ApproveIn"]["properties"]["sig"]
    assert "decision statement" in sig["description"] and "SHA-256 of the statement" in sig["description"]
    for name in ("EditIn", "RejectIn"):
        assert "sig" in schemas[name]["properties"]


@pytest.mark.parametrize("store_url", ["sqlite", "postgresql"], indirect=True)
def test_register_and_sign_on_each_backend(store_url: str, tmp_path: Path) -> None:
    env = make_env(store_url, tmp_path)
    env.svc.enroll_reviewer(DANA, roles=["finance"], tools=["*"], code=CODE, admin=env.admin)
    env.desk.accounts.set_password(DANA, PASSWORD, must_change=False)
    try:
        with BrowserClient(env.app, base_url="http://localhost") as client:
            csrf = sign_in(client, DANA)
            key = SoftPasskey("EdDSA")
            assert register(client, key).status_code == 201
            rev = env.open()[0]
            data = _review_data(client, rev.id)
            body, extra = page_body(data, decisions.APPROVED, rationale="ok")
            fields = {**_signed_form(env, key, data, decisions.APPROVED, body), **extra}
            resp = client.post(f"/reviews/{rev.id}/approve", data={"csrf": csrf, "rationale": "ok", **fields})
            assert resp.status_code == 200 and "signed with your passkey" in resp.text
            assert prove_decision(env.desk.store, rev.id).signed_by == env.svc.keys(DANA)[0].fingerprint
    finally:
        env.desk.store.close()
