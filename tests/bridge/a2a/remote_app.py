"""The remote side of the A2A tests: an ADK agent ("treasurer") whose ``transfer`` needs a confirmation,
served over A2A (ADK's ``to_a2a``) by uvicorn on 127.0.0.1. It holds no Signoff: the local app does.

    python remote_app.py PORT        (each call that reaches the tool: a JSON line in $SIGNOFF_A2A_CALLS)
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.a2a.utils.agent_to_a2a import to_a2a
from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools import FunctionTool, ToolContext
from google.genai import types


def transfer(amount: int, to: str, tool_context: ToolContext) -> dict[str, Any]:
    """Transfer money to an account."""
    with open(os.environ["SIGNOFF_A2A_CALLS"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"amount": amount, "to": to}) + "\n")
    return {"status": "ok", "amount": amount, "to": to}


class Scripted(BaseLlm):
    """Asks for the transfer on its first turn; says "done" once it has a tool result."""

    model: str = "scripted-remote"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if any(p.function_response for c in llm_request.contents for p in c.parts or []):
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="done")]))
            return
        call = types.FunctionCall(name="transfer", args={"amount": 5, "to": "acct-t"})
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))


def build(port: int) -> Any:
    agent = LlmAgent(
        name="treasurer",
        model=Scripted(),
        description="Moves money between accounts.",
        tools=[FunctionTool(transfer, require_confirmation=True)],
    )
    app = App(name="treasurer", root_agent=agent, resumability_config=ResumabilityConfig(is_resumable=True))
    runner = Runner(app=app, session_service=InMemorySessionService())
    return to_a2a(agent, host="127.0.0.1", port=port, runner=runner)


if __name__ == "__main__":
    import uvicorn

    listen = int(sys.argv[1])
    uvicorn.run(build(listen), host="127.0.0.1", port=listen, log_level="warning")
