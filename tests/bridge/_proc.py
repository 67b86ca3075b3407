"""Run one side of a bridge test in its own process.

    python tests/bridge/_proc.py pause  STORE_URL SESSIONS KIND   -> prints {"session": id}
    python tests/bridge/_proc.py resume STORE_URL SESSIONS [ACTOR] -> prints [{"frontier", "how"}]

SESSIONS is ``sqlite:<path>`` (SqliteSessionService) or ``db:<sqlalchemy async url>``
(DatabaseSessionService). ``crash_resume`` is the same resume, for forked children that SIGKILL
themselves at one step of the resumer (``before_claim``, ``after_claim``, ``sent``, ``after_send``) or
of the resumed run (``before_store``, ``in_tool``, ``after_tool``: see ``_support.CrashPlugin``);
``python tests/bridge/_proc.py zygote`` forks them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for p in (str(HERE.parents[1]), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

from _support import (  # noqa: E402
    CRASH_STEPS,
    CrashPlugin,
    make_app,
    new_session,
    run_turn,
    sequential_agent,
    single_agent,
    transfer_script,
    workflow_agent,
)
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions.base_session_service import BaseSessionService  # noqa: E402

from signoff import bridge  # noqa: E402


def session_service(spec: str) -> BaseSessionService:
    if spec.startswith("sqlite:"):
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        return SqliteSessionService(db_path=spec[len("sqlite:") :])
    if spec.startswith("db:"):
        from google.adk.sessions.database_session_service import DatabaseSessionService

        return DatabaseSessionService(db_url=spec[len("db:") :])
    raise SystemExit(f"sessions: expected sqlite:<path> or db:<url>, found {spec!r}")


def root_for(kind: str) -> Any:
    if kind == "single":
        return single_agent(transfer_script(amount=5000, to="acct-x"))
    if kind == "callbacks":  # no plugin in the App: apply_reviewed_args is the only Signoff hook
        return single_agent(transfer_script(amount=5000, to="acct-x"), callbacks=True)
    if kind == "sequential":
        return sequential_agent()
    if kind == "workflow":
        return workflow_agent()
    raise SystemExit(f"kind: expected single, callbacks, sequential or workflow, found {kind!r}")


async def pause(store_url: str, sessions: str, kind: str = "single") -> dict[str, Any]:
    signoff = bridge.Signoff(store_url)
    service = session_service(sessions)
    runner = Runner(app=make_app(root_for(kind), signoff, plugin=kind != "callbacks"), session_service=service)
    sid = await new_session(service)
    await run_turn(runner, sid, '{"amount": 5000, "to": "acct-x"}' if kind == "workflow" else "pay acct-x")
    signoff.close()
    return {"session": sid, "pid": os.getpid()}


async def resume(
    store_url: str, sessions: str, actor: str | None = None, kind: str = "single", crash_at: str | None = None
) -> list[dict[str, Any]]:
    signoff = bridge.Signoff(store_url)
    service = session_service(sessions)
    extra = (CrashPlugin(crash_at),) if crash_at in CRASH_STEPS else ()
    app = make_app(root_for(kind), signoff, plugin=kind != "callbacks", extra=extra)
    runner = Runner(app=app, session_service=service)

    def hook(step: str, frontier: str) -> None:
        if step == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

    # One run at a time, so each child claims one frontier per step and the kills land on
    # many different frontiers (claims are per frontier whatever the concurrency).
    resumer = signoff.resumer(runner, actor=actor, on_step=hook if crash_at else None, concurrency=1)
    done = await resumer.run_once()
    signoff.close()
    return [{"frontier": r.frontier, "how": r.how, "session": r.session} for r in done]


def crash_resume(store_url: str, sessions: str, actor: str, crash_at: str | None, out: str) -> None:
    """Entry point for forked children (multiprocessing); writes its result to ``out`` if it lives."""
    result = asyncio.run(resume(store_url, sessions, actor, crash_at=crash_at))
    Path(out).write_text(json.dumps(result))


def zygote() -> None:
    """Fork one child per stdin line (JSON list of ``crash_resume`` args); print how each ended.

    The zygote only imports (it starts no thread), so a fork is a clean, real process that
    costs milliseconds instead of seconds of imports.
    """
    for line in sys.stdin:
        args = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                crash_resume(*args)
            except BaseException:  # noqa: BLE001
                import traceback

                traceback.print_exc()
                os._exit(3)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        print(json.dumps({"exit": code, "signal": killed_by}), flush=True)


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "zygote":
        zygote()
    elif command == "pause":
        print(json.dumps(asyncio.run(pause(*args))))
    elif command == "resume":
        print(json.dumps(asyncio.run(resume(*args))))
    else:
        raise SystemExit(f"command: expected pause or resume, found {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown of ADK's background threads
