"""A real ``adk api_server`` and the ``signoff resume`` sidecar, driven over real HTTP.

The app (``api_agents/bank``) carries Signoff's plugin; its scripted model proposes
``transfer(amount=5000, to="acct-x")``, which ADK pauses for a confirmation, and every run of the
tool is a line in the side file. The server, the sidecar and the ``audit`` CLI are real processes
sharing one Signoff store and one session database; the decisions are signed with the reviewer's
key. Each test asserts what ran (the side file), the log entries of its session in order, and that
the whole log verifies.

One server (SQLite store, SQLite sessions) serves the module; tests keep to their own sessions.
A sidecar runs only where the test says so. The PostgreSQL case starts its own server and sidecar
on ``DatabaseSessionService`` (``postgresql://``: SQLAlchemy 2.1 picks the async psycopg driver;
``postgresql+asyncpg://`` would need asyncpg, which is not installed). Tests that kill or slow the
server get a deployment of their own (``fresh``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from _support import REVIEWER, REVIEWER_KEY, RUNS_ENV, runs
from conftest import _init, _pg_schema_url, assert_bound

from signoff.audit import ReviewService, Store, open_store
from signoff.audit.keys import write_private_key

pytestmark = pytest.mark.slow

AGENTS = Path(__file__).resolve().parent / "api_agents"
BIN = Path(sys.executable).parent  # the venv's adk, signoff and audit commands
APP, USER = "bank", "u1"
STORE_ENV = "SIGNOFF_TEST_STORE"  # read by api_agents/bank/agent.py, as are the two below
STALL_MESSAGE_ENV = "SIGNOFF_TEST_STALL_MESSAGE"
STALL_TOOL_ENV = "SIGNOFF_TEST_STALL_TOOL"
SLOW_TOOL_ENV = "SIGNOFF_TEST_SLOW_TOOL"
SLOW_SECONDS = 2.0  # as api_agents/bank/agent.py
ASKED = {"amount": 5000, "to": "acct-x"}  # what the scripted model proposes
CONFIRM = "adk_request_confirmation"
TIMEOUT = 60.0

# What a refused confirmation leaves in the server's log (ADK logs the plugin's error, uvicorn the 500).
REFUSAL = re.compile(r"ConfirmationRefused|Error in plugin 'signoff' during 'on_user_message_callback'")
# A line that reports an error: an exception line of a traceback, or a logged error.
ERROR_LINE = re.compile(r"^(Traceback|[\w.]*(Error|Exception|Refused)\b)|\bERROR\b|StaleSession")
BENIGN = re.compile(r"Skipping missing token usage metadata|^signoff: (resuming app|resumed \d+ frontier)")


def wait_until(check: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"expected {what} within {timeout:.0f}s, found it did not happen")
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Proc:
    """One subprocess with its output in a file; stopped (or killed) by its own pid only."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.log = cwd / f"{name}.log"
        self._out = self.log.open("ab")
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self._out, stderr=subprocess.STDOUT)

    def text(self, start: int = 0) -> str:
        return self.log.read_bytes()[start:].decode(errors="replace")

    def size(self) -> int:
        return self.log.stat().st_size

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> float:
        """SIGTERM, then wait; seconds it took to exit."""
        t0 = time.monotonic()
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"{self.name} did not stop within {timeout}s of SIGTERM") from None
        self._out.close()
        return time.monotonic() - t0

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._out.close()


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if ERROR_LINE.search(line.strip()) and not BENIGN.search(line)]


def unexpected_errors(text: str) -> list[str]:
    """Error lines that are not a refused confirmation (the traceback of one is ADK's 500, and expected)."""
    ok = ("Traceback (most recent call last):", "ERROR:    Exception in ASGI application")
    return [line for line in error_lines(text) if not REFUSAL.search(line) and line.strip() not in ok]


@dataclass
class Paused:
    session: str
    confirmation_id: str  # the adk_request_confirmation call's id
    event_id: str  # the id of the event holding it (the dev UI's functionCallEventId)
    invocation: str
    review: str


class Deployment:
    """``adk api_server`` on the test app, one store, one session database, sidecars on demand."""

    def __init__(self, root: Path, store_url: str, sessions_uri: str, **server_env: str) -> None:
        self.root = root
        self.store_url = store_url
        self.sessions_uri = sessions_uri
        self.runs_file = root / "runs.jsonl"
        self.key_file = write_private_key(REVIEWER_KEY, root / "alice.pem")
        # Unbuffered: the tests read the processes' logs (uvicorn's access log goes to stdout) as they go.
        self.env = {**os.environ, STORE_ENV: store_url, RUNS_ENV: str(self.runs_file), "PYTHONUNBUFFERED": "1"}
        for name in (STALL_MESSAGE_ENV, STALL_TOOL_ENV, SLOW_TOOL_ENV):
            self.env.pop(name, None)
        self.store: Store = open_store(store_url, create=False)
        self.reviews = ReviewService(self.store)
        self.sidecars: list[Proc] = []
        self.servers: list[Proc] = []
        self.start_server(**server_env)

    @property
    def server(self) -> Proc:
        return self.servers[-1]

    def start_server(self, **extra_env: str) -> Proc:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        argv = [str(BIN / "adk"), "api_server", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--session_service_uri", self.sessions_uri, "--no-reload", str(AGENTS)]
        self.servers.append(Proc(f"api_server-{len(self.servers)}", argv, {**self.env, **extra_env}, self.root))
        previous = getattr(self, "http", None)
        if previous is not None:
            previous.close()
        # A 500 (a refused confirmation) may leave the connection unusable: one connection per request.
        self.http: httpx.Client = httpx.Client(base_url=self.base, timeout=TIMEOUT, headers={"Connection": "close"})
        wait_until(self._up, "adk api_server to answer GET /list-apps")
        return self.server

    def _up(self) -> bool:
        if not self.server.alive():
            raise AssertionError(f"adk api_server exited: {self.server.text()[-3000:]}")
        try:
            return self.http.get("/list-apps").json() == [APP]
        except httpx.TransportError:
            return False

    def close(self) -> None:
        for sidecar in self.sidecars:
            if sidecar.alive():
                sidecar.stop()
        self.http.close()
        for server in self.servers:
            if server.alive():
                server.stop()
        self.store.close()

    # -- the sidecar and the CLI ------------------------------------------------------------

    def sidecar(
        self,
        *,
        actor: str | None = None,
        once: bool = False,
        env: dict[str, str] | None = None,
        takeover_after: float | None = None,
        expect_refusal: bool = False,
        extra: tuple[str, ...] = (),
    ) -> Proc:
        argv = [str(BIN / "signoff"), "resume", "--agents-dir", str(AGENTS), "--app", "bank.agent:app", *extra]
        argv += ["--sessions", self.sessions_uri, "--max-wait", "0.5"]
        if actor:
            argv += ["--actor", actor]
        if once:
            argv.append("--once")
        if takeover_after is not None:
            argv += ["--takeover-after", str(takeover_after)]
        proc = Proc(f"sidecar-{len(self.sidecars)}", argv, {**self.env, **(env or {})}, self.root)
        self.sidecars.append(proc)
        wait_until(lambda: "signoff: resuming app" in proc.text() or not proc.alive(), "the sidecar to start")
        assert proc.alive() or once or expect_refusal, proc.text()
        return proc

    def audit(self, *args: str) -> dict[str, Any]:
        argv = [str(BIN / "audit"), "--store", self.store_url, *args]
        argv += ["--as", REVIEWER.removeprefix("human:"), "--reviewer-key", str(self.key_file), "--json"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, cwd=self.root, env=self.env)
        assert done.returncode == 0, done.stderr
        out: dict[str, Any] = json.loads(done.stdout)
        return out

    # -- the HTTP API -------------------------------------------------------------------

    def new_session(self) -> str:
        r = self.http.post(f"/apps/{APP}/users/{USER}/sessions", json={})
        assert r.status_code == 200, r.text
        sid: str = r.json()["id"]
        return sid

    def run(self, session: str, message: dict[str, Any], timeout: float = TIMEOUT) -> httpx.Response:
        body = {"appName": APP, "userId": USER, "sessionId": session, "newMessage": message}
        return self.http.post("/run", json=body, timeout=timeout)

    def run_sse(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        r = self.http.post("/run_sse", json=body)
        assert r.status_code == 200, r.text
        return [json.loads(line[len("data:") :]) for line in r.text.splitlines() if line.startswith("data:")]

    def pause(self, *, sse: bool = False) -> Paused:
        """A new session whose first turn pauses on ``transfer`` (through /run, or /run_sse as the dev UI)."""
        sid = self.new_session()
        message = {"role": "user", "parts": [{"text": "pay acct-x"}]}
        if sse:
            events = self.run_sse(dev_ui_body(sid, message))
        else:
            r = self.run(sid, message)
            assert r.status_code == 200, r.text
            events = r.json()
        [event] = [e for e in events if e.get("longRunningToolIds")]
        [call] = [p["functionCall"] for p in event["content"]["parts"] if "functionCall" in p]
        assert call["name"] == CONFIRM and call["args"]["originalFunctionCall"]["args"] == ASKED
        review = wait_until(lambda: self.reviews.find(sid, confirmation_id=call["id"]), "the review opened")
        return Paused(sid, call["id"], event["id"], event["invocationId"], review.id)

    def events(self, session: str) -> list[dict[str, Any]]:
        r = self.http.get(f"/apps/{APP}/users/{USER}/sessions/{session}")
        assert r.status_code == 200, r.text
        events: list[dict[str, Any]] = r.json()["events"]
        return events

    # -- what happened ------------------------------------------------------------------

    def ran(self, session: str) -> list[dict[str, Any]]:
        return [r for r in runs(self.runs_file) if r.get("session") == session]

    def answers(self, session: str) -> list[dict[str, Any]]:
        """The user events in the session that answer a confirmation."""
        return [
            e
            for e in self.events(session)
            if e["author"] == "user"
            for p in (e.get("content") or {}).get("parts") or []
            if (p.get("functionResponse") or {}).get("name") == CONFIRM
        ]

    def finals(self, session: str) -> list[str]:
        """The model's closing texts (the scripted model says "done: <tool results>")."""
        return [
            p["text"]
            for e in self.events(session)
            for p in (e.get("content") or {}).get("parts") or []
            if p.get("text", "").startswith("done:")
        ]

    def log_of(self, session: str, *, replies: bool = False) -> list[tuple[str, str]]:
        """The log entries of this session's reviews, in order: (kind, ``via`` if any, else the actor);
        the agent's reply after a resume (``run.replied``, written when the resumed run ends) only
        with ``replies``."""
        reviews: set[str] = set()
        frontiers: set[str] = set()
        out = []
        for entry in self.store.entries():
            body = entry.body
            if entry.kind == "review.opened" and body["call"]["session"] == session:
                reviews.add(body["review"])
                frontiers.add(body["frontier"])
            if entry.kind == "run.replied" and not replies:
                continue
            if body.get("review") in reviews or body.get("frontier") in frontiers:
                out.append((entry.kind, str(body.get("via") or entry.actor)))
        return out

    def executed(self, review: str) -> bool:
        return self.reviews.get(review).executed


def confirmation(paused: Paused, response: dict[str, Any]) -> dict[str, Any]:
    """The user message answering the pause (what an API client sends)."""
    part = {"functionResponse": {"id": paused.confirmation_id, "name": CONFIRM, "response": response}}
    return {"role": "user", "parts": [part]}


def dev_ui_body(session: str, message: dict[str, Any], *, call_event_id: str | None = None) -> dict[str, Any]:
    """The body ``adk web``'s page posts to /run_sse (its sendMessage: streaming off, no state edits)."""
    body: dict[str, Any] = {
        "appName": APP,
        "userId": USER,
        "sessionId": session,
        "newMessage": message,
        "streaming": False,
        "stateDelta": None,
    }
    if call_event_id is not None:
        body["functionCallEventId"] = call_event_id
    return body


def dev_ui_confirmation(paused: Paused, *, confirmed: bool, payload: Any) -> dict[str, Any]:
    """What the page posts when the person submits its confirmation form for ``paused``."""
    return dev_ui_body(
        paused.session,
        confirmation(paused, {"confirmed": confirmed, "payload": payload}),
        call_event_id=paused.event_id,
    )


def opened_and(*rest: tuple[str, str]) -> list[tuple[str, str]]:
    return [("review.opened", "agent:teller"), *rest]


EXECUTED = ("tool.executed", "agent:teller")


def assert_clean(proc: Proc, start: int = 0) -> None:
    bad = unexpected_errors(proc.text(start))
    assert not bad, f"{proc.name}: unexpected errors:\n" + "\n".join(bad)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("api_server")
    url = _init(f"sqlite:///{root / 'signoff.db'}", root / "log.key")
    deployment = Deployment(root, url, f"sqlite:///{root / 'sessions.db'}")
    try:
        yield deployment
    finally:
        deployment.close()


@pytest.fixture
def dep(sqlite_deployment: Deployment) -> Iterator[Deployment]:
    """The module's deployment; the test's sidecars are stopped after it and, like the server's log
    from the test's start, must show no error but refused confirmations; the log must verify."""
    start = sqlite_deployment.server.size()
    sidecars = len(sqlite_deployment.sidecars)
    yield sqlite_deployment
    for sidecar in sqlite_deployment.sidecars[sidecars:]:
        if sidecar.alive():
            sidecar.stop()
        assert_clean(sidecar)
    assert_clean(sqlite_deployment.server, start)
    assert_bound(sqlite_deployment.store)


# -- the tests ----------------------------------------------------------------------------------


def test_cli_edit_then_sidecar_runs_the_edited_call_once(dep: Deployment) -> None:
    sidecar = dep.sidecar()
    paused = dep.pause()
    assert dep.ran(paused.session) == []
    decided = dep.audit("edit", paused.review, "amount=50", "--rationale", "cap it")
    assert decided["status"] == "edited" and decided["final_args"] == {"amount": 50, "to": "acct-x"}

    wait_until(lambda: dep.finals(paused.session), "the resumed run to finish")
    assert [r["args"] for r in dep.ran(paused.session)] == [{"amount": 50, "to": "acct-x"}]
    assert [r["pid"] for r in dep.ran(paused.session)] == [sidecar.proc.pid]  # the sidecar's runner ran it
    assert dep.log_of(paused.session) == opened_and(("review.edited", REVIEWER), ("run.resumed", "resumer"), EXECUTED)
    replied = ("run.replied", "agent:signoff-resumer-bank")  # the agent's next words, for the people who decided
    wait_until(lambda: replied in dep.log_of(paused.session, replies=True), "the reply to be recorded")
    assert len(dep.answers(paused.session)) == 1
    assert '"amount": 50' in dep.finals(paused.session)[0]


def test_client_confirm_before_the_decision_is_refused_then_the_sidecar_resumes(dep: Deployment) -> None:
    sidecar = dep.sidecar()
    paused = dep.pause()
    start = dep.server.size()
    r = dep.run(paused.session, confirmation(paused, {"confirmed": True}))
    assert r.status_code == 500, r.text  # ADK answers a plugin's error with a bare 500; the reason is logged
    assert "still pending" in dep.server.text(start)
    assert dep.answers(paused.session) == []  # nothing stored: the call is still paused
    assert dep.ran(paused.session) == []
    assert dep.log_of(paused.session) == opened_and()

    dep.audit("approve", paused.review)
    wait_until(lambda: dep.finals(paused.session), "the sidecar's resumed run to finish")
    assert [(r["args"], r["pid"]) for r in dep.ran(paused.session)] == [(ASKED, sidecar.proc.pid)]
    assert dep.log_of(paused.session) == opened_and(("review.approved", REVIEWER), ("run.resumed", "resumer"), EXECUTED)
    assert len(dep.answers(paused.session)) == 1


ROUNDS = 4


def test_client_confirm_after_the_decision_races_the_serving_sidecar(dep: Deployment) -> None:
    """The decision wakes the sidecar while the client's confirmation is on its way: one of them claims
    the frontier, the other is refused; one run, one ``run.resumed`` before ``tool.executed``."""
    sidecar = dep.sidecar()
    time.sleep(0.3)  # let it reach its wait, so the decision wakes it
    server_start, sidecar_start = dep.server.size(), sidecar.size()
    winners = []
    for _ in range(ROUNDS):
        paused = dep.pause()
        dep.reviews.approve(paused.review, reviewer=REVIEWER, signer=REVIEWER_KEY)
        r = dep.run(paused.session, confirmation(paused, {"confirmed": True}))
        assert r.status_code in (200, 500), r.text
        winner = "client:u1" if r.status_code == 200 else "resumer"
        winners.append(winner)
        wait_until(functools.partial(dep.finals, paused.session), "the resumed run to finish")
        assert [x["args"] for x in dep.ran(paused.session)] == [ASKED]
        assert dep.log_of(paused.session) == opened_and(
            ("review.approved", REVIEWER), ("run.resumed", winner), EXECUTED
        )
        assert len(dep.answers(paused.session)) == 1
        assert len(dep.finals(paused.session)) == 1
    print("claimed by:", winners)
    time.sleep(0.5)  # anything late would show now
    assert_clean(sidecar, sidecar_start)
    server_log = dep.server.text(server_start)
    assert "StaleSession" not in server_log + sidecar.text(sidecar_start)
    assert_clean(dep.server, server_start)
    assert server_log.count('"POST /run HTTP/1.1" 500') == winners.count("resumer"), server_log


def test_client_confirm_after_a_rejection_never_runs_the_tool(dep: Deployment) -> None:
    paused = dep.pause()
    dep.audit("reject", paused.review, "--reason", "wrong account")
    r = dep.run(paused.session, confirmation(paused, {"confirmed": True}))
    assert r.status_code == 200, r.text
    assert any("wrong account" in text for text in dep.finals(paused.session))  # the model read the reason
    assert dep.ran(paused.session) == []
    assert dep.log_of(paused.session) == opened_and(("review.rejected", REVIEWER), ("run.resumed", "client:u1"))
    # A sidecar started now finds nothing to resume: the client's message was the one resume.
    sidecar = dep.sidecar(once=True)
    sidecar.proc.wait(TIMEOUT)
    assert "resumed 0 frontier(s)" in sidecar.text()
    assert dep.ran(paused.session) == []
    assert len(dep.log_of(paused.session)) == 3


@pytest.mark.parametrize("where", ["after_claim", "in_tool"])
def test_sidecar_killed_mid_resume_then_restarted_runs_the_tool_once(dep: Deployment, where: str) -> None:
    """SIGKILL the sidecar where it stalls: right after its claim (the message held before ADK stores
    it), or inside the tool (the answer stored, the tool entered and not done); a restart under the
    same actor finishes the resume, and the tool runs to completion once."""
    actor = f"agent:sidecar-crashy-{where}"
    marker = dep.root / f"stalled-{where}"
    stall = {STALL_MESSAGE_ENV if where == "after_claim" else STALL_TOOL_ENV: str(marker)}
    first = dep.sidecar(actor=actor, env=stall)
    paused = dep.pause()
    dep.audit("approve", paused.review)
    wait_until(marker.exists, f"the sidecar to stall {where}")
    claimed = opened_and(("review.approved", REVIEWER), ("run.resumed", "resumer"))
    assert dep.log_of(paused.session) == claimed
    assert [e.actor for e in dep.store.entries(kind="run.resumed") if e.body["session"] == paused.session] == [actor]
    first.kill9()
    assert dep.ran(paused.session) == [] and not dep.executed(paused.review)
    assert len(dep.answers(paused.session)) == (0 if where == "after_claim" else 1)

    second = dep.sidecar(actor=actor)
    wait_until(lambda: dep.executed(paused.review), "the restarted sidecar to run the tool")
    wait_until(lambda: dep.finals(paused.session), "the resumed run to finish")
    [ran] = dep.ran(paused.session)
    assert (ran["args"], ran["pid"]) == (ASKED, second.proc.pid)
    assert dep.log_of(paused.session) == [*claimed, EXECUTED]  # still one claim
    assert len(dep.finals(paused.session)) == 1
    # One answer per pause: after a kill inside the tool the restart drives the run again with no new
    # message, and ADK takes up the answer the killed run left stored.
    assert len(dep.answers(paused.session)) == 1
    if where == "in_tool":
        # The tool was entered twice (once killed before any effect), under one idempotency key.
        [stalled] = [json.loads(line) for line in marker.read_text().splitlines()]
        assert (stalled["pid"], stalled["key"]) == (first.proc.pid, ran["key"])
    second.stop()
    third = dep.sidecar(actor=actor, once=True)  # and a later restart sends nothing again
    third.proc.wait(TIMEOUT)
    assert "resumed 0 frontier(s)" in third.text(), third.text()
    assert len(dep.ran(paused.session)) == 1


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Callable[..., Deployment]]:
    """``fresh(**server_env)``: a deployment of its own (SQLite), for a test that kills or slows its server."""
    made: list[Deployment] = []

    def make(**server_env: str) -> Deployment:
        url = _init(f"sqlite:///{tmp_path / 'signoff.db'}", tmp_path / "log.key")
        made.append(Deployment(tmp_path, url, f"sqlite:///{tmp_path / 'sessions.db'}", **server_env))
        return made[-1]

    yield make
    for deployment in made:
        deployment.close()


@pytest.mark.parametrize("how", ["server_killed", "client_disconnected"])
def test_a_client_claimed_resume_whose_run_died_still_runs_the_tool_once(
    fresh: Callable[..., Deployment], tmp_path: Path, how: str
) -> None:
    """The client's confirmation after the decision is claimed by the guard in the server, stored, and
    the tool entered; then the run dies before the tool finishes: the server is killed (SIGKILL, then
    restarted), or the client gives up waiting (ADK aborts the run of a disconnected /run). With the
    sidecar serving, the approved call should still run once."""
    marker = tmp_path / "entered"
    d = fresh(**{STALL_TOOL_ENV if how == "server_killed" else SLOW_TOOL_ENV: str(marker)})
    paused = d.pause()
    d.reviews.approve(paused.review, reviewer=REVIEWER, signer=REVIEWER_KEY)
    message = confirmation(paused, {"confirmed": True})
    if how == "server_killed":
        client = threading.Thread(target=lambda: _quietly(d.run, paused.session, message))
        client.start()
        wait_until(marker.exists, "the server's tool to stall")
        d.server.kill9()
        client.join(TIMEOUT)
        d.start_server()
    else:
        with pytest.raises(httpx.ReadTimeout):
            d.run(paused.session, message, timeout=SLOW_SECONDS / 4)
        wait_until(lambda: "Aborting agent run" in d.server.text(), "ADK to abort the disconnected run")
        time.sleep(SLOW_SECONDS)
    assert marker.exists() and not d.executed(paused.review) and d.ran(paused.session) == []
    assert d.log_of(paused.session) == opened_and(("review.approved", REVIEWER), ("run.resumed", "client:u1"))
    assert len(d.answers(paused.session)) == 1  # stored, not consumed

    d.sidecar(takeover_after=2)  # (the default is 600 s: longer than the slowest tool runs)
    retried = d.run(paused.session, message)  # the client trying again: refused, "already resumed"
    assert retried.status_code == 500
    wait_until(lambda: d.executed(paused.review), "the approved call to run after all", timeout=15)
    assert [r["args"] for r in d.ran(paused.session)] == [ASKED]


def test_a_re_drive_while_the_client_claimed_tool_runs_does_not_run_it_twice(
    fresh: Callable[..., Deployment], tmp_path: Path
) -> None:
    """Client A's confirmation (after the decision) is claimed and its tool is running (slowly); client
    B posts ``/run`` with the invocation id and no message (ADK's resume of an invocation, which no
    ``on_user_message_callback`` sees). B must be refused; the tool must run once."""
    marker = tmp_path / "entered"
    d = fresh(**{SLOW_TOOL_ENV: str(marker)})
    paused = d.pause()
    d.reviews.approve(paused.review, reviewer=REVIEWER, signer=REVIEWER_KEY)
    answered: list[int] = []
    client_a = threading.Thread(
        target=lambda: answered.append(d.run(paused.session, confirmation(paused, {"confirmed": True})).status_code)
    )
    client_a.start()
    wait_until(marker.exists, "client A's tool to start")
    b = d.http.post(
        "/run", json={"appName": APP, "userId": USER, "sessionId": paused.session, "invocationId": paused.invocation}
    )
    client_a.join(TIMEOUT)
    assert answered == [200], d.server.text()[-4000:]
    assert [r["args"] for r in d.ran(paused.session)] == [ASKED], f"B answered {b.status_code}"
    assert d.log_of(paused.session) == opened_and(("review.approved", REVIEWER), ("run.resumed", "client:u1"), EXECUTED)
    assert "StaleSession" not in d.server.text()


def test_a_second_sidecar_does_not_run_a_call_the_first_is_running(
    fresh: Callable[..., Deployment], tmp_path: Path
) -> None:
    """Sidecar A (default actor) claims and is inside the tool; sidecar B starts with the default actor
    too. B must leave A's claim alone while A lives (or refuse to start): the tool is not entered twice."""
    marker = tmp_path / "entered"
    d = fresh()
    first = d.sidecar(env={STALL_TOOL_ENV: str(marker)})
    paused = d.pause()
    d.reviews.approve(paused.review, reviewer=REVIEWER, signer=REVIEWER_KEY)
    wait_until(marker.exists, "sidecar A to be inside the tool")
    second = d.sidecar(expect_refusal=True)
    wait_until(lambda: not second.alive(), "sidecar B to refuse to start")
    try:
        assert second.proc.returncode == 2 and "give each its own --actor" in second.text()
        assert d.ran(paused.session) == [], "sidecar B ran the call that sidecar A is running"
    finally:
        first.kill9()


def test_a_live_sidecar_slower_than_takeover_after_is_not_taken_over(
    fresh: Callable[..., Deployment], tmp_path: Path
) -> None:
    """Sidecar A claims and holds the message past ``--takeover-after`` (stalled after its claim, before
    ADK stores it: a sender slower than the setting). Sidecar B, with its own actor and
    ``--takeover-after 1``, leaves it alone while A lives, because A holds the frontier's resume lease.
    Once A is killed, B takes it over at once (A's process is gone from this machine), and the tool runs
    once, in B, with the signed args, under A's one claim."""
    marker = tmp_path / "claimed"
    d = fresh()
    first = d.sidecar(actor="agent:sidecar-a", env={STALL_MESSAGE_ENV: str(marker)})
    paused = d.pause()
    d.reviews.approve(paused.review, reviewer=REVIEWER, signer=REVIEWER_KEY)
    wait_until(marker.exists, "sidecar A to claim and hold the message")
    second = d.sidecar(actor="agent:sidecar-b", takeover_after=1, extra=("--verbose",))
    refused = "not sent again here (take over): held by"
    wait_until(lambda: refused in second.text() or d.ran(paused.session), "sidecar B to look at the claim")
    time.sleep(3.0)  # several more looks, each 1 s or more after the claim
    assert d.ran(paused.session) == [] and not d.executed(paused.review), "B ran a call A still holds"
    first.kill9()
    killed = time.monotonic()
    wait_until(lambda: d.executed(paused.review), "sidecar B to take the call over", timeout=15)
    took = time.monotonic() - killed
    [ran] = d.ran(paused.session)
    assert (ran["args"], ran["pid"]) == (ASKED, second.proc.pid)
    assert [e.actor for e in d.store.entries(kind="run.resumed") if e.body["session"] == paused.session] == [
        "agent:sidecar-a"
    ]
    assert took < 10, f"taken over {took:.1f} s after the kill: it waited for the lease to lapse"
    second.stop()


def _quietly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; a transport error (the server was killed under it) is an outcome, not a failure."""
    with contextlib.suppress(httpx.TransportError):
        return fn(*args, **kwargs)
    return None


def test_dev_ui_confirmation_is_refused_before_the_decision_and_runs_the_logged_one_after(
    dep: Deployment,
) -> None:
    """``adk web``'s confirm form: POST /run_sse with functionCallEventId, ``confirmed`` ticked and the
    payload box as it opens (the original args). Refused while pending (an SSE error event, since the
    stream has started: the status is 200); once edited, the edited args run, whatever the payload."""
    paused = dep.pause(sse=True)
    ui_says = dev_ui_confirmation(paused, confirmed=True, payload=dict(ASKED))
    refused = dep.run_sse(ui_says)
    assert [set(e) for e in refused] == [{"error", "error_details"}]
    assert "still pending" in refused[0]["error"]
    assert dep.answers(paused.session) == [] and dep.ran(paused.session) == []

    dep.reviews.edit(
        paused.review,
        reviewer=REVIEWER,
        signer=REVIEWER_KEY,
        patch=[{"op": "replace", "path": "/amount", "value": 75}],
    )
    events = dep.run_sse(ui_says)
    assert not [e for e in events if "error" in e], events
    assert [r["args"] for r in dep.ran(paused.session)] == [{"amount": 75, "to": "acct-x"}]
    assert dep.log_of(paused.session) == opened_and(("review.edited", REVIEWER), ("run.resumed", "client:u1"), EXECUTED)
    stored = dep.answers(paused.session)
    assert len(stored) == 1  # what ADK stored is the logged decision, not the page's payload
    [part] = stored[0]["content"]["parts"]
    assert part["functionResponse"]["response"]["payload"]["args"] == {"amount": 75, "to": "acct-x"}

    # "Send another response" from the page: refused, nothing runs again.
    again = dep.run_sse(dev_ui_confirmation(paused, confirmed=True, payload=dict(ASKED)))
    assert len(again) == 1 and "already resumed" in again[0]["error"]
    assert len(dep.ran(paused.session)) == 1


def test_dev_ui_shows_where_to_decide_and_that_nothing_was_consumed(fresh: Callable[..., Deployment]) -> None:
    """Issue 21: in ``adk web`` the pause event's metadata (its event view) links to the review in the desk
    and says it is pending; answering the confirmation form while it is pending gets one message naming
    that link and saying nothing was consumed, and indeed nothing is stored or run."""
    d = fresh(SIGNOFF_DESK_URL="http://desk.example.test:8080/")
    sid = d.new_session()
    events = d.run_sse(dev_ui_body(sid, {"role": "user", "parts": [{"text": "pay acct-x"}]}))
    [pause] = [e for e in events if e.get("longRunningToolIds")]
    [call] = [p["functionCall"] for p in pause["content"]["parts"] if "functionCall" in p]
    stamp = pause["customMetadata"]["signoff"]
    review = stamp["reviews"][call["id"]]
    link = f"http://desk.example.test:8080/reviews/{review}"
    assert stamp["state"] == "pending" and stamp["links"] == {call["id"]: link}
    paused = Paused(sid, call["id"], pause["id"], pause["invocationId"], review)
    refused = d.run_sse(dev_ui_confirmation(paused, confirmed=True, payload=dict(ASKED)))
    [said] = [e["error"] for e in refused]
    assert "still pending" in said and f"at {link}" in said and "Nothing was consumed" in said, said
    assert d.answers(sid) == [] and d.ran(sid) == []


def test_a_rewound_run_is_recorded_by_signoff_resume_once_and_never_resumed(fresh: Callable[..., Deployment]) -> None:
    """The report of issue 21, as it was tried: the pause approved, the run rewound past it (ADK's
    ``Runner.rewind_async`` on the server's session database), then ``signoff resume --once`` in its own
    process. It writes ``run.rewound``, not ``run.resumed``; prints no traceback; the tool never runs;
    the review's decision is refused afterwards; ``audit verify`` passes."""
    import asyncio

    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    d = fresh()
    paused = d.pause()
    d.reviews.approve(paused.review, reviewer=REVIEWER, signer=REVIEWER_KEY)

    async def rewind() -> None:
        # (adk api_server serves a sqlite:/// URI with its SqliteSessionService)
        service = SqliteSessionService(db_path=d.sessions_uri.removeprefix("sqlite:///"))
        runner = Runner(app_name=APP, agent=LlmAgent(name="teller"), session_service=service)
        await runner.rewind_async(
            user_id=USER, session_id=paused.session, rewind_before_invocation_id=paused.invocation
        )
        await service.close()

    asyncio.run(rewind())
    once = d.sidecar(once=True)
    wait_until(lambda: not once.alive(), "signoff resume --once to end", timeout=TIMEOUT)
    out = once.text()
    assert "Traceback" not in out and "resumed 0 frontier(s)" in out, out
    assert d.log_of(paused.session) == opened_and(
        ("review.approved", REVIEWER), ("run.rewound", "agent:signoff-resumer-bank")
    )
    assert d.ran(paused.session) == []
    assert "rewound" in d.reviews.get(paused.review).resume_failed
    verified = subprocess.run(
        [str(BIN / "audit"), "--store", d.store_url, "verify"],
        capture_output=True,
        text=True,
        env=d.env,
        timeout=TIMEOUT,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.fixture
def pg_deployment(tmp_path: Path) -> Iterator[Deployment]:
    """Its own server and store on PostgreSQL: the sessions (``DatabaseSessionService``) and the Signoff
    store share one fresh schema, named in the URL (``options=-csearch_path=…``)."""
    for url in _pg_schema_url():
        _init(url, tmp_path / "log.key")
        deployment = Deployment(tmp_path, url, url)  # postgresql://: SQLAlchemy 2.1's default is async psycopg
        try:
            yield deployment
        finally:
            deployment.close()


@pytest.mark.postgres
def test_postgres_sessions_refused_early_then_cli_edit_and_sidecar(pg_deployment: Deployment) -> None:
    """``--session_service_uri postgresql://…``: the early confirmation stores nothing in the database
    session; the CLI edit wakes the sidecar (LISTEN/NOTIFY) and runs once."""
    pg = pg_deployment
    sidecar = pg.sidecar()
    paused = pg.pause()
    r = pg.run(paused.session, confirmation(paused, {"confirmed": True}))
    assert r.status_code == 500, r.text
    assert pg.answers(paused.session) == [] and pg.ran(paused.session) == []
    pg.audit("edit", paused.review, "amount=60")
    wait_until(functools.partial(pg.finals, paused.session), "the sidecar's resumed run to finish")
    assert [(r["args"], r["pid"]) for r in pg.ran(paused.session)] == [
        ({"amount": 60, "to": "acct-x"}, sidecar.proc.pid)
    ]
    assert pg.log_of(paused.session) == opened_and(("review.edited", REVIEWER), ("run.resumed", "resumer"), EXECUTED)
    assert len(pg.answers(paused.session)) == 1
    sidecar.stop()
    assert_clean(sidecar)
    assert_clean(pg.server)
    assert_bound(pg.store)


# -- a supervisor restarting the sidecar, with a database writer at work (issue 17) -------------------

SKEW_ENV = "SIGNOFF_TEST_SKEW"  # read by api_agents/bank/agent.py


def _sql(url: str, statement: str, *params: Any) -> None:
    """Plain SQL behind the service's back (``?`` placeholders), on either backend."""
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute(statement, params)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement.replace("?", "%s"), params)


def _supervised(d: Deployment, tmp_path: Path) -> None:
    """Every tampering in place, then `signoff resume --once` restarted 10 times by a loop (a supervisor):
    each signed call runs at most once, each honest frontier exactly once, and no pass prints a traceback."""
    actor = "agent:supervised"
    skew = tmp_path / "skew.txt"
    rewritten = d.pause()  # approved, then its row's final_digest rewritten before it runs
    d.audit("approve", rewritten.review)
    _sql(d.store_url, "UPDATE signoff_review SET final_digest = ? WHERE id = ?", "sha256:" + "0" * 64, rewritten.review)
    forged = d.pause()  # pending on the log; its rows say decided
    frontier = d.reviews.get(forged.review).frontier
    edited = "UPDATE signoff_review SET status = 'edited', decided_seq = opened_seq WHERE id = ?"
    _sql(d.store_url, edited, forged.review)
    _sql(d.store_url, "UPDATE signoff_frontier SET open_count = 0 WHERE id = ?", frontier)
    skewed = d.pause()  # a plugin after Signoff's changes its args: its tool.executed is refused
    skew.write_text(skewed.session + "\n")
    d.audit("approve", skewed.review)
    honest = [d.pause() for _ in range(2)]
    for paused in honest:
        d.audit("approve", paused.review)
    codes = []
    for _ in range(10):
        proc = d.sidecar(actor=actor, once=True, env={SKEW_ENV: str(skew)})
        proc.proc.wait(TIMEOUT)
        codes.append(proc.proc.returncode)
        text = proc.text()
        assert "Traceback" not in text, text
        assert f"frontier {frontier}" in text, text  # a log line names the frontier it could not resume
    assert codes == [1] * 10  # every pass: one frontier could not be resumed (documented exit code 1)
    assert [r["args"] for r in d.ran(rewritten.session)] == [ASKED]
    assert d.ran(forged.session) == []
    assert [r["args"]["amount"] for r in d.ran(skewed.session)] == [ASKED["amount"] + 1]  # once, and never again
    for paused in honest:
        assert [r["args"] for r in d.ran(paused.session)] == [ASKED]
    failed = [e.body for e in d.store.entries(kind="run.resume_failed")]
    assert [b["reviews"] for b in failed] == [[skewed.review]]
    resumed = [e.body["frontier"] for e in d.store.entries(kind="run.resumed")]
    assert frontier not in resumed and len(resumed) == len(set(resumed)) == 4
    done = subprocess.run(
        [str(BIN / "audit"), "--store", d.store_url, "verify"],
        capture_output=True, text=True, env=d.env, timeout=TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 1 and "projection of review" in done.stderr, done.stderr


def test_sidecar_restarted_by_a_supervisor_with_the_database_tampered(
    fresh: Callable[..., Deployment], tmp_path: Path
) -> None:
    _supervised(fresh(), tmp_path)


@pytest.mark.postgres
def test_sidecar_restarted_by_a_supervisor_with_the_database_tampered_postgres(
    pg_deployment: Deployment, tmp_path: Path
) -> None:
    _supervised(pg_deployment, tmp_path)


def test_the_sidecar_publishes_checkpoints_with_the_log_key(fresh: Callable[..., Deployment], tmp_path: Path) -> None:
    """`signoff resume --log-key log.key --checkpoint-every S`: the resumer makes the log's C2SP checkpoints
    (and would push them to its witnesses); without the key the flag is refused."""
    d = fresh()
    refused = d.sidecar(once=True, extra=("--checkpoint-every", "1"), expect_refusal=True)
    refused.proc.wait(TIMEOUT)
    assert refused.proc.returncode == 2 and "--checkpoint-every: expected the log key" in refused.text()
    paused = d.pause()
    d.audit("approve", paused.review)
    sidecar = d.sidecar(extra=("--log-key", str(tmp_path / "log.key"), "--checkpoint-every", "0.2"))
    wait_until(lambda: d.executed(paused.review), "the tool to run")
    wait_until(
        lambda: (p := d.store.latest_checkpoint()) is not None and p.size > d.reviews.get(paused.review).opened_seq,
        "a checkpoint made by the sidecar",
    )
    sidecar.stop()
    point = d.store.latest_checkpoint()
    assert point is not None and point.note.startswith(d.store.rules.origin + "\n")
