"""Quick start, offline: an agent asks to transfer 100 to Alice, a person edits the amount to 50, the tool
runs with 50, and `audit verify` exits 0.

    python examples/quickstart.py        # everything goes to ./quickstart/ (QUICKSTART_DIR to move it)

Each step is what you would do by hand: the admin creates the log and enrolls Alice (the `audit`
command), the agent runs until it pauses, Alice edits the call with her own key (the `audit` command
again), the run resumes, and an auditor verifies the log. The agent's only Signoff hook is
``before_tool_callback=apply_reviewed_args``; a scripted model stands in for Gemini.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import warnings
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools import FunctionTool
from google.genai import types

from signoff import Signoff, apply_reviewed_args
from signoff.bridge.scripted import ScriptedModel

warnings.filterwarnings("ignore")  # ADK marks resumability experimental
HERE = Path(os.environ.get("QUICKSTART_DIR", "quickstart")).resolve()
STORE = f"sqlite:///{HERE / 'signoff.db'}"


def transfer(amount: int, to: str) -> dict[str, object]:
    """Transfer money to someone."""
    print(f"  >>> TRANSFER RUNNING: {amount} to {to}")
    return {"sent": amount, "to": to}


def audit(*args: str) -> str:
    """The `audit` command, as a person types it."""
    done = subprocess.run(
        [sys.executable, "-m", "signoff.audit.cli", "--store", STORE, *args], capture_output=True, text=True, cwd=HERE
    )
    if done.returncode != 0:
        raise SystemExit(f"audit {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def setup() -> None:
    """The admin's part, once: the log, and Alice as a reviewer with her own key."""
    HERE.mkdir(parents=True, exist_ok=True)
    if (HERE / "signoff.db").exists():
        return
    audit("--key", "log.pem", "init", "--admin-key", "admin.pem")
    audit("keygen", "-o", "alice.pem")  # Alice's key; in real life she runs this on her machine
    audit("enroll", "alice@example.org", "--role", "finance", "--tools", "transfer",
          "--public-key", "alice.pem.pub", "--admin-key", "admin.pem")  # fmt: skip


async def main() -> None:
    setup()
    signoff = Signoff(STORE)
    agent = LlmAgent(
        name="treasurer",
        model=ScriptedModel.calling("transfer", amount=100, to="Alice", say="I'll send Alice 100."),
        tools=[FunctionTool(transfer, require_confirmation=True)],
        before_tool_callback=apply_reviewed_args,  # the one line
    )
    app = App(name="quickstart", root_agent=agent, resumability_config=ResumabilityConfig(is_resumable=True))
    runner = Runner(app=app, session_service=SqliteSessionService(str(HERE / "sessions.db")))

    session = await runner.session_service.create_session(app_name="quickstart", user_id="u1")
    message = types.Content(role="user", parts=[types.Part(text="Pay Alice 100.")])
    async for _event in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
        pass
    [review] = signoff.reviews.pending()
    print(f"paused: {review.tool}({review.call.args}) waits for a person: review {review.id}")

    print(audit("edit", review.id, "amount=50", "--as", "alice@example.org", "--reviewer-key", "alice.pem").strip())

    await signoff.resumer(runner).run_once()  # the tool runs once, with what Alice signed
    print(audit("verify").strip())
    signoff.close()


if __name__ == "__main__":
    asyncio.run(main())
