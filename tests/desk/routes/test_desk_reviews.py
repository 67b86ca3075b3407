"""The queue and one review with its three decisions (desk/routes/reviews.py): escaping,
CSRF, and every refusal with nothing recorded. SQLite, except the decision round trip, which
runs on PostgreSQL too (the API tests cover every refusal on both backends).

The forms are posted without a passkey here, so these tests run on a log that allows unsigned
decisions (``open_env``, as ``desk demo`` makes); test_desk_passkeys.py covers signed forms."""

from __future__ import annotations

import json

import pytest
from deskkit import BOB, CAROL, BrowserClient, Env, sign_in
from fastapi.testclient import TestClient

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
