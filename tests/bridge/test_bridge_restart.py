"""Restart: pause in process A, decide here, resume in process B (real subprocesses)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _proc import root_for, session_service
from _support import REVIEWER, REVIEWER_KEY, make_app, runs
from conftest import ROOT, assert_bound
from google.adk.runners import Runner

from signoff import bridge
from signoff.audit import ReviewService, open_store

PROC = Path(__file__).resolve().parent / "_proc.py"


def _run(*args: str) -> object:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{PROC.parent}"}
    done = subprocess.run(
        [sys.executable, str(PROC), *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _sessions(kind: str, store_url: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:{tmp_path / 'sessions.db'}"
    if store_url.startswith("postgresql"):  # DatabaseSessionService on the same PostgreSQL schema
        return "db:" + store_url.replace("postgresql://", "postgresql+psycopg://", 1)
    return f"db:sqlite+aiosqlite:///{tmp_path / 'sessions-db.db'}"


@pytest.mark.parametrize(
    ("sessions_kind", "hooks"),
    [("sqlite", "single"), ("database", "single"), ("sqlite", "callbacks")],
    ids=["sqlite-plugin", "database-plugin", "sqlite-callback-only"],
)
def test_pause_decide_resume_in_another_process(
    store_url: str, sessions_kind: str, hooks: str, runs_file: Path, tmp_path: Path
) -> None:
    """``hooks="callbacks"``: the App has no plugin; ``before_tool_callback=apply_reviewed_args`` alone
    opens the review in process A and runs the decided args in process B (the design card's line)."""
    sessions = _sessions(sessions_kind, store_url, tmp_path)
    paused = _run("pause", store_url, sessions, hooks)
    assert isinstance(paused, dict)

    store = open_store(store_url)
    svc = ReviewService(store)
    [review] = svc.pending()
    assert review.call.session == paused["session"]
    svc.edit(
        review.id, reviewer=REVIEWER, signer=REVIEWER_KEY, patch=[{"op": "replace", "path": "/amount", "value": 50}]
    )

    # The session service kept the plugin's stamp binding the paused call to its review.
    session = asyncio.run(
        session_service(sessions).get_session(app_name="bank", user_id="u1", session_id=paused["session"])
    )
    assert session is not None
    stamps = [e.custom_metadata["signoff"] for e in session.events if (e.custom_metadata or {}).get("signoff")]
    assert stamps and stamps[0]["reviews"] == {review.call.confirmation_id: review.id}

    resumed = _run("resume", store_url, sessions, "", hooks)
    assert isinstance(resumed, list) and [r["how"] for r in resumed] == ["sent"]
    [ran] = runs(runs_file)
    assert ran["args"] == {"amount": 50, "to": "acct-x"}
    assert ran["pid"] != paused["pid"]
    assert svc.get(review.id).executed

    # A third process (this one) starting a worker sends nothing again.
    signoff = bridge.Signoff(store_url)
    runner = Runner(app=make_app(root_for("single"), signoff), session_service=session_service(sessions))
    assert asyncio.run(signoff.resumer(runner).run_once()) == []
    assert len(runs(runs_file)) == 1
    assert_bound(store)
    signoff.close()
    store.close()
