"""``audit evidence``: write an evidence pack an auditor can file (:mod:`signoff.audit.evidence`); ``audit
verify DIR`` checks one offline (:mod:`signoff.audit.evidence_check`). Wired in by :mod:`signoff.audit.cli`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from signoff.audit.cli_common import add_json, emit, open_existing, verb
from signoff.audit.errors import UnusableInput


def cmd_evidence(args: argparse.Namespace) -> int:
    from signoff.audit.evidence import build
    from signoff.audit.evidence_rows import Range

    try:
        scope = Range.of_days(args.since, args.until, args.tool or "")
    except ValueError as exc:
        raise UnusableInput(str(exc)) from None
    manifest = build(open_existing(args), Path(args.out), scope)
    emit(
        args,
        manifest,
        f"evidence pack in {args.out}: {manifest['reviews']} review(s) opened from {scope.since} to {scope.until}"
        f"{', tools ' + scope.tool if scope.tool else ''} ({manifest['decided']} decided), entries "
        f"{manifest['first_seq']}..{manifest['last_seq']} under the checkpoint of size {manifest['checkpoint_size']}\n"
        f"  check it: audit verify {args.out} --log-vkey '{manifest['log_vkey']}'",
    )
    return 0


def verify_pack(args: argparse.Namespace, directory: Path) -> int:
    """``audit verify DIR`` of an evidence pack: 0 intact, 1 tampered (the first thing that does not hold
    is named), 2 unusable."""
    from signoff.audit.evidence_check import check_pack

    if args.quorum is not None and not args.witness:
        raise UnusableInput("--quorum: expected --witness VKEY for each witness you trust, found none")
    report = check_pack(directory, log_vkey=args.log_vkey, witnesses=list(args.witness or []), quorum=args.quorum or 0)
    lines = [
        f"ok: evidence pack {directory} of log {report.log} intact: {report.reviews} review(s) opened from "
        f"{report.since} to {report.until}, none missing from decisions.csv",
        f"   entries {report.first_seq}..{report.last_seq} are the log's, in its checkpoint of size {report.size}"
        + (f", cosigned by {', '.join(report.witnesses)}" if report.witnesses else ""),
        f"   {report.receipts} receipt(s) checked; the log only grew from the pack's first checkpoint to its last",
        *(f"   note: {note}" for note in report.notes),
    ]
    emit(args, report.to_json(), "\n".join(lines))
    return 0


def register(sub: Any) -> None:
    made = verb(
        sub, "evidence", "write an evidence pack: decisions.csv, the log's slice, proofs, checked by audit verify DIR",
        "audit evidence --from 2026-12-01 --to 2026-12-31 --tool 'transfer*' --out evidence-2026-12", cmd_evidence,
    )  # fmt: skip
    made.add_argument("--from", dest="since", required=True, metavar="DAY", help="the first day (YYYY-MM-DD, UTC)")
    made.add_argument("--to", dest="until", required=True, metavar="DAY", help="the last day, included")
    made.add_argument("--tool", help="only reviews of tools matching this glob")
    made.add_argument("--out", required=True, help="a new directory for the pack")
    add_json(made)
