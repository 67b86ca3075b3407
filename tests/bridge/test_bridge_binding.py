"""The binding: what ran is what was approved, and the log says so to an outside verifier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _support import REVIEWER, REVIEWER_KEY, Harness, fc, runs, single_agent
from conftest import ROOT

from signoff import bridge
from signoff.audit import digest

pytestmark = pytest.mark.asyncio


async def test_executed_digests_match_decisions_and_audit_verify_passes(
    signoff: bridge.Signoff, sqlite_url: str, runs_file: Path, tmp_path: Path
) -> None:
    script = [
        [
            fc("transfer", {"amount": 1, "to": "a"}, "c1"),
            fc("transfer", {"amount": 2, "to": "b"}, "c2"),
            fc("close_account", {"account": "c"}, "c3"),
        ]
    ]
    h = Harness(signoff, single_agent(script), tmp_path)
    await h.start()
    by_call = {r.call.call_id: r for r in signoff.reviews.pending()}
    signoff.reviews.approve(by_call["c1"].id, reviewer=REVIEWER, signer=REVIEWER_KEY)
    signoff.edit(
        by_call["c2"].id,
        reviewer=REVIEWER,
        signer=REVIEWER_KEY,
        patch=[{"op": "replace", "path": "/to", "value": "b2"}],
    )
    signoff.reviews.reject(by_call["c3"].id, reviewer=REVIEWER, signer=REVIEWER_KEY, reason="no")
    await h.resume()

    decided = {}
    executed = {}
    for entry in signoff.store.entries():
        if entry.kind in ("review.approved", "review.edited"):
            decided[entry.body["review"]] = entry.body["args_digest"]
        if entry.kind == "tool.executed":
            executed[entry.body["review"]] = entry.body["args_digest"]
    assert executed == decided and len(executed) == 2
    # ... and the args each signed digest stands for (the sealed args, revealed and checked against their
    # commitments) are the args the tool really received.
    ran = {r["args"]["to"]: r["args"] for r in runs(runs_file)}
    assert signoff.reviews.get(by_call["c1"].id).final_args == ran["a"]
    assert signoff.reviews.get(by_call["c2"].id).final_args == ran["b2"]
    sealed_final = signoff.store.entry(signoff.reviews.get(by_call["c1"].id).opened_seq).body["call"]["args"]
    assert executed[by_call["c1"].id] == digest(sealed_final) != digest(ran["a"])  # salted: no guessing

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "signoff.audit.cli", "--store", sqlite_url, "verify"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
