"""The resumer's pass over 1,000 decided frontiers: deciding from the log (issue 17) against the code
before it, in the same run.

    python tests/benchmarks/resume_pass_bench.py [--frontiers 1000] [--rounds 2] [--baseline a50c29c]

Each round runs the same child twice, interleaved: once on this checkout, once on ``--baseline`` (a git
worktree of the commit before the change, made in a temporary directory). A child opens a fresh SQLite
store, pauses ``--frontiers`` ADK sessions (one gated call each), approves every review (signed), then
times ``Resumer.run_once()`` until nothing is left to resume: the pass reads the candidates, reads each
frontier, claims it and sends its answer through a real ``Runner`` (the tool runs). It also times the
log-side work alone, reading and claiming 1,000 more decided frontiers with no ADK run.
Prints one JSON object. Target: the pass costs less than 2x the baseline's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASELINE = "a50c29c"  # the last commit before the resumer decided from the log


def child(root: Path, frontiers: int) -> dict[str, Any]:
    """Runs inside the code under test (``root`` is first on sys.path)."""
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(root))
    from google.adk.agents import LlmAgent
    from google.adk.apps import App, ResumabilityConfig
    from google.adk.runners import Runner
    from google.adk.sessions.sqlite_session_service import SqliteSessionService
    from google.adk.tools import FunctionTool

    from signoff import bridge
    from signoff.audit import ReviewService, Signer, open_store
    from signoff.audit.keys import read_private_key
    from signoff.audit.reviews import CallSpec
    from signoff.audit.store import default_admin_key
    from signoff.bridge.scripted import ScriptedModel

    ran = 0

    def pay(n: int) -> dict[str, Any]:
        """Pay."""
        nonlocal ran
        ran += 1
        return {"paid": n}

    tmp = Path(tempfile.mkdtemp(prefix="resume-pass-"))
    url = f"sqlite:///{tmp / 'signoff.db'}"
    store = open_store(url)
    store.init_log(tmp / "log.key")
    admin = read_private_key(default_admin_key(tmp / "log.key"))
    person = Signer.generate()
    reviewer = "human:bench@example.org"
    ReviewService(store).enroll_reviewer(reviewer, roles=["ops"], tools=["*"], key=person.public, admin=admin)
    store.close()
    signoff = bridge.Signoff(url)
    agent = LlmAgent(
        name="payer",
        model=ScriptedModel.calling("pay", n=1, say="paying"),
        tools=[FunctionTool(pay, require_confirmation=True)],
    )
    app = App(
        name="bench", root_agent=agent, plugins=[signoff.plugin()],
        resumability_config=ResumabilityConfig(is_resumable=True),
    )  # fmt: skip
    runner = Runner(app=app, session_service=SqliteSessionService(str(tmp / "sessions.db")))

    async def main() -> dict[str, Any]:
        from google.genai import types

        for _ in range(frontiers):
            session = await runner.session_service.create_session(app_name="bench", user_id="u")
            ask = types.Content(role="user", parts=[types.Part(text="pay")])
            async for _event in runner.run_async(user_id="u", session_id=session.id, new_message=ask):
                pass
        for review in signoff.reviews.pending(limit=frontiers + 10):
            signoff.reviews.approve(review.id, reviewer=reviewer, signer=person)
        resumer = signoff.resumer(runner, actor="agent:bench")
        t0 = time.perf_counter()
        done = 0
        while True:
            batch = await resumer.run_once()
            if not batch:
                break
            done += len(batch)
        pass_seconds = time.perf_counter() - t0
        # The log side alone: 1,000 decided frontiers read and claimed, no ADK run.
        svc = signoff.reviews
        ids = []
        for i in range(frontiers):
            call = CallSpec(
                app="other", user="u", session=f"s{i}", invocation=f"i{i}", confirmation_id=f"c{i}",
                call_id=f"k{i}", tool="pay", args={"n": i},
            )  # fmt: skip
            front = svc.open_frontier([call], actor="agent:bench")
            svc.approve(front.reviews[0].id, reviewer=reviewer, signer=person)
            ids.append(front.id)
        t0 = time.perf_counter()
        for fid in ids:
            svc.frontier(fid)
            svc.claim_resume(fid, actor="agent:bench")
        log_seconds = time.perf_counter() - t0
        return {
            "resumed": done,
            "tool_runs": ran,
            "pass_seconds": round(pass_seconds, 3),
            "per_frontier_ms": round(pass_seconds / max(done, 1) * 1000, 3),
            "read_and_claim_ms": round(log_seconds / frontiers * 1000, 3),
        }

    try:
        return asyncio.run(main())
    finally:
        signoff.close()


def worktree(rev: str) -> Path:
    target = Path(tempfile.mkdtemp(prefix="signoff-baseline-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(target), rev], check=True,
                   capture_output=True)  # fmt: skip
    return target


def run_child(root: Path, frontiers: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(root), "--frontiers", str(frontiers)],
        capture_output=True, text=True, env=env, cwd=root, timeout=3600,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"child on {root} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frontiers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.frontiers)))
        return
    base = worktree(args.baseline)
    try:
        rounds: dict[str, list[dict[str, Any]]] = {"baseline": [], "log_decides": []}
        for _ in range(args.rounds):
            rounds["baseline"].append(run_child(base, args.frontiers))
            rounds["log_decides"].append(run_child(ROOT, args.frontiers))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds[name])

    ratio = median("log_decides", "pass_seconds") / median("baseline", "pass_seconds")
    print(json.dumps({
        "frontiers": args.frontiers,
        "baseline_commit": args.baseline,
        "rounds": rounds,
        "pass_seconds": {"baseline": median("baseline", "pass_seconds"),
                         "log_decides": median("log_decides", "pass_seconds")},
        "read_and_claim_ms": {"baseline": median("baseline", "read_and_claim_ms"),
                              "log_decides": median("log_decides", "read_and_claim_ms")},
        "pass_ratio": round(ratio, 3),
        "target": "pass_ratio < 2",
        "met": ratio < 2,
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
