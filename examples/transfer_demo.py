"""Transfer demo: an offline agent pauses on a money transfer until a person decides.

Run it from the repository root, one step per process (everything lives in ./signoff-demo/):

    python examples/transfer_demo.py run                  # process 1: the agent asks to send 5000 and pauses
    python examples/transfer_demo.py pending              # list the open reviews
    python examples/transfer_demo.py decide REVIEW_ID approve
    python examples/transfer_demo.py decide REVIEW_ID edit amount=500 --why "cap at 500"
    python examples/transfer_demo.py decide REVIEW_ID reject --why "unknown payee"
    python examples/transfer_demo.py resume               # process 2: the run resumes, the tool runs
    python examples/transfer_demo.py verify               # `audit verify` over the log (exit code 0: intact)

`decide` records the decision through the bridge (`Signoff.record_decision`), as another UI would,
under the reviewer `human:demo@example.org` that `run` enrolled. The `audit` command works too:
`audit --store sqlite:///signoff-demo/signoff.db approve REVIEW_ID --as human:demo@example.org`.
The model is scripted (no network, no API key): it asks for one transfer, then reports what the
tool returned.
Set SIGNOFF_DEMO_DIR to keep the files elsewhere, SIGNOFF_STORE to use another store URL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App, ResumabilityConfig  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions.sqlite_session_service import SqliteSessionService  # noqa: E402
from google.adk.tools import FunctionTool, ToolContext  # noqa: E402
from google.adk.tools.tool_confirmation import ToolConfirmation  # noqa: E402
from google.genai import types  # noqa: E402

from signoff import bridge  # noqa: E402

DIR = Path(os.environ.get("SIGNOFF_DEMO_DIR", "signoff-demo")).resolve()
STORE = os.environ.get("SIGNOFF_STORE", f"sqlite:///{DIR / 'signoff.db'}")
REVIEWER = "human:demo@example.org"
APP_NAME = "transfer_demo"


class ScriptedModel(BaseLlm):
    """First turn: ask for the transfer. Any later turn: say what the tool returned."""

    model: str = "scripted-demo"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if not any(c.role == "model" for c in llm_request.contents):
            parts = [
                types.Part(text="I'll pay the invoice from Acme."),
                types.Part(
                    function_call=types.FunctionCall(
                        name="transfer", args={"amount": 5000, "to": "acme-ltd"}, id="call-transfer-1"
                    )
                ),
            ]
        else:
            last = llm_request.contents[-1]
            results = [p.function_response.response for p in last.parts or [] if p.function_response]
            parts = [types.Part(text=f"Result: {json.dumps(results)}")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def transfer(amount: int, to: str, tool_context: ToolContext) -> dict[str, Any]:
    """Send `amount` euros to account `to`."""
    key = bridge.idempotency_key(tool_context)  # hand this to the payment provider
    print(f"  >>> TRANSFER RUNNING: {amount} EUR to {to} (idempotency key {key})")
    return {"sent": amount, "to": to}


def build(signoff: bridge.Signoff) -> Runner:
    agent = LlmAgent(
        name="treasurer",
        model=ScriptedModel(),
        instruction="Pay invoices.",
        tools=[FunctionTool(transfer, require_confirmation=True)],
    )
    app = App(
        name=APP_NAME,
        root_agent=agent,
        plugins=[signoff.plugin()],
        resumability_config=ResumabilityConfig(is_resumable=True),
    )
    return Runner(app=app, session_service=SqliteSessionService(db_path=str(DIR / "sessions.db")))


def open_signoff() -> bridge.Signoff:
    DIR.mkdir(parents=True, exist_ok=True)
    signoff = bridge.Signoff(STORE, init_key=DIR / "log.key")
    if signoff.reviews.reviewer(REVIEWER) is None:
        signoff.reviews.enroll_reviewer(REVIEWER, roles=["treasury"], tools=["transfer"])
    return signoff


async def cmd_run() -> None:
    signoff = open_signoff()
    runner = build(signoff)
    session = await runner.session_service.create_session(app_name=APP_NAME, user_id="demo")
    message = types.Content(role="user", parts=[types.Part(text="Please pay Acme's invoice of 5000.")])
    async for event in runner.run_async(user_id="demo", session_id=session.id, new_message=message):
        for part in event.content.parts if event.content and event.content.parts else []:
            if part.text:
                print(f"[{event.author}] {part.text}")
    for review in signoff.reviews.pending():
        print(f"PAUSED: review {review.id}: {review.call.tool}({json.dumps(review.call.args)})")
    print("Decide with: python examples/transfer_demo.py decide <review> approve|edit amount=N|reject --why ...")


def cmd_pending() -> None:
    signoff = open_signoff()
    for review in signoff.reviews.pending():
        print(f"{review.id}  {review.call.tool}({json.dumps(review.call.args)})  opened {review.opened_at}")


def cmd_decide(review_id: str, verdict: str, edits: list[str], why: str) -> None:
    signoff = open_signoff()
    review = signoff.reviews.get(review_id)
    if verdict == "approve":
        confirmation = ToolConfirmation(confirmed=True)
    elif verdict == "edit":
        args = dict(review.call.args)
        for item in edits:
            name, _, value = item.partition("=")
            args[name] = json.loads(value) if value[:1].isdigit() or value[:1] in "[{-tfn" else value
        confirmation = ToolConfirmation(confirmed=True, payload={"args": args})
    elif verdict == "reject":
        confirmation = ToolConfirmation(confirmed=False)
    else:
        raise SystemExit(f"verdict: expected approve, edit or reject, found {verdict!r}")
    decided = signoff.record_decision(review, confirmation, reviewer=REVIEWER, rationale=why)
    print(f"review {decided.id}: {decided.status} by {decided.decided_by}; args to run: {decided.final_args}")


async def cmd_resume() -> None:
    signoff = open_signoff()
    runner = build(signoff)

    def show(event: Any) -> None:
        for part in event.content.parts if event.content and event.content.parts else []:
            if part.text:
                print(f"[{event.author}] {part.text}")

    done = await signoff.resumer(runner, on_event=show).run_once()
    print(f"resumed {len(done)} frontier(s)" if done else "nothing decided yet")


def cmd_verify() -> int:
    """``audit verify`` (the console script if installed, else ``python -m signoff.audit.cli``)."""
    root = Path(__file__).resolve().parents[1]
    cli = shutil.which("audit")
    command = [cli] if cli else [sys.executable, "-m", "signoff.audit.cli"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    return subprocess.call([*command, "--store", STORE, "--key", str(DIR / "log.key"), "verify"], env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run")
    sub.add_parser("pending")
    decide = sub.add_parser("decide")
    decide.add_argument("review")
    decide.add_argument("verdict", choices=["approve", "edit", "reject"])
    decide.add_argument("edits", nargs="*", help="name=value pairs for edit")
    decide.add_argument("--why", default="", help="rationale (the reason, for a rejection)")
    sub.add_parser("resume")
    sub.add_parser("verify")
    args = parser.parse_args()
    if args.command == "run":
        asyncio.run(cmd_run())
    elif args.command == "pending":
        cmd_pending()
    elif args.command == "decide":
        cmd_decide(args.review, args.verdict, args.edits, args.why)
    elif args.command == "resume":
        asyncio.run(cmd_resume())
    elif args.command == "verify":
        return cmd_verify()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
