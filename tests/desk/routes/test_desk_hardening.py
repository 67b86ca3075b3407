"""Hardening (issue 10, item 7), each from outside, through HTTP: a foreign Origin is refused with
nothing logged; reviews outside a reviewer's roles and tools are not there for them (404), unless
they observe; disabling a reviewer or signing out ends their event streams within a second; an
oversized body gets 413 with the log unchanged; sign-in is throttled per address and per account.

Named after what each stops (STYLE.md). SQLite unless the backend matters."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from deskkit import ALICE, BOB, CAROL, OLIVE, PASSWORD, BrowserClient, Env, csrf_of, sign_in
from fastapi.testclient import TestClient
from livekit import Stream, serving, signed_in

from signoff.desk import throttle

EVIL = "https://evil.example"


@pytest.fixture
def env(sqlite_env: Env) -> Env:
    return sqlite_env


@pytest.fixture
def client(sclient: TestClient) -> TestClient:
    return sclient


# -- Origin ---------------------------------------------------------------------------------------


def test_cross_site_decision_with_valid_token_and_cookie_is_refused_and_nothing_logged(
    open_env: Env, oclient: TestClient
) -> None:
    env, client = open_env, oclient  # a log that takes unsigned forms: only the Origin can refuse them
    rev = env.open()[0]
    csrf = sign_in(client)
    size = env.desk.store.size()
    for headers in ({"Origin": EVIL}, {"Origin": "null"}, {"Origin": "", "Referer": EVIL + "/page"}):
        r = client.post(f"/reviews/{rev.id}/reject", data={"csrf": csrf, "reason": "x"}, headers=headers)
        assert r.status_code == 403 and ("another site" in r.text or "opaque" in r.text), (headers, r.text[:200])
    # A browser always sends Origin on a POST; a cookie without it (or a Referer) is refused too.
    del client.headers["origin"]
    r = client.post(f"/reviews/{rev.id}/reject", data={"csrf": csrf, "reason": "x"})
    assert r.status_code == 403 and "no Origin or Referer" in r.text
    assert env.desk.store.size() == size and env.svc.get(rev.id).status == "pending"
    # The desk's own Referer, without Origin, is taken.
    r = client.post(
        f"/reviews/{rev.id}/reject", data={"csrf": csrf, "reason": "ok"}, headers={"Referer": "http://testserver/x"}
    )
    assert r.status_code == 200 and env.svc.get(rev.id).status == "rejected"


def test_cross_site_api_call_and_sign_in_are_refused_and_nothing_logged(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    size = env.desk.store.size()
    r = client.post(
        f"/api/reviews/{rev.id}/approve", json=env.approve_json(rev), headers={**env.bearer(), "Origin": EVIL}
    )
    assert r.status_code == 403 and r.json()["recorded"] is False and "another site" in r.json()["detail"]
    page = client.get("/signin")
    r = client.post(
        "/signin",
        data={"csrf": csrf_of(page.text), "email": "alice@example.org", "password": PASSWORD},
        headers={"Origin": EVIL},
    )
    assert r.status_code == 403 and "desk_session" not in r.headers.get("set-cookie", "")
    assert env.desk.store.size() == size and env.svc.get(rev.id).status == "pending"
    # A script with a token and no cookie need not send Origin.
    with TestClient(env.app) as script:
        ok = script.post(f"/api/reviews/{rev.id}/approve", json=env.approve_json(rev), headers=env.bearer())
    assert ok.status_code == 200


def test_an_allowed_proxy_origin_is_taken(env: Env, tmp_path: Path) -> None:
    from signoff.desk.app import create_app

    app = create_app(env.url, env.key, access_log=False, allowed_origins=["https://desk.proxy.example:8443/"])
    rev = env.open()[0]
    with BrowserClient(app, headers={"origin": "https://desk.proxy.example:8443"}) as c:
        r = c.post(f"/api/reviews/{rev.id}/approve", json=env.approve_json(rev), headers=env.bearer())
        assert r.status_code == 200
        other = env.open()[0]
        r = c.post(
            f"/api/reviews/{other.id}/approve",
            json=env.approve_json(other),
            headers={**env.bearer(), "Origin": "https://desk.proxy.example"},  # another port: another origin
        )
        assert r.status_code == 403
    app.state.desk.store.close()


# -- roles: what a reviewer sees ------------------------------------------------------------------


def _transfer_and_email(env: Env) -> tuple[object, object]:
    transfer = env.open("transfer", {"amount": 99999, "to": "acct-secret"})[0]  # finance
    email = env.open("send_email", {"to": "x@example.org"}, role="ops", schema=None)[0]  # BOB's
    return transfer, email


def test_reviews_outside_roles_and_tools_are_invisible_in_the_api(env: Env, client: TestClient) -> None:
    transfer, email = _transfer_and_email(env)
    bob = env.bearer(BOB)
    listed = client.get("/api/reviews", headers=bob).json()
    assert [i["id"] for i in listed["items"]] == [email.id] and listed["total"] == 1  # type: ignore[attr-defined]
    for path in (f"/api/reviews/{transfer.id}", f"/api/reviews/{transfer.id}/history"):  # type: ignore[attr-defined]
        r = client.get(path, headers=bob)
        assert r.status_code == 404 and "acct-secret" not in r.text
    log = client.get("/api/log?limit=1000", headers=bob).json()
    assert "acct-secret" not in json.dumps(log) and transfer.id not in json.dumps(log)  # type: ignore[attr-defined]
    assert email.id in json.dumps(log)  # type: ignore[attr-defined]
    opened = transfer.opened_seq  # type: ignore[attr-defined]
    assert client.get(f"/api/log/{opened}", headers=bob).status_code == 404
    assert client.get(f"/api/proofs/inclusion/{opened}", headers=bob).status_code == 404
    # ALICE (finance, any tool) sees both.
    assert client.get("/api/reviews", headers=env.bearer()).json()["total"] == 2
    assert client.get(f"/api/log/{opened}", headers=env.bearer()).status_code == 200
    # Decided ones too.
    env.svc.reject(transfer.id, reviewer=CAROL, reason="no", signer=env.signers[CAROL])  # type: ignore[attr-defined]
    assert client.get("/api/decided", headers=bob).json()["total"] == 0
    assert client.get("/api/decided", headers=env.bearer()).json()["total"] == 1


def test_reviews_outside_roles_and_tools_are_invisible_in_the_pages(env: Env, client: TestClient) -> None:
    transfer, email = _transfer_and_email(env)
    env.svc.reject(email.id, reviewer=BOB, reason="not now", signer=env.signers[BOB])  # type: ignore[attr-defined]
    sign_in(client, BOB)
    for path in ("/queue", "/decided", "/log", "/stalled", "/queue/recent"):
        page = client.get(path)
        assert page.status_code == 200 and "acct-secret" not in page.text, path
        assert transfer.id not in page.text, path  # type: ignore[attr-defined]
    assert email.id in client.get("/decided").text  # type: ignore[attr-defined]
    for path in (
        f"/reviews/{transfer.id}",  # type: ignore[attr-defined]
        f"/reviews/{transfer.id}/outcome",  # type: ignore[attr-defined]
        f"/log/proof/{transfer.opened_seq}.json",  # type: ignore[attr-defined]
    ):
        r = client.get(path)
        assert r.status_code == 404 and "acct-secret" not in r.text, path
    assert client.get("/reviews/rv_does_not_exist").text.count("No such review") >= 1


def test_an_observer_reads_everything_and_decides_nothing(env: Env, client: TestClient) -> None:
    env.add_reviewer(OLIVE, ["observer"], ["*"])
    transfer, email = _transfer_and_email(env)
    olive = env.bearer(OLIVE)
    assert client.get("/api/reviews", headers=olive).json()["total"] == 2
    detail = client.get(f"/api/reviews/{transfer.id}", headers=olive).json()  # type: ignore[attr-defined]
    assert detail["call"]["args"]["to"] == "acct-secret" and detail["can_decide"] is False
    size = env.desk.store.size()
    # A role-less review would pass audit's tool check; the desk still refuses an observer.
    free = env.open("send_email", {"to": "y"}, role=None, schema=None)[0]
    size = env.desk.store.size()
    for review in (transfer, email, free):
        r = client.post(
            f"/api/reviews/{review.id}/approve",  # type: ignore[attr-defined]
            json=env.approve_json(review, OLIVE),
            headers=olive,
        )
        assert r.status_code == 403 and r.json()["error"] == "NotAllowed" and "observer" in r.json()["detail"]
    assert env.desk.store.size() == size
    csrf = sign_in(client, OLIVE)
    page = client.get(f"/reviews/{transfer.id}").text  # type: ignore[attr-defined]
    assert 'id="observer-note"' in page and 'id="approve-form"' not in page and "acct-secret" in page
    r = client.post(f"/reviews/{free.id}/approve", data={"csrf": csrf})
    assert r.status_code == 403 and env.desk.store.size() == size


def test_observer_with_a_deciding_role_decides_what_that_role_covers(env: Env, client: TestClient) -> None:
    env.add_reviewer(OLIVE, ["observer", "ops"], ["send_*"])
    transfer, email = _transfer_and_email(env)
    olive = env.bearer(OLIVE)
    assert client.get("/api/reviews", headers=olive).json()["total"] == 2
    ok = client.post(f"/api/reviews/{email.id}/approve", json=env.approve_json(email, OLIVE), headers=olive)  # type: ignore[attr-defined]
    assert ok.status_code == 200
    no = client.post(f"/api/reviews/{transfer.id}/approve", json=env.approve_json(transfer, OLIVE), headers=olive)  # type: ignore[attr-defined]
    assert no.status_code == 403


# -- bodies ----------------------------------------------------------------------------------------


def test_a_5_mb_body_gets_413_and_the_log_is_unchanged(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    csrf = sign_in(client)
    size = env.desk.store.size()
    huge = "x" * (5 * 1024 * 1024)
    patch = [{"op": "replace", "path": "/memo", "value": huge}]
    r = client.post(f"/api/reviews/{rev.id}/edit", json={"patch": patch}, headers=env.bearer())
    assert r.status_code == 413 and r.json()["recorded"] is False
    r = client.post(f"/reviews/{rev.id}/edit", data={"csrf": csrf, "patch": json.dumps(patch)})
    assert r.status_code == 413 and "larger than this desk accepts" in r.text

    def chunks():  # no Content-Length: the body streams, and is cut off at the limit
        for _ in range(6):
            yield b"x" * (1024 * 1024)

    r = client.post(
        f"/api/reviews/{rev.id}/reject",
        content=chunks(),
        headers={**env.bearer(), "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert env.desk.store.size() == size and env.svc.get(rev.id).status == "pending"


def test_the_body_limit_is_configurable(env: Env) -> None:
    from signoff.desk.app import create_app

    app = create_app(env.url, env.key, access_log=False, max_body=2048)
    rev = env.open()[0]
    with BrowserClient(app) as c:
        r = c.post(f"/api/reviews/{rev.id}/reject", json={"reason": "y" * 4096}, headers=env.bearer())
        assert r.status_code == 413
        r = c.post(f"/api/reviews/{rev.id}/reject", json=env.reject_json(rev, "short"), headers=env.bearer())
        assert r.status_code == 200
    app.state.desk.store.close()


def test_args_over_their_bound_under_the_body_limit_are_refused_before_anything_is_written(
    env: Env, client: TestClient
) -> None:
    rev = env.open()[0]
    size = env.desk.store.size()
    patch = [{"op": "replace", "path": "/memo", "value": "m" * (300 * 1024)}]  # 300 KB: over the 256 KB args bound
    r = client.post(f"/api/reviews/{rev.id}/edit", json={"patch": patch}, headers=env.bearer())
    assert r.status_code == 422 and r.json()["error"] == "CanonicalFormError" and r.json()["recorded"] is False
    many = [{"op": "add", "path": f"/k{i}", "value": i} for i in range(1001)]
    r = client.post(f"/api/reviews/{rev.id}/edit", json={"patch": many}, headers=env.bearer())
    assert r.status_code == 422 and "1,000 operations" in r.json()["detail"]
    assert env.desk.store.size() == size


# -- sign-in throttling ---------------------------------------------------------------------------


def _attempt(c: TestClient, email: str, password: str) -> int:
    page = c.get("/signin")
    return c.post("/signin", data={"csrf": csrf_of(page.text), "email": email, "password": password}).status_code


def test_guessing_from_one_address_is_slowed_whatever_the_accounts(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from signoff.desk import db

    attacker = BrowserClient(env.app, client=("203.0.113.9", 4000))
    # Failures spread over many e-mails (most not enrolled), none of them often enough to slow an account.
    for i in range(throttle.IP_FREE):
        assert _attempt(attacker, f"guess{i}@example.org", "wrong") == 401
    # The first wait is 1 s: hold the throttle's clock at this moment, so that a slow machine does not let
    # it run out between the attempts below (CI saw that once).
    held = db.utcnow()
    monkeypatch.setattr(throttle, "utcnow", lambda: held)
    # Now this address waits, even with a right password, and even for an account it never tried.
    assert _attempt(attacker, "alice@example.org", PASSWORD) == 429
    assert _attempt(attacker, "nobody@example.org", "x") == 429
    # Another address is not slowed: the guesser cannot lock Alice out.
    alice = BrowserClient(env.app, client=("198.51.100.7", 4001))
    assert _attempt(alice, "alice@example.org", PASSWORD) == 303 or alice.get("/queue").status_code == 200


def test_one_person_cannot_lock_another_out_for_long(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import timedelta

    from signoff.desk import db

    attackers = [BrowserClient(env.app, client=(f"192.0.2.{i}", 4000)) for i in range(40)]
    for i, c in enumerate(attackers):  # many addresses, one account
        _attempt(c, "carol@example.org", f"wrong {i}")
    carol = BrowserClient(env.app, client=("198.51.100.8", 4002))
    page = carol.get("/signin")
    r = carol.post("/signin", data={"csrf": csrf_of(page.text), "email": "carol@example.org", "password": PASSWORD})
    assert r.status_code == 429 and int(r.headers["retry-after"]) <= throttle.ACCOUNT_MAX_WAIT.total_seconds()
    # At most a minute later, Carol is in: the account's wait is capped, whatever the guessers did.
    later = db.utcnow() + throttle.ACCOUNT_MAX_WAIT + timedelta(seconds=1)
    monkeypatch.setattr(throttle, "utcnow", lambda: later)
    assert _attempt(carol, "carol@example.org", PASSWORD) in (200, 303)
    assert carol.get("/queue").status_code == 200


def test_backoff_doubles_up_to_its_cap() -> None:
    waits = [throttle.backoff(n, 5, throttle.ACCOUNT_MAX_WAIT).total_seconds() for n in range(1, 14)]
    assert waits[:4] == [0, 0, 0, 0] and waits[4:8] == [1, 2, 4, 8] and max(waits) == 60


# -- event streams end --------------------------------------------------------------------------


def test_disabling_a_reviewer_ends_their_open_streams_within_a_second(env: Env) -> None:
    with serving(env.app) as base:
        carol = signed_in(base, "carol@example.org", PASSWORD)
        stream = Stream(carol)
        other = Stream(signed_in(base, "alice@example.org", PASSWORD))
        start = time.monotonic()
        env.svc.disable_reviewer(CAROL, reason="left the team", admin=env.admin)
        assert stream.ended.wait(3) and stream.ended_at - start < 1.0
        assert ("bye" in stream.names()) and not other.ended.is_set()


def test_signing_out_ends_the_sessions_streams_within_a_second(env: Env) -> None:
    with serving(env.app) as base:
        alice = signed_in(base, "alice@example.org", PASSWORD)
        stream = Stream(alice)
        csrf = csrf_of(alice.get("/account").text)
        start = time.monotonic()
        assert alice.post("/signout", data={"csrf": csrf}).status_code == 303
        assert stream.ended.wait(3) and stream.ended_at - start < 1.0


def test_a_session_ended_elsewhere_ends_its_stream_within_a_second(env: Env) -> None:
    """Another replica (or ``desk reviewer password``) closed the session: this desk notices on its own."""
    with serving(env.app) as base:
        alice = signed_in(base, "alice@example.org", PASSWORD)
        stream = Stream(alice)
        start = time.monotonic()
        env.desk.accounts.close_all_sessions(ALICE)  # nothing on the log, no in-process signal
        assert stream.ended.wait(3) and stream.ended_at - start < 1.2


def test_streams_only_carry_reviews_the_reviewer_sees(env: Env) -> None:
    with serving(env.app) as base:
        bob = Stream(signed_in(base, "bob@example.org", PASSWORD))
        alice = Stream(signed_in(base, "alice@example.org", PASSWORD))
        transfer, email = _transfer_and_email(env)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and alice.names().count("opened") < 2:
            time.sleep(0.05)
        time.sleep(0.3)
        seen_by_bob = json.dumps(bob.events)
        assert email.id in seen_by_bob and transfer.id not in seen_by_bob and "acct-secret" not in seen_by_bob  # type: ignore[attr-defined]
        assert transfer.id in json.dumps(alice.events)  # type: ignore[attr-defined]


def test_origins_are_compared_as_scheme_host_and_port() -> None:
    from signoff.desk.guard import origin_of

    assert origin_of("https://Desk.Example.org:443/path?q") == "https://desk.example.org"
    assert origin_of("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert origin_of("http://[::1]:80/") == "http://[::1]"
    assert origin_of("https://desk.example.org:8443") != origin_of("https://desk.example.org")
    assert origin_of("null") is None and origin_of("not a url") is None and origin_of("http://x:notaport") is None
