"""Quorum, claims and escalation in the desk (issue 13), on SQLite and PostgreSQL: what the API returns
and refuses for a review that needs two people, the claim endpoint, and what the pages say.

The log's policy is an admin's ``policy.set`` (the admin key ``Store.init_log`` wrote): four eyes on
``transfer*``. Decisions through the API are signed with each reviewer's key file
(``signoff.audit.decision.sign_decision`` over ``approve_body`` / ``edit_body`` with the round)."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from types import SimpleNamespace
from typing import Any

from deskkit import ALICE, BOB, CAROL, OLIVE, BrowserClient, Env, csrf_of, sign_in
from fastapi.testclient import TestClient

from signoff.audit import decision as decisions
from signoff.audit import digest
from signoff.desk import errors
from signoff.desk.scope import Scope
from signoff.desk.sse import Broker, event_of

FOUR_EYES = {"policy": "four-eyes", "tools": "transfer*", "approvals": 2}
DAVE = "human:dave@example.org"  # finance: a third pair of eyes
ERIN = "human:erin@example.org"  # supervisor: where reviews escalate


def _four_eyes(env: Env, **more: Any) -> Any:
    env.set_policy({**FOUR_EYES, **more})
    return env.open()[0]


ESCALATING = {"policy": "escalating", "tools": "transfer*", "escalate": {"to_role": "supervisor", "after_seconds": 1}}


def _escalated(env: Env) -> Any:
    """A review of a tool whose policy escalates to role supervisor a second after opening, escalated (the
    entry's own time must be past the escalation time: ``audit`` names an early one as forged)."""
    env.set_policy(ESCALATING)
    review = env.open()[0]
    end = time.monotonic() + 10
    while not env.svc.escalate_due():
        assert time.monotonic() < end, "the review never escalated"
        time.sleep(0.1)
    return review


def _post(client: TestClient, env: Env, review_id: str, action: str, body: Any, who: str) -> Any:
    return client.post(f"/api/reviews/{review_id}/{action}", json=body, headers=env.bearer(who))


# -- the API -----------------------------------------------------------------------------------------


def test_a_first_approval_leaves_the_review_pending_with_its_progress(env: Env, client: TestClient) -> None:
    review = _four_eyes(env)
    r = _post(client, env, review.id, "approve", env.approve_json(env.svc.get(review.id), ALICE, "looks right"), ALICE)
    assert r.status_code == 200, r.text
    first = r.json()
    seq = env.svc.history(review.id)[-1].seq
    assert {k: first[k] for k in ("status", "decided_by", "decision_seq", "final_args")} == {
        "status": "pending",
        "decided_by": None,
        "decision_seq": None,
        "final_args": None,
    }
    assert first["approvals"] == [{"by": ALICE, "seq": seq, "acting_for": None}]
    assert (first["approvals_needed"], first["round"], first["round_args"]) == (2, 0, {"amount": 10, "to": "acct-1"})
    assert first["escalated_role"] is None and first["claim"] is None
    entry = env.svc.history(review.id)[-1]
    assert entry.kind == "review.approved" and entry.body["round"] == 0  # what alice signed names the round
    # The same shape from every read: the review, the queue, and nothing in Decided yet.
    got = client.get(f"/api/reviews/{review.id}", headers=env.bearer(CAROL)).json()
    assert {k: got[k] for k in first if k != "summary"} == {k: first[k] for k in first if k != "summary"}
    listed = client.get("/api/reviews", headers=env.bearer(CAROL)).json()["items"]
    assert [(i["id"], i["approvals"], i["approvals_needed"]) for i in listed] == [(review.id, first["approvals"], 2)]
    assert client.get("/api/decided", headers=env.bearer(CAROL)).json()["total"] == 0

    r = _post(client, env, review.id, "approve", env.approve_json(env.svc.get(review.id), CAROL), CAROL)
    assert r.status_code == 200, r.text
    done = r.json()
    assert done["status"] == "approved" and done["decided_by"] == CAROL and done["round_args"] is None
    assert [a["by"] for a in done["approvals"]] == [ALICE, CAROL]
    assert done["final_args"] == {"amount": 10, "to": "acct-1"}


def test_the_same_person_twice_is_not_two_and_nothing_is_recorded(env: Env, client: TestClient) -> None:
    review = _four_eyes(env)
    assert _post(client, env, review.id, "approve", env.approve_json(review, ALICE), ALICE).status_code == 200
    size = env.desk.store.size()
    r = _post(client, env, review.id, "approve", env.approve_json(env.svc.get(review.id), ALICE), ALICE)
    assert r.status_code == 403 and r.json()["error"] == "AlreadyApproved" and r.json()["recorded"] is False
    assert "approving round 0 twice" in r.json()["detail"] and r.json()["summary"] == errors.APPROVED_TWICE
    assert env.desk.store.size() == size and env.svc.get(review.id).status == "pending"


def test_an_edit_starts_a_round_that_others_approve_on_the_round_args(env: Env, client: TestClient) -> None:
    review = _four_eyes(env)
    patch = [{"op": "replace", "path": "/amount", "value": 7}]
    r = _post(client, env, review.id, "edit", env.edit_json(review, patch, ALICE, "smaller"), ALICE)
    assert r.status_code == 200, r.text
    edited = r.json()
    assert (edited["status"], edited["round"], edited["round_args"]) == ("pending", 1, {"amount": 7, "to": "acct-1"})
    assert [a["by"] for a in edited["approvals"]] == [ALICE] and edited["patch"] == patch
    assert edited["call"]["args"] == {"amount": 10, "to": "acct-1"}  # what the agent proposed stays as it was
    entry = env.svc.history(review.id)[-1]
    # The digest of the round's args as the entries hold them (commitments, on a log that keeps values beside it).
    assert entry.body["round"] == 0 and entry.body["args_digest"] == digest(env.svc.get(review.id).sealed_round_args)
    assert env.sealed or env.svc.get(review.id).sealed_round_args == {"amount": 7, "to": "acct-1"}

    # An approval signed over the opened args (round 0) no longer matches what the server would record.
    stale = decisions.approve_body(review.id, review.args_digest, "", None, 0)
    body = env.with_sig({"rationale": ""}, CAROL, decisions.APPROVED, stale)
    size = env.desk.store.size()
    r = _post(client, env, review.id, "approve", body, CAROL)
    assert r.status_code == 403 and r.json()["summary"] == errors.SIGNATURE_REFUSED
    assert env.desk.store.size() == size

    # A second edit patches the round's args (round 1), and starts round 2 with carol's approval.
    fresh = env.svc.get(review.id)
    more = [{"op": "add", "path": "/memo", "value": "checked"}]
    r = _post(client, env, review.id, "edit", env.edit_json(fresh, more, CAROL), CAROL)
    assert r.status_code == 200, r.text
    assert r.json()["round"] == 2 and r.json()["round_args"] == {"amount": 7, "to": "acct-1", "memo": "checked"}
    assert env.svc.history(review.id)[-1].body["round"] == 1

    r = _post(client, env, review.id, "approve", env.approve_json(env.svc.get(review.id), ALICE), ALICE)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "edited" and r.json()["final_args"] == {"amount": 7, "to": "acct-1", "memo": "checked"}
    assert [a["by"] for a in r.json()["approvals"]] == [CAROL, ALICE]


def test_a_decision_on_a_round_the_review_left_is_refused(open_env: Env, oclient: TestClient) -> None:
    """On a log that allows unsigned decisions nothing signed names the round: the API's ``round`` does."""
    env, client = open_env, oclient
    review = _four_eyes(env)
    patch = [{"op": "replace", "path": "/amount", "value": 7}]
    assert _post(client, env, review.id, "edit", {"patch": patch, "round": 0}, ALICE).status_code == 200
    size = env.desk.store.size()
    r = _post(client, env, review.id, "approve", {"round": 0}, CAROL)
    assert r.status_code == 409 and r.json()["error"] == "StaleRound"
    assert r.json()["summary"] == errors.OTHER_ROUND and "found round 0" in r.json()["detail"]
    r = _post(client, env, review.id, "edit", {"patch": [{"op": "remove", "path": "/to"}], "round": 0}, CAROL)
    assert r.status_code == 409 and env.desk.store.size() == size
    r = _post(client, env, review.id, "approve", {"round": 1}, CAROL)
    assert r.status_code == 200 and r.json()["status"] == "edited"


def test_a_round_needs_one_answer(env: Env, client: TestClient) -> None:
    env.set_policy(FOUR_EYES)
    review = env.open("transfer_limit", {"account": "A"}, schema=None, payload={"limit": 100})[0]
    first = env.approve_json(review, ALICE, payload={"limit": 250})
    assert _post(client, env, review.id, "approve", first, ALICE).status_code == 200
    other = env.approve_json(env.svc.get(review.id), CAROL, payload={"limit": 900})
    r = _post(client, env, review.id, "approve", other, CAROL)
    assert r.status_code == 409 and r.json()["summary"] == errors.OTHER_ANSWER
    same = env.approve_json(env.svc.get(review.id), CAROL, payload={"limit": 250})
    r = _post(client, env, review.id, "approve", same, CAROL)
    assert r.status_code == 200 and r.json()["answer_payload"] == {"limit": 250}


def test_one_rejection_rejects(env: Env, client: TestClient) -> None:
    review = _four_eyes(env)
    assert _post(client, env, review.id, "approve", env.approve_json(review, ALICE), ALICE).status_code == 200
    r = _post(client, env, review.id, "reject", env.reject_json(review, "wrong account", CAROL), CAROL)
    assert r.status_code == 200 and r.json()["status"] == "rejected" and r.json()["reason"] == "wrong account"


def test_claim_success_renewal_conflict_and_refusals(env: Env, client: TestClient) -> None:
    review = _four_eyes(env, claim_seconds=300)
    env.add_reviewer(OLIVE, ["observer"], ["*"])
    before = datetime.now(UTC)
    r = client.post(f"/api/reviews/{review.id}/claim", headers=env.bearer(ALICE))
    assert r.status_code == 200, r.text
    claimed = r.json()
    until = datetime.fromisoformat(claimed["until"].replace("Z", "+00:00"))
    assert claimed["review"] == review.id and claimed["reviewer"] == ALICE
    assert timedelta(seconds=290) < until - before < timedelta(seconds=310)  # the policy's claim_seconds
    entry = env.svc.history(review.id)[-1]
    assert entry.kind == "review.claimed" and entry.body["reviewer"] == ALICE
    got = client.get(f"/api/reviews/{review.id}", headers=env.bearer(CAROL)).json()
    assert got["claim"] == {"reviewer": ALICE, "until": claimed["until"]}
    assert client.get("/api/reviews", headers=env.bearer(CAROL)).json()["items"][0]["claim"]["reviewer"] == ALICE

    assert client.post(f"/api/reviews/{review.id}/claim", headers=env.bearer(ALICE)).status_code == 200  # renewed
    size = env.desk.store.size()
    r = client.post(f"/api/reviews/{review.id}/claim", headers=env.bearer(CAROL))
    assert r.status_code == 409 and r.json()["error"] == "Claimed" and r.json()["recorded"] is False
    assert r.json()["status"].startswith(f"claimed by {ALICE} until") and r.json()["summary"] == errors.CLAIMED
    r = client.post(f"/api/reviews/{review.id}/claim", headers=env.bearer(OLIVE))  # sees it, decides nothing
    assert r.status_code == 403 and r.json()["error"] == "NotAllowed"
    r = client.post(f"/api/reviews/{review.id}/claim", headers=env.bearer(BOB))  # outside his roles and tools
    assert r.status_code == 404 and r.json()["error"] == "UnknownReview"
    assert client.post("/api/reviews/rv_nope/claim", headers=env.bearer(ALICE)).status_code == 404
    assert client.post(f"/api/reviews/{review.id}/claim").status_code == 401
    assert env.desk.store.size() == size

    # Advice, not a lock: carol decides while alice's claim holds; then the review takes no claim.
    assert _post(client, env, review.id, "approve", env.approve_json(review, CAROL), CAROL).status_code == 200
    r = _post(client, env, review.id, "approve", env.approve_json(env.svc.get(review.id), ALICE), ALICE)
    assert r.status_code == 200 and r.json()["status"] == "approved" and r.json()["claim"] is None
    r = client.post(f"/api/reviews/{review.id}/claim", headers=env.bearer(ALICE))
    assert r.status_code == 409 and r.json()["status"] == "approved"


def test_an_escalated_review_is_seen_and_decided_by_the_role_it_went_to(env: Env, client: TestClient) -> None:
    env.add_reviewer(ERIN, ["supervisor"], ["*"])
    env.set_policy(ESCALATING)
    before = env.open()[0]
    assert client.get(f"/api/reviews/{before.id}", headers=env.bearer(ERIN)).status_code == 404
    assert client.post(f"/api/reviews/{before.id}/claim", headers=env.bearer(ERIN)).status_code == 404
    env.svc.withdraw(before.id, actor="agent:teller", reason="test")
    review = _escalated(env)
    got = client.get(f"/api/reviews/{review.id}", headers=env.bearer(ERIN)).json()
    assert got["escalated_role"] == "supervisor" and got["can_decide"] is True
    assert [i["id"] for i in client.get("/api/reviews", headers=env.bearer(ERIN)).json()["items"]] == [review.id]
    assert client.post(f"/api/reviews/{review.id}/claim", headers=env.bearer(ERIN)).status_code == 200
    r = _post(client, env, review.id, "approve", env.approve_json(env.svc.get(review.id), ERIN), ERIN)
    assert r.status_code == 200 and r.json()["status"] == "approved" and r.json()["decided_by"] == ERIN


def test_openapi_documents_round_claim_and_the_new_fields(env: Env, client: TestClient) -> None:
    spec = client.get("/api/openapi.json").json()
    assert "/api/reviews/{review_id}/claim" in spec["paths"]
    fields = spec["components"]["schemas"]["ReviewPublic"]["properties"]
    for name in ("approvals", "approvals_needed", "round", "round_args", "escalated_role", "claim"):
        assert name in fields, name
    sig = spec["components"]["schemas"]["ApproveIn"]["properties"]["sig"]
    text = json.dumps(sig)
    assert '\\"round\\"' in text and "round_args" in text


# -- the pages -----------------------------------------------------------------------------------------


class _Text(HTMLParser):
    """The text inside the element with one id."""

    def __init__(self, element_id: str) -> None:
        super().__init__()
        self.element_id, self.depth, self.found = element_id, 0, False
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth:
            self.depth += 1
        elif ("id", self.element_id) in attrs:
            self.depth, self.found = 1, True

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.parts.append(data)


def _text(html: str, element_id: str) -> str:
    """The text of the element with this id, spaces folded, as a person reads it."""
    parser = _Text(element_id)
    parser.feed(html)
    assert parser.found, f"no #{element_id} on the page"
    return " ".join("".join(parser.parts).split())


def test_the_review_page_shows_progress_and_who_may_still_approve(open_env: Env) -> None:
    env = open_env
    env.add_reviewer(DAVE, ["finance"], ["transfer*"])
    env.add_reviewer(OLIVE, ["observer"], ["*"])  # reads everything, approves nothing: never listed
    review = _four_eyes(env)
    with BrowserClient(env.app) as alice, BrowserClient(env.app) as carol:
        csrf = sign_in(alice, ALICE)
        r = alice.post(f"/reviews/{review.id}/approve", data={"csrf": csrf, "rationale": "ok", "round": "0"})
        assert r.status_code == 200 and r.url.query == b"done=approved"
        page = r.text
        assert 'id="decision-done"' not in page and "Recorded: " not in page  # not decided
        assert "1 of 2 approvals" in _text(page, "approval-recorded")
        assert _text(page, "quorum-line") == f"1 of 2 approvals: {ALICE}"
        assert "You approved this call" in _text(page, "quorum-you")
        assert 'id="approve-form"' not in page and 'data-tab="approve"' not in page  # no second approval
        assert 'id="edit-form"' in page and 'id="reject-form"' in page
        assert _text(page, "quorum-who") == f"May still approve: {CAROL}, {DAVE}"
        assert '<span class="status s-pending" id="status">pending</span>' in page

        sign_in(carol, CAROL)
        page = carol.get(f"/reviews/{review.id}").text
        assert _text(page, "quorum-line") == f"1 of 2 approvals: {ALICE}"
        assert "yours would be the last" in _text(page, "quorum-need")
        assert 'data-tab="approve"' in page and "approved once 2 different people" in _text(page, "approve-note")
        data = json.loads(re.search(r'id="review-data">(.*?)</script>', page, re.S).group(1))  # type: ignore[union-attr]
        assert data["round"] == 0 and data["args"] == {"amount": 10, "to": "acct-1"}
        r = carol.post(f"/reviews/{review.id}/approve", data={"csrf": csrf_of(page), "round": "0"})
        assert r.status_code == 200 and 'id="decision-done"' in r.text
        assert "2 of 2 approvals" in _text(r.text, "decided-approvals")
        assert env.svc.get(review.id).status == "approved"


def test_after_an_edit_the_page_shows_the_round_args_and_the_patch(open_env: Env) -> None:
    env = open_env
    review = _four_eyes(env)
    with BrowserClient(env.app) as alice, BrowserClient(env.app) as carol:
        csrf = sign_in(alice, ALICE)
        edited = json.dumps({"amount": 7, "to": "acct-1"})
        r = alice.post(f"/reviews/{review.id}/edit", data={"csrf": csrf, "args": edited, "round": "0"})  # no JS
        assert r.status_code == 200 and r.url.query == b"done=edited"
        assert "Recorded your edit and approval" in _text(r.text, "approval-recorded")

        sign_in(carol, CAROL)
        page = carol.get(f"/reviews/{review.id}").text
        assert f"Arguments, as {ALICE} changed them" in page and _text(page, "round-badge") == "changed"
        assert _text(page, "round-changes") == "amount 10 → 7"
        assert json.loads(_text(page, "round-patch")) == [{"op": "replace", "path": "/amount", "value": 7}]
        assert _text(page, "quorum-round").startswith(f"{ALICE} changed the arguments at seq")
        assert _text(page, "changed-by") == f"arguments changed by {ALICE}"
        data = json.loads(re.search(r'id="review-data">(.*?)</script>', page, re.S).group(1))  # type: ignore[union-attr]
        assert data["round"] == 1 and data["args"] == {"amount": 7, "to": "acct-1"}
        # The headline reads as what will run, the proposal struck through beside it.
        headline = re.search(r'<h1 class="headline[^"]*" id="headline">(.*?)</h1>', page, re.S).group(1)  # type: ignore[union-attr]
        assert re.sub(r"<[^>]+>", "", headline) == "teller wants to transfer: 10 7 to acct-1"
        assert re.search(r"<del[^>]*>10</del> <ins[^>]*>7</ins>", headline)
        # A form still showing round 0 (opened before the edit) is refused, naming what happened.
        r = carol.post(f"/reviews/{review.id}/approve", data={"csrf": csrf_of(page), "round": "0"})
        assert r.status_code == 409 and errors.OTHER_ROUND.split(":")[0] in r.text
        r = carol.post(f"/reviews/{review.id}/approve", data={"csrf": csrf_of(page), "round": "1"})
        assert r.status_code == 200 and env.svc.get(review.id).final_args == {"amount": 7, "to": "acct-1"}


def test_claim_from_the_page_is_shown_to_the_others_and_never_blocks(open_env: Env) -> None:
    env = open_env
    review = _four_eyes(env)
    with BrowserClient(env.app) as alice, BrowserClient(env.app) as carol:
        csrf = sign_in(alice, ALICE)
        assert alice.post(f"/reviews/{review.id}/claim", data={}).status_code == 403  # no CSRF token: refused
        other = BrowserClient(env.app, headers={"origin": "https://evil.example"})
        other.cookies = alice.cookies
        assert other.post(f"/reviews/{review.id}/claim", data={"csrf": csrf}).status_code == 403  # another origin
        assert env.svc.get(review.id).claim is None
        r = alice.post(f"/reviews/{review.id}/claim", data={"csrf": csrf})
        assert r.status_code == 200 and r.url.path == f"/reviews/{review.id}"
        assert _text(r.text, "claim-line").startswith("You are on it until ")
        assert "Still on it" in r.text

        carol_csrf = sign_in(carol, CAROL)
        page = carol.get(f"/reviews/{review.id}").text
        until = env.svc.get(review.id).claim[1]  # type: ignore[index]
        assert _text(page, "claim-line") == f"{ALICE} is on it until {until[11:16]} UTC"
        assert 'id="claim-form"' not in page and 'id="approve-form"' in page  # shown, never blocking
        queue = carol.get("/queue").text
        assert f"{ALICE} is on it until {until[11:16]} UTC" in queue and "needs 2 approvals" in queue
        r = carol.post(f"/reviews/{review.id}/claim", data={"csrf": carol_csrf})
        assert r.status_code == 409 and errors.CLAIMED in r.text
        r = carol.post(f"/reviews/{review.id}/approve", data={"csrf": carol_csrf, "round": "0"})
        assert r.status_code == 200 and env.svc.get(review.id).approvals[0][0] == CAROL
        queue = carol.get("/queue").text
        assert f"1 of 2 approvals: {CAROL}" in queue and "you approved" in queue
        assert carol.get(f"/reviews/{review.id}/progress").status_code == 200
        with BrowserClient(env.app) as bob:
            bob_csrf = sign_in(bob, BOB)
            assert bob.post(f"/reviews/{review.id}/claim", data={"csrf": bob_csrf}).status_code == 404
            assert bob.get(f"/reviews/{review.id}/progress").status_code == 404


def test_the_review_page_says_where_a_review_was_escalated(open_env: Env) -> None:
    env = open_env
    env.add_reviewer(ERIN, ["supervisor"], ["*"])
    review = _escalated(env)
    with BrowserClient(env.app) as erin:
        sign_in(erin, ERIN)
        page = erin.get(f"/reviews/{review.id}").text
        assert _text(page, "escalated").startswith("Escalated to role supervisor")
        assert "escalated to role supervisor" in _text(page, "policy-fact")
        assert 'id="approve-form"' in page
        assert "escalated to role supervisor" in erin.get("/queue").text


# -- live events ---------------------------------------------------------------------------------------


def test_a_partial_approval_is_an_approval_event_and_the_last_one_closes(sqlite_env: Env) -> None:
    env = sqlite_env
    review = _four_eyes(env)
    broker = Broker(env.desk.store, env.svc, env.desk.tool_roles)
    env.svc.approve(review.id, reviewer=ALICE, signer=env.signers[ALICE])
    env.svc.claim(review.id, reviewer=CAROL)
    env.svc.approve(review.id, reviewer=CAROL, signer=env.signers[CAROL])
    entries = env.svc.history(review.id)[1:]
    events = [ev for ev, _about, _before in broker._events(entries, end_streams=False)]
    assert [e["type"] for e in events] == ["approval", "claimed", "closed"]
    assert events[0] == {
        "type": "approval",
        "seq": entries[0].seq,
        "review": review.id,
        "actor": ALICE,
        "kind": "approved",
        "round": 0,
        "needed": 2,
        "approvals": [ALICE],
    }
    assert events[1]["reviewer"] == CAROL and events[1]["until"] == entries[1].body["until"]
    assert events[2]["status"] == "approved" and events[2]["actor"] == CAROL


def test_an_escalation_is_new_to_the_role_it_went_to(sqlite_env: Env) -> None:
    env = sqlite_env
    env.add_reviewer(ERIN, ["supervisor"], ["*"])
    broker = Broker(env.desk.store, env.svc, env.desk.tool_roles)
    env.desk.tool_roles.refresh()
    review = _escalated(env)
    entry = env.svc.history(review.id)[-1]
    [(ev, about, before)] = broker._events([entry], end_streams=False)
    assert ev["type"] == "escalated" and ev["role"] == "supervisor" and ev["headline"].startswith("teller wants")
    erin = Scope.of(ERIN, env.svc.reviewer(ERIN))
    carol = Scope.of(CAROL, env.svc.reviewer(CAROL))
    bob = Scope.of(BOB, env.svc.reviewer(BOB))
    assert broker._for(erin, ev, about, before) == {**ev, "new": True}
    assert broker._for(carol, ev, about, before) == ev
    assert broker._for(bob, ev, about, before) is None


def _forge_row(env: Env, review_id: str, change: Any) -> None:
    """Rewrite a review's projection row (its ``data``) behind the log's back."""
    path = env.url.removeprefix("sqlite:///")
    with closing(sqlite3.connect(path)) as db:
        (data,) = db.execute("SELECT data FROM signoff_review WHERE id = ?", (review_id,)).fetchone()
        found = json.loads(data)
        change(found)
        db.execute("UPDATE signoff_review SET data = ? WHERE id = ?", (json.dumps(found), review_id))
        db.commit()


def test_live_events_read_the_log_not_a_rewritten_row(open_env: Env) -> None:
    """The queue's live updates after an edit toward a quorum and after an escalation say what the log says."""
    env = open_env
    env.add_reviewer(ERIN, ["supervisor"], ["*"])
    broker = Broker(env.desk.store, env.svc, env.desk.tool_roles)
    review = _four_eyes(env)
    env.svc.edit(review.id, reviewer=ALICE, patch=[{"op": "replace", "path": "/amount", "value": 7}], round=0)

    def forge(data: dict[str, Any]) -> None:
        data["progress"] = {**data["progress"], "args": {"amount": 100, "to": "ATTACKER-D"}, "approvals": []}
        data["policy"] = {**data["policy"], "approvals": 9}

    _forge_row(env, review.id, forge)
    edit = env.svc.history(review.id)[-1]
    [(ev, _about, _before)] = broker._events([edit], end_streams=False)
    assert ev["type"] == "approval" and ev["needed"] == 2 and ev["approvals"] == [ALICE]
    assert ev["lead"] == "7 to acct-1" and "ATTACKER-D" not in json.dumps(ev)
    assert ev["lead_parts"][0] == {"text": "7", "was": "10"}  # the proposal, for the queue row to strike

    escalated = _escalated(env)
    _forge_row(env, escalated.id, lambda d: d["call"].update(args={"amount": 100, "to": "ATTACKER-D"}, agent="x"))
    entry = env.svc.history(escalated.id)[-1]
    [(ev, _about, _before)] = broker._events([entry], end_streams=False)
    assert ev["type"] == "escalated" and ev["agent"] == "teller" and ev["lead"] == "10 to acct-1"
    assert ev["session"] == escalated.call.session and "ATTACKER-D" not in json.dumps(ev)


def test_event_of_without_the_review_never_says_closed_for_a_quorum_approval() -> None:
    entry = SimpleNamespace(
        seq=9,
        at="2026-01-01T00:00:00.000000Z",
        actor=ALICE,
        kind="review.approved",
        body={"review": "rv_1", "args_digest": "sha256:00", "rationale": "", "round": 0},
    )
    assert event_of(entry)["type"] == "approval"  # type: ignore[index]
    review = SimpleNamespace(decision_seq=9)  # the review as its entries tell it: this approval decided it
    assert event_of(entry, review)["type"] == "closed"  # type: ignore[index]
    del entry.body["round"]  # a review that needs one approval: its approval closes it
    assert event_of(entry)["type"] == "closed"  # type: ignore[index]
