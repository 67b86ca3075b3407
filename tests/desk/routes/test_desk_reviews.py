"""The queue and one review with its three decisions (desk/routes/reviews.py): escaping,
CSRF, and every refusal with nothing recorded. SQLite, except the decision round trip, which
runs on PostgreSQL too (the API tests cover every refusal on both backends).

The forms are posted without a passkey here, so these tests run on a log that allows unsigned
decisions (``open_env``, as ``desk demo`` makes); test_desk_passkeys.py covers signed forms."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from html import unescape
from typing import Any

import pytest
from deskkit import BOB, CAROL, BrowserClient, Env, sign_in
from fastapi.testclient import TestClient

from signoff.desk.present import middle

HOSTILE = {
    "amount": 1,
    "to": "<script>alert('x')</script>",
    "memo": "\"quoted\" & 'single' </pre><img src=x onerror=alert(1)> 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓ مرحبا" + "A" * 5000,
}


@pytest.fixture
def env(open_env: Env) -> Env:
    return open_env


@pytest.fixture
def client(oclient: TestClient) -> TestClient:
    return oclient


def test_queue_lists_pending_with_filters_and_pages(env: Env, client: TestClient) -> None:
    a = env.open("transfer")[0]
    b = env.open("send_email", {"to": "x"}, schema=None, agent="mailer")[0]
    sign_in(client)
    html = client.get("/queue").text
    assert html.index(a.id) < html.index(b.id)
    assert 'data-deadline="' in html and 'id="pending-count">2<' in html
    html = client.get("/queue?tool=send_email").text
    assert b.id in html and a.id not in html
    html = client.get("/queue?agent=teller").text
    assert a.id in html and b.id not in html
    assert client.get("/queue?page=99").status_code == 200


def test_queue_pagination(env: Env, client: TestClient) -> None:
    reviews = env.open(n=60)
    sign_in(client)
    first = client.get("/queue").text
    second = client.get("/queue?page=2").text
    assert reviews[0].id in first and reviews[59].id not in first
    assert reviews[59].id in second and "Page 2 of 2" in second


def test_agent_strings_are_escaped(env: Env, client: TestClient) -> None:
    rev = env.open(
        args=HOSTILE,
        hint='<b>bold</b> "hint"',
        payload={"q": "<script>p()</script>"},
        context={"user": "<iframe src=x>", "model": "</script><script>m()</script>"},
        agent="<i>agent</i>",
    )[0]
    sign_in(client)
    for path in ("/queue", f"/reviews/{rev.id}", "/log"):
        html = client.get(path).text
        assert "<script>alert" not in html and "<img src=x" not in html and "<iframe" not in html, path
        assert "<i>agent</i>" not in html and "<b>bold</b>" not in html and "<script>m()" not in html
    html = client.get(f"/reviews/{rev.id}").text
    assert "&lt;script&gt;alert(" in html and "𝔘𝔫𝔦𝔠𝔬𝔡𝔢" in html
    # The data island for the editor is JSON with <, > and & escaped.
    island = html.split('id="review-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in island and json.loads(island)["args"] == HOSTILE


def test_review_page_shows_everything(env: Env, client: TestClient) -> None:
    first, second = env.open(n=2, payload={"limit": 100})
    sign_in(client)
    html = client.get(f"/reviews/{first.id}").text
    for text in (
        "transfer",
        "Transfer money.",
        "teller/transfer",
        "pay acct-1",
        "I&#39;ll pay.",
        "Send the money?",
        "&#34;amount&#34;: 10",
        "&#34;limit&#34;: 100",
        second.id,
        "review.opened",
    ):
        assert text in html, text
    assert 'action="/reviews/' + first.id + '/approve"' in html


@pytest.mark.parametrize("store_url", ["sqlite", "postgresql"], indirect=True)
def test_approve_edit_reject_through_forms(store_url: str, tmp_path: object) -> None:
    from deskkit import make_env

    env = make_env(store_url, tmp_path, signed=False)  # type: ignore[arg-type]
    with BrowserClient(env.app) as client:
        _decide_through_forms(env, client)
    env.desk.store.close()


def _decide_through_forms(env: Env, client: TestClient) -> None:
    a, e, r = env.open()[0], env.open()[0], env.open()[0]
    csrf = sign_in(client)
    resp = client.post(f"/reviews/{a.id}/approve", data={"csrf": csrf, "rationale": "ok"})
    assert resp.status_code == 200 and "Recorded" in resp.text and env.svc.get(a.id).status == "approved"
    patch = json.dumps([{"op": "replace", "path": "/amount", "value": 3}])
    resp = client.post(f"/reviews/{e.id}/edit", data={"csrf": csrf, "patch": patch})
    assert resp.status_code == 200 and env.svc.get(e.id).final_args == {"amount": 3, "to": "acct-1"}
    resp = client.post(f"/reviews/{r.id}/reject", data={"csrf": csrf, "reason": "no thanks"})
    assert resp.status_code == 200 and env.svc.get(r.id).reason == "no thanks"


def test_edit_without_javascript_sends_whole_args(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    csrf = sign_in(client)
    resp = client.post(
        f"/reviews/{rev.id}/edit", data={"csrf": csrf, "patch": "", "args": json.dumps({"amount": 4, "to": "acct-2"})}
    )
    assert resp.status_code == 200
    got = env.svc.get(rev.id)
    assert got.final_args == {"amount": 4, "to": "acct-2"} and got.patch
    payload_rev = env.open("set_limit", {"account": "A"}, schema=None, payload={"limit": 1})[0]
    resp = client.post(f"/reviews/{payload_rev.id}/approve", data={"csrf": csrf, "payload": '{"limit": 9}'})
    assert resp.status_code == 200 and env.svc.get(payload_rev.id).answer_payload == {"limit": 9}


def test_a_question_reads_as_one_and_its_answer_is_signed(env: Env, client: TestClient) -> None:
    """Issue 21: a review of kind ``input`` (``adk_request_input``): the page asks the question, the
    answer form starts from the response schema's shape, and the answer sent is the decision's payload."""
    rev = env.open(
        "adk_request_input",
        {"message": "Which account?", "response_schema": {"type": "object"}},
        schema=None,
        hint="Which account?",
        payload={"account": "", "urgent": False},
        kind="input",
    )[0]
    csrf = sign_in(client)
    page = unescape(client.get(f"/reviews/{rev.id}").text)
    assert re.search(r'id="headline">.*teller.*asks you: .*Which account\?', page), page[:2000]
    assert "wants to" not in page.split('id="headline"', 1)[1].split("</h1>", 1)[0]
    assert 'name="payload"' in page and '"urgent": false' in page and "Send the answer" in page
    resp = client.post(
        f"/reviews/{rev.id}/approve", data={"csrf": csrf, "payload": '{"account": "acct-9", "urgent": true}'}
    )
    assert resp.status_code == 200
    assert env.svc.get(rev.id).answer_payload == {"account": "acct-9", "urgent": True}
    lists = unescape(client.get("/queue/recent").text) + unescape(client.get("/decided").text)
    queue = re.sub(r"<[^>]+>", "", lists)
    assert "asks you: Which account?" in queue and "wants to adk_request_input" not in queue


def test_post_without_csrf_is_refused_and_nothing_recorded(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    sign_in(client)
    size = env.desk.store.size()
    for path, data in (("approve", {}), ("edit", {"patch": "[]"}), ("reject", {"reason": "x"})):
        r = client.post(f"/reviews/{rev.id}/{path}", data=data)
        assert r.status_code == 403 and "security token" in r.text
        r = client.post(f"/reviews/{rev.id}/{path}", data={**data, "csrf": "forged"})
        assert r.status_code == 403
    assert client.post("/account/tokens", data={}).status_code == 403
    assert client.post("/log/checkpoint", data={}).status_code == 403
    assert env.desk.store.size() == size and env.svc.get(rev.id).status == "pending"


def test_csrf_token_is_bound_to_the_session(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    alice_csrf = sign_in(client)
    with BrowserClient(env.app) as other:
        sign_in(other, CAROL)
        r = other.post(f"/reviews/{rev.id}/approve", data={"csrf": alice_csrf})
        assert r.status_code == 403


def test_refusals_on_the_review_page(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    csrf = sign_in(client)
    size = env.desk.store.size()
    bad_patch = client.post(f"/reviews/{rev.id}/edit", data={"csrf": csrf, "patch": '[{"op":"remove","path":"/zz"}]'})
    assert bad_patch.status_code == 422 and "does not apply" in bad_patch.text
    schema = client.post(
        f"/reviews/{rev.id}/edit", data={"csrf": csrf, "patch": '[{"op":"replace","path":"/amount","value":"x"}]'}
    )
    assert schema.status_code == 422 and "schema" in schema.text and "amount" in schema.text
    not_json = client.post(f"/reviews/{rev.id}/edit", data={"csrf": csrf, "patch": "[{"})
    assert not_json.status_code == 422 and "not valid JSON" in not_json.text
    no_reason = client.post(f"/reviews/{rev.id}/reject", data={"csrf": csrf, "reason": " "})
    assert no_reason.status_code == 422 and "needs a reason" in no_reason.text
    assert env.desk.store.size() == size and "nothing was recorded" in no_reason.text


def test_outside_role_is_not_there_and_cannot_be_decided(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    csrf = sign_in(client, BOB)
    page = client.get(f"/reviews/{rev.id}")
    assert page.status_code == 404 and rev.id not in page.text and "acct-1" not in page.text
    size = env.desk.store.size()
    r = client.post(f"/reviews/{rev.id}/approve", data={"csrf": csrf})
    assert r.status_code == 404 and "acct-1" not in r.text
    assert env.svc.get(rev.id).status == "pending" and env.desk.store.size() == size


def test_already_decided_gets_a_clear_message(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    csrf = sign_in(client)
    env.svc.reject(rev.id, reviewer=CAROL, reason="carol said no")
    r = client.post(f"/reviews/{rev.id}/approve", data={"csrf": csrf})
    assert r.status_code == 409 and "already decided" in r.text and "rejected" in r.text
    assert env.svc.get(rev.id).decided_by == CAROL


def test_unknown_review_page(env: Env, client: TestClient) -> None:
    sign_in(client)
    assert client.get("/reviews/rv_nope").status_code == 404


def test_a_refused_edit_shows_the_changes_again(env: Env, client: TestClient) -> None:
    """The page sends the patch without the whole args (desk.js); a refusal rebuilds them from it."""
    rev = env.open()[0]
    csrf = sign_in(client)
    patch = json.dumps([{"op": "replace", "path": "/amount", "value": "not a number"}])
    r = client.post(f"/reviews/{rev.id}/edit", data={"csrf": csrf, "patch": patch})
    assert r.status_code == 422
    editor = r.text.split('id="args-editor"', 1)[1].split("</textarea>", 1)[0]
    assert "&#34;amount&#34;: &#34;not a number&#34;" in editor


# -- after an edit: what runs, the proposal struck through beside it (issue 13) ---------------------

TRANSFER = {
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "currency": {"type": "string"},
        "to": {"type": "string"},
        "memo": {"type": "string"},
    },
    "required": ["amount", "to"],
}
SEND_100 = {"amount": 100, "currency": "EUR", "to": "acct-1", "memo": "<b>rent</b>"}


def _between(html: str, start: str, end: str) -> str:
    return html.split(start, 1)[1].split(end, 1)[0]


def _plain(fragment: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def test_after_an_edit_the_headline_and_the_question_say_what_runs_the_proposal_struck(
    env: Env, client: TestClient
) -> None:
    rev = env.open(args=SEND_100, schema=TRANSFER, hint="Send 100 EUR to acct-1?")[0]
    csrf = sign_in(client)
    edited = {**SEND_100, "amount": 50, "memo": "<i>half</i>"}
    r = client.post(f"/reviews/{rev.id}/edit", data={"csrf": csrf, "args": json.dumps(edited)})
    assert r.status_code == 200 and env.svc.get(rev.id).final_args == edited
    page = client.get(f"/reviews/{rev.id}").text
    head = _between(page, 'id="headline">', "</h1>")
    assert re.search(r"<del[^>]*>100\.00 EUR</del> <ins[^>]*>50\.00 EUR</ins>", head), head
    # Agent data stays escaped inside the marks: the proposal's memo and the reviewer's.
    assert re.search(
        r"<del[^>]*>memo: &lt;b&gt;rent&lt;/b&gt;</del> <ins[^>]*>memo: &lt;i&gt;half&lt;/i&gt;</ins>", head
    )
    assert "<b>rent" not in page and "<i>half" not in page
    assert (
        _plain(head) == "teller wants to transfer: 100.00 EUR 50.00 EUR to acct-1 (memo: <b>rent</b> memo: <i>half</i>)"
    )
    question = _between(page, 'id="question">', "</p>")
    assert re.search(
        r"Send <span class=\"changed\"><del[^>]*>100</del> <ins[^>]*>50</ins></span> EUR to acct-1\?", question
    )
    assert "struck through" in _between(page, 'id="question-note">', "</p>")
    assert _plain(_between(page, 'id="changed-by">', "</span>\n")).startswith("arguments changed by human:alice")
    # The Decided history's row says the same.
    row = _between(client.get("/decided").text, f'<tr data-review="{rev.id}">', "</tr>")
    assert re.search(r"<del[^>]*>100\.00 EUR</del> <ins[^>]*>50\.00 EUR</ins>", row), row
    # An approval as proposed strikes nothing.
    plain = env.open(args=SEND_100, schema=TRANSFER)[0]
    client.post(f"/reviews/{plain.id}/approve", data={"csrf": csrf})
    assert "<del" not in _between(client.get(f"/reviews/{plain.id}").text, 'id="headline">', "</h1>")


def test_a_round_a_reviewer_changed_reads_as_what_will_run_on_the_page_and_in_the_queue(env: Env) -> None:
    env.set_policy({"policy": "four-eyes", "tools": "transfer*", "approvals": 2})
    rev = env.open(args=SEND_100, schema=TRANSFER, hint="Send 100 EUR?")[0]
    with BrowserClient(env.app) as alice, BrowserClient(env.app) as carol:
        csrf = sign_in(alice)
        edited = json.dumps({**SEND_100, "amount": 50})
        r = alice.post(f"/reviews/{rev.id}/edit", data={"csrf": csrf, "args": edited, "round": "0"})
        assert r.status_code == 200 and env.svc.get(rev.id).status == "pending"
        sign_in(carol, CAROL)
        page = carol.get(f"/reviews/{rev.id}").text
        head = _between(page, 'id="headline">', "</h1>")
        assert re.search(r"<del[^>]*>100\.00 EUR</del> <ins[^>]*>50\.00 EUR</ins>", head), head
        assert re.search(r"<del[^>]*>100</del> <ins[^>]*>50</ins>", _between(page, 'id="question">', "</p>"))
        row = _between(carol.get("/queue").text, f'<tr data-review="{rev.id}"', "</tr>")
        assert re.search(r'class="lead"><span class="changed"><del[^>]*>100\.00 EUR</del> <ins[^>]*>50\.00 EUR', row)


# -- the queue shows only what the log says (issue 15) -----------------------------------------------


def _forge(env: Env, review_id: str, **columns: Any) -> None:
    """Rewrite a review's projection row behind the log's back, as someone with the database file can."""
    with closing(sqlite3.connect(env.url.removeprefix("sqlite:///"))) as db:
        sets = ", ".join(f"{name} = ?" for name in columns)
        db.execute(f"UPDATE signoff_review SET {sets} WHERE id = ?", (*columns.values(), review_id))
        db.commit()


def _row_data(env: Env, review_id: str) -> dict[str, Any]:
    with closing(sqlite3.connect(env.url.removeprefix("sqlite:///"))) as db:
        (data,) = db.execute("SELECT data FROM signoff_review WHERE id = ?", (review_id,)).fetchone()
    found: dict[str, Any] = json.loads(data)
    return found


def _alarms(client: TestClient) -> float:
    found = re.search(r'signoff_projection_alarms\{kind="review row"\} ([0-9.]+)', client.get("/metrics").text)
    assert found, "no projection alarm gauge"
    return float(found.group(1))


def test_a_review_row_rewritten_in_the_database_shows_the_logs_call_marked_and_raises_an_alarm(
    env: Env, client: TestClient
) -> None:
    honest = env.open(args={"amount": 10, "to": "acct-1"})[0]
    forged = env.open(args={"amount": 10, "to": "acct-2"})[0]
    data = _row_data(env, forged.id)
    data["call"] = {**data["call"], "args": {"amount": 100, "to": "ATTACKER-D"}, "agent": "mallory", "hint": "Fine."}
    _forge(env, forged.id, data=json.dumps(data), agent="mallory")
    before = _alarms(client)
    sign_in(client)  # which lands on the queue
    html = client.get("/queue").text
    assert "ATTACKER-D" not in html and "Fine." not in html
    # (The agent filter's suggestions are the projection's column, a hint: the rows themselves read the log.)
    assert "mallory" not in _between(html, '<table class="queue"', "</table>")
    row = _between(html, f'<tr data-review="{forged.id}"', "</tr>")
    assert "disagrees" in row.split(">", 1)[0]  # the row is marked
    assert "This row disagrees with the log; showing the log's values." in row
    assert _plain(_between(row, 'class="headline"', "</a>")).endswith("teller wants to transfer: 10 to acct-2")
    other = _between(html, f'<tr data-review="{honest.id}"', "</tr>")
    assert "disagrees" not in other and "to acct-1" in other
    assert _alarms(client) == before + 1  # counted: signoff_projection_alarms{kind="review row"}
    # The JSON list says the same, and names what the row said otherwise.
    items = {i["id"]: i for i in client.get("/api/reviews", headers=env.bearer()).json()["items"]}
    assert items[forged.id]["call"]["args"] == {"amount": 10, "to": "acct-2"}
    assert items[forged.id]["agent"] == "teller" and "to acct-2" in items[forged.id]["summary"]["headline"]
    assert "call" in items[forged.id]["row_disagrees"] and "agent" in items[forged.id]["row_disagrees"]
    assert items[honest.id]["row_disagrees"] == ""
    assert "ATTACKER-D" not in client.get(f"/reviews/{forged.id}").text  # the review page reads the log too


def test_a_forged_round_or_a_row_with_no_review_on_the_log_shows_nothing_of_the_row(
    env: Env, client: TestClient
) -> None:
    rev = env.open(args={"amount": 10, "to": "acct-1"})[0]
    data = _row_data(env, rev.id)
    data["progress"] = {"round": 1, "args": {"amount": 100, "to": "ATTACKER-D"}, "approvals": []}
    _forge(env, rev.id, data=json.dumps(data))
    ghost = env.open(args={"amount": 1, "to": "acct-3"})[0]
    with closing(sqlite3.connect(env.url.removeprefix("sqlite:///"))) as db:  # a row the log never opened
        names = [c[1] for c in db.execute("PRAGMA table_info(signoff_review)")]
        made = {"id": "'rv_ghost'", "session": "session || 'x'", "confirmation_id": "confirmation_id || 'x'"}
        made["data"] = "replace(data, 'acct-3', 'GHOST-ACCOUNT')"
        picked = ", ".join(made.get(n, n) for n in names)
        db.execute(
            f"INSERT INTO signoff_review ({', '.join(names)}) SELECT {picked} FROM signoff_review WHERE id = ?",
            (ghost.id,),
        )
        db.commit()
    before = _alarms(client)
    sign_in(client)
    html = client.get("/queue").text
    assert "ATTACKER-D" not in html and "GHOST-ACCOUNT" not in html
    note = _between(_between(html, f'<tr data-review="{rev.id}"', "</tr>"), 'class="disagrees-note"', ">")
    assert "round" in note and "to acct-1" in _between(html, f'<tr data-review="{rev.id}"', "</tr>")
    ghost_row = _between(html, '<tr data-review="rv_ghost"', "</tr>")
    assert "names a review the log does not have" in ghost_row and 'href="/reviews/rv_ghost"' not in ghost_row
    assert _alarms(client) == before + 2
    ids = [i["id"] for i in client.get("/api/reviews", headers=env.bearer()).json()["items"]]
    assert "rv_ghost" not in ids and rev.id in ids


def test_honest_rows_of_edits_claims_and_quorums_raise_no_alarm(env: Env, client: TestClient) -> None:
    env.set_policy({"policy": "four-eyes", "tools": "transfer*", "approvals": 2})
    a, b = env.open()[0], env.open()[0]
    env.svc.edit(a.id, reviewer=CAROL, patch=[{"op": "replace", "path": "/amount", "value": 3}], round=0)
    env.svc.claim(a.id, reviewer=CAROL)
    env.svc.approve(b.id, reviewer=CAROL, round=0)
    env.open("send_email", {"to": "x"}, schema=None, role=None)
    before = _alarms(client)
    sign_in(client)
    html = client.get("/queue").text
    assert "disagrees" not in html and "carol@example.org is on it" in html and "1 of 2 approvals" in html
    assert all(i["row_disagrees"] == "" for i in client.get("/api/reviews", headers=env.bearer()).json()["items"])
    assert _alarms(client) == before


# -- two like calls told apart; the review page's order and words (issue 16) ---------------------------


def test_two_identical_calls_are_told_apart_by_session_review_and_age(env: Env, client: TestClient) -> None:
    first, second = env.open(n=2)  # one frontier: the same session
    third = env.open()[0]
    sign_in(client)
    html = client.get("/queue").text
    for review in (first, second, third):
        ids = _plain(_between(_between(html, f'<tr data-review="{review.id}"', "</tr>"), '<div class="ids">', "</div>"))
        assert ids == f"session {review.call.session} · {review.id[:9]}", ids  # short sessions whole
        assert 'data-since="' in _between(html, f'<tr data-review="{review.id}"', "</tr>")  # the age
    # A long session keeps its start and its end: an app's sessions often share a prefix.
    assert middle("demo-30160-1-63849") == "demo-301…1-63849" and middle("s1") == "s1"


def test_the_claim_sits_by_the_decision_and_the_jargon_one_click_away(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    sign_in(client)
    page = client.get(f"/reviews/{rev.id}").text
    assert page.index('id="args-card"') < page.index('id="claim"') < page.index('id="decide"')
    assert 'id="claim-btn"' in page and 'id="progress" hidden' in page  # no card above the arguments for it
    h2 = _between(_between(page, 'id="args-card"', "</section>"), "<h2>", "</h2>")
    assert _plain(h2) == "Arguments" and rev.args_digest[7:19] not in h2
    details = _between(page, 'id="args-details"', "</details>")
    assert rev.args_digest[7:19] in details  # the digest: one click away
    edit = _between(page, 'id="edit-form"', "</form>")
    assert "What you change" in edit and "Patch" not in _plain(edit.split("<details", 1)[0])
    assert "RFC 6902" not in edit.split("<details", 1)[0] and "RFC 6902" in _between(edit, "<details", "</details>")
    csrf = sign_in(client)
    client.post(
        f"/reviews/{rev.id}/edit", data={"csrf": csrf, "patch": '[{"op": "replace", "path": "/amount", "value": 3}]'}
    )
    outcome = client.get(f"/reviews/{rev.id}").text
    assert _plain(_between(outcome, 'id="decided-changed">', "</div>")) == "Changed: amount"
    assert "/amount" not in outcome.split('id="decided-changed"', 1)[1].split("<details", 1)[0]
