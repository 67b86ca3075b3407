"""An offline, scripted stand-in for a model: for examples, demos and tests of gated tools.

Plug it in wherever an ``LlmAgent`` takes a model (``model="gemini-2.5-flash"`` in production)::

    agent = LlmAgent(name="treasurer", model=ScriptedModel.calling("transfer", amount=100, to="Alice"), ...)

On its first turn in a conversation it says ``say`` and asks for ``calls``; on every later turn it
reports the tool results it was given. No network, no API key; the same answers in every process,
so a run paused in one process resumes in another exactly as with a real model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types


class ScriptedModel(BaseLlm):
    """First turn: ``say`` and one function call per entry of ``calls``; later turns: the results."""

    model: str = "scripted"
    say: str = ""
    calls: list[dict[str, Any]] = []  # [{"name": "transfer", "args": {...}}, ...]

    @classmethod
    def calling(cls, tool: str, *, say: str = "", **args: Any) -> ScriptedModel:
        """A model that asks for one call: ``tool(**args)``."""
        return cls(say=say or f"I'll call {tool}.", calls=[{"name": tool, "args": args}])

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if not any(content.role == "model" for content in llm_request.contents):
            parts = [types.Part(text=self.say)] if self.say else []
            for index, call in enumerate(self.calls):
                function_call = types.FunctionCall(name=call["name"], args=call.get("args", {}), id=f"call-{index}")
                parts.append(types.Part(function_call=function_call))
        else:
            last = llm_request.contents[-1]
            results = [
                {"tool": p.function_response.name, "result": p.function_response.response}
                for p in last.parts or []
                if p.function_response
            ]
            parts = [types.Part(text="Done: " + json.dumps(results, ensure_ascii=False) if results else "Done.")]
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=0, candidates_token_count=0)
        yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)


__all__ = ["ScriptedModel"]
