"""Shared test kit for the desk: enrolled reviewers with passwords and API tokens, an app on
a store, sign-in through the form, and a helper that opens reviews the way the bridge does.

``make_env`` makes a log as ``audit init`` does: by default it requires signed decisions, and the
admin enrolls each reviewer with an Ed25519 key file, which the tests sign decisions with (the
``*_json`` helpers build the API request bodies, ``sig`` included). ``signed=False`` makes a log
that allows unsigned decisions (as ``desk demo`` does), with reviewers who hold no key, for the
page tests that post forms without a passkey."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jsonpatch  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

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
    ) -> list[Any]:
        """Open one frontier of ``n`` calls; return its reviews."""
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
        approves its round's args, as ``audit`` builds it."""
        round_, args = _round_of(review)
        entry = decisions.approve_body(review.id, digest(args), rationale, payload, round_)
        return self.with_sig({"rationale": rationale, "payload": payload}, who, decisions.APPROVED, entry)

    def edit_json(
        self, review: Any, patch: list[Any], who: str = ALICE, rationale: str = "", payload: Any = None
    ) -> dict[str, Any]:
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


def make_env(url: str, tmp_path: Path, *, signed: bool = True) -> Env:
    from signoff.desk.app import create_app

    key = tmp_path / "log.key"
    store = open_store(url)
    store.init_log(key, signed_decisions=signed)
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
