"""Single sign-on (issue 23 §1) against a real OpenID Provider (npm's ``oidc-provider`` under Node, idpkit.py):
sign-in and sign-out in Chromium; a tampered ID token, a wrong nonce and a replayed state refused; someone
taken out of a group a role needs (``sso.required``, admin-signed on the log) or disabled at the provider
refused from their next request on, and their event stream closed; passwords off.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from idpkit import SECRET, Idp, running_idp, sign_in_headless
from livekit import Stream, free_port, serving

from signoff.audit import ReviewService, Signer, open_store, sso_required
from signoff.audit.keys import read_private_key
from signoff.audit.store import default_admin_key
from signoff.desk.app import create_app
from signoff.desk.sso import Provider, Settings, SignInFailed

ALICE = "human:alice@example.org"  # role finance, which needs grp-finance at the IdP
BOB = "human:bob@example.org"  # role ops, no group needed
PEOPLE = {
    "alice": {"password": "alice pw", "email": "alice@example.org", "groups": ["grp-finance", "staff"]},
    "bob": {"password": "bob pw", "email": "bob@example.org", "groups": ["staff"]},
    "mallory": {"password": "mallory pw", "email": "mallory@example.org", "groups": ["grp-finance"]},
}


@dataclass
class World:
    desk: str  # the desk's base URL (http://localhost:PORT)
    idp: Idp
    url: str  # the store
    svc: ReviewService
    admin: Signer
    app: Any


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    url = f"sqlite:///{tmp_path / 'signoff.db'}"
    store = open_store(url)
    store.init_log(tmp_path / "log.pem")
    admin = read_private_key(default_admin_key(tmp_path / "log.pem"))
    svc = ReviewService(store)
    svc.enroll_reviewer(ALICE, roles=["finance"], tools=["*"], key=Signer.generate().public, admin=admin)
    svc.enroll_reviewer(BOB, roles=["ops"], tools=["*"], key=Signer.generate().public, admin=admin)
    sso_required.require(store, "finance", ["grp-finance"], admin=admin)
    port = free_port()
    desk = f"http://localhost:{port}"
    with running_idp(free_port(), [f"{desk}/signin/oidc/callback"], PEOPLE) as idp:
        settings = Settings(issuer=idp.issuer, client_id="desk", client_secret=SECRET, passwords=False)
        app = create_app(url, access_log=False, sso=settings, origin=desk)
        with serving(app, host="localhost", port=port) as base:
            yield World(base, idp, url, svc, admin, app)
    store.close()


def _signed_in(world: World, login: str) -> httpx.Client:
    client = httpx.Client(base_url=world.desk, timeout=15, headers={"Origin": world.desk})
    back = sign_in_headless(client, world.desk, login, PEOPLE[login]["password"])
    done = client.get(back.url.join(back.headers["location"]))
    assert done.status_code == 303 and done.headers["location"] == "/queue", (done.status_code, done.text[:300])
    return client


def test_sign_in_and_out_in_chromium(world: World, browser: Any) -> None:
    from browserkit import ARTIFACTS

    page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
    page.goto(world.desk + "/queue")
    assert "/signin" in page.url
    assert page.locator("#signin-form").count() == 0  # passwords are off: the provider's button only
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "sso-signin.png"))
    page.click("#sso-signin")
    page.wait_for_selector("text=Example IdP")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", "alice pw")
    page.click("button[type=submit]")
    page.wait_for_url("**/queue")
    assert "human:alice@example.org" in page.content()
    page.screenshot(path=str(ARTIFACTS / "sso-signed-in.png"))
    page.click("text=Sign out")
    page.wait_for_url("**/signin")
    page.goto(world.desk + "/queue")
    assert "/signin" in page.url  # signed out at the desk
    page.context.close()


def test_in_chromium_a_replayed_callback_and_a_group_taken_away_mid_session(world: World, browser: Any) -> None:
    """Alice signs in; the callback URL the provider sent her browser to, opened again, signs nobody in; the
    IdP takes her out of grp-finance while her queue is open: its live updates end, and a reload asks her
    to sign in again."""
    page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
    callbacks: list[str] = []
    page.on("request", lambda r: callbacks.append(r.url) if "/signin/oidc/callback" in r.url else None)
    page.goto(world.desk + "/signin")
    page.click("#sso-signin")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", "alice pw")
    page.click("button[type=submit]")
    page.wait_for_url("**/queue")
    page.wait_for_selector("#live[data-state=live]")
    other = browser.new_context().new_page()
    answer = other.goto(callbacks[0])
    assert answer is not None and answer.status == 401 and "state: expected one this desk sent" in other.content()
    other.context.close()
    world.idp.accounts(alice={**PEOPLE["alice"], "groups": ["staff"]})
    page.wait_for_selector("#live[data-state=ended]", timeout=10_000)
    page.reload()
    assert "/signin" in page.url
    page.context.close()


def test_a_person_not_in_the_group_their_role_needs_is_refused(world: World) -> None:
    world.idp.accounts(alice={**PEOPLE["alice"], "groups": ["staff"]})
    client = httpx.Client(timeout=15)
    back = sign_in_headless(client, world.desk, "alice", "alice pw")
    done = client.get(back.url.join(back.headers["location"]))
    assert done.status_code == 403 and "role finance needs one of the groups grp-finance" in done.text
    assert client.get(world.desk + "/queue").status_code == 303  # no session was opened


def test_someone_the_provider_does_not_know_as_a_reviewer_is_refused(world: World) -> None:
    client = httpx.Client(timeout=15)
    back = sign_in_headless(client, world.desk, "mallory", "mallory pw")
    done = client.get(back.url.join(back.headers["location"]))
    assert done.status_code == 403 and "mallory@example.org is not a reviewer here" in done.text


def test_removed_from_the_group_mid_session_refused_at_the_next_request_and_the_stream_closes(world: World) -> None:
    client = _signed_in(world, "alice")
    assert client.get(world.desk + "/queue").status_code == 200
    stream = Stream(client)
    world.idp.accounts(alice={**PEOPLE["alice"], "groups": ["staff"]})  # the IdP admin takes her out of grp-finance
    r = client.get(world.desk + "/queue")
    assert r.status_code in (303, 307) and "/signin" in r.headers["location"]  # this very request
    assert stream.ended.wait(10), "her event stream went on after the provider took her out of the group"
    assert client.get(world.desk + "/queue").status_code in (303, 307)  # the session is gone, not just refused once


def test_disabled_at_the_provider_refused_at_the_next_request(world: World) -> None:
    client = _signed_in(world, "bob")
    assert client.get(world.desk + "/queue").status_code == 200
    world.idp.accounts(bob={**PEOPLE["bob"], "disabled": True})
    r = client.get(world.desk + "/queue")
    assert r.status_code in (303, 307) and "/signin" in r.headers["location"]
    again = sign_in_headless(httpx.Client(timeout=15), world.desk, "bob", "bob pw")
    assert again.status_code == 200 and "Wrong username or password" in again.text  # nor can he sign in again


def test_a_replayed_state_signs_nobody_in(world: World) -> None:
    client = httpx.Client(timeout=15)
    back = sign_in_headless(client, world.desk, "bob", "bob pw")
    callback = back.url.join(back.headers["location"])
    assert client.get(callback).status_code == 303  # used once
    replay = httpx.Client(timeout=15).get(callback)  # the same code and state again, from anyone
    assert replay.status_code == 401 and "state: expected one this desk sent" in replay.text


def test_a_wrong_nonce_signs_nobody_in(world: World) -> None:
    client = httpx.Client(timeout=15)
    back = sign_in_headless(client, world.desk, "bob", "bob pw")
    state = parse_qs(urlparse(back.headers["location"]).query)["state"][0]
    with sqlite3.connect(world.url.removeprefix("sqlite:///")) as db:  # the desk's kept nonce, not the token's
        db.execute("UPDATE desk_oidc_request SET nonce = 'another nonce' WHERE state = ?", (state,))
    done = client.get(back.url.join(back.headers["location"]))
    assert done.status_code == 401 and "nonce" in done.text


def test_a_tampered_or_forged_id_token_is_refused(world: World) -> None:
    """A real ID token from the provider, then altered: its payload changed under the same signature, its
    signature changed, signed with another key, and unsigned (alg none); each refused."""
    from authlib.integrations.httpx_client import OAuth2Client
    from joserfc import jwt
    from joserfc.jwk import RSAKey

    provider = Provider(Settings(issuer=world.idp.issuer, client_id="desk", client_secret=SECRET))
    client = httpx.Client(timeout=15)
    back = sign_in_headless(client, world.desk, "bob", "bob pw")
    query = parse_qs(urlparse(back.headers["location"]).query)
    with sqlite3.connect(world.url.removeprefix("sqlite:///")) as db:  # the request the desk keeps for this state
        nonce, verifier = db.execute(
            "SELECT nonce, verifier FROM desk_oidc_request WHERE state = ?", (query["state"][0],)
        ).fetchone()
    oauth = OAuth2Client("desk", SECRET, redirect_uri=world.desk + "/signin/oidc/callback")
    token = oauth.fetch_token(provider.metadata_url("token_endpoint"), code=query["code"][0], code_verifier=verifier)
    real = str(token["id_token"])
    assert provider.check_id_token(real, nonce)["email"] == "bob@example.org"  # the genuine one passes
    head, payload, sig = real.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    other = base64.urlsafe_b64encode(json.dumps({**claims, "email": "alice@example.org"}).encode()).rstrip(b"=")
    flipped = sig[:-2] + ("A" if sig[-2] != "A" else "B") + sig[-1]
    forged_key = RSAKey.generate_key(2048, parameters={"kid": json.loads(base64.urlsafe_b64decode(head + "=="))["kid"]})
    forged = jwt.encode({"alg": "RS256", "kid": forged_key.kid}, claims, forged_key)
    unsigned = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode() + "." + payload + "."
    for bad in (f"{head}.{other.decode()}.{sig}", f"{head}.{payload}.{flipped}", forged, unsigned):
        with pytest.raises(SignInFailed, match="id_token: not signed by the provider"):
            provider.check_id_token(bad, nonce)
    with pytest.raises(SignInFailed, match="nonce"):
        provider.check_id_token(real, "another nonce")


def test_passwords_off_refuses_the_password_form_and_sign_in_links(world: World) -> None:
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    Accounts(make_engine(world.url), world.svc.store.log_id).set_password(BOB, "bob desk password", must_change=False)
    client = httpx.Client(timeout=15, headers={"Origin": world.desk})
    page = client.get(world.desk + "/signin")
    assert 'id="sso-signin"' in page.text and 'id="signin-form"' not in page.text
    form = {"csrf": client.cookies.get("desk_csrf"), "email": "bob@example.org", "password": "bob desk password"}
    r = client.post(world.desk + "/signin", data=form)
    assert r.status_code == 403 and "through the identity provider only" in r.text
    assert client.get(world.desk + "/queue").status_code == 303  # not signed in


def test_signed_in_through_the_provider_one_queue_spans_every_log_the_person_is_enrolled_on(tmp_path: Path) -> None:
    """Two logs, Alice enrolled on both by their admins and given no desk password on either: the provider
    vouches for her, so one sign-in shows both logs' reviews; the log whose role needs a group she is not in
    shows none of its reviews."""
    from signoff.audit import CallSpec, Policy

    url = f"sqlite:///{tmp_path / 'signoff.db'}"
    services = []
    for n, name in enumerate(("payments", "support", "audit")):
        store = open_store(url)
        store.init_log(tmp_path / f"{name}.pem", origin=f"example.org/{name}", new_log=n > 0)
        admin = read_private_key(default_admin_key(tmp_path / f"{name}.pem"))
        svc = ReviewService(store)
        role = "auditor" if name == "audit" else "finance"
        svc.enroll_reviewer(ALICE, roles=[role], tools=["*"], key=Signer.generate().public, admin=admin)
        if name == "audit":
            sso_required.require(store, "auditor", ["grp-audit"], admin=admin)  # she is not in it
        call = CallSpec(app=name, user="u", session=f"s-{name}", invocation="i", confirmation_id="c", call_id="k",
                        tool=f"{name}_tool", args={"n": n})  # fmt: skip
        svc.open_frontier([call], actor="agent:a", policies=Policy(role=role))
        services.append(svc)
    port = free_port()
    desk = f"http://localhost:{port}"
    with running_idp(free_port(), [f"{desk}/signin/oidc/callback"], PEOPLE) as idp:
        settings = Settings(issuer=idp.issuer, client_id="desk", client_secret=SECRET, passwords=False)
        app = create_app(url, access_log=False, sso=settings, origin=desk)
        with serving(app, host="localhost", port=port):
            client = httpx.Client(base_url=desk, timeout=15, headers={"Origin": desk})
            back = sign_in_headless(client, desk, "alice", "alice pw")
            assert client.get(back.url.join(back.headers["location"])).status_code == 303
            page = client.get("/queue")
            assert page.status_code == 200
            assert "payments_tool" in page.text and "support_tool" in page.text
            assert "audit_tool" not in page.text
    for svc in services:
        svc.store.close()
