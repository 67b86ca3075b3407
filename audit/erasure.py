"""Erasing the values beside a sealed log: on request (``audit erase``) and by retention (SPEC.md).

Each erasure is one transaction: it reads the review from its own log entries, refuses one that
is not done (still open, or approved and not yet run: its values are what will run), deletes the
value rows and appends a ``data.erased`` entry naming every commitment erased and why. No entry
is rewritten: hashes, checkpoints, proofs and witness cosignatures stay as they were, and
``audit verify`` checks that every missing value is named by such an entry.

What this cannot reach: copies already sent out (notifications, webhooks, Slack, exports and
backups), the ADK session database, and (until ``VACUUM``) the free pages of PostgreSQL; see the
README, "Personal data".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from signoff.audit import rules, sealing, trust, values
from signoff.audit.driver import BUSY_TIMEOUT_MS
from signoff.audit.entry import Entry, check_actor, format_time, later, parse_time
from signoff.audit.errors import NotAllowed, ReviewError, UnknownReview
from signoff.audit.keys import Signer
from signoff.audit.limits import bounded_text
from signoff.audit.log_state import read_review_in
from signoff.audit.review_types import Review
from signoff.audit.store import Store, Tx

_ROW = "SELECT id, frontier, data FROM signoff_review WHERE id = ? AND log = ?"
_ROWS = "SELECT id, frontier, status, opened_seq, opened_at, data FROM signoff_review WHERE log = ? ORDER BY opened_seq"
_AT_SEQ = "SELECT raw FROM signoff_entry WHERE log = ? AND seq = ?"
_OWNERS = "SELECT DISTINCT owner FROM signoff_value WHERE log = ?"


class NothingToErase(ReviewError):
    """The review holds no value beside the log that could still be erased."""


@dataclass(frozen=True)
class Erased:
    review: str
    entry: Entry | None  # None: not erased (``why`` says why)
    why: str = ""
    waiting: bool = False  # not erased, and rightly so: not done yet, or nothing (more) to erase


class _NotDone(NotAllowed):
    """The review is not done: its values may still be what runs."""


def _check_sealed(tx: Tx) -> None:
    if not tx.rules.sealed_values:
        raise NotAllowed(
            "log: expected a log with sealed values (any log `audit init` makes without --values-in-entries), "
            "found one that keeps values in its entries: erasing there would rewrite entries and break every hash, "
            "checkpoint, proof and cosignature after them"
        )


def _done(review: Review) -> str:
    """Why the review's values cannot be erased yet ("" when they can)."""
    if review.status == "pending":
        return (
            f"review {review.id}: expected a review that is done, found it pending (decide, withdraw or let it expire)"
        )
    runs = review.status in rules.RUNNABLE and not review.executed and not review.resume_failed and not review.problem
    if runs:
        return f"review {review.id}: expected a review that is done, found it {review.status} and not yet run"
    return ""


def _erase_in(
    tx: Tx,
    review_id: str,
    *,
    actor: str,
    reason: str,
    signer: Signer | None,
    fields: Sequence[str] | None,
    extra: dict[str, Any],
) -> Entry:
    """One review's erasure in ``tx`` (see the module docstring)."""
    _check_sealed(tx)
    found = tx.rows(_ROW, review_id, tx.log)
    if not found:
        raise UnknownReview(review_id)
    review, _front = read_review_in(tx.rows, tx.log, review_id, found[0].frontier or None, pending=tx.appended)
    why = _done(review)
    if why:
        raise _NotDone(why)
    owned = {review_id: values.owned(tx.rows, tx.log, review_id)}
    if review.frontier and not fields:
        owned[review.frontier] = values.owned(tx.rows, tx.log, review.frontier)  # the agent's reply after it
    if fields:
        args = review.call.args
        if sealing.sealed_whole(args):
            raise NotAllowed(
                f"--field: review {review_id}'s args are sealed whole (too many or too large); erase them all"
            )
        unknown = [name for name in fields if name not in args]
        if unknown:
            raise NotAllowed(f"--field {unknown[0]}: expected a member of review {review_id}'s args {sorted(args)}")
        wanted = {args[name] for name in fields if sealing.is_commitment(args[name])}
        wanted |= _edited_values(review_id, tx, fields)
        owned = {review_id: [c for c in owned[review_id] if c in wanted]}
    owned = {owner: listed for owner, listed in owned.items() if listed}
    if not owned:
        raise NothingToErase(
            f"review {review_id}: expected values beside the log to erase, found none (already erased?)"
        )
    body: dict[str, Any] = {"review": review_id, "commitments": owned, "reason": reason, **extra}
    if fields:
        body["fields"] = list(fields)
    sig = tx.signature(actor, trust.ERASED, body, None, signer)
    entry = tx.append(actor, trust.ERASED, body, sig)
    for listed in owned.values():
        values.delete(tx.rows, tx.log, listed)
    return entry


def _edited_values(review_id: str, tx: Tx, fields: Sequence[str]) -> set[str]:
    """The commitments edits recorded for the members ``fields`` (replaced whole, ``/name``)."""
    out: set[str] = set()
    paths = {"/" + name.replace("~", "~0").replace("/", "~1") for name in fields}
    for row in tx.rows(
        "SELECT raw FROM signoff_entry WHERE subject = ? AND log = ? AND kind = 'review.edited'", review_id, tx.log
    ):
        body = json.loads(bytes(row.raw))["body"]
        for op in body.get("patch") or []:
            if isinstance(op, dict) and op.get("path") in paths and sealing.is_commitment(op.get("value")):
                out.add(op["value"])
    return out


def _reason(reason: str) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise NotAllowed("reason: expected why the values are erased (the log keeps it), found none")
    return bounded_text(reason, "$.reason")


def erase(store: Store, review_id: str, *, reason: str, admin: Signer, fields: Sequence[str] | None = None) -> Entry:
    """Erase a done review's values (or only the args members ``fields``), signed by an admin."""
    actor, why = store.admin_actor(admin), _reason(reason)
    return store.transact(
        lambda tx: _erase_in(tx, review_id, actor=actor, reason=why, signer=admin, fields=fields, extra={})
    )


def reviews_of(store: Store, requester: str) -> list[str]:
    """The reviews opened on behalf of ``requester`` (the call's ``user``), as their opening entries say."""
    out = []
    for row in store.read_rows(_ROWS, store.log_id):
        if (json.loads(row.data).get("call") or {}).get("user") != requester:
            continue
        opened = store.read_rows(_AT_SEQ, store.log_id, row.opened_seq)  # the row only says where to look
        body = json.loads(bytes(opened[0].raw))["body"] if opened else {}
        if body.get("review") == row.id and (body.get("call") or {}).get("user") == requester:
            out.append(str(row.id))
    return out


def erase_requester(
    store: Store, requester: str, *, reason: str, admin: Signer, fields: Sequence[str] | None = None
) -> list[Erased]:
    """Erase the values of every done review on behalf of ``requester``: one ``data.erased`` each, each in
    its own transaction; a review not done yet (or with nothing left) is reported, not erased."""
    actor, why = store.admin_actor(admin), _reason(reason)
    done = []
    for review_id in reviews_of(store, requester):

        def work(tx: Tx, rid: str = review_id) -> Entry:
            extra = {"requester": requester}
            return _erase_in(tx, rid, actor=actor, reason=why, signer=admin, fields=fields, extra=extra)

        done.append(_attempt(store, review_id, work))
    return done


def _attempt(store: Store, review_id: str, work: Callable[[Tx], Entry]) -> Erased:
    """One review's erasure in its own transaction: erased, waiting (not done, nothing left), or refused."""
    try:
        return Erased(review_id, store.transact(work))
    except (_NotDone, NothingToErase) as exc:
        return Erased(review_id, None, str(exc), waiting=True)
    except NotAllowed as exc:
        return Erased(review_id, None, str(exc))


def retention_due(store: Store) -> list[str]:
    """Reviews whose values a retention policy lets go by the log's clock (checked again when erased)."""
    now = format_time(store.clock())
    holding = {str(r.owner) for r in store.read_rows(_OWNERS, store.log_id)}  # erased ones hold nothing more
    due = []
    for row in store.read_rows(_ROWS, store.log_id):
        if str(row.id) not in holding:
            continue
        retain = (json.loads(row.data).get("policy") or {}).get("retain_seconds")
        if isinstance(retain, int | float) and format_time(later(parse_time(row.opened_at), retain)) <= now:
            due.append(str(row.id))
    return due


def retention_run(store: Store, *, actor: str = "service:signoff", signer: Signer | None = None) -> list[Erased]:
    """Erase every value whose retention has passed, as ``data.erased`` with reason ``retention``, written
    by ``actor`` (a ``service:``/``agent:`` actor, or an admin) and signed by ``signer`` when the actor has
    an enrolled key (it must then). What is not done yet waits for a later run (``waiting``); a refusal
    (a missing signature) is returned with its reason."""
    check_actor(actor)
    out = []
    for review_id in retention_due(store):

        def work(tx: Tx, rid: str = review_id) -> Entry:
            row = tx.rows(_ROW, rid, tx.log)[0]
            retain = float(json.loads(row.data)["policy"]["retain_seconds"])
            review, _front = read_review_in(tx.rows, tx.log, rid, row.frontier or None, pending=tx.appended)
            if tx.at < format_time(later(review.opened_at, retain)):
                raise NothingToErase(f"review {rid}: its retention has not passed")
            return _erase_in(tx, rid, actor=actor, reason=trust.RETENTION, signer=signer, fields=None, extra={})

        out.append(_attempt(store, review_id, work))
    return out


VACUUM_WAIT_MS = 5000  # how long the SQLite checkpoint waits for other connections' readers


@dataclass(frozen=True)
class Vacuumed:
    """What ``audit erase --vacuum`` did: ``done``, or why not (``why``, for the person to act on)."""

    done: bool
    why: str = ""


def vacuum(store: Store) -> Vacuumed:
    """Give erased values' bytes back (``audit erase --vacuum``): on SQLite (which overwrites deleted
    cells itself, ``PRAGMA secure_delete``) checkpoint the WAL into the file and truncate it; on
    PostgreSQL rewrite ``signoff_value`` (``VACUUM FULL``: its dead row versions go with the old file)
    and ``CHECKPOINT``. PostgreSQL's WAL segments keep the inserted values until they are recycled,
    and backups keep them for ever: README, "Personal data".

    SQLite's checkpoint runs on a raw connection outside any transaction (the engine's own ``BEGIN
    IMMEDIATE`` would make it fail with "database table is locked"). It waits for readers up to the
    busy timeout; a reader that still holds an old snapshot then (another process reading the store)
    leaves the checkpoint incomplete, and the result says so (https://sqlite.org/pragma.html#pragma_wal_checkpoint).
    """
    if store.backend == "sqlite":
        raw = store.write_engine.raw_connection()
        try:
            conn: Any = raw.driver_connection
            conn.execute(f"PRAGMA busy_timeout={VACUUM_WAIT_MS}")
            try:
                busy, frames, moved = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        finally:
            raw.close()
        if busy:
            return Vacuumed(
                False,
                f"the WAL checkpoint could not finish ({moved} of {frames} pages written back): another "
                f"connection kept reading the store for {VACUUM_WAIT_MS // 1000} s; the erased values stay in the "
                "WAL file until a checkpoint completes: SQLite makes one as the WAL grows, and when the last "
                "process closes the store",
            )
        return Vacuumed(True)
    with store.write_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM FULL signoff_value")
        conn.exec_driver_sql("CHECKPOINT")
    return Vacuumed(True)
