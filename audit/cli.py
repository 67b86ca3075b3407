"""The ``audit`` command: create, inspect, prove and verify a Signoff log, and decide from a terminal.

Errors become a message and an exit code at one edge (:func:`signoff.audit.cli_common.run_at_edge`,
which ``desk`` and ``signoff`` share), never a traceback:

* 0: done; the log (or the proof) is intact;
* 1: a verification or a proof failed: the log or the file was tampered with, or breaks a rule;
* 2: unusable input or a refused request: a bad store URL, a missing or wrong kind of file, an
  unknown review or seq, an invalid patch or value, or a decision the log's rules refuse.

The verbs live in :mod:`signoff.audit.cli_log` (the log and its proofs),
:mod:`signoff.audit.cli_review` (keys, reviewers, decisions), :mod:`signoff.audit.cli_answer` (answers),
:mod:`signoff.audit.cli_policy` and
:mod:`signoff.audit.cli_witness`. Each imports what a verb needs when the verb runs, so ``audit --help``
loads neither SQLAlchemy nor Alembic nor fido2 (tests/test_startup.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from signoff.audit import (
    cli_answer,
    cli_delegate,
    cli_evidence,
    cli_log,
    cli_policy,
    cli_proofs,
    cli_review,
    cli_sso,
    cli_values,
    cli_witness,
)
from signoff.audit.cli_common import DEFAULT_KEY, DEFAULT_STORE, STORE_HELP, add_log_option, command, run_at_edge

EXAMPLES = [
    "audit --store sqlite:///signoff.db --key signoff-log-key.pem init",
    "audit --store sqlite:///signoff.db verify",
    "audit approve rv_… --as alice@example.org --reviewer-key alice.pem",
]


def build_parser() -> argparse.ArgumentParser:
    parser, sub = command(
        "audit",
        "Create, inspect, prove and verify a Signoff log; enroll reviewers; decide from a terminal.",
        EXAMPLES,
    )
    parser.add_argument("--store", default=os.environ.get("SIGNOFF_STORE", DEFAULT_STORE), help=STORE_HELP)
    add_log_option(parser)
    parser.add_argument(
        "--key",
        default=os.environ.get("SIGNOFF_KEY", DEFAULT_KEY),
        help="the log's private key file, for init and checkpoint (PEM, mode 0600; env SIGNOFF_KEY)",
    )
    cli_log.register(sub)
    cli_proofs.register(sub)
    cli_review.register(sub)
    cli_answer.register(sub)
    cli_delegate.register(sub)
    cli_evidence.register(sub)
    cli_policy.register(sub, os.environ.get("SIGNOFF_ADMIN_KEY"))
    cli_witness.register(sub)
    cli_values.register(sub)
    cli_sso.register(sub)
    _log_after_the_verb(parser)
    return parser


def _log_after_the_verb(parser: argparse.ArgumentParser) -> None:
    """``--log ID`` after the verb too (``audit evidence --from … --log ID``), wherever a verb has no ``--log``
    of its own (``audit witness serve --log VKEY`` names a log it witnesses); given there, it wins."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                if "--log" not in child._option_string_actions:
                    child.add_argument(
                        "--log",
                        dest="log_id",
                        metavar="ID",
                        default=argparse.SUPPRESS,
                        help="which of the store's logs (as `audit --log ID …`; `audit logs` lists them)",
                    )
                _log_after_the_verb(child)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    return run_at_edge(lambda: int(args.run(args)), args.store)


if __name__ == "__main__":
    sys.exit(main())
