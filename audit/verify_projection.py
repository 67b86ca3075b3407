"""The review projection checked against the log (DESIGN.md: every projection is rebuilt from the log).

The review queue, frontiers, reviewers, keys, the log's own row and the stored checkpoints in
the database must be exactly what the :class:`~signoff.audit.verifier.Verifier` derived from
the entries; a difference names the row.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import orjson
from sqlalchemy import func, select
from sqlmodel import col

from signoff.audit import rules
from signoff.audit.canonical import digest as json_digest
from signoff.audit.errors import VerificationFailed
from signoff.audit.store import Store
from signoff.audit.tables import CheckpointRow, EntryRow, FrontierRow, KeyRow, LogRow, ReviewerRow, ReviewRow
from signoff.audit.trust import RULES_VERSION
from signoff.audit.verifier import Verifier, frontier_tuple, review_tuple, row_hash

_ASTRAL = re.compile(rb"[\xf0-\xf4]")
ROW_FIELDS = (
    "id", "status", "frontier", "tool", "agent", "app", "session", "confirmation_id", "call_id", "opened_seq",
    "opened_at",
    "args_digest", "deadline", "decided_seq", "decided_by", "decided_at", "final_digest", "executed_seq", "data",
)  # fmt: skip


def row_tuple(row: Any) -> tuple[Any, ...]:
    """A review's projection row as stored."""
    return (
        row.id, row.status, row.frontier, row.tool, row.agent, row.app, row.session, row.confirmation_id,
        row.call_id, row.opened_seq, row.opened_at, row.args_digest, row.deadline, row.decided_seq, row.decided_by,
        row.decided_at, row.final_digest, row.executed_seq, data_digest(row.data),
    )  # fmt: skip


def data_digest(text: str) -> str:
    """``digest(json.loads(text))``: a stored ``data`` column's canonical digest. Without floats, long
    integers or characters beyond the BMP, RFC 8785 is sorted compact JSON (as in
    :func:`~signoff.audit.canonical.parse_canonical`), which ``orjson`` writes without a Python walk."""
    floats: list[str] = []

    def as_float(number: str) -> float:
        floats.append(number)
        return float(number)

    value = json.loads(text, parse_float=as_float)
    if not floats:
        try:
            encoded = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER)
        except orjson.JSONEncodeError:  # a long integer or a lone surrogate: the full rules decide
            encoded = b""
        if encoded and not _ASTRAL.search(encoded):
            return "sha256:" + hashlib.sha256(encoded).hexdigest()
    return json_digest(value)


def expected_sums(v: Verifier) -> tuple[int, int]:
    """The review and frontier rows' multiset sums the log implies (the verifier's folded sums and the
    rows it still holds)."""
    reviews = v.review_sum + sum(row_hash(review_tuple(f)) for f in v.reviews.values())
    frontiers = v.frontier_sum + sum(row_hash(frontier_tuple(k, f)) for k, f in v.frontiers.items())
    return reviews, frontiers


def found_sums(conn: Any, log: str) -> tuple[int, int]:
    """The review and frontier rows' multiset sums as stored (read in ``conn``; no verifier needed, so a
    worker process reads them while the sequential pass runs: :mod:`signoff.audit.verify_sums`)."""
    query = select(ReviewRow).where(ReviewRow.log == log)  # type: ignore[arg-type]
    reviews = sum(row_hash(row_tuple(row)) for row in conn.execution_options(yield_per=2000).execute(query))
    frontiers = sum(
        row_hash((row.id, row.open_count, row.size, row.resumed_seq))
        for row in conn.execute(select(FrontierRow).where(col(FrontierRow.log) == log))
    )
    return reviews, frontiers


def entries_in(conn: Any, log: str) -> int:
    """How many entries of ``log`` the read transaction ``conn`` sees."""
    found = conn.execute(select(func.max(EntryRow.seq)).where(col(EntryRow.log) == log)).scalar()
    return 0 if found is None else int(found) + 1


def check_with_sums(store: Store, v: Verifier, size: int, reviews: int, frontiers: int) -> bool:
    """The projection checked with the sums a worker read in its own snapshot of ``size`` entries. True:
    they settle it (and the small tables were checked here); False: the snapshot was not of exactly the
    entries ``v`` checked, or the sums differ, and :func:`check_projection` is to decide and name the row."""
    if size != v.expected_seq or (reviews, frontiers) != expected_sums(v):
        return False
    with store.snapshot() as conn:
        if entries_in(conn, str(v.log)) != v.expected_seq:  # committed since: the sums are of another state
            return False
        _check_others(conn, v)
    return True


class ProjectionMismatch(Exception):
    """The folded projection sums differ; a second, full-memory pass names the row."""


def check_projection(store: Store, v: Verifier) -> None:
    """The review queue, frontiers and reviewers must be exactly what the log says.

    Compared as order-free multiset hashes of the rows, so memory stays flat; with
    ``v.keep_all`` each row is compared directly, to name the one that differs. Read in one
    snapshot (:meth:`~signoff.audit.reader.LogReader.snapshot`): the entries committed since ``v``
    stopped are checked first, in that snapshot, so a write landing meanwhile is never half seen.
    """
    with store.snapshot() as conn:
        for seq, stored_hash, raw, nodes, columns in store.rows_in(conn, v.expected_seq):
            v.add(raw, stored_hash, seq, nodes, columns)
        _check_rows(conn, v)


def _check_rows(conn: Any, v: Verifier) -> None:
    review_sum, frontier_sum = expected_sums(v)
    found_reviews = found_frontiers = seen_reviews = seen_frontiers = 0
    query = select(ReviewRow).where(ReviewRow.log == v.log)  # type: ignore[arg-type]
    for row in conn.execution_options(yield_per=2000).execute(query):
        found = row_tuple(row)
        if v.keep_all:
            facts = v.reviews.get(row.id)
            expected = review_tuple(facts) if facts else None
            if expected != found:
                seq = facts.decided_seq if facts and facts.decided_seq is not None else row.opened_seq
                if expected is None:
                    raise VerificationFailed(seq, f"projection of review {row.id}", "no such review", "a row")
                differ = [f"{name}={e!r}" for name, e, f in zip(ROW_FIELDS, expected, found, strict=True) if e != f]
                shown = [f"{name}={f!r}" for name, e, f in zip(ROW_FIELDS, expected, found, strict=True) if e != f]
                raise VerificationFailed(seq, f"projection of review {row.id}", ", ".join(differ), ", ".join(shown))
        found_reviews += row_hash(found)
        seen_reviews += 1
    if v.keep_all and seen_reviews != len(v.reviews):
        raise VerificationFailed(None, "projection", f"{len(v.reviews)} review rows", f"{seen_reviews}")
    if not v.keep_all and found_reviews != review_sum:
        raise ProjectionMismatch()
    for front_row in conn.execute(select(FrontierRow).where(col(FrontierRow.log) == v.log)):
        found_f = (front_row.id, front_row.open_count, front_row.size, front_row.resumed_seq)
        if v.keep_all:
            front = v.frontiers.get(front_row.id)
            expected_f = frontier_tuple(front_row.id, front) if front else None
            if expected_f != found_f:
                named = [x for x in (front[2] if front else None, front_row.resumed_seq) if x is not None]
                raise VerificationFailed(
                    min(named) if named else front_row.opened_seq,
                    f"projection of frontier {front_row.id}",
                    str(expected_f),
                    str(found_f),
                )
        found_frontiers += row_hash(found_f)
        seen_frontiers += 1
    if v.keep_all and seen_frontiers != len(v.frontiers):
        raise VerificationFailed(None, "projection", f"{len(v.frontiers)} frontier rows", f"{seen_frontiers}")
    if not v.keep_all and found_frontiers != frontier_sum:
        raise ProjectionMismatch()
    _check_others(conn, v)


def _check_others(conn: Any, v: Verifier) -> None:
    """Reviewers, keys, the log's row and the stored checkpoints: small tables, compared row by row."""
    people = 0
    for person in conn.execute(select(ReviewerRow).where(col(ReviewerRow.log) == v.log)):
        people += 1
        state = v.reviewers.get(person.id)
        found_state = rules.ReviewerState(
            person.id, tuple(json.loads(person.roles)), tuple(json.loads(person.tools)), bool(person.enabled)
        )
        if state != found_state:
            raise VerificationFailed(
                person.enrolled_seq, f"projection of reviewer {person.id}", str(state), str(found_state)
            )
    if people != len(v.reviewers):
        raise VerificationFailed(None, "projection", f"{len(v.reviewers)} reviewer rows", f"{people}")
    _check_keys(conn, v)
    _check_log_row(conn, v)
    _check_checkpoints(conn, v)


def _check_keys(conn: Any, v: Verifier) -> None:
    """The key projection (what the write path checks signatures with) is exactly the active keys."""
    expected = {
        (key.actor, key.fingerprint): (key.stored(), key.seq) for mine in v.ring.keys.values() for key in mine.values()
    }
    found = {
        (row.actor, row.fingerprint): (row.public_key, row.enrolled_seq)
        for row in conn.execute(select(KeyRow).where(col(KeyRow.log) == v.log))
    }
    for name in sorted(set(expected) | set(found)):
        if expected.get(name) != found.get(name):
            seq = (expected.get(name) or found.get(name) or (None, None))[1]
            actor, fp = name
            raise VerificationFailed(
                seq,
                f"projection of key {fp} of {actor} (signoff_key)",
                "an enrolled key" if name in expected else "no such active key",
                "a row that differs" if name in found else "no row (deleted)",
            )


def _check_log_row(conn: Any, v: Verifier) -> None:
    query = select(LogRow.id, LogRow.public_key).where(LogRow.id == v.log)  # type: ignore[call-overload]
    found = [(row.id, row.public_key) for row in conn.execute(query).all()]
    if found != [(v.log, v.log_key)]:  # (the store's other logs have rows of their own, each checked by its verify)
        raise VerificationFailed(0, "the log's row (signoff_log)", f"one row: {v.log}, key {v.log_key}", str(found))


def _check_checkpoints(conn: Any, v: Verifier) -> None:
    """Every checkpoint recorded on the log is stored, and (on a log under rules version 2) every stored
    one is recorded: deleting or adding checkpoint rows behind the log's back shows here."""
    rows = conn.execute(
        select(CheckpointRow.size, CheckpointRow.root, CheckpointRow.signed).where(col(CheckpointRow.log) == v.log)  # type: ignore[call-overload]
    ).all()
    stored = {row.size: row.root for row in rows}
    notes = {row.size: row.signed for row in rows}
    for size, root in sorted(v.checkpoints.items()):
        if stored.get(size) != root:
            raise VerificationFailed(
                size, f"stored checkpoint of size {size}", f"a row with root {root}", f"{stored.get(size) or 'no row'}"
            )
        logged = v.notes.get(size)
        if logged is not None:
            expected = {"log": v.log, "size": size, "root": root, "at": logged[0], "note": logged[1]}
            try:
                found = json.loads(notes[size])
            except ValueError:
                found = None
            if found != expected:  # a cosignature deleted, added or changed behind the log's back
                have = len(v.cosigned.get(size, ()))
                raise VerificationFailed(
                    size, f"stored checkpoint of size {size} (its note)",
                    f"the log's note with the {have} cosignature(s) recorded on the log", "another row",
                )  # fmt: skip
    first_logged = min(v.checkpoints, default=None)
    for size in sorted(set(stored) - set(v.checkpoints)):
        legacy = v.ring.rules.version < RULES_VERSION and (first_logged is None or size < first_logged)
        if not legacy:
            raise VerificationFailed(
                size, f"stored checkpoint of size {size}", "a log.checkpoint entry recording it", "none on the log"
            )
