"""Standing rules proposed from a review in the desk (issue 22 §5), on SQLite and PostgreSQL: the review page
offers "Allow calls like this from now on", previews the CEL rule it makes, and records the proposal signed by
the reviewer; the Rules page shows each proposal and its state; once an admin approves it, the next matching
call is auto-approved on the log. The JSON API drafts and records proposals with the reviewer's signature."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from deskkit import ALICE, BOB, CAROL, BrowserClient, Env, csrf_of, sign_in
from fastapi.testclient import TestClient

from signoff.audit import CallSpec
from signoff.audit.decision import sign_decision
from signoff.audit.verify import verify_store


def _mail(env: Env, to: str = "dora@example.com") -> Any:
    return env.open(
        "send_email", {"to": to, "subject": "Invoice 7", "size": 20}, role="ops", schema=None, agent="mailer"
    )[0]


def _auto(env: Env, to: str, n: int) -> str:
    call = CallSpec(
        app="bank", user="u1", session=f"auto{n}", invocation=f"i{n}", confirmation_id=f"c{n}", call_id=f"k{n}",
        tool="send_email", args={"to": to, "subject": "x", "size": 20}, agent="mailer",
    )  # fmt: skip
    review, why = env.svc.auto_approve(call, actor="agent:mailer")
    return review.status if review is not None else why


def test_propose_from_the_review_page_then_an_admin_approves(open_env: Env, oclient: TestClient) -> None:
    env, client = open_env, oclient
    review = _mail(env)
    sign_in(client, ALICE)
    page = client.get(f"/reviews/{review.id}")
    assert 'id="proposal-form"' in page.text and 'name="value:to" value="@example.com"' in page.text
    preview = client.post(
        f"/reviews/{review.id}/proposal",
        data={
            "csrf": csrf_of(page.text),
            "agent": "on",
            "cond": ["to"],
            "op:to": "ends_with",
            "value:to": "@example.com",
        },
    )
    assert preview.status_code == 200 and 'id="proposal-rule"' in preview.text, preview.text[:400]
    rule = unescape(re.search(r'id="proposal-rule">([^<]+)<', preview.text).group(1))  # type: ignore[union-attr]
    assert rule == '!(tool == "send_email" && agent == "mailer" && args["to"].endsWith("@example.com"))'
    body = unescape(re.search(r'name="body" value="([^"]+)"', preview.text).group(1))  # type: ignore[union-attr]
    assert _auto(env, "eve@example.com", 1) != "auto_approved"  # nothing changes before an admin says so
    made = client.post(f"/reviews/{review.id}/proposal/sign", data={"csrf": csrf_of(preview.text), "body": body})
    assert made.status_code == 200 and made.url.path == "/rules", made.text[:300]
    [proposal] = env.svc.proposals()
    assert proposal.proposer == ALICE and proposal.state == "open" and proposal.policy["review_when"] == rule
    assert f'id="{proposal.id}"' in made.text and "No proposal waits." not in made.text
    assert _auto(env, "eve@example.com", 2) != "auto_approved"

    env.svc.approve_proposal(proposal.id, admin=env.admin)
    rules = client.get("/rules")
    assert "No proposal waits." in rules.text and ">approved</span>" in rules.text
    assert _auto(env, "eve@example.com", 3) == "auto_approved"  # in force: the next matching call
    assert _auto(env, "eve@evil.example", 4) != "auto_approved"
    assert verify_store(env.desk.store).ok


def test_a_condition_the_call_itself_fails_is_refused(open_env: Env, oclient: TestClient) -> None:
    env, client = open_env, oclient
    review = _mail(env)
    sign_in(client, BOB)  # ops, send_*: his own roles cover it
    page = client.get(f"/reviews/{review.id}")
    r = client.post(
        f"/reviews/{review.id}/proposal",
        data={"csrf": csrf_of(page.text), "cond": ["size"], "op:size": "at_most", "value:size": "5"},
    )
    assert r.status_code == 422 and 'id="proposal-error"' in r.text and "lets this very call through" in r.text
    assert env.svc.proposals() == []


def test_who_is_offered_the_proposal(open_env: Env, oclient: TestClient) -> None:
    env, client = open_env, oclient
    transfer = env.open()[0]  # role finance: Carol's own
    with BrowserClient(env.app) as carol:
        sign_in(carol, CAROL)
        assert 'id="proposal-form"' in carol.get(f"/reviews/{transfer.id}").text
    sign_in(client, BOB)  # ops on send_*: a transfer is not his at all
    assert client.get(f"/reviews/{transfer.id}").status_code == 404


def test_the_api_drafts_and_records_a_signed_proposal(env: Env, client: TestClient) -> None:
    review = _mail(env)
    drafted = client.post(
        f"/api/reviews/{review.id}/proposal/draft",
        json={"conditions": [{"arg": "to", "op": "ends_with", "value": "@example.com"}], "agent": False},
        headers=env.bearer(BOB),
    )
    assert drafted.status_code == 200, drafted.text
    body = drafted.json()
    assert body["policy"]["review_when"] == '!(tool == "send_email" && args["to"].endsWith("@example.com"))'
    unsigned = client.post("/api/proposals", json={"body": body}, headers=env.bearer(BOB))
    assert unsigned.status_code == 403 and unsigned.json()["recorded"] is False, unsigned.text
    sig = sign_decision(env.signers[BOB], env.desk.store.log_id, "policy.proposed", BOB, body)
    made = client.post("/api/proposals", json={"body": body, "sig": sig}, headers=env.bearer(BOB))
    assert made.status_code == 201 and made.json()["state"] == "open", made.text
    listed = client.get("/api/proposals", headers=env.bearer(ALICE)).json()
    assert [(p["proposal"], p["proposer"]) for p in listed] == [(body["proposal"], BOB)]
    stolen = client.post("/api/proposals", json={"body": {**body, "proposal": "pp_" + "0" * 16}, "sig": sig},
                         headers=env.bearer(ALICE))  # fmt: skip
    assert stolen.status_code == 403, stolen.text  # Bob's signature is not Alice's, nor over this body
    assert verify_store(env.desk.store).ok
