"""What the ``audit``, ``desk`` and ``signoff`` commands share: the store option, the exit codes (one
edge that turns errors into a message and a code), JSON output, ``--help`` with an example.

It imports nothing heavy: each verb imports what it needs when it runs, so ``--help`` starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.audit.errors import AuditError, UnusableInput, VerificationFailed
from signoff.audit.merkle import ProofError

if TYPE_CHECKING:
    from signoff.audit.store import Store

DEFAULT_STORE = "sqlite:///signoff.db"
DEFAULT_KEY = "signoff-log-key.pem"
EXIT_CODES = """exit codes: 0 done / intact; 1 a verification or proof failed;
2 unusable input or a refused request (bad URL, missing or wrong file, unknown id, invalid patch)"""
STORE_HELP = "store URL (sqlite:///file.db, postgresql://…) or a SQLite file path (env SIGNOFF_STORE)"


def store_url(text: str, option: str = "--store") -> str:
    """A store URL, or a bare path taken as a SQLite file (``signoff.db`` → ``sqlite:////abs/signoff.db``).

    The one reading of a store option for ``audit``, ``desk``, ``desk notify`` and ``signoff resume``.
    """
    if "://" in text:  # the store names what it cannot open (another scheme, an in-memory SQLite)
        return text
    if not text or text.endswith(("/", os.sep)):
        raise UnusableInput(
            f"{option}: expected a URL (sqlite:///path.db or postgresql://…) or a file path, found {text!r}"
        )
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def sqlite_file(url: str) -> str | None:
    """The file a ``sqlite:///`` URL names (``""`` for none; ``None`` for another backend)."""
    scheme, _, rest = url.partition("://")
    if not scheme.startswith("sqlite"):
        return None
    return rest.removeprefix("/").split("?", 1)[0]


def existing_store_url(text: str, option: str = "--store") -> str:
    """:func:`store_url` for a store that must exist already: a missing SQLite file is refused by name."""
    url = store_url(text, option)
    path = sqlite_file(url)
    if path and path != ":memory:" and not Path(path).is_file():
        raise UnusableInput(
            f"{option}: expected a Signoff store made by `audit init` (a SQLite file, or postgresql://…), "
            f"found none at {path}"
        )
    return url


def add_log_option(parser: Any) -> None:
    """``--log ID`` (``args.log_id``; env ``SIGNOFF_LOG``): which of the store's logs a command is about."""
    parser.add_argument(
        "--log",
        dest="log_id",
        metavar="ID",
        default=os.environ.get("SIGNOFF_LOG") or None,
        help="which of the store's logs (a store may hold several, one per app or team: `audit logs` lists "
        "them; env SIGNOFF_LOG); default: the store's only log",
    )


def open_existing(args: argparse.Namespace) -> Store:
    """The store named by ``--store``, bound to the log ``--log`` names (else its only one), which must
    already exist; creates no file or table."""
    from signoff.audit.store import open_store

    return open_store(existing_store_url(args.store), create=False, log=getattr(args, "log_id", None))


def free_port(host: str, port: int) -> bool:
    """Whether ``host:port`` can be listened on now (port 0 always can)."""
    import socket

    if port == 0:
        return True
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def fail(message: str) -> None:
    """One line on stderr: ``error: …``."""
    print(f"error: {message}", file=sys.stderr, flush=True)


def run_at_edge(run: Callable[[], int], store: str | None = None) -> int:
    """Run a verb; every error becomes one line on stderr and an exit code, never a traceback.

    0 done (or intact); 1 a verification or proof failed (``TAMPERED or INVALID: …``); 2 unusable
    input or a refused request (``error: …``); 130 interrupted.
    """
    try:
        return run()
    except (VerificationFailed, ProofError) as exc:
        print(f"TAMPERED or INVALID: {exc}", file=sys.stderr)
        return 1
    except AuditError as exc:
        fail(str(exc))
        return 2
    except BrokenPipeError:  # `audit log | head`: the reader has all it wanted
        with contextlib.suppress(OSError, ValueError):  # no second error when Python flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        fail(f"{exc.filename or ''}: {exc.strerror or exc}" if exc.filename else str(exc.strerror or exc))
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the edge: a message, never a traceback
        found = sys.modules.get("sqlalchemy.exc")
        if found is not None and isinstance(exc, found.DBAPIError):  # loaded only by a verb that used a database
            from signoff.audit.driver import safe_url

            fail(f"the database refused: expected a working store at {safe_url(store or '')}, found {exc.orig}")
        else:
            fail(f"unexpected {type(exc).__name__}: {exc} (please report this)")
        return 2


def emit(args: argparse.Namespace, data: Any, text: str | Callable[[], None]) -> None:
    """Print ``data`` as JSON with ``--json``, else ``text`` (a string, or a function that prints)."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    elif callable(text):
        text()
    else:
        print(text)


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def epilog(examples: Sequence[str], exit_codes: str = EXIT_CODES) -> str:
    """The end of a ``--help``: what to type, then what the exit code means."""
    lines = "\n".join(f"  {example}" for example in examples)
    return f"example{'s' if len(examples) > 1 else ''}:\n{lines}\n\n{exit_codes}"


def command(
    prog: str, description: str, examples: Sequence[str], exit_codes: str = EXIT_CODES
) -> tuple[argparse.ArgumentParser, Any]:
    """A command's top parser (``audit``, ``desk``, ``signoff``); returns it and the subparsers for its verbs."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=epilog(examples, exit_codes),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def verb(
    sub: Any,
    name: str,
    summary: str,
    example: str,
    run: Callable[[argparse.Namespace], int],
    exit_codes: str = EXIT_CODES,
) -> argparse.ArgumentParser:
    """A subcommand with a one-line summary, an example and the exit codes in its ``--help``."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=epilog([example], exit_codes),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(run=run)
    return parser


def group(sub: Any, name: str, summary: str, examples: Sequence[str], dest: str, exit_codes: str = EXIT_CODES) -> Any:
    """A verb with verbs of its own (``desk reviewer``, ``desk notify``): examples in its ``--help``;
    returns the subparsers to add its verbs to."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}. Each verb has its own --help.",
        epilog=epilog(examples, exit_codes),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.add_subparsers(dest=dest, required=True, metavar="VERB")
