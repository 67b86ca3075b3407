"""Shared test kit for the desk: enrolled reviewers with passwords and API tokens, an app on
a store, sign-in through the form, and a helper that opens reviews the way the bridge does.

``make_env`` makes a log as ``audit init`` does: by default it requires signed decisions, and the
admin enrolls each reviewer with an Ed25519 key file, which the tests sign decisions with (the
``*_json`` helpers build the API request bodies, ``sig`` included). ``signed=False`` makes a log
that allows unsigned decisions (as ``desk demo`` does), with reviewers who hold no key, for the
page tests that post forms without a passkey. ``sealed=True`` makes a log that keeps the values
beside it (as ``audit init`` does without ``--values-in-entries``); by default the log is what
``audit init`` makes by default,
and the ``*_json`` helpers build the bodies as ``signoff.audit.decision.prepare_*`` do, on either."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jsonpatch  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import event  # noqa: E402

from signoff.audit import CallSpec, Policy, ReviewService, Signer, digest, open_store  # noqa: E402
from signoff.audit import decision as decisions  # noqa: E402
from signoff.audit.keys import read_private_key  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402

ALICE = "human:alice@example.org"  # finance + ops, every tool
BOB = "human:bob@example.org"  # ops only, send_* tools only
CAROL = "human:carol@example.org"  # finance, every tool
OLIVE = "human:olive@example.org"  # observer (env.add_reviewer): reads everything, decides nothing
PASSWORD = "correct horse battery"

SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "to": {"type": "string"}, "memo": {"type": "string"}},
    "required": ["amount", "to"],
}

_n = iter(range(1_000_000))


@dataclass
class Env:
    url: str
    key: Path
    app: Any
    svc: ReviewService
    admin: Signer
    signed: bool = True
    tokens: dict[str, str] = field(default_factory=dict)
    signers: dict[str, Signer] = field(default_factory=dict)  # each reviewer's key file (signed logs)

    @property
    def desk(self) -> Any:
        return self.app.state.desk

    @property
    def sealed(self) -> bool:
        """Whether the log keeps its values beside it (entries hold commitments; desk/reveal.py)."""
        return bool(self.desk.store.rules.sealed_values)

    def open(
        self,
        tool: str = "transfer",
        args: dict[str, Any] | None = None,
        *,
        role: str | None = "finance",
        deadline: float | None = 600,
        payload: Any = None,
        schema: dict[str, Any] | None = SCHEMA,
        hint: str = "Send the money?",
        agent: str = "teller",
        n: int = 1,
        context: dict[str, str] | None = None,
        kind: str = "confirmation",
    ) -> list[Any]:
        """Open one frontier of ``n`` calls (``kind``: ``confirmation``, or ``input``: a question); return
        its reviews."""
        i = next(_n)
        specs = [
            CallSpec(
                app="bank",
                user="u1",
                session=f"s{i}",
                invocation=f"inv{i}",
                confirmation_id=f"conf{i}-{k}",
                call_id=f"call{i}-{k}",
                tool=tool,
                args=args if args is not None else {"amount": 10 + k, "to": "acct-1"},
                hint=hint,
                payload=payload,
                agent=agent,
                node_path=f"{agent}/{tool}",
                context=context if context is not None else {"user": "pay acct-1", "model": "I'll pay."},
                tool_description="Transfer money.",
                tool_schema=schema,
                kind=kind,
            )
            for k in range(n)
        ]
        front = self.svc.open_frontier(
            specs, actor=f"agent:{agent}", policies=Policy(role=role, deadline_seconds=deadline)
        )
        return list(front.reviews)

    def bearer(self, who: str = ALICE) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    # -- API request bodies, signed by the reviewer's key file as a script would -----------------

    def with_sig(self, body: dict[str, Any], who: str, kind: str, entry_body: dict[str, Any]) -> dict[str, Any]:
        if who in self.signers:
            body["sig"] = decisions.sign_decision(self.signers[who], self.desk.store.log_id, kind, who, entry_body)
        return body

    def approve_json(self, review: Any, who: str = ALICE, rationale: str = "", payload: Any = None) -> dict[str, Any]:
        """On a review that needs several people (read fresh: ``svc.get``), the body names its round and
        approves its round's args, as ``audit`` builds it; on a sealed log, over their commitments (with
        the answer's salt beside it)."""
        if getattr(review, "sealed", False):
            prepared = decisions.prepare_approve(review, rationale, payload)
            body = {"rationale": rationale, "payload": payload, "payload_salt": prepared.payload_salt}
            return self.with_sig(body, who, decisions.APPROVED, prepared.body)
        round_, args = _round_of(review)
        entry = decisions.approve_body(review.id, digest(args), rationale, payload, round_)
        return self.with_sig({"rationale": rationale, "payload": payload}, who, decisions.APPROVED, entry)

    def edit_json(
        self, review: Any, patch: list[Any], who: str = ALICE, rationale: str = "", payload: Any = None
    ) -> dict[str, Any]:
        if getattr(review, "sealed", False):
            prepared = decisions.prepare_edit(review, patch, rationale, payload)
            body = {"patch": patch, "rationale": rationale, "payload": payload}
            body.update(salts=prepared.salts, payload_salt=prepared.payload_salt)
            return self.with_sig(body, who, decisions.EDITED, prepared.body)
        round_, args = _round_of(review)
        final = jsonpatch.apply_patch(args, patch)
        entry = decisions.edit_body(review.id, patch, final, rationale, payload, round_)
        return self.with_sig({"patch": patch, "rationale": rationale, "payload": payload}, who, decisions.EDITED, entry)

    def set_policy(self, body: dict[str, Any]) -> Any:
        """``policy.set`` signed with the admin key ``Store.init_log`` wrote."""
        return self.svc.set_policy(body, admin=self.admin)

    def reject_json(self, review: Any, reason: str, who: str = ALICE) -> dict[str, Any]:
        entry = decisions.reject_body(review.id, reason)
        return self.with_sig({"reason": reason}, who, decisions.REJECTED, entry)

    def signer_of(self, who: str) -> Signer | None:
        return self.signers.get(who)

    def add_reviewer(self, who: str, roles: list[str], tools: list[str]) -> None:
        """Enroll one more reviewer (signed by the admin), with a password, an API token and, on a
        signed log, a key file."""
        if self.signed:
            self.signers[who] = Signer.generate()
        public = self.signers[who].public if who in self.signers else None
        self.svc.enroll_reviewer(who, roles=roles, tools=tools, key=public, admin=self.admin)
        self.desk.accounts.set_password(who, PASSWORD, must_change=False)
        self.tokens[who] = self.desk.accounts.new_token(who, "test")


def page_body(
    data: dict[str, Any], kind: str, *, rationale: str = "", payload: Any = None, patch: list[Any] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The decision body desk.js builds from a review page's data (``#review-data``), and the form fields it
    sends beside the signature: on a sealed log the commitments' digest, the sealed patch walked in the
    page's ``order``, the answer's commitment, and the salts (``sealedBody``), as
    ``signoff.audit.decision.prepare_*`` build them."""
    from signoff.audit import sealing
    from signoff.audit.rules import patched_args

    review, round_ = data["id"], data.get("round")
    if not data.get("sealed"):
        if kind == decisions.APPROVED:
            return decisions.approve_body(review, digest(data["args"]), rationale, payload, round_), {}
        final = patched_args(data["args"], patch)
        return decisions.edit_body(review, list(patch or []), final, rationale, payload, round_), {}
    fields: dict[str, str] = {}
    answer = payload
    if payload is not None:
        given = data.get("round_payload_salt")
        salt = bytes.fromhex(given) if given and kind == decisions.APPROVED else sealing.new_salt()  # an edit: fresh
        answer, fields["payload_salt"] = sealing.commit(payload, salt), salt.hex()
    if kind == decisions.APPROVED:
        return decisions.approve_body(review, digest(data["sealed_args"]), rationale, answer, round_), fields
    plain = {name: data["args"][name] for name in data["order"]}
    result = patched_args(plain, patch)
    salts = {name: sealing.new_salt() for name in [*result, sealing.WHOLE]}
    recorded, _kept = sealing.edit_patch(plain, result, data["sealed_args"], data["private"], salts)
    final = patched_args(data["sealed_args"], recorded)
    fields["salts"] = json.dumps({name: salt.hex() for name, salt in salts.items()})
    return decisions.edit_body(review, recorded, final, rationale, answer, round_), fields


def _round_of(review: Any) -> tuple[int | None, dict[str, Any]]:
    """(the round a decision body names, the args it approves): the current round's on a review that needs
    several approvals, (None, the opened args) otherwise."""
    if getattr(review, "approvals_needed", 1) > 1:
        return review.round, dict(review.round_args if review.round_args is not None else review.call.args)
    return None, dict(review.call.args)


class BrowserClient(TestClient):
    """The test client, sending ``Origin`` on every request as a browser does on a POST from the desk's
    own pages (desk/guard.py refuses a state-changing request from elsewhere)."""

    def __init__(self, app: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        if "origin" not in self.headers:
            scheme, rest = str(self.base_url).split("://", 1)
            self.headers["origin"] = f"{scheme}://{rest.split('/', 1)[0]}"


def make_env(url: str, tmp_path: Path, *, signed: bool = True, sealed: bool | None = None) -> Env:
    from signoff.desk.app import create_app

    key = tmp_path / "log.key"
    store = open_store(url)
    if sealed is None:  # as `audit init` makes a log by default
        store.init_log(key, signed_decisions=signed)
    else:
        store.init_log(key, signed_decisions=signed, sealed_values=sealed)
    admin = read_private_key(default_admin_key(key))
    svc = ReviewService(store)
    signers = {who: Signer.generate() for who in (ALICE, BOB, CAROL)} if signed else {}
    for who, roles, tools in (
        (ALICE, ["finance", "ops"], ["*"]),
        (BOB, ["ops"], ["send_*"]),
        (CAROL, ["finance"], ["*"]),
    ):
        public = signers[who].public if who in signers else None
        svc.enroll_reviewer(who, roles=roles, tools=tools, key=public, admin=admin)
    store.close()
    app = create_app(url, key, access_log=False)
    env = Env(url=url, key=key, app=app, svc=app.state.desk.svc, admin=admin, signed=signed, signers=signers)
    for who in (ALICE, BOB, CAROL):
        env.desk.accounts.set_password(who, PASSWORD, must_change=False)
        env.tokens[who] = env.desk.accounts.new_token(who, "test")
    return env


CSRF_RE = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    m = CSRF_RE.search(html)
    assert m, "no CSRF field on the page"
    return m.group(1)


def sign_in(c: TestClient, who: str = ALICE, password: str = PASSWORD) -> str:
    """Sign in through the form; return the session's CSRF token."""
    page = c.get("/signin")
    r = c.post("/signin", data={"csrf": csrf_of(page.text), "email": who.split(":", 1)[1], "password": password})
    assert r.status_code == 200 and r.url.path == "/queue", (r.status_code, r.text[:500])
    return csrf_of(r.text)


@contextmanager
def vm_steps(engine: Any) -> Iterator[list[int]]:
    """The SQLite virtual machine's steps (in hundreds) of the statements run meanwhile on ``engine`` (or on
    every engine: ``sqlalchemy.Engine``): the work a read does, whatever the machine's speed."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0  # go on

    def watch(_conn: Any, cursor: Any, *_args: Any) -> None:
        cursor.connection.set_progress_handler(count, 100)

    def unwatch(_conn: Any, cursor: Any, *_args: Any) -> None:
        cursor.connection.set_progress_handler(None, 0)

    event.listen(engine, "before_cursor_execute", watch)
    event.listen(engine, "after_cursor_execute", unwatch)
    try:
        yield steps
    finally:
        event.remove(engine, "before_cursor_execute", watch)
        event.remove(engine, "after_cursor_execute", unwatch)
