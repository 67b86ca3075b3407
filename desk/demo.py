"""``desk demo``: the desk on a local SQLite log, with an offline scripted ADK agent in the
same process that keeps proposing gated calls and resumes as people decide.

The agent is a real ADK 2 ``LlmAgent`` behind the bridge's ``SignoffPlugin``; only the model is
scripted (no network). Its tools print a line and append one JSON line to ``tool-runs.jsonl``
in the demo directory, so you (and the browser tests) can see each tool run as decided.

Scenarios come from a built-in rotation (every ``--interval`` seconds) and from an inbox file
(``inbox.jsonl`` in the demo directory): every JSON line appended there,
``{"prompt": "...", "say": "...", "calls": [{"name": "...", "args": {...}}, ...]}``, starts one run
at once. More than one call in a scenario pauses them together: one frontier.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

log = logging.getLogger("desk.demo")

DEMO_REVIEWER = "human:demo@signoff.local"
APP_NAME = "signoff_demo"
USER = "demo-user"

ROTATION: list[dict[str, Any]] = [
    {
        "prompt": "Pay invoice #1042 from ACME GmbH, it's due today.",
        "say": "Invoice #1042 is EUR 1,250.00 to ACME GmbH. I'll transfer it now.",
        "calls": [
            {
                "name": "transfer_money",
                "args": {
                    "amount": 1250.0,
                    "currency": "EUR",
                    "to_account": "DE89 3704 0044 0532 0130 00",
                    "memo": "Invoice 1042",
                },
            }
        ],
    },
    {
        "prompt": "Tell Dana the Q3 numbers are final.",
        "say": "I'll e-mail Dana.",
        "calls": [
            {
                "name": "send_email",
                "args": {
                    "to": "dana@example.com",
                    "subject": "Q3 numbers are final",
                    "body": "Hi Dana,\n\nthe Q3 numbers are final and in the shared folder.\n\nBest",
                },
            }
        ],
    },
    {
        "prompt": "Customer 7781 asked us to erase their data (GDPR).",
        "say": "Deleting customer 7781's record as requested.",
        "calls": [{"name": "delete_record", "args": {"table": "customers", "record_id": "7781"}}],
    },
    {
        "prompt": "Raise the card limit on account ACC-204.",
        "say": "The tool will ask which daily limit to set.",
        "calls": [{"name": "set_daily_limit", "args": {"account": "ACC-204"}}],
    },
    {
        "prompt": "Set up the standing order for the new office lease.",
        "say": "I need to know which account pays the rent.",
        "calls": [
            {
                "name": "adk_request_input",
                "args": {
                    "message": "Which account should pay the office rent, and from which month?",
                    "response_schema": {
                        "type": "object",
                        "properties": {"account": {"type": "string"}, "first_month": {"type": "string"}},
                    },
                },
            }
        ],
    },
    {
        "prompt": "Refund order 5512 and let the customer know.",
        "say": "Two steps: refund EUR 89.90 and send the customer an e-mail.",
        "calls": [
            {
                "name": "transfer_money",
                "args": {
                    "amount": 89.9,
                    "currency": "EUR",
                    "to_account": "NL91 ABNA 0417 1643 00",
                    "memo": "Refund order 5512",
                },
            },
            {
                "name": "send_email",
                "args": {
                    "to": "customer5512@example.net",
                    "subject": "Your refund",
                    "body": "We refunded EUR 89.90 for order 5512.",
                },
            },
        ],
    },
]


# -- the scripted model ------------------------------------------------------------------


def _make_llm_class() -> Any:
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class DemoLlm(BaseLlm):
        """Turn 0: the scenario's text and function calls. Later turns: a summary of the results."""

        model: str = "scripted-demo"
        scenarios: dict[str, dict[str, Any]] = {}

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            turn = sum(1 for c in llm_request.contents if c.role == "model")
            prompt = ""
            for c in llm_request.contents:
                if c.role == "user" and c.parts and c.parts[0].text:
                    prompt = c.parts[0].text
                    break
            scenario = self.scenarios.get(prompt)
            if turn == 0 and scenario is not None:
                parts = [types.Part(text=scenario.get("say") or "I'll do that.")]
                for i, call in enumerate(scenario["calls"]):
                    parts.append(
                        types.Part(
                            function_call=types.FunctionCall(
                                name=call["name"], args=call.get("args", {}), id=f"{scenario['id']}-{i}"
                            )
                        )
                    )
                yield LlmResponse(content=types.Content(role="model", parts=parts))
                return
            last = llm_request.contents[-1] if llm_request.contents else None
            results = [
                f"{p.function_response.name}: {json.dumps(p.function_response.response, ensure_ascii=False)}"
                for p in (last.parts if last and last.parts else [])
                if p.function_response
            ]
            yield LlmResponse(
                content=types.Content(
                    role="model",
                    parts=[types.Part(text="Done. " + "; ".join(results) if results else "Nothing to do.")],
                )
            )

    return DemoLlm


# -- tools -------------------------------------------------------------------------------


class ToolLog:
    def __init__(self, path: Path, quiet: bool) -> None:
        self.path = path
        self.quiet = quiet
        self.lock = threading.Lock()

    def ran(self, tool: str, args: dict[str, Any], **extra: Any) -> None:
        line = {"tool": tool, "args": args, "t": time.time(), **extra}
        with self.lock, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
        if not self.quiet:
            print(f"  agent ran {tool}({json.dumps(args, ensure_ascii=False)[:200]})", flush=True)


def _make_tools(runs: ToolLog) -> list[Any]:
    from google.adk.tools import FunctionTool, ToolContext

    def transfer_money(
        amount: float, currency: str, to_account: str, memo: str, tool_context: ToolContext
    ) -> dict[str, Any]:
        """Transfer money from the company account to another account."""
        args = {"amount": amount, "currency": currency, "to_account": to_account, "memo": memo}
        runs.ran("transfer_money", args, call=tool_context.function_call_id)
        return {"ok": True, "transferred": amount, "currency": currency, "to": to_account}

    def send_email(to: str, subject: str, body: str, tool_context: ToolContext) -> dict[str, Any]:
        """Send an e-mail from the company mailbox."""
        runs.ran("send_email", {"to": to, "subject": subject, "body": body}, call=tool_context.function_call_id)
        return {"ok": True, "sent_to": to}

    def delete_record(table: str, record_id: str, tool_context: ToolContext) -> dict[str, Any]:
        """Permanently delete one record from a database table."""
        runs.ran("delete_record", {"table": table, "record_id": record_id}, call=tool_context.function_call_id)
        return {"ok": True, "deleted": f"{table}/{record_id}"}

    def set_daily_limit(account: str, tool_context: ToolContext) -> dict[str, Any]:
        """Set an account's daily card limit. Asks the reviewer which limit to set."""
        conf = tool_context.tool_confirmation
        if conf is None:
            tool_context.request_confirmation(
                hint=f"Which daily limit should account {account} get?",
                payload={"limit": 500, "currency": "EUR"},
            )
            return {"status": "waiting for a person to choose the limit"}
        if not conf.confirmed:
            return {"error": "not confirmed"}
        runs.ran("set_daily_limit", {"account": account}, payload=conf.payload, call=tool_context.function_call_id)
        return {"ok": True, "account": account, "limit": conf.payload}

    from google.adk.tools import request_input  # ADK's question to a person: a review of kind input

    return [
        FunctionTool(transfer_money, require_confirmation=True),
        FunctionTool(send_email, require_confirmation=True),
        FunctionTool(delete_record, require_confirmation=True),
        FunctionTool(set_daily_limit),
        request_input,
    ]


# -- the agent thread --------------------------------------------------------------------


class DemoAgent:
    """Runs the ADK app, the scenario feed and the bridge's resumer on its own event loop."""

    def __init__(
        self, signoff: Any, directory: Path, *, interval: float, max_open: int, quiet: bool, sessions: str = "sqlite"
    ) -> None:
        self.signoff = signoff
        self.session_kind = sessions
        self.dir = directory
        self.interval = interval
        self.max_open = max_open
        self.quiet = quiet
        self.inbox = directory / "inbox.jsonl"
        self.inbox.touch(exist_ok=True)
        self.runs = ToolLog(directory / "tool-runs.jsonl", quiet)
        self._counter = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="demo-agent", daemon=True)
        self.ready = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self.ready.wait(30)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=5)

    def _main(self) -> None:
        warnings.filterwarnings("ignore")
        asyncio.run(self._amain())

    async def _amain(self) -> None:
        from google.adk.agents import LlmAgent
        from google.adk.apps import App, ResumabilityConfig
        from google.adk.runners import Runner
        from google.adk.sessions import DatabaseSessionService

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        DemoLlm = _make_llm_class()
        self.llm = DemoLlm()
        agent = LlmAgent(
            name="back_office",
            description="Pays invoices, sends e-mails and keeps customer records.",
            model=self.llm,
            instruction="You are the company's back-office assistant.",
            tools=_make_tools(self.runs),
        )
        app = App(
            name=APP_NAME,
            root_agent=agent,
            plugins=[self.signoff.plugin()],
            resumability_config=ResumabilityConfig(is_resumable=True),
        )
        if self.session_kind == "memory":
            from google.adk.sessions import InMemorySessionService

            self.sessions: Any = InMemorySessionService()
        else:  # paused runs survive a restart of the demo on the same --dir
            self.sessions = DatabaseSessionService(db_engine=_session_engine(self.dir / "sessions.db"))
        self.runner = Runner(app=app, session_service=self.sessions)
        resumer = self.signoff.resumer(self.runner, actor="agent:demo-resumer")
        tasks = [asyncio.create_task(resumer.serve(stop=self._stop)), asyncio.create_task(self._inbox_loop())]
        if self.interval > 0:
            tasks.append(asyncio.create_task(self._rotation_loop()))
        self.ready.set()
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def propose(self, scenario: dict[str, Any]) -> None:
        from google.genai import types

        n = next(self._counter)
        sid = f"demo-{os.getpid()}-{n}-{int(time.time() * 1000) % 100000}"
        scenario = {**scenario, "id": f"call-{sid}"}
        prompt = scenario.get("prompt") or f"Task {n}"
        # Keep prompts unique so the scripted model finds the scenario again.
        if prompt in self.llm.scenarios:
            prompt = f"{prompt} (#{n})"
        self.llm.scenarios[prompt] = scenario
        session = await self.sessions.create_session(app_name=APP_NAME, user_id=USER, session_id=sid)
        msg = types.Content(role="user", parts=[types.Part(text=prompt)])
        try:
            async for _ in self.runner.run_async(user_id=USER, session_id=session.id, new_message=msg):
                pass
        except Exception:  # noqa: BLE001 - one bad scenario must not stop the demo
            log.exception("scenario %s failed", sid)
        if not self.quiet:
            names = ", ".join(c["name"] for c in scenario["calls"])
            print(f"  agent proposed {names} (waiting for a person)", flush=True)

    async def _rotation_loop(self) -> None:
        for scenario in itertools.cycle(ROTATION):
            while await asyncio.to_thread(self.signoff.reviews.count_pending) >= self.max_open:
                await asyncio.sleep(self.interval)
            await self.propose(scenario)
            await asyncio.sleep(self.interval)

    async def _inbox_loop(self) -> None:
        offset = self.inbox.stat().st_size
        buf = b""
        while True:
            size = self.inbox.stat().st_size
            if size > offset:
                with self.inbox.open("rb") as f:
                    f.seek(offset)
                    buf += f.read(size - offset)
                offset = size
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        try:
                            scenario = json.loads(line)
                        except ValueError:
                            log.error("inbox: not JSON: %r", line[:200])
                            continue
                        asyncio.create_task(self.propose(scenario))
            await asyncio.sleep(0.1)


def _session_engine(path: Path) -> Any:
    """ADK's session store for the demo: SQLite in WAL mode with ``synchronous=NORMAL``.

    WAL keeps the file consistent across crashes; NORMAL skips the fsync per commit, so a power
    cut may lose the newest session events. Decisions are unaffected (they live on the audit
    log, which keeps ``synchronous=FULL``), and the resumer re-drives a claimed frontier whose
    answer never reached the session.
    """
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")

    @event.listens_for(engine.sync_engine, "connect")
    def _pragmas(conn: Any, _record: Any) -> None:
        cur = conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    return engine


def prepare(directory: Path, *, sealed_values: bool | None = None) -> tuple[str, Path, str | None]:
    """Create (or reopen) the demo store; return (store URL, key path, new password or None).

    The demo's log accepts unsigned decisions (``signed_decisions=False``), and the demo holds its
    admin key (``log.admin.key`` in the directory) to enroll its reviewer: both are fine for a demo
    on one machine, and neither is how a real desk runs (``audit init`` makes a log that requires
    signed decisions, and the admin key stays with the administrator). ``sealed_values``: whether a new log
    keeps the calls' values beside it, under commitments, or in its entries; ``None``: as ``audit init``
    makes a log by default.
    """
    from signoff.audit import ReviewService, open_store
    from signoff.audit.errors import LogNotFound
    from signoff.audit.keys import read_private_key
    from signoff.audit.store import default_admin_key
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    directory.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{directory / 'signoff.db'}"
    key = directory / "log.key"
    store = open_store(url)
    try:
        store.log_id  # noqa: B018
    except LogNotFound:
        if sealed_values is None:  # as `audit init` makes a log by default
            store.init_log(key, signed_decisions=False)
        else:
            store.init_log(key, signed_decisions=False, sealed_values=sealed_values)
    svc = ReviewService(store)
    accounts = Accounts(make_engine(url), store.log_id)
    password = None
    if svc.reviewer(DEMO_REVIEWER) is None or not accounts.has_account(DEMO_REVIEWER):
        import secrets

        password = "demo-" + secrets.token_hex(4)
        # The password doubles as the reviewer's one-time enrolment code, so a passkey can be tried here too.
        svc.enroll_reviewer(
            DEMO_REVIEWER,
            roles=["finance", "ops", "admin"],
            tools=["*"],
            code=password,
            admin=read_private_key(default_admin_key(key)),
        )
        accounts.set_password(DEMO_REVIEWER, password, must_change=False)
        (directory / "demo-credentials.txt").write_text(f"{DEMO_REVIEWER[6:]}\n{password}\n")
        os.chmod(directory / "demo-credentials.txt", 0o600)
    store.close()
    return url, key, password


DEFAULT_PORT = 8080


def choose_port(host: str, port: int | None) -> tuple[int, str | None]:
    """The port to serve on, checked before anything is printed, and a note when it is not the default.

    No ``--port``: :data:`DEFAULT_PORT`, or the next free port after it. A ``--port`` in use is refused."""
    from signoff.audit.cli_common import free_port
    from signoff.audit.errors import UnusableInput

    default = DEFAULT_PORT
    if port is not None:
        if not free_port(host, port):
            raise UnusableInput(
                f"--port: expected a free port on {host}, found {port} in use (another desk or demo?); leave "
                f"--port out (or PORT= out of `make demo`) to take the next free one after {default}"
            )
        return port, None
    for candidate in range(default, min(default + 100, 65536)):
        if free_port(host, candidate):
            if candidate == default:
                return candidate, None
            return candidate, f"port {default} is in use on {host}: serving on {candidate} instead (--port picks one)"
    raise UnusableInput(f"--port: expected a free port on {host} from {default} on, found the next 100 in use")


def _browser_host(host: str) -> str:
    """The host to print: passkeys need a domain, so a loopback address is shown as ``localhost``."""
    return "localhost" if host in ("127.0.0.1", "::1", "0.0.0.0", "::") else host


def run_demo(
    directory: Path | None,
    *,
    host: str,
    port: int | None,
    interval: float,
    max_open: int,
    quiet: bool,
    sessions: str = "sqlite",
    sealed_values: bool | None = None,
) -> int:
    """Serve the demo until stopped. ``directory`` is kept; without one, a temp dir is made and removed
    again on a clean stop (Ctrl-C, SIGTERM). ``port`` ``None``: 8080 or the next free port."""
    port, note = choose_port(host, port)
    import uvicorn

    from signoff.bridge import Signoff, ToolPolicy
    from signoff.desk.app import create_app
    from signoff.desk.reqlog import setup_logging

    logging.getLogger("google_adk").setLevel(logging.ERROR)  # no telemetry chatter from the scripted model
    temporary = directory is None
    directory = directory or Path(tempfile.mkdtemp(prefix="signoff-demo-"))
    url, key, password = prepare(directory, sealed_values=sealed_values)
    if password is None:
        cred = directory / "demo-credentials.txt"
        password = cred.read_text().split("\n")[1] if cred.exists() else "(unchanged; see demo-credentials.txt)"
    signoff = Signoff(
        url,
        policies=[
            ToolPolicy("transfer_money", role="finance", deadline_seconds=3600),
            ToolPolicy("delete_record", role="ops", deadline_seconds=1800),
            ToolPolicy("send_email", role="ops"),
            ToolPolicy("set_daily_limit", role="finance"),
        ],
    )
    app = create_app(url, key, service=signoff.reviews, access_log=not quiet)
    if not quiet:
        setup_logging(logging.WARNING)
    print("Signoff demo", flush=True)
    if note is not None:
        print(f"  note      {note}", flush=True)
    print(f"  desk      http://{_browser_host(host)}:{port}/", flush=True)
    print(f"  sign in   {DEMO_REVIEWER[6:]}  /  {password}", flush=True)
    print(f"  store     {url}", flush=True)
    if signoff.store.rules.sealed_values:
        print("  values    kept beside the log, under salted commitments (erasable: `audit erase`)", flush=True)
    if temporary:
        print("            (a temp dir, removed when the demo stops; --dir DIR keeps the store)", flush=True)
    print("  NOTE      this demo log accepts UNSIGNED decisions, and the demo holds its admin key", flush=True)
    print(f"            ({directory / 'log.admin.key'}); a real log (`audit init`) requires each decision", flush=True)
    print("            to carry the reviewer's own passkey signature, and its admin key stays offline.", flush=True)
    print(
        "            To try a passkey here: Account → Passkeys, with your password as the enrolment code.", flush=True
    )
    print(f"  inbox     {directory / 'inbox.jsonl'}  (append a JSON scenario line to propose it)", flush=True)
    print(f"  tool runs {directory / 'tool-runs.jsonl'}", flush=True)
    print("  the agent proposes a transfer, an e-mail, a record deletion, a limit (its own question)", flush=True)
    print("  and a refund + e-mail frontier; it resumes as you decide. Ctrl-C stops.", flush=True)
    agent = DemoAgent(signoff, directory, interval=interval, max_open=max_open, quiet=quiet, sessions=sessions)
    agent.start()
    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _stop) if main_thread else None  # SIGTERM stops it as Ctrl-C does
    clean = False
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=2)
        clean = True
    except KeyboardInterrupt:  # uvicorn shuts down gracefully, then raises the signal it caught again
        clean = True
        raise
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, before)
        agent.stop()
        signoff.close()
        if temporary and clean:  # after a crash the directory stays, for a look at what happened
            shutil.rmtree(directory, ignore_errors=True)
            print(f"removed the demo's temp dir {directory}", flush=True)
    return 0


def _stop(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_demo(None, host="127.0.0.1", port=None, interval=20, max_open=8, quiet=False))
