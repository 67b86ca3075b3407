"""What ``audit verify`` checks of the values beside a sealed log (SPEC.md "Values beside the log"), pure.

While the verifier streams the entries, :class:`ValueLedger` adds up the commitments they hold,
each with its owner (the review, or for a reply the frontier), as a multiset hash (flat memory),
and subtracts those an admin-signed ``data.erased`` names. Then the value rows are streamed once:
each must match its commitment (salt and value), and their multiset must equal what the entries
hold less what was erased. A value deleted without ``data.erased``, changed, given another salt or
moved to another owner breaks one or the other; :func:`first_difference` then names the review.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from signoff.audit import sealing
from signoff.audit.errors import VerificationFailed

_MOD = 1 << 256


def owner_name(owner: str) -> str:
    """How a message names an owner: the frontier a reply belongs to, or a review."""
    return f"frontier {owner}" if owner.startswith("fr_") else f"review {owner}"


def _h(owner: str, commitment: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{owner}\x00{commitment}".encode()).digest(), "big")


def held(kind: str, body: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The owner and the commitments an entry of ``kind`` holds (none for most kinds)."""
    if kind in ("review.opened", "review.auto_approved"):
        call = body.get("call")
        return str(body.get("review")), sealing.call_commitments(call) if isinstance(call, Mapping) else []
    if kind in ("review.approved", "review.edited"):
        found = sealing.commitments_in(body.get("payload"))
        for op in body.get("patch") or [] if kind == "review.edited" else []:
            if isinstance(op, Mapping) and "value" in op:
                found += (
                    sealing.commitments_in(op["value"])
                    if op.get("path") == ""
                    else ([op["value"]] if sealing.is_commitment(op["value"]) else [])
                )
        return str(body.get("review")), found
    if kind == "tool.executed":
        return str(body.get("review")), sealing.commitments_in(body.get("result_preview"))
    if kind == "run.replied":
        return str(body.get("frontier")), sealing.commitments_in(body.get("text"))
    return "", []


def erased_by(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(owner, commitment) pairs a ``data.erased`` body names."""
    named = body.get("commitments")
    out = []
    if isinstance(named, Mapping):
        for owner, listed in named.items():
            for commitment in listed if isinstance(listed, list) else []:
                out.append((str(owner), str(commitment)))
    return out


def check_erased_body(seq: int, body: Mapping[str, Any]) -> None:
    """The shape of a ``data.erased`` body: the review, what was erased (per owner), and why."""
    if not isinstance(body.get("review"), str) or not body["review"]:
        raise VerificationFailed(seq, "data.erased", "the review it erases values of", repr(body.get("review")))
    pairs = erased_by(body)
    if not pairs or not all(sealing.is_commitment(c) for _owner, c in pairs):
        raise VerificationFailed(seq, "data.erased", "commitments per owner", repr(body.get("commitments"))[:80])
    if not isinstance(body.get("reason"), str) or not body["reason"].strip():
        raise VerificationFailed(seq, "data.erased", "a reason", repr(body.get("reason")))


@dataclass
class ValueLedger:
    """The commitments held by the entries so far, less the erased ones (a multiset hash)."""

    expected: int = 0
    commitments: int = 0
    erased_reviews: set[str] = field(default_factory=set)
    erasures: int = 0

    def hold(self, owner: str, commitments: Iterable[str]) -> None:
        for commitment in commitments:
            self.expected = (self.expected + _h(owner, commitment)) % _MOD
            self.commitments += 1

    def erase(self, review: str, pairs: Iterable[tuple[str, str]]) -> None:
        for owner, commitment in pairs:
            self.expected = (self.expected - _h(owner, commitment)) % _MOD
        self.erased_reviews.add(review)
        self.erasures += 1

    def check_rows(self, rows: Iterable[tuple[str, str, str, Any]]) -> int:
        """Stream the value rows ``(owner, commitment, salt hex, value)``: each must match its commitment,
        and together they must be what the entries hold less what was erased. Returns the row count;
        raises ``VerificationFailed`` (seq -1: the values beside the log) naming the owner, or, for a
        multiset difference, raises ``ValueMismatch`` for :func:`first_difference` to name."""
        total, count = row_sum(rows)
        if total != self.expected:
            raise ValueMismatch(count)
        return count


def row_sum(rows: Iterable[tuple[str, str, str, Any]]) -> tuple[int, int]:
    """The value rows' multiset sum and count, each value checked against its commitment (order-free: a
    worker process sums them while the sequential pass runs, :mod:`signoff.audit.verify_sums`). Raises
    ``VerificationFailed`` naming the owner of a value that does not match."""
    total, count = 0, 0
    for owner, commitment, salt, value in rows:
        try:
            matches = sealing.commit(value, bytes.fromhex(salt)) == commitment
        except (ValueError, TypeError):
            matches = False
        if not matches:
            raise VerificationFailed(
                None,
                "value beside the log",
                f"{owner_name(owner)}: a value matching {commitment[:27]}…",
                "another value or salt",
            )
        total = (total + _h(owner, commitment)) % _MOD
        count += 1
    return total, count


class ValueMismatch(Exception):
    """The value rows are not what the entries hold less what was erased (see :func:`first_difference`)."""


def first_difference(
    held_pairs: Iterable[tuple[str, str]], erased_pairs: Iterable[tuple[str, str]], stored: Iterable[tuple[str, str]]
) -> VerificationFailed:
    """Name the first owner whose values differ (the slow, full-memory second look)."""
    wanted: dict[tuple[str, str], int] = {}
    for pair in set(held_pairs):  # a commitment held twice (a quorum round's answer) is one value
        wanted[pair] = wanted.get(pair, 0) + 1
    for pair in erased_pairs:
        wanted[pair] = wanted.get(pair, 0) - 1
    for pair in stored:
        wanted[pair] = wanted.get(pair, 0) - 1
    for (owner, commitment), left in sorted(wanted.items()):
        if left > 0:
            return VerificationFailed(
                None,
                "value beside the log",
                f"{owner_name(owner)}: the value of {commitment[:27]}… (or a data.erased naming it)",
                "no value and no data.erased (deleted behind the log's back)",
            )
        if left < 0:
            return VerificationFailed(
                None,
                "value beside the log",
                f"no value of {commitment[:27]}… under {owner}",
                "a value no entry holds there (added, moved or erased twice)",
            )
    return VerificationFailed(None, "value beside the log", "the values the entries hold", "others")
