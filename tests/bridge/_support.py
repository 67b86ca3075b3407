"""Shared test kit: a scripted model, tools that count their runs in a side file, app builders.

Used in-process by the tests and by ``_proc.py`` in subprocesses, so everything here is rebuilt
from plain names and environment variables.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.tools import FunctionTool, ToolContext
from google.genai import types

from signoff import bridge
from signoff.audit import Signer

warnings.filterwarnings("ignore", category=UserWarning)

REVIEWER = "human:alice@example.org"
RUNS_ENV = "SIGNOFF_TEST_RUNS"
RAISES_ENV = "SIGNOFF_TEST_TRANSFER_RAISES"  # set: transfer() takes effect (its run is recorded), then raises


def key_of(actor: str) -> Signer:
    """A reviewer's own Ed25519 key for the tests, the same in every process (derived from the name)."""
    seed = hashlib.sha256(b"signoff test key\x00" + actor.encode()).digest()
    return Signer(Ed25519PrivateKey.from_private_bytes(seed))


REVIEWER_KEY = key_of(REVIEWER)


class ScriptedLlm(BaseLlm):
    """Returns ``script[i]`` on the agent's i-th model turn; then echoes the last tool results.

    The turn number is read from the request (the number of model turns already in it), so the
    same script gives the same answers in any process, before and after a restart.
    """

    model: str = "scripted"
    script: list[list[dict[str, Any]]] = []
    requests: list[LlmRequest] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        turn = sum(1 for c in llm_request.contents if c.role == "model")
        if turn < len(self.script):
            parts = []
            for spec in self.script[turn]:
                if "text" in spec:
                    parts.append(types.Part(text=spec["text"]))
                else:
                    parts.append(
                        types.Part(
                            function_call=types.FunctionCall(name=spec["name"], args=spec["args"], id=spec["id"])
                        )
                    )
            yield LlmResponse(content=types.Content(role="model", parts=parts))
            return
        last = llm_request.contents[-1] if llm_request.contents else None
        results = [
            {"name": p.function_response.name, "response": p.function_response.response}
            for p in (last.parts if last and last.parts else [])
            if p.function_response
        ]
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text="done: " + json.dumps(results, sort_keys=True))])
        )


def fc(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id}


# -- tools: every run is one JSON line in the side file ------------------------------------


def _record(tool: str, args: dict[str, Any], tool_context: ToolContext | None, **extra: Any) -> None:
    path = os.environ.get(RUNS_ENV)
    if not path:
        return
    line = {"tool": tool, "args": args, "pid": os.getpid(), **extra}
    if tool_context is not None:
        line["key"] = bridge.idempotency_key(tool_context)
        line["session"] = tool_context.session.id
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def transfer(amount: int, to: str, tool_context: ToolContext) -> dict[str, Any]:
    """Transfer money to an account."""
    _record("transfer", {"amount": amount, "to": to}, tool_context)
    if os.environ.get(RAISES_ENV):  # a provider that charged, then lost its answer
        raise TimeoutError("the payments provider did not answer in time")
    return {"ok": True, "amount": amount, "to": to}


def close_account(account: str, tool_context: ToolContext) -> dict[str, Any]:
    """Close an account."""
    _record("close_account", {"account": account}, tool_context)
    return {"closed": account}


def refund(order: str, tool_context: ToolContext) -> dict[str, Any]:
    """Refund an order (not declared with require_confirmation)."""
    _record("refund", {"order": order}, tool_context)
    return {"refunded": order}


def lookup(query: str, tool_context: ToolContext) -> dict[str, Any]:
    """Look something up (never gated)."""
    _record("lookup", {"query": query}, tool_context)
    return {"answer": f"about {query}"}


def set_limit(account: str, tool_context: ToolContext) -> dict[str, Any]:
    """Set a limit; asks its own question (the limit) through request_confirmation."""
    if tool_context.tool_confirmation is None:
        _record("set_limit.asked", {"account": account}, tool_context)  # first attempt: it asks
        tool_context.request_confirmation(hint="Which daily limit?", payload={"limit": 100})
        return {"status": "waiting for the limit"}
    payload = tool_context.tool_confirmation.payload
    if not tool_context.tool_confirmation.confirmed:
        return {"error": "not confirmed"}
    _record("set_limit", {"account": account}, tool_context, payload=payload)
    return {"account": account, "limit": payload}


def gated(fn: Any) -> FunctionTool:
    return FunctionTool(fn, require_confirmation=True)


# -- apps -----------------------------------------------------------------------------------

APP = "bank"


def single_agent(script: list[list[dict[str, Any]]], *, callbacks: bool = False) -> LlmAgent:
    extra: dict[str, Any] = {}
    if callbacks:
        extra = {
            "before_tool_callback": bridge.apply_reviewed_args,
            "after_tool_callback": bridge.record_tool_executed,
        }
    return LlmAgent(
        name="teller",
        model=ScriptedLlm(script=script),
        tools=[gated(transfer), gated(close_account), refund, lookup, set_limit],
        **extra,
    )


def transfer_script(amount: int = 50, to: str = "acct-1") -> list[list[dict[str, Any]]]:
    return [[{"text": "I will send the money."}, fc("transfer", {"amount": amount, "to": to}, "call-transfer")]]


def sequential_agent() -> SequentialAgent:
    payer = LlmAgent(
        name="payer",
        model=ScriptedLlm(script=[[fc("transfer", {"amount": 10, "to": "acct-p"}, "call-pay")]]),
        tools=[gated(transfer)],
    )
    closer = LlmAgent(
        name="closer",
        model=ScriptedLlm(script=[[fc("close_account", {"account": "acct-c"}, "call-close")]]),
        tools=[gated(close_account)],
    )
    return SequentialAgent(name="pipeline", sub_agents=[payer, closer])


def workflow_agent() -> Any:
    from google.adk.workflow import Workflow

    return Workflow(name="flow", edges=[("START", gated(transfer))])


class CrashPlugin(BasePlugin):
    """Kills its process with SIGKILL at one point of a resumed run, after Signoff's own callbacks there
    (plugins run in order, and Signoff's comes first): ``before_store`` (the answer sent, before ADK
    stores it), ``in_tool`` (the answer stored, the tool entered, before its effect) or ``after_tool``
    (the tool ran and ``tool.executed`` is on the log, before ADK stores its response)."""

    def __init__(self, step: str) -> None:
        super().__init__(name=f"crash-{step}")
        self.step = step

    def _die(self, step: str) -> None:
        if step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)

    async def on_user_message_callback(self, *, invocation_context: Any, user_message: types.Content) -> None:
        if any(p.function_response for p in user_message.parts or []):
            self._die("before_store")

    async def before_tool_callback(self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any) -> None:
        if tool_context.tool_confirmation is not None:
            self._die("in_tool")

    async def after_tool_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, result: Any
    ) -> None:
        if tool_context.tool_confirmation is not None:
            self._die("after_tool")


CRASH_STEPS = ("before_store", "in_tool", "after_tool")


def make_app(
    root: Any, signoff: bridge.Signoff | None, *, plugin: bool = True, extra: tuple[BasePlugin, ...] = ()
) -> App:
    plugins: list[BasePlugin] = [signoff.plugin()] if (signoff is not None and plugin) else []
    plugins.extend(extra)
    return App(
        name=APP,
        root_agent=root,
        plugins=plugins,
        resumability_config=ResumabilityConfig(is_resumable=True),
    )


async def run_turn(
    runner: Runner, session_id: str, message: types.Content | str, *, invocation_id: str | None = None
) -> list[Event]:
    content = types.Content(role="user", parts=[types.Part(text=message)]) if isinstance(message, str) else message
    events = []
    async for event in runner.run_async(
        user_id="u1", session_id=session_id, new_message=content, invocation_id=invocation_id
    ):
        events.append(event)
    return events


async def new_session(service: BaseSessionService) -> str:
    session = await service.create_session(app_name=APP, user_id="u1")
    return session.id


def runs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_text(events: list[Event]) -> str:
    for event in reversed(events):
        if event.content and event.content.parts:
            text = "".join(p.text or "" for p in event.content.parts)
            if text:
                return text
    return ""


class Harness:
    """One app, one SQLite session file, one runner, and the events each run produced."""

    def __init__(self, signoff: bridge.Signoff, root: Any, tmp_path: Path, *, plugin: bool = True) -> None:
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        self.signoff = signoff
        self.sessions = SqliteSessionService(db_path=str(tmp_path / "sessions.db"))
        self.runner = Runner(app=make_app(root, signoff, plugin=plugin), session_service=self.sessions)
        self.session_id = ""
        self.events: list[Event] = []

    async def start(self, message: str = "please do it") -> list[Event]:
        self.session_id = await new_session(self.sessions)
        events = await run_turn(self.runner, self.session_id, message)
        self.events.extend(events)
        return events

    async def resume(self) -> list[bridge.Resumed]:
        resumer = self.signoff.resumer(self.runner, on_event=self.events.append)
        return await resumer.run_once()

    async def session_events(self) -> list[Event]:
        session = await self.sessions.get_session(app_name=APP, user_id="u1", session_id=self.session_id)
        assert session is not None
        return list(session.events)

    def paused(self, events: list[Event] | None = None) -> list[bridge.PausedCall]:
        out: list[bridge.PausedCall] = []
        for event in events if events is not None else self.events:
            out.extend(bridge.paused_calls(event, app=APP, user="u1", session=self.session_id))
        return out
