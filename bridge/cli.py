"""The ``signoff`` command: the resumer as a sidecar process, for apps served by ``adk api_server``.

``signoff resume --app bank.agent:app --sessions sqlite:///sessions.db`` loads the ADK ``App`` the
API server serves, opens the same session database (the same URI syntax as ``adk api_server
--session_service_uri``) and resumes every decided frontier of that app exactly once, until stopped.
No Python glue is needed: the Signoff instance is the one behind the App's Signoff plugin (or the
module's ``signoff`` attribute).

Exit codes: 0 stopped cleanly (or, with ``--once``, every frontier looked at was resumed); 1 a
frontier could not be resumed (with ``--once``; the log line names it) or the resumer stopped on an
error; 2 unusable input (no such module or attribute, no App, no Signoff). Errors are one line each,
never a traceback (``--verbose`` adds them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from signoff.audit.cli_common import add_log_option, command, epilog, existing_store_url, run_at_edge
from signoff.audit.errors import AuditError, UnusableInput
from signoff.bridge._plugin import SignoffPlugin
from signoff.bridge._signoff import Signoff

EXAMPLE = "signoff resume --agents-dir agents --app bank.agent:app --sessions sqlite:///sessions.db"
DESCRIPTION = """Resume the decided frontiers of an app served by `adk api_server`, exactly once.

It loads the ADK App the API server serves (--app MODULE:ATTR, found under --agents-dir), opens the
same session database (--sessions, the URI `adk api_server --session_service_uri` takes) and sends
each decision back to its run, once, until stopped. The Signoff it uses is the one behind the App's
Signoff plugin, or the module's `signoff` attribute, or one on --store. Up to --concurrency runs are
resumed at once; plain (non-async) tools run on --tool-threads threads, unless the module's own
`run_config` (a google.adk RunConfig, which the resumed runs get) sets a tool thread pool."""
EXIT = """exit codes: 0 stopped cleanly (with --once: every frontier looked at was resumed);
1 a frontier could not be resumed (with --once; a log line names it) or the resumer stopped on an error;
2 unusable input (no such module, App or Signoff)"""


class _OneLine(logging.Formatter):
    """Log records as one line each: the message, never a traceback (``--verbose`` keeps them)."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return ""

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return ""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return super().format(record)


def setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    fmt = "signoff: %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(logging.Formatter(fmt) if verbose else _OneLine(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose else logging.WARNING)


class UsageError(UnusableInput):
    """The command line names something that is not there (exit code 2)."""


def load_app(spec: str, agents_dir: str | None) -> tuple[Any, Any]:
    """``MODULE:ATTR`` → (the App, its module); the agents dir (like api_server's) goes on the path."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--app: expected MODULE:ATTR (e.g. bank.agent:app), found {spec!r}")
    for path in (agents_dir, os.getcwd()):
        if path and path not in sys.path:
            sys.path.insert(0, os.path.abspath(path))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--app: expected an importable module {module_name!r}, found: {exc}") from None
    app = getattr(module, attr, None)
    from google.adk.apps import App

    if not isinstance(app, App):
        raise UsageError(f"--app: expected {spec} to be a google.adk.apps.App, found {type(app).__name__}")
    return app, module


def signoff_of(app: Any, module: Any, store: str | None, log: str | None = None) -> Signoff:
    """The Signoff behind the App's plugin, else the module's ``signoff``, else one on ``--store`` (and
    ``--log``)."""
    for plugin in app.plugins or []:
        if isinstance(plugin, SignoffPlugin) and isinstance(plugin.signoff, Signoff):
            return plugin.signoff
    found = getattr(module, "signoff", None)
    if isinstance(found, Signoff):
        return found
    if store:
        return Signoff(store, default=False, log=log)
    raise UsageError(
        "expected the App to carry Signoff's plugin (plugins=[signoff.plugin()]) or its module to define "
        "`signoff = Signoff(...)`, found neither; or pass --store"
    )


def run_config_of(module: Any) -> Any:
    """The ``RunConfig`` the App's module passes its runs (a module-level ``run_config``), if any: the
    resumed runs get it too (with a tool thread pool added when it sets none)."""
    from google.adk.agents.run_config import RunConfig

    found = getattr(module, "run_config", None)
    if found is not None and not isinstance(found, RunConfig):
        raise UsageError(
            f"run_config: expected a google.adk RunConfig in the App's module, found {type(found).__name__}"
        )
    return found


@contextlib.contextmanager
def exclusive(store: Any, actor: str) -> Iterator[None]:
    """Hold the right to resume as ``actor`` on this log for the life of this process: a second worker
    under the same name would recover the first one's in-flight claims as its own."""
    name = f"signoff-resumer:{store.log_id}:{actor}"
    if store.backend == "sqlite":
        import fcntl

        path = Path(
            store.url.removeprefix("sqlite:///") + f".resumer-{hashlib.sha256(name.encode()).hexdigest()[:16]}.lock"
        )
        handle = path.open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise UsageError(
                f"another `signoff resume` runs as {actor} on this log; give each its own --actor"
            ) from None
        try:
            yield
        finally:
            handle.close()
        return
    import psycopg

    with psycopg.connect(store._pg_conninfo, autocommit=True) as conn:
        held = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (name,)).fetchone()
        if not held or not held[0]:
            raise UsageError(f"another `signoff resume` runs as {actor} on this log; give each its own --actor")
        yield


async def _serve(
    signoff: Signoff,
    runner: Any,
    actor: str | None,
    max_wait: float,
    once: bool,
    takeover_after: float,
    concurrency: int = 8,
    tool_threads: int | None = None,
    run_config: Any = None,
) -> int:
    """Run the resumer; the exit code (1: with ``once``, a frontier it could not resume)."""
    resumer = signoff.resumer(
        runner,
        actor=actor,
        max_wait=max_wait,
        takeover_after=takeover_after,
        concurrency=concurrency,
        tool_threads=tool_threads,
        run_config=run_config,
    )
    if once:
        done = await resumer.run_once()
        failed = sorted({frontier for frontier, _step, _why in resumer.failures})
        print(f"signoff: resumed {len(done)} frontier(s)", file=sys.stderr)
        if failed:
            print(f"signoff: could not resume {len(failed)} frontier(s): {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await resumer.serve(stop=stop)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    store = existing_store_url(args.store) if args.store else None  # the forms `audit --store` takes
    from google.adk.cli.utils.service_factory import create_session_service_from_options
    from google.adk.runners import Runner

    for name, value in (("--concurrency", args.concurrency), ("--tool-threads", args.tool_threads)):
        if value is not None and value < 1:
            raise UsageError(f"{name}: expected a number of at least 1, found {value}")
    setup_logging(args.verbose)
    app, module = load_app(args.app, args.agents_dir)
    signoff = signoff_of(app, module, store, args.log_id)
    # The very function `adk api_server --session_service_uri` uses, so every URI it takes works here.
    try:
        sessions = create_session_service_from_options(
            base_dir=args.agents_dir or ".", session_service_uri=args.sessions
        )
    except (ValueError, ImportError) as exc:
        raise UsageError(
            f"--sessions: expected a session service URI `adk api_server` takes (sqlite:///…, postgresql://…), "
            f"found {args.sessions!r}: {exc}"
        ) from None
    runner = Runner(app=app, session_service=sessions)
    actor = args.actor or f"agent:signoff-resumer-{app.name}"
    with exclusive(signoff.store, actor):
        print(
            f"signoff: resuming app {app.name!r} as {actor} from {signoff.store.url} with sessions {args.sessions}",
            file=sys.stderr,
            flush=True,
        )
        if args.metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(args.metrics_port, addr=args.metrics_host)
        publishing = _publisher(signoff, args)
        try:
            return asyncio.run(
                _serve(
                    signoff,
                    runner,
                    actor,
                    args.max_wait,
                    args.once,
                    args.takeover_after,
                    args.concurrency,
                    args.tool_threads,
                    run_config_of(module),
                )
            )
        except (UsageError, AuditError):
            raise
        except Exception as exc:  # noqa: BLE001 - the edge: one line, never a traceback
            print(f"error: the resumer stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
            if args.verbose:
                raise
            return 1
        finally:
            if publishing is not None:
                publisher, thread, stop = publishing
                stop.set()
                thread.join(10)
                publisher.close()


def _publisher(signoff: Signoff, args: argparse.Namespace) -> Any:
    """With ``--log-key`` and ``--checkpoint-every``: checkpoints pushed to the log's witnesses on a schedule,
    in a thread (:class:`signoff.audit.publisher.Publisher`); ``None`` otherwise. With ``--once``: one pass."""
    if args.checkpoint_every is None:
        return None
    if not args.log_key or args.checkpoint_every <= 0:
        raise UsageError("--checkpoint-every: expected the log key (--log-key FILE) and a number of seconds above 0")
    from signoff.audit.keys import read_private_key
    from signoff.audit.publisher import Publisher

    publisher = Publisher(signoff.store, read_private_key(args.log_key))
    if args.once:
        publisher.publish_once()
        publisher.close()
        return None
    return (publisher, *publisher.start(args.checkpoint_every))


def build_parser() -> argparse.ArgumentParser:
    parser, sub = command("signoff", "Signoff's ADK side: run the resumer as a sidecar.", [EXAMPLE], EXIT)
    resume = sub.add_parser(
        "resume",
        help="resume decided frontiers of an app served by `adk api_server`, exactly once",
        description=DESCRIPTION,
        epilog=epilog([EXAMPLE], EXIT),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    resume.add_argument("--app", required=True, help="MODULE:ATTR of the google.adk.apps.App (e.g. bank.agent:app)")
    resume.add_argument("--agents-dir", help="the directory `adk api_server` serves (put on the import path)")
    resume.add_argument(
        "--sessions", required=True, help="the session service URI the API server uses (sqlite:///…, postgresql://…)"
    )
    resume.add_argument(
        "--store",
        help="the Signoff store when the App's module defines no Signoff: a URL (sqlite:///file.db, "
        "postgresql://…) or a SQLite file path",
    )
    add_log_option(resume)  # with --store
    resume.add_argument("--actor", help="this worker's name on the log (give each concurrent worker its own)")
    resume.add_argument("--max-wait", type=float, default=5.0, help="seconds between passes at most (push wakes it)")
    resume.add_argument("--once", action="store_true", help="one pass, then exit")
    resume.add_argument(
        "--takeover-after",
        type=float,
        default=600.0,
        help="seconds after which a call claimed without a resume lease (by a client, through the guard) that "
        "neither ran nor had its answer consumed is sent again; keep it longer than your slowest tool (a "
        "resumer's own claims are taken over once it is gone, however long their tools run)",
    )
    resume.add_argument(
        "--concurrency", type=int, default=8, help="frontiers resumed at once in this process (default 8)"
    )
    resume.add_argument(
        "--tool-threads",
        type=int,
        help="threads for plain (non-async) tools of the resumed runs (default: --concurrency), so a slow one "
        "holds no other resume; an App whose own RunConfig sets a tool thread pool keeps it",
    )
    resume.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics (signoff_resume_failures_total, …) on this port"
    )
    resume.add_argument("--metrics-host", default="127.0.0.1", help="the address for --metrics-port")
    resume.add_argument("--verbose", action="store_true", help="log more, with tracebacks")
    resume.add_argument("--log-key", help="the log's private key file: lets this process make checkpoints")
    resume.add_argument(
        "--checkpoint-every",
        type=float,
        metavar="SECONDS",
        help="with --log-key: make a checkpoint when the log grew and push it to the log's witnesses, this often",
    )
    resume.set_defaults(run=cmd_resume)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_at_edge(lambda: int(args.run(args)), args.store)


if __name__ == "__main__":
    sys.exit(main())
