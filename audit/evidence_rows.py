"""An evidence pack's ``decisions.csv`` (issue 23 §4): one row per review opened in a time range, derived
from the log's own entries, as pure functions.

The pack's builder (:mod:`signoff.audit.evidence`) writes the rows; its checker
(:mod:`signoff.audit.evidence_check`) derives them again from the pack's slice of the log and compares,
so a row removed, added or changed in the CSV is named. A row reads the way the gate does
(:func:`signoff.audit.decided.review_from_sealed`): who decided (and for whom, under a delegation), the
outcome, whether the args were edited, the digest of the args it runs with, and what ran.
"""

from __future__ import annotations

import csv
import fnmatch
import io
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from datetime import date, timedelta
from typing import Any

from signoff.audit.canonical import digest
from signoff.audit.decided import review_from_sealed
from signoff.audit.entry import NEVER_RUN, Entry

OPENINGS = ("review.opened", "review.auto_approved")


@dataclass(frozen=True)
class Range:
    """The reviews a pack is about: opened at or after ``since`` and before ``until`` (log times), of tools
    matching ``tool`` (an fnmatch glob; empty: every tool)."""

    since: str
    until: str
    tool: str = ""

    @classmethod
    def of_days(cls, first: str, last: str, tool: str = "") -> Range:
        """``--from 2026-12-01 --to 2026-12-07``: both days whole, in UTC."""
        try:
            start, end = date.fromisoformat(first), date.fromisoformat(last)
        except ValueError:
            raise ValueError(f"--from/--to: expected dates as YYYY-MM-DD, found {first!r} and {last!r}") from None
        if end < start:
            raise ValueError(f"--to: expected a day on or after --from ({first}), found {last}")
        after = end + timedelta(days=1)
        return cls(f"{start.isoformat()}T00:00:00.000000Z", f"{after.isoformat()}T00:00:00.000000Z", tool)

    def opens(self, entry: Entry) -> bool:
        """Whether ``entry`` opens a review this range is about."""
        if entry.kind not in OPENINGS or not self.since <= entry.at < self.until:
            return False
        tool = str((entry.body.get("call") or {}).get("tool") or "")
        return not self.tool or fnmatch.fnmatchcase(tool, self.tool)


@dataclass(frozen=True)
class Row:
    """One review as ``decisions.csv`` lists it (every field text; empty where it does not apply)."""

    review: str
    tool: str
    agent: str
    requested_by: str
    opened_at: str
    opened_seq: str
    outcome: str  # approved, edited, rejected, expired, withdrawn, auto_approved, pending
    decided_at: str
    decided_seq: str
    decided_by: str  # a person, or policy:<name> for an auto-approval
    acting_for: str  # a delegate's decision: whom it was for
    edited: str  # yes | no
    args_digest: str  # of the args it runs with once decided; of the args proposed while pending
    ran: str  # yes | no | will not run: <reason>
    ran_at: str
    ran_seq: str
    ran_args_digest: str


HEADER = tuple(f.name for f in fields(Row))


def rows(entries: Sequence[Entry], scope: Range) -> list[Row]:
    """The rows of the reviews ``scope`` names among ``entries`` (consecutive log entries, oldest first), in
    the order they opened. A review's later entries count only when they are among ``entries``."""
    own: dict[str, list[Entry]] = {}
    order: list[str] = []
    resumed: set[str] = set()
    failed: dict[str, str] = {}
    for item in entries:
        rid = item.body.get("review")
        if scope.opens(item) and isinstance(rid, str) and rid not in own:
            own[rid] = []
            order.append(rid)
        if isinstance(rid, str) and rid in own:
            own[rid].append(item)
        if item.kind == "run.resumed":
            resumed.add(str(item.body.get("frontier")))
        if item.kind in NEVER_RUN:
            for named in item.body.get("reviews") or []:
                failed.setdefault(str(named), str(item.body.get("reason") or item.kind))
    return [_row(rid, own[rid], resumed, failed) for rid in order]


def _row(review_id: str, own: list[Entry], resumed: set[str], failed: dict[str, str]) -> Row:
    opened = own[0]
    call = opened.body.get("call") or {}
    frontier = str(opened.body.get("frontier") or "")
    review = review_from_sealed(review_id, own, frontier in resumed, failed.get(review_id, ""))
    ran = next((e for e in own if e.kind == "tool.executed"), None)
    closing = next((e for e in own if e.seq == review.decision_seq), None)
    decided = review.status != "pending"
    if review.status == "auto_approved":
        by = f"policy:{review.policy.name}"
    else:
        by = (review.decided_by or "") if decided else ""
    return Row(
        review=review_id,
        tool=str(call.get("tool") or ""),
        agent=str(call.get("agent") or ""),
        requested_by=str(call.get("requested_by") or ""),
        opened_at=opened.at,
        opened_seq=str(opened.seq),
        outcome=review.status,
        decided_at=closing.at if closing is not None and decided else "",
        decided_seq=str(review.decision_seq) if decided and review.decision_seq is not None else "",
        decided_by=by,
        acting_for=review.acting_for(review.decision_seq) or "",
        edited="yes" if review.status == "edited" or (review.round > 0 and decided) else "no",
        args_digest=_digest(review),
        ran="yes" if ran is not None else (f"will not run: {review.resume_failed}" if review.resume_failed else "no"),
        ran_at=ran.at if ran is not None else "",
        ran_seq=str(ran.seq) if ran is not None else "",
        ran_args_digest=str(ran.body.get("args_digest") or "") if ran is not None else "",
    )


def _digest(review: Any) -> str:
    """The digest of the args as the entries hold them: decided, those it runs with; else as proposed."""
    return digest(review.final_args) if review.final_args is not None else str(review.args_digest)


def to_csv(found: Iterable[Row]) -> str:
    """``decisions.csv``: a header line and one line per row (RFC 4180, ``\\r\\n`` line ends)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(HEADER)
    for row in found:
        writer.writerow(astuple(row))
    return out.getvalue()


def from_csv(text: str) -> list[tuple[str, ...]]:
    """The data lines of a ``decisions.csv`` as tuples (the header checked); ``ValueError`` names a bad line."""
    reader = csv.reader(io.StringIO(text))
    lines = list(reader)
    if not lines or tuple(lines[0]) != HEADER:
        found_header = ",".join(lines[0]) if lines else "nothing"
        raise ValueError(f"decisions.csv: expected the header {','.join(HEADER)}, found {found_header}")
    found = []
    for number, line in enumerate(lines[1:], start=2):
        if len(line) != len(HEADER):
            raise ValueError(f"decisions.csv line {number}: expected {len(HEADER)} fields, found {len(line)}")
        found.append(tuple(line))
    return found
