"""What every ``audit`` verb shares: the store option, JSON output, ``--help`` with an example."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from signoff.audit.errors import UnusableInput
from signoff.audit.store import Store, open_store

DEFAULT_STORE = "sqlite:///signoff.db"
DEFAULT_KEY = "signoff-log-key.pem"
EXIT_CODES = """exit codes: 0 done / intact; 1 a verification or proof failed;
2 unusable input or a refused request (bad URL, missing or wrong file, unknown id, invalid patch)"""


def store_url(text: str) -> str:
    """A store URL, or a bare path taken as a SQLite file (``signoff.db`` → ``sqlite:////abs/signoff.db``)."""
    if "://" in text:
        return text
    if not text or text.endswith(("/", os.sep)):
        raise UnusableInput(
            f"--store: expected a URL (sqlite:///path.db or postgresql://…) or a file path, found {text!r}"
        )
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def open_existing(args: argparse.Namespace) -> Store:
    """The store named by ``--store``, which must already hold a log; creates no file or table."""
    return open_store(store_url(args.store), create=False)


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


def verb(
    sub: Any, name: str, summary: str, example: str, run: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """A subcommand with a one-line summary, an example and the exit codes in its ``--help``."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=f"example:\n  {example}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(run=run)
    return parser
