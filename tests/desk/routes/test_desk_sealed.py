"""The desk on a sealed log (issue 20, SPEC.md "Values beside the log"; desk/reveal.py), on SQLite and
PostgreSQL: every page, the JSON API, the live events and the notifications show the values revealed
from beside the log, each checked against its commitment; a value changed behind the service's back is
never shown and nothing is approved or edited on it; an erased review says when, by whom and why;
decisions signed ahead with a key file (``signoff.audit.decision.prepare_*``) are recorded and proven;
retention runs on the desk's timer (``desk serve --retention-every``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deskkit import ALICE, CAROL, BrowserClient, Env, csrf_of, make_env, sign_in
from fastapi.testclient import TestClient
from notifykit import Receiver, make_log, wait_until
from sqlalchemy import text

from signoff.audit import decision, erasure, sealing
from signoff.audit.canonical import digest
from signoff.audit.decided import DecisionNotProven, prove_decision
from signoff.audit.errors import UnusableInput
from signoff.audit.verify import verify_store

ARGS = {"amount": 50, "to": "Alice Smith", "memo": "rent"}


@pytest.fixture
def env(store_url: str, tmp_path: Path) -> Iterator[Env]:
    e = make_env(store_url, tmp_path, sealed=True)
    yield e
    e.desk.store.close()


@pytest.fixture
def open_env(tmp_path: Path) -> Iterator[Env]:
    """A sealed SQLite log that allows unsigned decisions (as ``desk demo --sealed-values`` makes)."""
    e = make_env(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path, signed=False, sealed=True)
    yield e
    e.desk.store.close()


@pytest.fixture
def client(env: Env) -> Iterator[TestClient]:
    with BrowserClient(env.app) as c:
        yield c


def _data(html: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="review-data">(.*?)</script>', html, re.S)
    assert found, "no review data on the page"
    return dict(json.loads(found.group(1)))


def _raw(env: Env, seq: int) -> bytes:
    return bytes(env.desk.store.entry(seq).raw)


def _tamper(env: Env, commitment: str, value: Any) -> None:
    """A database writer, behind the service's back: another value for a commitment."""
    with env.desk.store.write_engine.begin() as conn:
        conn.execute(
            text("UPDATE signoff_value SET value = :v WHERE commitment = :c"),
            {"v": sealing.value_json(value), "c": commitment},
        )


def _sealed_args(env: Env, review_id: str) -> dict[str, Any]:
    return dict(env.desk.store.entry(env.svc.get(review_id).opened_seq).body["call"]["args"])


# -- what is shown -------------------------------------------------------------------------------------------


def test_pages_and_api_show_the_values_revealed_from_beside_the_log(env: Env, client: TestClient) -> None:
    review = env.open(args=dict(ARGS), context={"user": "pay Alice Smith", "model": "Paying Alice."})[0]
    assert b"Alice Smith" not in _raw(env, review.opened_seq)
    sign_in(client)
    queue = client.get("/queue").text
    assert "Alice Smith" in queue and "sealed:sha256:" not in queue
    page = client.get(f"/reviews/{review.id}").text
    assert "Alice Smith" in page and "Paying Alice." in page and "Send the money?" in page
    data = _data(page)
    sealed = _sealed_args(env, review.id)
    assert data["args"] == ARGS and data["sealed"] is True and data["sealed_args"] == sealed
    assert data["private"] is None and data["round_payload_salt"] is None
    assert data["limits"] == {"MAX_MEMBERS": 64, "MAX_SEALED_ARGS": 32 * 1024, "MAX_CLEAR": 512}
    assert data["order"] == sorted(ARGS)  # the order a sealed edit walks the members in (RFC 8785's)
    for name, value in ARGS.items():  # each salt opens its commitment to the value shown
        assert sealing.commit(value, bytes.fromhex(data["round_salts"][name])) == sealed[name]
    api = client.get(f"/api/reviews/{review.id}", headers=env.bearer()).json()
    assert api["call"]["args"] == ARGS and api["call"]["hint"] == "Send the money?" and api["problem"] == ""
    assert api["sealed"] is True and api["sealed_round_args"] == sealed and api["erasures"] == []
    listed = client.get("/api/reviews", headers=env.bearer()).json()["items"]
    assert [i["call"]["args"] for i in listed] == [ARGS]


def test_a_key_file_signs_prepared_bodies_through_the_api(env: Env, client: TestClient) -> None:
    """What a script does: ``decision.prepare_edit`` on the review as ``ReviewService.get`` returns it,
    signed with the reviewer's key file, sent with its salts; the gate proves the edited plain args."""
    review = env.svc.get(env.open(args=dict(ARGS))[0].id)
    patch = [{"op": "replace", "path": "/amount", "value": 40}]
    prepared = decision.prepare_edit(review, patch, "lower")
    body = {
        "patch": patch,
        "rationale": "lower",
        "salts": prepared.salts,
        "sig": prepared.sign(env.signers[ALICE], env.desk.store.log_id, ALICE),
    }
    r = client.post(f"/api/reviews/{review.id}/edit", json=body, headers=env.bearer())
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "edited" and r.json()["final_args"] == {**ARGS, "amount": 40}
    entry = env.desk.store.entry(r.json()["decision_seq"])
    assert entry.body == prepared.body and sealing.is_commitment(entry.body["patch"][0]["value"])
    assert prove_decision(env.desk.store, review.id).review.final_args == {**ARGS, "amount": 40}
    # An approval signs the digest of the commitments (prepare_approve), an answer is sealed with its salt.
    other = env.svc.get(env.open(args={"amount": 7, "to": "Bob"}, payload={"limit": 5})[0].id)
    prepared = decision.prepare_approve(other, "ok", {"limit": 6})
    assert prepared.body["args_digest"] == digest(other.sealed_round_args) and prepared.payload_salt
    body = {
        "rationale": "ok",
        "payload": {"limit": 6},
        "payload_salt": prepared.payload_salt,
        "sig": prepared.sign(env.signers[ALICE], env.desk.store.log_id, ALICE),
    }
    r = client.post(f"/api/reviews/{other.id}/approve", json=body, headers=env.bearer())
    assert r.status_code == 200, r.text
    assert r.json()["answer_payload"] == {"limit": 6}
    assert sealing.is_commitment(env.desk.store.entry(r.json()["decision_seq"]).body["payload"])
    # The same body without the salts it was sealed with is another body: refused, nothing recorded.
    third = env.svc.get(env.open(args=dict(ARGS))[0].id)
    prepared = decision.prepare_edit(third, patch)
    body = {"patch": patch, "sig": prepared.sign(env.signers[ALICE], env.desk.store.log_id, ALICE)}
    r = client.post(f"/api/reviews/{third.id}/edit", json=body, headers=env.bearer())
    assert r.status_code == 403 and r.json()["recorded"] is False
    r = client.post(f"/api/reviews/{third.id}/edit", json={**body, "salts": {"amount": "00"}}, headers=env.bearer())
    assert r.status_code == 422 and "salts.amount" in r.json()["detail"]
    report = verify_store(env.desk.store)
    assert report.ok, report.failure


def _quorum_with_an_answer(env: Env, client: TestClient) -> Any:
    """A review two people must approve, with alice's approval and answer: the round's first."""
    env.set_policy({"policy": "two", "tools": "transfer", "approvals": 2})
    review = env.svc.get(env.open(args=dict(ARGS), payload={"limit": 5})[0].id)
    first = client.post(
        f"/api/reviews/{review.id}/approve", json=env.approve_json(review, ALICE, payload={"limit": 9}),
        headers=env.bearer(),
    )  # fmt: skip
    assert first.status_code == 200, first.text
    return env.svc.get(review.id)


def test_a_quorum_round_gives_the_page_its_first_answers_salt(env: Env, client: TestClient) -> None:
    review = _quorum_with_an_answer(env, client)
    assert review.round_payload == {"limit": 9} and review.round_payload_salt
    sign_in(client, CAROL)
    data = _data(client.get(f"/reviews/{review.id}").text)
    assert data["round_payload_salt"] == review.round_payload_salt and data["payload"] == {"limit": 9}
    body = env.approve_json(review, CAROL, payload={"limit": 9})
    held = env.desk.store.entry(review.approvals[0][1]).body["payload"]
    assert body["payload_salt"] == review.round_payload_salt
    assert sealing.commit({"limit": 9}, bytes.fromhex(body["payload_salt"])) == held  # the same commitment


def test_a_quorum_rounds_second_approval_with_the_same_answer_decides_it(env: Env, client: TestClient) -> None:
    review = _quorum_with_an_answer(env, client)
    body = env.approve_json(review, CAROL, payload={"limit": 9})
    second = client.post(f"/api/reviews/{review.id}/approve", json=body, headers=env.bearer(CAROL))
    assert second.status_code == 200, second.text
    assert second.json()["status"] == "approved" and second.json()["answer_payload"] == {"limit": 9}
    assert prove_decision(env.desk.store, review.id).review.answer_payload == {"limit": 9}


def test_prepare_edit_of_two_members_in_the_agents_order(env: Env, client: TestClient) -> None:
    review = env.svc.get(env.open(args={"to": "Alice Smith", "amount": 50})[0].id)
    patch = [{"op": "replace", "path": "/to", "value": "Bob"}, {"op": "replace", "path": "/amount", "value": 5}]
    prepared = decision.prepare_edit(review, patch)
    body = {"patch": patch, "salts": prepared.salts}
    body["sig"] = prepared.sign(env.signers[ALICE], env.desk.store.log_id, ALICE)
    r = client.post(f"/api/reviews/{review.id}/edit", json=body, headers=env.bearer())
    assert r.status_code == 200, r.text


def test_decided_recent_stalled_and_outcome_show_revealed_values(env: Env, client: TestClient) -> None:
    review = env.open(args=dict(ARGS))[0]
    r = client.post(f"/api/reviews/{review.id}/approve", json=env.approve_json(env.svc.get(review.id)),
                    headers=env.bearer())  # fmt: skip
    assert r.status_code == 200, r.text
    front = env.svc.claim_resume(review.frontier, actor="agent:teller")
    assert front.kind == "run.resumed"
    env.svc.record_execution(review.id, actor="agent:teller", args=dict(ARGS), result={"sent": "to Alice Smith"})
    env.svc.record_reply(review.frontier, actor="agent:teller", text="Paid Alice Smith.")
    sign_in(client)
    decided = client.get("/decided").text
    assert "Alice Smith" in decided and "sealed:sha256:" not in decided
    recent = client.get("/queue/recent").text
    assert "Paid Alice Smith." in recent and "to Alice Smith" in recent
    page = client.get(f"/reviews/{review.id}").text
    assert 'id="result-preview">{&#34;sent&#34;: &#34;to Alice Smith&#34;}' in page and "Paid Alice Smith." in page
    api = client.get(f"/api/reviews/{review.id}", headers=env.bearer()).json()
    assert api["outcome"]["reply"] == "Paid Alice Smith." and "Alice Smith" in api["outcome"]["result_preview"]
    assert client.get("/api/decided", headers=env.bearer()).json()["items"][0]["final_args"] == ARGS


def test_the_form_without_javascript_and_the_unsigned_form_decide_a_sealed_review(open_env: Env) -> None:
    env = open_env
    with BrowserClient(env.app) as c:
        csrf = sign_in(c)
        review = env.open(args=dict(ARGS))[0]
        edited = {**ARGS, "to": "Bob Jones"}
        r = c.post(f"/reviews/{review.id}/edit", data={"csrf": csrf, "args": json.dumps(edited)})
        assert r.status_code == 200 and r.url.path == f"/reviews/{review.id}", r.text[:3000]
        assert "Bob Jones" in r.text and prove_decision(env.desk.store, review.id).review.final_args == edited
        other = env.open(args=dict(ARGS), payload={"limit": 5})[0]
        page = c.get(f"/reviews/{other.id}").text
        r = c.post(f"/reviews/{other.id}/approve", data={"csrf": csrf_of(page), "payload": '{"limit": 7}'})
        assert r.status_code == 200 and "decision-done" in r.text
        assert env.svc.get(other.id).answer_payload == {"limit": 7}
    assert verify_store(env.desk.store).ok


def test_a_log_that_keeps_values_in_its_entries_gives_the_page_nothing_more(tmp_path: Path) -> None:
    env = make_env(f"sqlite:///{tmp_path / 'plain.db'}", tmp_path, sealed=False)
    try:
        review = env.open(args=dict(ARGS))[0]
        with BrowserClient(env.app) as c:
            sign_in(c)
            data = _data(c.get(f"/reviews/{review.id}").text)
        assert data["sealed"] is False and "sealed_args" not in data and "round_salts" not in data
    finally:
        env.desk.store.close()


# -- a value changed behind the service's back ----------------------------------------------------------------


def test_a_tampered_value_is_never_shown_and_nothing_is_approved_on_it(env: Env, client: TestClient) -> None:
    review = env.open(args=dict(ARGS))[0]
    fine = env.open(args={"amount": 1, "to": "Carl"})[0]
    _tamper(env, _sealed_args(env, review.id)["to"], "Mallory")
    csrf = sign_in(client)
    page = client.get(f"/reviews/{review.id}").text
    assert 'id="values-withheld"' in page and 'data-problem="values"' in page
    assert "Mallory" not in page and "Alice Smith" not in page and "rent" not in page
    assert 'id="approve-form"' not in page and 'id="edit-form"' not in page
    queue = client.get("/queue").text
    assert "Mallory" not in queue and "Alice Smith" not in queue and "Carl" in queue
    assert "do not match the record" in queue
    api = client.get(f"/api/reviews/{review.id}", headers=env.bearer()).json()
    assert api["call"]["args"] == {} and "does not match" not in api["problem"] and "call.args.to" in api["problem"]
    listed = {i["id"]: i for i in client.get("/api/reviews", headers=env.bearer()).json()["items"]}
    assert listed[review.id]["call"]["args"] == {} and listed[review.id]["problem"]
    assert listed[fine.id]["call"]["args"] == {"amount": 1, "to": "Carl"}
    # Nothing approved or edited on it, through the API or the page, whatever the signature.
    sealed = env.svc.get(review.id)
    r = client.post(f"/api/reviews/{review.id}/approve", json=env.approve_json(sealed), headers=env.bearer())
    assert r.status_code == 409 and r.json()["error"] == "ValuesDoNotMatch" and r.json()["recorded"] is False
    patch = json.dumps([{"op": "replace", "path": "/amount", "value": 1}])
    r = client.post(f"/reviews/{review.id}/edit", data={"csrf": csrf, "patch": patch})
    assert r.status_code == 409 and 'id="values-withheld"' in r.text and "Mallory" not in r.text
    assert env.svc.get(review.id).status == "pending"
    with pytest.raises(DecisionNotProven, match="call.args.to"):
        prove_decision(env.desk.store, review.id)


def test_a_value_changed_after_the_page_was_cached_is_checked_again(env: Env, client: TestClient) -> None:
    review = env.open(args=dict(ARGS))[0]
    sign_in(client)
    assert "Alice Smith" in client.get(f"/reviews/{review.id}").text  # cached for this log size
    _tamper(env, _sealed_args(env, review.id)["to"], "Mallory")
    page = client.get(f"/reviews/{review.id}").text  # the log did not grow; the values did
    assert 'id="values-withheld"' in page and "Mallory" not in page and "Alice Smith" not in page


# -- erased -----------------------------------------------------------------------------------------------------


def test_an_erased_review_says_when_by_whom_and_why(env: Env, client: TestClient) -> None:
    review = env.open(args=dict(ARGS), payload={"limit": 5})[0]
    r = client.post(f"/api/reviews/{review.id}/reject", json=env.reject_json(review, "not now"), headers=env.bearer())
    assert r.status_code == 200
    entry = erasure.erase(env.desk.store, review.id, reason="GDPR request 12", admin=env.admin)
    sign_in(client)
    page = client.get(f"/reviews/{review.id}").text
    notice = re.search(r'<div class="notice erasure" role="status" id="values-erased">(.*?)</div>', page, re.S)
    assert notice is not None
    said = re.sub(r"<[^>]+>", "", notice.group(1))
    assert re.search(rf"Values erased on {entry.at[:10]} \d\d:\d\d:\d\d UTC by admin:root: GDPR request 12", said)
    assert 'id="args-erased"' in page and "Alice Smith" not in page and "Send the money?" not in page
    assert "pay acct-1" not in page and "rent" not in page
    decided = client.get("/decided").text
    assert "Values erased" in decided and "Alice Smith" not in decided and "sealed:sha256" not in decided
    api = client.get(f"/api/reviews/{review.id}", headers=env.bearer()).json()
    assert api["erasures"] == [{"at": entry.at, "by": "admin:root", "reason": "GDPR request 12"}]
    assert api["problem"] == "" and all(sealing.is_commitment(v) for v in api["call"]["args"].values())
    assert verify_store(env.desk.store).ok


def test_retention_runs_on_the_desks_timer(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    from signoff.desk.app import create_app

    env.set_policy({"policy": "short", "tools": "*", "retain_values": 1})
    done = env.open(args=dict(ARGS))[0]
    waiting = env.open(args={"amount": 2, "to": "Zed"})[0]
    env.svc.reject(done.id, reviewer=ALICE, reason="no", signer=env.signers[ALICE])
    time.sleep(1.1)
    app = create_app(env.url, env.key, access_log=False, retention_every=0.2)
    try:
        with TestClient(app):
            wait_until(lambda: env.svc.get(done.id).erasures, 10, "the retention pass")
        erased = env.svc.get(done.id)
        assert erased.erasures[0][1:] == ("service:signoff", "retention")
        assert env.svc.get(waiting.id).call.args == {"amount": 2, "to": "Zed"}  # still open: it waits
        lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"event": "retention"' in x]
        assert lines and lines[0]["erased"][0]["review"] == done.id
        assert lines[0]["waiting"] == 1 and lines[0]["refused"] == []  # the open one waits for a later pass
    finally:
        app.state.desk.store.close()
    assert verify_store(env.desk.store).ok


def test_retention_is_refused_on_a_log_that_keeps_values_in_its_entries(tmp_path: Path) -> None:
    from signoff.desk.app import create_app
    from signoff.desk.cli import main

    plain = make_env(f"sqlite:///{tmp_path / 'plain.db'}", tmp_path, sealed=False)
    plain.desk.store.close()
    with pytest.raises(UnusableInput, match="--retention-every: expected a log with sealed values"):
        create_app(plain.url, plain.key, retention_every=5)
    assert main(["serve", "--store", plain.url, "--retention-every", "5", "--quiet"]) == 2


# -- live events and notifications ---------------------------------------------------------------------------


def test_live_events_carry_revealed_values_and_none_that_do_not_check(env: Env) -> None:
    review = env.open(args=dict(ARGS))[0]
    bad = env.open(args={"amount": 3, "to": "Dora"})[0]
    _tamper(env, _sealed_args(env, bad.id)["to"], "Mallory")
    store = env.desk.store
    events = [ev for ev, _about, _before in env.desk.broker._events(list(store.entries()), end_streams=False)]
    opened = {ev["review"]: ev for ev in events if ev["type"] == "opened"}
    assert "Alice Smith" in opened[review.id]["headline"] and "problem" not in opened[review.id]
    assert opened[bad.id]["problem"] is True
    assert "Mallory" not in json.dumps(opened[bad.id]) and "Dora" not in json.dumps(opened[bad.id])
    assert "sealed:sha256" not in json.dumps(opened)


def test_notifications_name_revealed_args_and_withhold_tampered_ones(tmp_path: Path) -> None:
    from notifykit import SECRET

    from signoff.audit.values import lookup_for
    from signoff.desk.notify import Endpoints, Engines, Notifier, NotifierOptions
    from signoff.desk.notify._endpoints import endpoint_from_options
    from signoff.desk.notify._events import events_of, payload

    log = make_log(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path, sealed=True)
    receiver = Receiver()
    try:
        endpoints = Endpoints(Engines(log.url), log.store.log_id)
        hook = endpoint_from_options("webhook", "hook", {"url": receiver.url, "secret": SECRET}, events=["opened"])
        endpoints.add(hook, head=log.store.size())
        options = NotifierOptions(desk_url="https://desk.example.org", retry_base=0.05, max_attempts=2)
        with Notifier(log.url, options):
            log.open(args={"amount": 5000, "to": "Alice Smith"})
            sent = receiver.wait_for(1)[0].json
        assert sent["review"]["args"] == {"amount": 5000, "to": "Alice Smith"} and "sealed:" not in json.dumps(sent)
        assert 'to="Alice Smith"' in sent["summary"]
        # A value changed behind the service's back: the notification names none of the args.
        bad = log.open(args={"amount": 7, "to": "Dora"})
        opened = log.store.entry(log.svc.get(bad).opened_seq)
        with log.store.write_engine.begin() as conn:
            conn.execute(
                text("UPDATE signoff_value SET value = :v WHERE commitment = :c"),
                {"v": '"Mallory"', "c": opened.body["call"]["args"]["to"]},
            )
        values = lookup_for(log.store.read_rows, log.store.log_id, [bad])
        event = events_of(opened, lambda _r: None, None, values)[0]
        data = payload(event, desk_url="https://desk.example.org")
        assert "values withheld" in data["summary"] and "args" not in data["review"] and data["review"]["problem"]
        assert "Mallory" not in json.dumps(data) and "Dora" not in json.dumps(data)
    finally:
        receiver.close()
        log.close()
