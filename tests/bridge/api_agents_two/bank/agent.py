"""App ``bank`` of ``test_bridge_two_apps.py``: its own store, callbacks only (see ../README.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]  # tests/bridge, for the shared test kit
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _support import ScriptedLlm, fc, transfer  # noqa: E402
from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App, ResumabilityConfig  # noqa: E402
from google.adk.tools import FunctionTool  # noqa: E402

from signoff import Signoff, apply_reviewed_args  # noqa: E402

signoff = Signoff(os.environ["SIGNOFF_TEST_STORE_BANK"])
root_agent = LlmAgent(
    name="teller",
    model=ScriptedLlm(script=[[fc("transfer", {"amount": 70, "to": "acct-bank"}, "call-bank")]]),
    tools=[FunctionTool(transfer, require_confirmation=True)],
    before_tool_callback=apply_reviewed_args,
)
app = App(name="bank", root_agent=root_agent, resumability_config=ResumabilityConfig(is_resumable=True))
