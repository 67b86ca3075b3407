"""The JSON API (desk/routes/api.py), on SQLite and PostgreSQL: every route and every refusal."""

from __future__ import annotations

import base64
import threading
import time

from deskkit import ALICE, BOB, CAROL, BrowserClient, Env
from fastapi.testclient import TestClient

from signoff.audit import digest, sealing


def test_api_needs_a_token(env: Env, client: TestClient) -> None:
    for path in ("/api/reviews", "/api/me", "/api/log", "/api/verification", "/api/checkpoints"):
        r = client.get(path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer"
    assert client.get("/api/reviews", headers={"Authorization": "Bearer sot_nope"}).status_code == 401


def test_session_cookie_is_not_an_api_credential(env: Env, client: TestClient) -> None:
    from deskkit import sign_in

    sign_in(client)
    assert client.get("/api/reviews").status_code == 401


def test_me(env: Env, client: TestClient) -> None:
    r = client.get("/api/me", headers=env.bearer(BOB)).json()
    key = env.signers[BOB]
    assert r == {
        "reviewer": BOB,
        "roles": ["ops"],
        "tools": ["send_*"],
        "enabled": True,
        "log": env.desk.store.log_id,
        "signed_decisions": True,
        "keys": [
            {
                "fingerprint": key.fingerprint,
                "alg": "Ed25519",
                "algorithm": "Ed25519",
                "credential_id": None,
                "rp_id": None,
                "enrolled_seq": r["keys"][0]["enrolled_seq"],
            }
        ],
    }


def test_list_pending_oldest_first_with_filters_and_paging(env: Env, client: TestClient) -> None:
    a = env.open("transfer")[0]
    b = env.open("send_email", {"to": "x"}, schema=None, agent="mailer")[0]
    c = env.open("transfer")[0]
    r = client.get("/api/reviews", headers=env.bearer()).json()
    assert [i["id"] for i in r["items"]] == [a.id, b.id, c.id] and r["total"] == 3
    r = client.get("/api/reviews?tool=transfer", headers=env.bearer()).json()
    assert [i["id"] for i in r["items"]] == [a.id, c.id] and r["total"] == 2
    r = client.get("/api/reviews?agent=mailer", headers=env.bearer()).json()
    assert [i["id"] for i in r["items"]] == [b.id]
    r = client.get("/api/reviews?limit=1&offset=1", headers=env.bearer()).json()
    assert [i["id"] for i in r["items"]] == [b.id] and r["total"] == 3
    assert client.get("/api/reviews?limit=0", headers=env.bearer()).status_code == 422


def test_get_review_with_frontier_and_role(env: Env, client: TestClient) -> None:
    first, second = env.open(n=2)
    r = client.get(f"/api/reviews/{first.id}", headers=env.bearer()).json()
    assert r["status"] == "pending" and r["tool"] == "transfer" and r["call"]["args"] == {"amount": 10, "to": "acct-1"}
    assert r["role"] == "finance" and r["can_decide"] is True
    assert [o["id"] for o in r["frontier_reviews"]] == [second.id]
    assert r["summary"]["headline"] == "teller wants to transfer: 10 to acct-1"
    assert r["outcome"] == {
        "resumed": False,
        "resumed_seq": None,
        "executed": False,
        "executed_seq": None,
        "result_preview": None,
        "reply": None,
        "reply_seq": None,
        "failed": False,
        "failed_seq": None,
        "failed_reason": None,
        "result_note": "",
        "reply_note": "",
    }
    # Outside BOB's roles and tools: not there at all for him.
    assert client.get(f"/api/reviews/{first.id}", headers=env.bearer(BOB)).status_code == 404


def test_unknown_review_is_404(env: Env, client: TestClient) -> None:
    for method, path, body in (
        ("get", "/api/reviews/rv_nope", None),
        ("get", "/api/reviews/rv_nope/history", None),
        ("post", "/api/reviews/rv_nope/approve", {}),
        ("post", "/api/reviews/rv_nope/reject", {"reason": "x"}),
    ):
        r = client.request(method.upper(), path, json=body, headers=env.bearer())
        assert r.status_code == 404, path
        assert r.json()["recorded"] is False if method == "post" else True


def test_approve(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    r = client.post(
        f"/api/reviews/{rev.id}/approve", json=env.approve_json(rev, rationale="fine"), headers=env.bearer()
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "approved" and body["decided_by"] == ALICE and body["rationale"] == "fine"
    assert body["final_args"] == {"amount": 10, "to": "acct-1"}
    assert env.svc.get(rev.id).status == "approved"
    entry = env.svc.history(rev.id)[-1]
    assert entry.sig is not None and entry.sig["key"] == env.signers[ALICE].fingerprint


def test_approve_with_payload_answer(env: Env, client: TestClient) -> None:
    rev = env.open("set_limit", {"account": "A"}, schema=None, payload={"limit": 100})[0]
    body = env.approve_json(rev, payload={"limit": 250})
    r = client.post(f"/api/reviews/{rev.id}/approve", json=body, headers=env.bearer())
    assert r.status_code == 200 and r.json()["answer_payload"] == {"limit": 250}


def test_edit(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    patch = [{"op": "replace", "path": "/amount", "value": 7}]
    r = client.post(
        f"/api/reviews/{rev.id}/edit", json=env.edit_json(rev, patch, rationale="smaller"), headers=env.bearer()
    )
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "edited" and r.json()["final_args"] == {"amount": 7, "to": "acct-1"}
    entry = env.svc.history(rev.id)[-1]
    assert entry.kind == "review.edited" and r.json()["patch"] == patch  # the patch as the reviewer made it
    if env.sealed:  # the entry records the changed member replaced by a new commitment (test_desk_sealed.py)
        assert [op["path"] for op in entry.body["patch"]] == ["/amount"]
        assert sealing.is_commitment(entry.body["patch"][0]["value"])
        opened = env.desk.store.entry(rev.opened_seq).body["call"]["args"]
        assert entry.body["args_digest"] == digest({**opened, "amount": entry.body["patch"][0]["value"]})
    else:
        assert entry.body["patch"] == patch
        assert entry.body["args_digest"] == digest({"amount": 7, "to": "acct-1"})


def test_reject(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    r = client.post(f"/api/reviews/{rev.id}/reject", json=env.reject_json(rev, "wrong account"), headers=env.bearer())
    assert r.status_code == 200 and r.json()["status"] == "rejected" and r.json()["reason"] == "wrong account"


def test_refused_reject_without_reason_is_422(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    for body in ({}, {"reason": ""}):
        assert client.post(f"/api/reviews/{rev.id}/reject", json=body, headers=env.bearer()).status_code == 422
    r = client.post(f"/api/reviews/{rev.id}/reject", json={"reason": "   "}, headers=env.bearer())
    assert r.status_code == 422 and r.json()["error"] == "MissingReason"
    assert env.svc.get(rev.id).status == "pending"


def test_refused_bad_patch_is_422(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    size = env.desk.store.size()
    r = client.post(
        f"/api/reviews/{rev.id}/edit", headers=env.bearer(), json={"patch": [{"op": "remove", "path": "/nope"}]}
    )
    assert r.status_code == 422 and r.json()["error"] == "PatchFailed" and r.json()["recorded"] is False
    r = client.post(f"/api/reviews/{rev.id}/edit", headers=env.bearer(), json={"patch": [{"op": "explode"}]})
    assert r.status_code == 422
    assert env.desk.store.size() == size and env.svc.get(rev.id).status == "pending"


def test_refused_schema_break_is_422_naming_the_parameter(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    r = client.post(
        f"/api/reviews/{rev.id}/edit",
        headers=env.bearer(),
        json={"patch": [{"op": "replace", "path": "/amount", "value": "lots"}]},
    )
    assert r.status_code == 422 and r.json()["error"] == "SchemaViolation" and r.json()["parameter"] == "amount"
    r = client.post(
        f"/api/reviews/{rev.id}/edit", headers=env.bearer(), json={"patch": [{"op": "remove", "path": "/to"}]}
    )
    assert r.status_code == 422 and r.json()["parameter"] == "to"
    r = client.post(
        f"/api/reviews/{rev.id}/edit",
        headers=env.bearer(),
        json={"patch": [{"op": "add", "path": "/sneaky", "value": 1}]},
    )
    assert r.status_code == 422 and r.json()["parameter"] == "sneaky"
    assert env.svc.get(rev.id).status == "pending"


def test_refused_outside_role_is_404_as_for_no_review(env: Env, client: TestClient) -> None:
    rev = env.open()[0]  # transfer, role finance
    unknown = client.post("/api/reviews/rv_nope/approve", json={}, headers=env.bearer(BOB)).json()
    for path, body in (("approve", {}), ("edit", {"patch": []}), ("reject", {"reason": "no"})):
        r = client.post(f"/api/reviews/{rev.id}/{path}", json=body, headers=env.bearer(BOB))
        assert r.status_code == 404, (path, r.text)
        assert r.json()["error"] == "UnknownReview" and r.json()["recorded"] is False
        assert r.json()["summary"] == unknown["summary"]  # says no more than for an id that does not exist
    # CAROL has the role but BOB's tool globs would not match either way; CAROL may decide.
    ok = client.post(f"/api/reviews/{rev.id}/approve", json=env.approve_json(rev, CAROL), headers=env.bearer(CAROL))
    assert ok.status_code == 200


def test_refused_stale_decision_is_409(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    assert (
        client.post(f"/api/reviews/{rev.id}/approve", json=env.approve_json(rev), headers=env.bearer()).status_code
        == 200
    )
    size = env.desk.store.size()
    for path, body in (("approve", {}), ("edit", {"patch": []}), ("reject", {"reason": "late"})):
        r = client.post(f"/api/reviews/{rev.id}/{path}", json=body, headers=env.bearer(CAROL))
        assert r.status_code == 409, path
        assert r.json()["error"] == "ReviewClosed" and r.json()["status"] == "approved"
    assert env.desk.store.size() == size


def test_refused_expired_is_409(env: Env, client: TestClient) -> None:
    late, expired = env.open(deadline=0.3, n=2)
    time.sleep(0.4)
    r = client.post(f"/api/reviews/{late.id}/approve", json={}, headers=env.bearer())
    assert r.status_code == 409 and r.json()["error"] == "DeadlinePassed" and r.json()["recorded"] is False
    env.svc.expire_due()
    r = client.post(f"/api/reviews/{expired.id}/approve", json={}, headers=env.bearer())
    assert r.status_code == 409 and r.json()["status"] == "expired"


def test_refused_disabled_reviewer(env: Env, client: TestClient) -> None:
    env.svc.disable_reviewer(CAROL, reason="left", admin=env.admin)
    assert client.get("/api/reviews", headers=env.bearer(CAROL)).status_code == 403


def test_two_reviewers_at_once_exactly_one_wins(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    results: dict[str, int] = {}
    barrier = threading.Barrier(2)

    def go(who: str) -> None:
        barrier.wait()
        body = env.approve_json(rev, who)
        results[who] = client.post(f"/api/reviews/{rev.id}/approve", json=body, headers=env.bearer(who)).status_code

    threads = [threading.Thread(target=go, args=(w,)) for w in (ALICE, CAROL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results.values()) == [200, 409]
    kinds = [e.kind for e in env.svc.history(rev.id)]
    assert kinds.count("review.approved") == 1


def test_history(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    client.post(f"/api/reviews/{rev.id}/reject", json=env.reject_json(rev, "no"), headers=env.bearer())
    kinds = [e["kind"] for e in client.get(f"/api/reviews/{rev.id}/history", headers=env.bearer()).json()]
    assert kinds == ["review.opened", "review.rejected"]


def test_log_newest_first_filters_and_paging(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    client.post(f"/api/reviews/{rev.id}/approve", json=env.approve_json(rev), headers=env.bearer())
    page = client.get("/api/log?limit=2", headers=env.bearer()).json()
    seqs = [e["seq"] for e in page["items"]]
    assert seqs == [page["size"] - 1, page["size"] - 2] and page["next_before"] == seqs[-1]
    older = client.get(f"/api/log?limit=2&before={page['next_before']}", headers=env.bearer()).json()
    assert older["items"][0]["seq"] == seqs[-1] - 1
    only = client.get("/api/log?kind=review.approved", headers=env.bearer()).json()["items"]
    assert [e["kind"] for e in only] == ["review.approved"] and only[0]["actor"] == ALICE
    assert client.get(f"/api/log?review={rev.id}", headers=env.bearer()).json()["items"][0]["kind"] == "review.approved"
    assert client.get(f"/api/log?actor={ALICE}", headers=env.bearer()).json()["items"][0]["actor"] == ALICE
    one = client.get("/api/log/0", headers=env.bearer()).json()
    assert one["seq"] == 0 and one["hash"].startswith("sha256:")
    assert client.get("/api/log/99999", headers=env.bearer()).status_code == 404


def test_checkpoints_and_proofs_verify_offline(env: Env, client: TestClient) -> None:
    from signoff.audit import merkle

    env.open()
    assert client.get("/api/checkpoints/latest", headers=env.bearer()).status_code == 404
    cp = client.post("/api/checkpoints", headers=env.bearer())
    assert cp.status_code == 201
    cp = cp.json()
    # A C2SP checkpoint note (c2sp.org/tlog-checkpoint), checked with the log's vkey, saying this size and root.
    from signoff.audit.tlog_checkpoint import verify_checkpoint
    from signoff.audit.vkeys import verifier_from_vkey

    assert cp["sig"] is None and cp["note"].startswith(env.desk.store.rules.origin + "\n")
    point = verify_checkpoint(cp["note"].encode(), [verifier_from_vkey(cp["vkey"])]).checkpoint
    assert (point.size, "sha256:" + point.root.hex()) == (cp["size"], cp["root"])
    assert client.get("/api/checkpoints/latest", headers=env.bearer()).json()["root"] == cp["root"]
    assert [c["size"] for c in client.get("/api/checkpoints", headers=env.bearer()).json()] == [cp["size"]]

    seq = cp["size"] - 1
    p = client.get(f"/api/proofs/inclusion/{seq}?size={cp['size']}", headers=env.bearer()).json()
    assert p["root"] == cp["root"] and p["leaf"] == env.desk.store.entry(seq).hash

    def h(s: str) -> bytes:
        return bytes.fromhex(s.split(":", 1)[1])

    merkle.verify_inclusion(
        merkle.leaf_hash(p["entry"].encode()), seq, cp["size"], [base64.b64decode(x) for x in p["proof"]], h(cp["root"])
    )

    env.open()
    c = client.get(f"/api/proofs/consistency?old={cp['size']}", headers=env.bearer()).json()
    assert c["old_root"] == cp["root"] and c["new_size"] == env.desk.store.size()
    merkle.verify_consistency(
        c["old_size"], c["new_size"], h(c["old_root"]), h(c["new_root"]), [base64.b64decode(x) for x in c["proof"]]
    )
    assert client.get("/api/proofs/inclusion/999", headers=env.bearer()).status_code == 404
    assert client.get("/api/proofs/consistency?old=999", headers=env.bearer()).status_code == 404


def test_verification_badge(env: Env, client: TestClient) -> None:
    env.open()
    point = client.post("/api/checkpoints", headers=env.bearer()).json()["size"]
    env.open()
    v = client.get("/api/verification?wait=20", headers=env.bearer()).json()
    size = env.desk.store.size()
    assert v["ok"] is True and v["verified_upto"] == size - 1 and v["checkpoint_size"] == point
    rules = v["rules"]
    # audit's own verifier ran incrementally: the entries before the checkpoint were proven by its root.
    assert rules["ok"] is True and rules["verified_upto"] == size - 1 and rules["checked_from"] == point
    assert rules["checkpoint_size"] == point


def test_openapi_documents_the_api(env: Env, client: TestClient) -> None:
    spec = client.get("/api/openapi.json").json()
    paths = spec["paths"]
    for p in (
        "/api/reviews",
        "/api/reviews/{review_id}",
        "/api/reviews/{review_id}/approve",
        "/api/reviews/{review_id}/edit",
        "/api/reviews/{review_id}/reject",
        "/api/log",
        "/api/checkpoints/latest",
        "/api/proofs/inclusion/{seq}",
        "/api/proofs/consistency",
    ):
        assert p in paths, p
    assert "409" in paths["/api/reviews/{review_id}/approve"]["post"]["responses"]
    assert "/queue" not in paths
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and "/api/reviews/{review_id}/approve" in docs.text
    assert "cdn" not in docs.text.lower() and '<script src="http' not in docs.text


def test_listing_follows_every_log_change(env: Env, client: TestClient) -> None:
    """The queue cache is keyed by log size: a decision or a new review shows at once."""
    a = env.open()[0]
    assert [i["id"] for i in client.get("/api/reviews", headers=env.bearer()).json()["items"]] == [a.id]
    env.svc.approve(a.id, reviewer=CAROL, signer=env.signers[CAROL])  # decided outside this desk process
    assert client.get("/api/reviews", headers=env.bearer()).json() == {
        "items": [],
        "total": 0,
        "limit": 50,
        "offset": 0,
    }
    b = env.open()[0]
    assert [i["id"] for i in client.get("/api/reviews", headers=env.bearer()).json()["items"]] == [b.id]


def test_signing_a_checkpoint_needs_the_log_key(env: Env) -> None:
    from signoff.desk.app import create_app

    app = create_app(env.url, access_log=False)  # no key_path
    app.state.desk.accounts = env.desk.accounts
    with BrowserClient(app) as c:
        r = c.post("/api/checkpoints", headers=env.bearer())
        assert r.status_code == 409 and "without the log's key" in r.json()["detail"]
        assert c.get("/", follow_redirects=False).headers["location"] == "/queue"
    app.state.desk.store.close()
