"""The ``audit`` command: create, inspect, prove and verify a Signoff log, and decide from a terminal.

Errors become a message and an exit code here, in one place, never a traceback:

* 0: done; the log (or the proof) is intact;
* 1: a verification or a proof failed: the log or the file was tampered with, or breaks a rule;
* 2: unusable input or a refused request: a bad store URL, a missing or wrong kind of file, an
  unknown review or seq, an invalid patch or value, or a decision the log's rules refuse.

The verbs live in :mod:`signoff.audit.cli_log` (the log and its proofs) and
:mod:`signoff.audit.cli_review` (keys, reviewers, decisions).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sqlalchemy.exc import DBAPIError

from signoff.audit import cli_log, cli_policy, cli_review, cli_witness
from signoff.audit.cli_common import DEFAULT_KEY, DEFAULT_STORE, EXIT_CODES
from signoff.audit.errors import AuditError, VerificationFailed
from signoff.audit.merkle import ProofError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="audit",
        description="Create, inspect, prove and verify a Signoff log; enroll reviewers; decide from a terminal.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--store",
        default=os.environ.get("SIGNOFF_STORE", DEFAULT_STORE),
        help="store URL (sqlite:///file.db, postgresql://…) or a SQLite file path (env SIGNOFF_STORE)",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("SIGNOFF_KEY", DEFAULT_KEY),
        help="the log's private key file, for init and checkpoint (PEM, mode 0600; env SIGNOFF_KEY)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_log.register(sub)
    cli_review.register(sub)
    cli_policy.register(sub, os.environ.get("SIGNOFF_ADMIN_KEY"))
    cli_witness.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except (VerificationFailed, ProofError) as exc:
        print(f"TAMPERED or INVALID: {exc}", file=sys.stderr)
        return 1
    except AuditError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DBAPIError as exc:
        print(
            f"error: the database refused: expected a working store at {args.store}, found {exc.orig}", file=sys.stderr
        )
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the edge: a message, never a traceback
        print(f"error: unexpected {type(exc).__name__}: {exc} (please report this)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
