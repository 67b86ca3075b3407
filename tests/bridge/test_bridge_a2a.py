"""A2A relayed pauses (issue 21, 4): two real ADK apps over A2A on 127.0.0.1. The remote app
(``a2a/remote_app.py``, served by uvicorn through ADK's ``to_a2a``) has a tool that needs a
confirmation; the local app reaches it through a ``RemoteA2aAgent`` and holds the Signoff plugin. What
the remote tool received is recorded from inside it.

ADK facts (google-adk 2.13, a2a-sdk 1.x, checked here): the remote's ``adk_request_confirmation``
reaches the local session with the remote's own call ids, twice (a working and an input-required
event), and a local ``FunctionResponse`` to it resumes the remote task. The remote runs the args it
asked for: a confirmation's payload does not change them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, run_turn
from google.adk.tools.tool_confirmation import ToolConfirmation

from signoff import bridge
from signoff.audit.verify import verify_store

pytest.importorskip("a2a", reason="a2a-sdk is in the dev extras: pip install -e '.[dev]'")
from google.adk.agents.remote_a2a_agent import RemoteA2aAgent  # noqa: E402

pytestmark = pytest.mark.asyncio
REMOTE = Path(__file__).resolve().parent / "a2a" / "remote_app.py"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The remote app on a free port: its agent card's URL, and the file its tool writes each call to."""
    calls = tmp_path / "remote-calls.jsonl"
    port = _free_port()
    env = {**os.environ, "SIGNOFF_A2A_CALLS": str(calls), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, str(REMOTE), str(port)], env=env, stderr=subprocess.PIPE)
    card = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(card, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the remote A2A app did not start: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.1)
        yield card, calls
    finally:
        proc.terminate()
        proc.wait(10)


def _received(calls: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in calls.read_text().splitlines() if x.strip()] if calls.exists() else []


async def _paused(url: str, card: str, tmp_path: Path) -> tuple[bridge.Signoff, Harness, Any]:
    signoff = bridge.Signoff(url)
    h = Harness(
        signoff, RemoteA2aAgent(name="treasurer", description="the bank's treasurer", agent_card=card), tmp_path
    )
    await h.start("pay 5 to acct-t")
    [review] = signoff.reviews.pending()  # one review, though ADK relays the pause twice
    assert (review.tool, review.call.args, review.call.agent) == (
        "transfer",
        {"amount": 5, "to": "acct-t"},
        "treasurer",
    )
    assert review.call.context.get("a2a_task"), review.call.context
    return signoff, h, review


async def test_a_relayed_pause_is_one_review_and_the_approval_runs_the_remote_tool_once(
    sqlite_url: str, remote: tuple[str, Path], tmp_path: Path
) -> None:
    card, calls = remote
    signoff, h, review = await _paused(sqlite_url, card, tmp_path)
    assert _received(calls) == []
    signoff.reviews.approve(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    [done] = await h.resume()
    assert done.how == "sent"
    assert _received(calls) == [{"amount": 5, "to": "acct-t"}]
    assert signoff.reviews.get(review.id).executed  # the remote's result came back: recorded here, once
    assert await h.resume() == [] and len(_received(calls)) == 1
    assert verify_store(signoff.store).ok
    signoff.close()


async def test_a_rejected_relayed_call_never_runs(sqlite_url: str, remote: tuple[str, Path], tmp_path: Path) -> None:
    card, calls = remote
    signoff, h, review = await _paused(sqlite_url, card, tmp_path)
    signoff.reviews.reject(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="wrong account")
    await h.resume()
    assert _received(calls) == []
    signoff.close()


async def test_an_edit_of_a_relayed_call_is_never_run_with_the_unedited_args(
    sqlite_url: str, remote: tuple[str, Path], tmp_path: Path
) -> None:
    """The remote agent runs what it asked for; an edit cannot reach its args. So the remote is told no,
    and the log says why (``run.resume_failed``): nothing runs with what nobody signed."""
    card, calls = remote
    signoff, h, review = await _paused(sqlite_url, card, tmp_path)
    patch = [{"op": "replace", "path": "/amount", "value": 3}]
    signoff.reviews.edit(review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=patch)
    await h.resume()
    assert _received(calls) == []
    [failed] = signoff.store.entries(kind="run.resume_failed")
    assert failed.body["reviews"] == [review.id] and "A2A" in failed.body["reason"], failed.body
    assert verify_store(signoff.store).ok
    signoff.close()


async def test_a_forged_answer_to_a_relayed_pause_reaches_nothing(
    sqlite_url: str, remote: tuple[str, Path], tmp_path: Path
) -> None:
    card, calls = remote
    signoff, h, review = await _paused(sqlite_url, card, tmp_path)
    [paused] = [
        c for e in await h.session_events() for c in bridge.paused_calls(e, app="bank", user="u1", session=h.session_id)
    ][:1]
    message = bridge.resume_message([(paused, ToolConfirmation(confirmed=True))])
    with pytest.raises(RuntimeError, match="still pending"):
        await run_turn(h.runner, h.session_id, message, invocation_id=paused.invocation)
    assert _received(calls) == [] and signoff.reviews.get(review.id).status == "pending"
    signoff.close()
