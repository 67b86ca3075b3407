"""Sign-in, sign-out, lockout, cookies, CSRF on the sign-in form and the account page
(desk/routes/signin.py), through the test client on SQLite."""

from __future__ import annotations

import pytest
from deskkit import ALICE, CAROL, PASSWORD, BrowserClient, Env, csrf_of, sign_in
from fastapi.testclient import TestClient


@pytest.fixture
def env(sqlite_env: Env) -> Env:
    return sqlite_env


@pytest.fixture
def client(sclient: TestClient) -> TestClient:
    return sclient


def test_pages_need_sign_in(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    for path in ("/queue", f"/reviews/{rev.id}", "/log", "/account"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/signin"), path
    assert client.get("/events").status_code == 401


def test_sign_in_sets_a_strict_httponly_cookie(env: Env, client: TestClient) -> None:
    page = client.get("/signin")
    r = client.post(
        "/signin",
        follow_redirects=False,
        data={"csrf": csrf_of(page.text), "email": "alice@example.org", "password": PASSWORD, "next": "/log"},
    )
    assert r.status_code == 303 and r.headers["location"] == "/log"
    cookie = r.headers["set-cookie"]
    assert "desk_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "Secure" not in cookie  # plain http in tests; https requests get Secure


def test_cookie_is_secure_over_https(env: Env) -> None:
    with BrowserClient(env.app, base_url="https://testserver") as c:
        page = c.get("/signin")
        assert "Secure" in page.headers["set-cookie"]
        r = c.post(
            "/signin",
            follow_redirects=False,
            data={"csrf": csrf_of(page.text), "email": "alice@example.org", "password": PASSWORD},
        )
        assert "Secure" in r.headers["set-cookie"]


def test_sign_in_refuses_an_open_redirect(env: Env, client: TestClient) -> None:
    page = client.get("/signin")
    r = client.post(
        "/signin",
        follow_redirects=False,
        data={"csrf": csrf_of(page.text), "email": "alice@example.org", "password": PASSWORD, "next": "//evil.example"},
    )
    assert r.headers["location"] == "/queue"


def test_wrong_passwords_then_the_account_waits_briefly(env: Env, client: TestClient) -> None:
    from signoff.desk import throttle

    page = client.get("/signin")
    token = csrf_of(page.text)
    for _ in range(throttle.ACCOUNT_FREE - 1):
        r = client.post("/signin", data={"csrf": token, "email": "carol@example.org", "password": "nope"})
        assert r.status_code == 401 and "Wrong e-mail or password" in r.text
    r = client.post("/signin", data={"csrf": token, "email": "carol@example.org", "password": "nope"})
    assert r.status_code == 401  # this failure starts the wait
    # Waiting: even the right password is refused now, without being checked, and says for how long.
    r = client.post("/signin", data={"csrf": token, "email": "carol@example.org", "password": PASSWORD})
    assert r.status_code == 429 and "Wait" in r.text and 1 <= int(r.headers["retry-after"]) <= 60
    # Unknown accounts get the same message as wrong passwords.
    r = client.post("/signin", data={"csrf": token, "email": "nobody@example.org", "password": "x"})
    assert r.status_code == 401 and "Wrong e-mail or password" in r.text


def test_sign_in_without_csrf_is_refused(env: Env, client: TestClient) -> None:
    client.get("/signin")
    r = client.post("/signin", data={"email": "alice@example.org", "password": PASSWORD})
    assert r.status_code == 403
    assert client.get("/queue", follow_redirects=False).status_code == 303


def test_first_sign_in_requires_a_new_password(env: Env, client: TestClient) -> None:
    env.desk.accounts.set_password(CAROL, "initial-pw-123", must_change=True)
    page = client.get("/signin")
    r = client.post(
        "/signin", data={"csrf": csrf_of(page.text), "email": "carol@example.org", "password": "initial-pw-123"}
    )
    assert r.status_code == 200 and 'name="new_password"' in r.text and r.url.path == "/signin"
    assert "data-keep-code" in r.text  # the page keeps the initial password (the enrolment code) for the passkey
    r = client.post(
        "/signin",
        data={
            "csrf": csrf_of(r.text),
            "email": "carol@example.org",
            "password": "initial-pw-123",
            "new_password": "a brand new one",
        },
    )
    # The log requires signed decisions: the first sign-in leads to registering a passkey.
    assert r.url.path == "/account" and 'id="passkey-form"' in r.text and "Welcome. Register a passkey" in r.text
    client.cookies.clear()
    page = client.get("/signin")
    r = client.post(
        "/signin", data={"csrf": csrf_of(page.text), "email": "carol@example.org", "password": "initial-pw-123"}
    )
    assert r.status_code == 401


def test_sign_out(env: Env, client: TestClient) -> None:
    csrf = sign_in(client)
    assert client.post("/signout", data={}).status_code == 403
    r = client.post("/signout", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/queue", follow_redirects=False).status_code == 303


def test_disabled_reviewer_is_signed_out(env: Env, client: TestClient) -> None:
    sign_in(client, CAROL)
    env.svc.disable_reviewer(CAROL, reason="left", admin=env.admin)
    assert client.get("/queue", follow_redirects=False).status_code == 303


def test_security_headers(env: Env, client: TestClient) -> None:
    r = client.get("/signin")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


def test_account_page_creates_an_api_token(env: Env, client: TestClient) -> None:
    csrf = sign_in(client)
    r = client.post("/account/tokens", data={"csrf": csrf, "label": "laptop"})
    token = r.text.split('id="new-token">', 1)[1].split('<code class="mono">', 1)[1].split("</code>", 1)[0]
    assert client.get("/api/me", headers={"Authorization": f"Bearer {token}"}).json()["reviewer"] == ALICE


def test_static_assets_are_served_locally(env: Env, client: TestClient) -> None:
    sign_in(client)
    html = client.get("/queue").text
    assert "http://" not in html.split("<main", 1)[0] and "https://" not in html.split("<main", 1)[0]
    assert client.get("/static/desk.css").status_code == 200
    assert client.get("/static/desk.js").status_code == 200
