"""Delegation in the desk (issue 22 §3; SPEC.md §7 rule 2b), on SQLite and PostgreSQL: a reviewer lends
roles through the API (signed with their key file) or the Account page; the delegate then sees the reviews
those roles cover, decides them "for" the delegator (the body says so, signed by the delegate), and every
list shows "Bob, for Carol". Ending the delegation takes it all away again.

Carol is finance, every tool; Bob is ops on ``send_*`` only, so a transfer is no business of his own.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from deskkit import ALICE, BOB, CAROL, PASSWORD, BrowserClient, Env, csrf_of, sign_in
from fastapi.testclient import TestClient

from signoff.audit import decision as decisions
from signoff.audit.delegation import grant_body, revoke_body
from signoff.audit.entry import format_time
from signoff.audit.verify import verify_store


def _until(days: float = 1) -> str:
    return format_time(datetime.now(UTC) + timedelta(days=days))


def _grant_json(env: Env, who: str, to: str, roles: list[str], until: str) -> dict[str, Any]:
    ident = "dg_" + secrets.token_hex(8)
    body = grant_body(ident, who, to, roles, until)
    out: dict[str, Any] = {"delegation": ident, "delegate": to, "roles": sorted(roles), "until": until}
    return env.with_sig(out, who, "delegation.granted", body)


def _approve_for(env: Env, review: Any, who: str, acting_for: str) -> dict[str, Any]:
    fresh = env.svc.get(review.id)
    if fresh.sealed:
        prepared = decisions.prepare_approve(fresh, "", None, acting_for)
        body = {"rationale": "", "payload_salt": prepared.payload_salt, "acting_for": acting_for}
        return env.with_sig(body, who, decisions.APPROVED, prepared.body)
    entry = decisions.approve_body(review.id, fresh.args_digest, "", None, None, acting_for)
    return env.with_sig({"rationale": "", "acting_for": acting_for}, who, decisions.APPROVED, entry)


def test_a_delegate_sees_and_decides_for_the_delegator_through_the_api(env: Env, client: TestClient) -> None:
    review = env.open()[0]  # a transfer, role finance
    assert client.get(f"/api/reviews/{review.id}", headers=env.bearer(BOB)).status_code == 404
    assert client.get("/api/reviews", headers=env.bearer(BOB)).json()["total"] == 0

    made = client.post(
        "/api/delegations", json=_grant_json(env, CAROL, BOB, ["finance"], _until()), headers=env.bearer(CAROL)
    )
    assert made.status_code == 201, made.text
    granted = made.json()
    assert (granted["delegator"], granted["delegate"], granted["roles"], granted["active"]) == (
        CAROL,
        BOB,
        ["finance"],
        True,
    )
    mine = client.get("/api/delegations", headers=env.bearer(BOB)).json()
    assert [d["delegation"] for d in mine] == [granted["delegation"]]

    listed = client.get("/api/reviews", headers=env.bearer(BOB)).json()["items"]
    assert [i["id"] for i in listed] == [review.id]
    detail = client.get(f"/api/reviews/{review.id}", headers=env.bearer(BOB)).json()
    assert (detail["can_decide"], detail["acting_for"]) == (True, CAROL)

    plain = env.approve_json(env.svc.get(review.id), BOB)  # as himself: his own roles do not cover it
    refused = client.post(f"/api/reviews/{review.id}/approve", json=plain, headers=env.bearer(BOB))
    assert refused.status_code == 403 and refused.json()["recorded"] is False, refused.text

    done = client.post(
        f"/api/reviews/{review.id}/approve", json=_approve_for(env, review, BOB, CAROL), headers=env.bearer(BOB)
    )
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["decided_by"], done.json()["decided_for"]) == ("approved", BOB, CAROL)
    decided = client.get("/api/decided", headers=env.bearer(ALICE)).json()["items"]
    assert [(i["id"], i["decided_by"], i["decided_for"]) for i in decided] == [(review.id, BOB, CAROL)]
    entry = env.desk.store.entry(env.svc.get(review.id).decision_seq)
    assert (entry.actor, entry.body["acting_for"], entry.sig is not None) == (BOB, CAROL, True)
    assert verify_store(env.desk.store).ok


def test_ending_the_delegation_takes_the_reviews_away(env: Env, client: TestClient) -> None:
    review = env.open()[0]
    made = client.post(
        "/api/delegations", json=_grant_json(env, CAROL, BOB, ["finance"], _until()), headers=env.bearer(CAROL)
    )
    ident = made.json()["delegation"]
    assert client.get(f"/api/reviews/{review.id}", headers=env.bearer(BOB)).status_code == 200
    found = env.svc.delegation(ident)
    assert found is not None
    reason = "back from leave"
    body = env.with_sig({"reason": reason}, BOB, "delegation.revoked", revoke_body(found, reason))
    ended = client.post(
        f"/api/delegations/{ident}/revoke", json=body, headers=env.bearer(BOB)
    )  # the delegate gives it back
    assert ended.status_code == 200 and ended.json()["active"] is False and ended.json()["revoked_seq"], ended.text
    assert client.get(f"/api/reviews/{review.id}", headers=env.bearer(BOB)).status_code == 404
    late = client.post(
        f"/api/reviews/{review.id}/approve", json=_approve_for(env, review, BOB, CAROL), headers=env.bearer(BOB)
    )
    assert late.status_code == 404 and env.svc.get(review.id).status == "pending"  # as for any review not his


def test_a_grant_beyond_ones_roles_or_unsigned_is_refused(env: Env, client: TestClient) -> None:
    size = env.desk.store.size()
    beyond = client.post(
        "/api/delegations", json=_grant_json(env, BOB, ALICE, ["finance"], _until()), headers=env.bearer(BOB)
    )
    assert beyond.status_code == 403 and "a role held by delegation is not theirs" in beyond.json()["detail"], (
        beyond.text
    )
    unsigned = _grant_json(env, CAROL, BOB, ["finance"], _until())
    unsigned.pop("sig", None)
    refused = client.post("/api/delegations", json=unsigned, headers=env.bearer(CAROL))
    assert refused.status_code == 403 and refused.json()["recorded"] is False, refused.text
    forged = _grant_json(env, CAROL, BOB, ["finance"], _until())  # Carol's body, sent by Alice as hers
    replayed = client.post("/api/delegations", json=forged, headers=env.bearer(ALICE))
    assert replayed.status_code == 403, replayed.text
    assert env.desk.store.size() == size


def test_the_account_page_delegates_and_the_review_page_decides_for(open_env: Env, oclient: TestClient) -> None:
    """On a log that takes unsigned entries (the demo's), the forms work without a passkey: the page
    names whom the delegate decides for, and the decision's body records it."""
    env, client = open_env, oclient
    review = env.open()[0]
    sign_in(client, CAROL)
    page = client.get("/account")
    assert 'id="delegate-form"' in page.text and "No delegation in force." in page.text
    tomorrow = (datetime.now(UTC) + timedelta(days=2)).date().isoformat()
    r = client.post(
        "/account/delegations",
        data={"csrf": csrf_of(page.text), "delegate": BOB, "roles": ["finance"], "until": tomorrow, "reason": "leave"},
    )
    assert r.status_code == 200 and r.url.path == "/account", r.text[:300]
    assert "recorded on the log" in r.text and "bob@example.org" in r.text
    [made] = env.svc.delegations()
    assert made.until == f"{tomorrow}T00:00:00.000000Z" and made.roles == ("finance",)

    with BrowserClient(env.app) as bob:
        sign_in(bob, BOB)
        shown = bob.get(f"/reviews/{review.id}")
        assert shown.status_code == 200 and 'id="acting-for"' in shown.text
        assert re.search(r'name="acting_for" value="human:carol@example.org"', shown.text)
        r = bob.post(
            f"/reviews/{review.id}/approve",
            data={"csrf": csrf_of(shown.text), "rationale": "for Carol", "acting_for": CAROL},
        )
        assert r.status_code == 200 and r.url.path == f"/reviews/{review.id}", r.text[:300]
        assert "bob@example.org</span>, for <span" in r.text  # the outcome: Bob, for Carol
        decided = bob.get("/decided")
        assert 'for <span class="actor">human:carol@example.org' in decided.text

    page = client.get("/account")
    r = client.post(f"/account/delegations/{made.id}/revoke", data={"csrf": csrf_of(page.text), "reason": "back"})
    assert r.status_code == 200 and "Delegation ended." in r.text
    assert verify_store(env.desk.store).ok


def test_the_account_page_says_what_the_log_refused(open_env: Env, oclient: TestClient) -> None:
    env, client = open_env, oclient
    sign_in(client, BOB)  # ops, send_*: lends ops, not finance
    page = client.get("/account")
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    r = client.post(
        "/account/delegations",
        data={"csrf": csrf_of(page.text), "delegate": ALICE, "roles": ["ops"], "until": yesterday},
    )
    assert r.status_code == 403 and 'id="delegation-error"' in r.text and "expected a time after the grant" in r.text
    assert env.svc.delegations() == []


def test_a_delegates_live_stream_follows_the_delegation(env: Env) -> None:
    """Granted: Bob's stream ends, and the one his page opens again carries Carol's reviews. Revoked: it
    ends again. (A delegation that runs out by the clock ends it too: ``alive`` checks ``lent_until``.)"""
    from livekit import Stream, serving, signed_in

    with serving(env.app) as base:
        bob = signed_in(base, "bob@example.org", PASSWORD)
        before = Stream(bob)
        made = httpx_post(base, env, "/api/delegations", _grant_json(env, CAROL, BOB, ["finance"], _until()), CAROL)
        assert made.status_code == 201, made.text
        assert before.ended.wait(3) and "bye" in before.names()
        after = Stream(bob)
        review = env.open()[0]
        end = time.monotonic() + 5
        while review.id not in json.dumps(after.events) and time.monotonic() < end:  # type: ignore[attr-defined]
            time.sleep(0.05)
        assert review.id in json.dumps(after.events)  # type: ignore[attr-defined]
        found = env.svc.delegation(made.json()["delegation"])
        assert found is not None
        env.svc.revoke_delegation(found.id, actor=CAROL, reason="back", signer=env.signers[CAROL])
        assert after.ended.wait(3) and "bye" in after.names()


def httpx_post(base: str, env: Env, path: str, body: dict[str, Any], who: str) -> Any:
    import httpx

    return httpx.post(base + path, json=body, headers=env.bearer(who), timeout=10)
