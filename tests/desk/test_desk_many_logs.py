"""One desk, many logs (issue 23 §3): three logs in one SQLite file and in one PostgreSQL schema. A reviewer
signs in once and sees, in one queue, exactly the reviews of the logs where they review, each row naming
its log; Decided, Not yet run and the event stream span them too. Each decision goes to its own log, signed
for it: a signature made for another log is refused, and nothing crosses.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deskkit import PASSWORD, BrowserClient, sign_in, vm_steps
from fastapi.testclient import TestClient
from livekit import Stream, serving, signed_in
from sqlalchemy import Engine

from signoff.audit import CallSpec, Policy, ReviewService, Signer, open_store
from signoff.audit import decision as decisions
from signoff.audit.keys import read_private_key
from signoff.audit.store import default_admin_key
from signoff.desk.app import create_app
from signoff.desk.auth import Accounts
from signoff.desk.db import make_engine

ALICE = "human:alice@example.org"  # payments and support
BOB = "human:bob@example.org"  # ops, and enrolled on support by its admin without a desk account there
NAMES = ("payments", "support", "ops")


@dataclass
class Many:
    url: str
    logs: dict[str, str]  # name -> log id
    svcs: dict[str, ReviewService]
    admins: dict[str, Signer]
    keys: dict[str, Signer] = field(default_factory=dict)  # each person's key file (one per person, every log)
    n: int = 0

    def open(self, name: str, tool: str = "transfer") -> Any:
        self.n += 1
        call = CallSpec(
            app=name, user="u", session=f"s-{self.n}", invocation=f"i-{self.n}", confirmation_id=f"c-{self.n}",
            call_id=f"call-{self.n}", tool=tool, args={"amount": self.n, "to": "acct"},
        )  # fmt: skip
        return self.svcs[name].open_frontier([call], actor="agent:teller", policies=Policy(role="teller")).reviews[0]

    def approve_body(self, review: Any, log: str, who: str = ALICE) -> dict[str, Any]:
        body = decisions.approve_body(review.id, review.args_digest, "fine", None, None)
        return {"rationale": "fine", "sig": decisions.sign_decision(self.keys[who], log, decisions.APPROVED, who, body)}


@pytest.fixture
def many(store_url: str, tmp_path: Path) -> Iterator[Many]:
    found = Many(store_url, {}, {}, {}, keys={ALICE: Signer.generate(), BOB: Signer.generate()})
    engine = make_engine(store_url)
    for n, name in enumerate(NAMES):
        key = tmp_path / f"{name}.pem"
        store = open_store(store_url)
        store.init_log(key, origin=f"example.org/{name}", new_log=n > 0)
        admin = read_private_key(default_admin_key(key))
        svc = ReviewService(store)
        people = {"payments": [ALICE], "support": [ALICE, BOB], "ops": [BOB]}[name]
        for who in people:
            svc.enroll_reviewer(who, roles=["teller"], tools=["*"], key=found.keys[who].public, admin=admin)
            if not (name == "support" and who == BOB):  # support's admin gave Bob no desk account
                Accounts(engine, store.log_id).set_password(who, PASSWORD, must_change=False)
        found.logs[name], found.svcs[name], found.admins[name] = store.log_id, svc, admin
    yield found
    for svc in found.svcs.values():
        svc.store.close()


def _app(many: Many, **extra: Any) -> Any:
    return create_app(many.url, access_log=False, **extra)


def _queue_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-review="(rv_[0-9a-f]+)"', html)


def _row_logs(html: str) -> dict[str, str]:
    """review id -> the log name its queue row shows."""
    rows = re.findall(
        r'<tr data-review="(rv_[0-9a-f]+)".*?<span class="log" title="log (log_[0-9a-f]+)">([^<]+)</span>', html, re.S
    )
    return {review: f"{log}={label}" for review, log, label in rows}


def test_one_sign_in_one_queue_over_the_logs_a_person_reviews(many: Many) -> None:
    mine = [many.open("payments"), many.open("support"), many.open("payments")]
    others = [many.open("ops")]
    with BrowserClient(_app(many)) as c:
        sign_in(c, ALICE)
        page = c.get("/queue")
        assert page.status_code == 200
        assert sorted(_queue_ids(page.text)) == sorted(r.id for r in mine)  # not ops'
        assert not set(_queue_ids(page.text)) & {r.id for r in others}
        labels = _row_logs(page.text)
        assert labels[mine[0].id] == f"{many.logs['payments']}=example.org/payments"
        assert labels[mine[1].id] == f"{many.logs['support']}=example.org/support"
        assert 'id="pending-count">3<' in page.text
        # The page's live updates start from each log's size, as it was rendered.
        size = re.search(r'data-log-size="([^"]+)"', page.text)
        assert size is not None
        assert {part.split(":")[0] for part in size.group(1).split(",")} == {
            many.logs["payments"],
            many.logs["support"],
        }
        # Each review page is its own log's; another log's review does not exist for her.
        assert c.get(f"/reviews/{mine[1].id}").status_code == 200
        assert c.get(f"/reviews/{others[0].id}").status_code == 404
    with BrowserClient(_app(many)) as c:
        sign_in(c, BOB)  # on support too, but its admin made him no desk account there: ops only
        assert sorted(_queue_ids(c.get("/queue").text)) == [others[0].id]
        assert c.get(f"/reviews/{mine[1].id}").status_code == 404


def test_a_decision_goes_to_its_own_log_signed_for_it(many: Many) -> None:
    """Through the API, with Alice's support token: a signature made for payments approves nothing on support,
    and payments' token reaches no support review; signed for support, it lands on support alone."""
    review = many.open("support")
    engine = make_engine(many.url)
    tokens = {name: Accounts(engine, many.logs[name]).new_token(ALICE, "t") for name in ("payments", "support")}
    with TestClient(_app(many)) as c:
        sizes = {name: svc.store.size() for name, svc in many.svcs.items()}
        path = f"/api/reviews/{review.id}/approve"
        wrong = many.approve_body(review, many.logs["payments"])
        r = c.post(path, json=wrong, headers={"Authorization": f"Bearer {tokens['support']}"})
        assert r.status_code == 403 and "expected a valid Ed25519 signature" in r.text, r.text[:300]
        right = many.approve_body(review, many.logs["support"])
        r = c.post(path, json=right, headers={"Authorization": f"Bearer {tokens['payments']}"})
        assert r.status_code == 401, r.text[:300]  # a token is its own log's
        assert {name: svc.store.size() for name, svc in many.svcs.items()} == sizes
        assert many.svcs["support"].get(review.id).status == "pending"
        r = c.post(path, json=right, headers={"Authorization": f"Bearer {tokens['support']}"})
        assert r.status_code == 200, r.text[:300]
    assert many.svcs["support"].get(review.id).status == "approved"
    changed = {name: svc.store.size() - sizes[name] for name, svc in many.svcs.items()}
    assert changed == {"payments": 0, "support": 1, "ops": 0}


def test_decided_spans_the_logs_newest_first_and_pages_across_them(many: Many, monkeypatch: pytest.MonkeyPatch) -> None:
    import signoff.desk.routes.decided

    monkeypatch.setattr(signoff.desk.routes.decided, "PAGE_SIZE", 3)
    order = []
    for name in ("payments", "support", "payments", "support", "payments", "ops"):
        review = many.open(name)
        who = BOB if name == "ops" else ALICE
        many.svcs[name].approve(review.id, reviewer=who, signer=many.keys[who])
        order.append((name, review.id))
        time.sleep(0.002)  # decided_at apart
    newest_first = [rid for name, rid in reversed(order) if name != "ops"]
    with BrowserClient(_app(many)) as c:
        sign_in(c, ALICE)
        first = c.get("/decided")
        ids = re.findall(r'<tr data-review="(rv_[0-9a-f]+)"', first.text)
        assert ids == newest_first[:3]
        older = re.search(r'href="(/decided\?[^"]*before_at=[^"]+)"', first.text)
        assert older is not None
        second = c.get(older.group(1).replace("&amp;", "&"))
        assert re.findall(r'<tr data-review="(rv_[0-9a-f]+)"', second.text) == newest_first[3:]
        assert f'title="log {many.logs["support"]}">example.org/support<' in first.text


def test_the_latest_decisions_over_the_logs_are_read_without_sorting_every_decision(many: Many) -> None:
    """The "Just decided" panel (and the Decided page) over several logs order the decisions by time, the one
    order the logs share: each log's are read along its (log, decided_at, id) index (revision 0006), not all
    read and sorted after every write (59 ms per log of 50,000 decisions). The work SQLite does for the
    panel must not grow with a log's decisions."""
    if not many.url.startswith("sqlite"):
        pytest.skip("counts SQLite's virtual machine steps; the index is the same on PostgreSQL")

    def decide(n: int) -> None:
        calls = [
            CallSpec(app="payments", user="u", session=f"bulk-{many.n}", invocation=f"bi-{many.n}",
                     confirmation_id=f"bc-{many.n}-{k}", call_id=f"bk-{many.n}-{k}", tool="transfer",
                     args={"amount": k, "to": "acct"})
            for k in range(n)
        ]  # fmt: skip
        many.n += 1
        svc = many.svcs["payments"]
        for review in svc.open_frontier(calls, actor="agent:teller", policies=Policy(role="teller")).reviews:
            svc.approve(review.id, reviewer=ALICE, signer=many.keys[ALICE])

    def panel(c: TestClient) -> int:
        assert c.get("/queue/recent").status_code == 200  # the same read once, so that both are warm
        with vm_steps(Engine) as steps:
            page = c.get("/queue/recent")
        assert page.status_code == 200 and len(re.findall(r"data-review=", page.text)) == 6, page.text[:500]
        return steps[0]

    decide(8)
    with BrowserClient(_app(many)) as c:
        sign_in(c, ALICE)
        few = panel(c)
        decide(400)
        lots = panel(c)
    assert lots <= few * 1.2 + 2, (few, lots)


def test_the_event_stream_spans_the_logs_and_names_each(many: Many) -> None:
    app = _app(many)
    with serving(app) as base:
        client = signed_in(base, "alice@example.org", PASSWORD)
        stream = Stream(client)
        opened = {"payments": many.open("payments"), "support": many.open("support"), "ops": many.open("ops")}
        end = time.monotonic() + 10
        heard: dict[str, str] = {}
        while time.monotonic() < end and len(heard) < 2:
            for name, data in list(stream.events):
                if name == "opened":
                    ev = json.loads(data)
                    heard[ev["review"]] = ev["log"]
            time.sleep(0.05)
        assert heard == {
            opened["payments"].id: many.logs["payments"],
            opened["support"].id: many.logs["support"],
        }  # never ops'
        # Alice disabled on support: her stream ends (she is to reload), and support's reviews leave her queue.
        many.svcs["support"].disable_reviewer(ALICE, reason="moved team", admin=many.admins["support"])
        assert stream.ended.wait(10), "the stream went on after she was disabled on one of its logs"
        page = client.get("/queue")
        assert _queue_ids(page.text) == [opened["payments"].id]
        client.close()


def test_desk_serve_log_serves_those_logs_only(many: Many) -> None:
    mine = [many.open("payments"), many.open("support")]
    with BrowserClient(_app(many, logs=[many.logs["support"]])) as c:
        sign_in(c, ALICE)
        page = c.get("/queue")
        assert _queue_ids(page.text) == [mine[1].id]
        assert 'class="log"' not in page.text  # one log served: no log names on the rows
        assert c.get(f"/reviews/{mine[0].id}").status_code == 404


def test_the_account_page_is_each_logs_own(many: Many) -> None:
    with BrowserClient(_app(many)) as c:
        sign_in(c, ALICE)
        here = c.get("/account")
        assert here.status_code == 200
        assert "example.org/payments" in here.text and f'href="/account?log={many.logs["support"]}"' in here.text
        there = c.get(f"/account?log={many.logs['support']}")
        assert there.status_code == 200 and f'action="/account/tokens?log={many.logs["support"]}"' in there.text
        assert c.get(f"/account?log={many.logs['ops']}").status_code == 404
        assert c.get("/account?log=log_0000000000000000").status_code == 404


def test_a_store_with_many_logs_needs_no_flag_but_each_cli_verb_takes_log(
    many: Many,
) -> None:
    from signoff.desk import cli

    assert cli.main(["reviewer", "list", "--store", many.url, "--log", many.logs["ops"]]) == 0
    assert cli.main(["reviewer", "list", "--store", many.url]) == 2  # which log: it does not guess


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_in_chromium_the_queue_names_each_rows_log_and_takes_new_ones_live(many: Many, browser: Any) -> None:
    """What Alice sees: one queue over payments and support, each row's log named; a call opened on support
    while she looks arrives by itself with its log's name; ops' never does. Desktop and phone screenshots."""
    from browserkit import ARTIFACTS, wait_until

    many.open("payments", tool="transfer_money")
    many.open("support", tool="issue_refund")

    def signed_in_page(base: str, viewport: dict[str, int]) -> Any:
        page = browser.new_context(viewport=viewport).new_page()
        page.goto(base + "/queue")
        page.fill("input[name=email]", "alice@example.org")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url("**/queue")
        page.wait_for_selector("#live[data-state=live]")
        return page

    ARTIFACTS.mkdir(exist_ok=True)
    with serving(_app(many)) as base:
        page = signed_in_page(base, {"width": 1280, "height": 860})
        logs = page.locator("#queue-body tr[data-review] .log")
        assert logs.all_inner_texts() == ["example.org/payments", "example.org/support"]
        live = many.open("support", tool="close_ticket")
        many.open("ops", tool="restart_service")
        row = f'#queue-body tr[data-review="{live.id}"]'
        wait_until(lambda: page.locator(row).count() == 1, what="the new support review in the queue")
        assert page.locator(f"{row} .log").inner_text() == "example.org/support"
        time.sleep(0.5)  # anything else (ops') would have arrived by now
        assert page.locator("#queue-body tr[data-review]").count() == 3
        assert page.locator("#pending-count").inner_text() == "3"
        page.screenshot(path=str(ARTIFACTS / "many-logs-queue-desktop.png"), full_page=True)
        page.context.close()
        phone = signed_in_page(base, {"width": 390, "height": 844})
        assert phone.locator("#queue-body tr[data-review] .log").count() == 3
        phone.screenshot(path=str(ARTIFACTS / "many-logs-queue-phone.png"), full_page=True)
        phone.context.close()


def test_the_log_page_is_each_logs_own(many: Many) -> None:
    many.open("support", tool="issue_refund")
    with BrowserClient(_app(many)) as c:
        sign_in(c, ALICE)
        page = c.get(f"/log?log={many.logs['support']}")
        assert page.status_code == 200
        assert (
            'id="log-switch"' in page.text
            and f'<input type="hidden" name="log" value="{many.logs["support"]}">' in page.text
        )
        assert "issue_refund" in page.text and f'href="/log?log={many.logs["payments"]}"' in page.text
        assert "issue_refund" not in c.get("/log").text  # her session's log (payments) has no such entry
