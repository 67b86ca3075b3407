"""The queue's summary, grouping and sorting; the Decided view's filters, search and paging; a
review's timeline with links to its entries and their inclusion proofs; the outcome after a
decision (desk/routes/reviews.py, desk/routes/decided.py, desk/queries.py). SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from deskkit import ALICE, BOB, CAROL, Env, sign_in
from fastapi.testclient import TestClient

from signoff.audit.merkle import verify_inclusion

ADK_HINT = (
    "Please approve or reject the tool call transfer() by responding with a FunctionResponse with an expected "
    "ToolConfirmation payload."
)


def _rows(html: str, table: str) -> list[str]:
    body = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr data-review="([^"]+)"', body)


def test_queue_rows_say_what_the_agent_wants(env: Env, client: TestClient) -> None:
    env.open("transfer", {"amount": 1250.0, "to": "DE89 3704", "memo": "Invoice 1042"}, hint=ADK_HINT)
    env.open("set_limit", {"account": "ACC-1"}, schema=None, hint="Which limit for ACC-1?", payload={"limit": 5})
    sign_in(client)
    html = client.get("/queue").text
    assert "Please approve or reject" not in html and "FunctionResponse" not in html  # protocol text: never
    tool = '<strong class="tool" title="Transfer money.">transfer</strong>'
    assert f'wants to {tool}: <span class="lead">1,250 to DE89 3704</span>' in html
    assert '<span class="k">memo</span>Invoice 1042' in html
    assert "Asks you: Which limit for ACC-1?" in html  # the tool's own question: shown
    page = client.get(f"/reviews/{re.findall(r'data-review=.(rv_[0-9a-f]+)', html)[0]}").text
    assert "Please approve or reject" not in page and "wants to" in page.split("<h1", 1)[1].split("</h1>", 1)[0]


def test_calls_of_one_frontier_are_grouped(env: Env, client: TestClient) -> None:
    alone = env.open()[0]
    pair = env.open(n=2)
    sign_in(client)
    html = client.get("/queue").text
    assert html.count('class="group-head"') == 1
    head = html.split('class="group-head"', 1)[1].split("</tr>", 1)[0]
    assert f'data-group="{pair[0].frontier}"' in head and '"group-size">2<' in head and '"group-open">2<' in head
    assert _rows(html, "queue") == [alone.id, pair[0].id, pair[1].id]
    env.svc.reject(pair[0].id, reviewer=CAROL, reason="no", signer=env.signer_of(CAROL))
    head = client.get("/queue").text.split('class="group-head"', 1)[1].split("</tr>", 1)[0]
    assert '"group-size">2<' in head and '"group-open">1<' in head


def test_queue_sorts_by_deadline(env: Env, client: TestClient) -> None:
    late = env.open(deadline=3600)[0]
    none = env.open(deadline=None)[0]
    soon = env.open(deadline=60)[0]
    sign_in(client)
    assert _rows(client.get("/queue").text, "queue") == [late.id, none.id, soon.id]
    assert _rows(client.get("/queue?sort=deadline").text, "queue") == [soon.id, late.id, none.id]
    api = client.get("/api/reviews?sort=deadline", headers=env.bearer()).json()
    assert [i["id"] for i in api["items"]] == [soon.id, late.id, none.id]


def _decide_many(env: Env, n: int) -> list[str]:
    """n decisions: alternately approved by ALICE, rejected by CAROL; returns ids, oldest decision first."""
    ids = []
    for k, review in enumerate(env.open(n=n)):
        if k % 2 == 0:
            env.svc.approve(review.id, reviewer=ALICE, signer=env.signer_of(ALICE))
        else:
            env.svc.reject(review.id, reviewer=CAROL, reason=f"no {k}", signer=env.signer_of(CAROL))
        ids.append(review.id)
    return ids


def test_decided_view_filters_and_search(env: Env, client: TestClient) -> None:
    ids = _decide_many(env, 6)
    mail = env.open("send_email", {"to": "x"}, role="ops", schema=None, agent="mailer")[0]
    env.svc.approve(mail.id, reviewer=BOB, signer=env.signer_of(BOB))
    sign_in(client)
    assert _rows(client.get("/decided").text, "decided") == [mail.id, *reversed(ids)]
    assert _rows(client.get("/decided?mine=1").text, "decided") == [ids[4], ids[2], ids[0]]
    assert _rows(client.get("/decided?outcome=rejected").text, "decided") == [ids[5], ids[3], ids[1]]
    assert _rows(client.get("/decided?tool=send_email").text, "decided") == [mail.id]
    assert _rows(client.get("/decided?agent=mailer").text, "decided") == [mail.id]
    assert _rows(client.get(f"/decided?q={ids[3]}").text, "decided") == [ids[3]]
    assert _rows(client.get(f"/decided?q={ids[3][:10]}").text, "decided") == [ids[3]]  # the start of an id
    session = env.svc.get(mail.id).call.session
    assert _rows(client.get(f"/decided?q={session}").text, "decided") == [mail.id]
    today = datetime.now(UTC).date()
    assert len(_rows(client.get(f"/decided?since={today}&until={today}").text, "decided")) == 7
    assert _rows(client.get(f"/decided?until={today - timedelta(days=1)}").text, "decided") == []
    assert _rows(client.get(f"/decided?since={today + timedelta(days=1)}").text, "decided") == []
    assert _rows(client.get("/decided?since=not-a-date").text, "decided") == [mail.id, *reversed(ids)]  # ignored
    # BOB sees his own decision only (the transfers are outside his roles and tools).
    with TestClient(env.app) as bob_client:
        bob_client.headers["origin"] = "http://testserver"
        sign_in(bob_client, BOB)
        assert _rows(bob_client.get("/decided").text, "decided") == [mail.id]
    api = client.get("/api/decided?mine=true&outcome=approved", headers=env.bearer()).json()
    assert [i["id"] for i in api["items"]] == [ids[4], ids[2], ids[0]] and api["total"] == 3


@pytest.mark.parametrize("walk", [False, True], ids=["sorted", "walked-along-the-log"])
def test_decided_view_pages_by_decision(
    env: Env, client: TestClient, walk: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from signoff.desk import queries

    monkeypatch.setattr(queries, "SORT_AT_MOST", 10 if walk else 2000)
    env.open(n=5)  # pending reviews between the decisions on the log
    ids = _decide_many(env, 60)
    env.open(n=5)
    ids += _decide_many(env, 60)
    sign_in(client)
    seen: list[str] = []
    url = "/decided"
    pages = 0
    while url:
        html = client.get(url).text
        seen += _rows(html, "decided")
        pages += 1
        older = re.search(r'<a href="([^"]+)" id="older">', html)
        url = older.group(1).replace("&amp;", "&") if older else ""
    assert pages == 3 and seen == list(reversed(ids))
    # Back from the last page to a newer one.
    last = client.get("/decided?outcome=approved&before=" + str(env.svc.get(ids[10]).decision_seq)).text
    newer = re.search(r'<a href="([^"]+)" id="newer">', last)
    assert newer is not None and "outcome=approved" in newer.group(1)
    back = _rows(client.get(newer.group(1).replace("&amp;", "&")).text, "decided")
    assert back and all(env.svc.get(i).status == "approved" for i in back)
    assert '"decided-count">120<' in client.get("/decided").text


def test_timeline_links_each_entry_and_its_inclusion_proof(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    env.svc.approve(rev.id, reviewer=ALICE, signer=env.signer_of(ALICE))
    env.svc.claim_resume(rev.frontier, actor="agent:teller")
    env.svc.record_execution(rev.id, actor="agent:teller", args=rev.call.args, result={"ok": True, "id": 7})
    env.svc.record_reply(rev.frontier, actor="agent:teller", text="Paid: transfer 7.")
    sign_in(client)
    html = client.get(f"/reviews/{rev.id}").text
    timeline = html.split('id="timeline-card"', 1)[1].split("</section>", 1)[0]
    kinds = re.findall(r'data-kind="([^"]+)"', timeline)
    assert kinds == ["review.opened", "review.approved", "run.resumed", "tool.executed", "run.replied"]
    for seq in re.findall(r'href="/log/proof/(\d+)\.json"', timeline):
        assert f'href="/log?before={int(seq) + 1}#seq-{seq}"' in timeline
        log = client.get(f"/log?before={int(seq) + 1}").text
        assert f'id="seq-{seq}"' in log
        proof = client.get(f"/log/proof/{seq}.json").json()
        leaf = bytes.fromhex(proof["leaf"].removeprefix("sha256:"))
        root = bytes.fromhex(proof["root"].removeprefix("sha256:"))
        path = [base64.b64decode(p) for p in proof["proof"]]
        verify_inclusion(leaf, int(seq), proof["size"], path, root)  # raises if it does not hold


def test_outcome_says_what_will_run_then_what_ran(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    env.svc.approve(rev.id, reviewer=ALICE, signer=env.signer_of(ALICE))
    sign_in(client)
    card = client.get(f"/reviews/{rev.id}/outcome").text
    assert "Will run with these arguments" in card and "the tool has not run yet" in card
    assert "Ran with" not in card and "The tool ran" not in card
    assert "Waiting for the agent to resume the run" in card
    env.svc.claim_resume(rev.frontier, actor="agent:teller")
    card = client.get(f"/reviews/{rev.id}/outcome").text
    assert "The agent's run was resumed" in card and "Will run with" in card
    env.svc.record_execution(rev.id, actor="agent:teller", args=rev.call.args, result={"receipt": "R-77"})
    env.svc.record_reply(rev.frontier, actor="agent:teller", text="Paid; receipt R-77.")
    card = client.get(f"/reviews/{rev.id}/outcome").text
    assert "The tool ran, with these arguments" in card and "Will run" not in card
    assert 'id="result-preview">{&#34;receipt&#34;: &#34;R-77&#34;}' in card
    assert 'id="reply-text">Paid; receipt R-77.' in card
    detail = client.get(f"/api/reviews/{rev.id}", headers=env.bearer()).json()
    assert detail["outcome"]["executed"] and detail["outcome"]["reply"] == "Paid; receipt R-77."
    recent = client.get("/queue/recent").text
    assert "Tool ran" in recent and "R-77" in recent and "Agent replied" in recent


def test_a_call_that_runs_no_more_says_why(env: Env, client: TestClient) -> None:
    """A run.resume_failed naming the review (its tool.executed was refused, or its answer could not be
    sent): the outcome card, the Decided list and the API say the call runs no more, and why."""
    rev = env.open()[0]
    env.svc.approve(rev.id, reviewer=ALICE, signer=env.signer_of(ALICE))
    env.svc.claim_resume(rev.frontier, actor="agent:teller")
    failed = env.svc.record_execution(rev.id, actor="agent:teller", args={**rev.call.args, "amount": 1})
    assert failed.kind == "run.resume_failed"
    sign_in(client)
    card = client.get(f"/reviews/{rev.id}/outcome").text
    assert 'id="resume-failed"' in card and "runs no more" in card and "tool.executed refused" in card
    assert f"seq {failed.seq}" in card and "Will run with" not in card
    assert "runs no more" in client.get("/decided").text
    detail = client.get(f"/api/reviews/{rev.id}", headers=env.bearer()).json()
    assert detail["outcome"]["failed"] and detail["outcome"]["failed_seq"] == failed.seq
    assert client.get("/api/stalled", headers=env.bearer()).json() == []


def test_a_call_whose_run_was_rewound_runs_no_more_and_says_why(env: Env, client: TestClient) -> None:
    """Issue 21: approved, then the run went back before its pause (``run.rewound``): the card, the
    Decided list and the API say it runs no more and why; it is neither "resumed" nor "not yet run"."""
    rev = env.open()[0]
    env.svc.approve(rev.id, reviewer=ALICE, signer=env.signer_of(ALICE))
    rewound = env.svc.record_rewind(rev.frontier, actor="agent:teller", before=rev.call.invocation)
    sign_in(client)
    card = client.get(f"/reviews/{rev.id}/outcome").text
    assert 'id="resume-failed"' in card and "rewound: the run went back before invocation" in card, card
    assert f"seq {rewound.seq}" in card
    decided = client.get("/decided").text
    assert "runs no more" in decided and "not yet run" not in decided
    detail = client.get(f"/api/reviews/{rev.id}", headers=env.bearer()).json()
    assert detail["outcome"]["failed_seq"] == rewound.seq and detail["outcome"]["resumed_seq"] is None
    assert client.get("/api/stalled", headers=env.bearer()).json() == []


def test_a_rejection_leaves_a_visible_trace(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    env.svc.reject(rev.id, reviewer=CAROL, reason="Wrong account", signer=env.signer_of(CAROL))
    sign_in(client)
    card = client.get(f"/reviews/{rev.id}/outcome").text
    assert "The tool does not run" in card and "Wrong account" in card and "will be told" in card
    env.svc.claim_resume(rev.frontier, actor="agent:teller")
    assert "The agent was told" in client.get(f"/reviews/{rev.id}/outcome").text
    assert "Agent told: not run" in client.get("/queue/recent").text


def test_approved_not_yet_run_is_listed_with_where_to_look(env: Env) -> None:
    from deskkit import BrowserClient

    from signoff.desk.app import create_app

    app = create_app(env.url, env.key, access_log=False, stalled_after=0)
    stuck = env.open()[0]
    env.svc.approve(stuck.id, reviewer=ALICE, signer=env.signer_of(ALICE))
    env.svc.claim_resume(stuck.frontier, actor="agent:teller")
    with BrowserClient(app) as c:
        sign_in(c)
        page = c.get("/stalled").text
        assert _rows(page, "stalled") == [stuck.id]
        assert stuck.call.session in page and stuck.call.invocation in page
        assert 'id="stalled-note"' in c.get("/queue").text
        assert 'id="stalled-here"' in c.get(f"/reviews/{stuck.id}").text
        assert [r["id"] for r in c.get("/api/stalled", headers=env.bearer()).json()] == [stuck.id]
        assert c.get("/api/stalled", headers=env.bearer(BOB)).json() == []  # outside BOB's roles
        env.svc.record_execution(stuck.id, actor="agent:teller", args=stuck.call.args)
        assert _rows(c.get("/stalled").text, "stalled") == []
    app.state.desk.store.close()


def test_actors_are_written_the_same_way_everywhere(env: Env, client: TestClient) -> None:
    rev = env.open()[0]
    env.svc.approve(rev.id, reviewer=ALICE, signer=env.signer_of(ALICE))
    sign_in(client)
    for path in ("/queue", f"/reviews/{rev.id}", "/log", "/decided", "/account"):
        html = client.get(path).text
        assert ALICE in html, path
        assert re.search(r">\s*alice@example\.org", html) is None, path  # never without its "human:"
    assert json.dumps(client.get("/api/me", headers=env.bearer()).json()).count(ALICE) == 1
