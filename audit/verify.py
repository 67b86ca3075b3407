"""Verification: stream the log once, with flat memory, and check everything an auditor needs.

Checks, in ``seq`` order: ``seq`` density from 0, every ``prev`` link, every hash, the RFC
8785 form of the stored bytes, every signature against keys enrolled earlier on the log,
the review rules 1–6 (:mod:`audit.rules`), every stored checkpoint's root (RFC 9162
§2.1) and signature, a kept checkpoint (``--against``), and that the review projection
matches the log. The first failure names its ``seq`` and the rule or hash that failed.

The per-entry checks are :class:`~signoff.audit.verifier.Verifier`'s; the projection's are
in :mod:`audit.verify_projection`. This module drives them over a store or an export file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from signoff.audit import merkle, rules, verify_parallel, verify_sums
from signoff.audit.canonical import digest as json_digest
from signoff.audit.entry import ABANDONED, NEVER_RUN, format_hash
from signoff.audit.errors import AuditError, UnusableInput, VerificationFailed
from signoff.audit.tlog_cosignature import CosignatureVerifier
from signoff.audit.tree_head import Checkpoint
from signoff.audit.trust import DELEGATIONS as DELEGATION_KINDS
from signoff.audit.trust import ENROLMENT as TRUST_KINDS
from signoff.audit.trust import WITNESS_KINDS
from signoff.audit.verifier import ReviewFacts, Verifier
from signoff.audit.verifier_values import small_id
from signoff.audit.verify_parallel import env_jobs, verify_rows
from signoff.audit.verify_witnesses import Witnessed, check_online, newest_cosigned

if TYPE_CHECKING:  # verifying a file or a proof imports no database code; a store brings its own
    from signoff.audit.store import Store

Progress = Callable[[int], None]


@dataclass
class Report:
    """The outcome of one verification."""

    ok: bool
    log: str | None
    size: int
    root: str | None
    checked_from: int = 0
    checkpoints: int = 0
    failure: VerificationFailed | None = None
    notes: list[str] = field(default_factory=list)
    stalled: list[dict[str, Any]] = field(default_factory=list)  # `audit verify --stalled-after`: warnings
    witnessed: Witnessed | None = None  # `audit verify --witness`: what the witnesses vouch for

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "log": self.log,
            "size": self.size,
            "root": self.root,
            "checked_from": self.checked_from,
            "checkpoints_checked": self.checkpoints,
        }
        if self.stalled:
            out["stalled"] = self.stalled
        if self.witnessed is not None:
            out["witnessed"] = self.witnessed.to_json()
        if self.failure is not None:
            out["failure"] = {
                "seq": self.failure.seq,
                "rule": self.failure.rule,
                "expected": self.failure.expected,
                "found": self.failure.found,
                "message": str(self.failure),
            }
        return out


def _check_checkpoint(seq_size: int, point: Checkpoint, verifier: Verifier, what: str) -> None:
    if verifier.log_key is None or not point.verify(verifier.log_key):
        raise VerificationFailed(
            None, f"{what} signature (size {point.size})", "a valid signature by the log key", "an invalid one"
        )
    if point.log and point.log != verifier.log:  # a note names its log by its origin instead (below)
        raise VerificationFailed(None, f"{what} log id", str(verifier.log), point.log)
    if point.note and point.origin != verifier.ring.rules.origin:
        raise VerificationFailed(None, f"{what} origin", verifier.ring.rules.origin, point.origin)
    if point.root != verifier.root():
        raise VerificationFailed(
            seq_size - 1,
            f"{what} root (RFC 9162 tree head over entries 0..{seq_size - 1})",
            point.root,
            verifier.root(),
        )


Row = tuple[int | None, str | None, bytes, bytes | None, tuple[Any, ...] | None]
"""``(stored seq, stored hash, raw bytes, stored Merkle nodes, stored (kind, actor, subject))``; None: not stored."""


def verify_stream(
    rows: Iterable[Row],
    *,
    checkpoints: Iterable[Checkpoint] = (),
    against: Checkpoint | None = None,
    progress: Progress | None = None,
    verifier: Verifier | None = None,
    jobs: int = 1,
) -> tuple[Verifier, int]:
    """Check :data:`Row` rows in order; stored checkpoints are checked as their size passes.

    ``jobs`` > 1 checks hashes, canonical form and signatures in that many worker processes
    (:mod:`signoff.audit.verify_parallel`); the checks and the failure reported are the same."""
    v = verifier or Verifier()
    pending = sorted(checkpoints, key=lambda c: c.size)
    pending = [c for c in pending if c.size > v.expected_seq or v.expected_seq == 0]
    index = 0

    def after(size: int) -> None:
        nonlocal index
        while index < len(pending) and pending[index].size == size:
            _check_checkpoint(size, pending[index], v, "stored checkpoint")
            index += 1
        if against is not None and against.size == size:
            _check_checkpoint(size, against, v, "kept checkpoint")
        if progress is not None and size % 10000 == 0:
            progress(size)

    if jobs > 1:
        verify_rows(rows, v, jobs, after)
    else:
        for stored_seq, stored_hash, raw, stored_nodes, stored_columns in rows:
            v.add(raw, stored_hash, stored_seq, stored_nodes, stored_columns)
            after(v.expected_seq)
    size = v.expected_seq
    if index < len(pending):
        point = pending[index]
        raise VerificationFailed(size, "stored checkpoint size", f"a log of at least {point.size} entries", f"{size}")
    if against is not None and against.size > size:
        raise VerificationFailed(
            size, "kept checkpoint (truncation)", f"a log of at least {against.size} entries", f"{size} entries"
        )
    return v, index


def verify_store(
    store: Store,
    *,
    against: Checkpoint | None = None,
    progress: Progress | None = None,
    pinned_key: str | None = None,
    incremental: bool = False,
    jobs: int | None = None,
    witnesses: Sequence[CosignatureVerifier] = (),
    quorum: int = 1,
    online: bool = True,
    fetch: Callable[[str], bytes | None] | None = None,
) -> Report:
    """Verify a whole store: the log, its checkpoints, the kept checkpoint and the projection.

    With ``witnesses`` (cosignature/v1 verifiers the auditor trusts), the log must also hold a checkpoint
    cosigned by ``quorum`` of them, and (``online``) agree with the newest checkpoint each of them cosigned
    (:mod:`signoff.audit.verify_witnesses`; ``fetch`` gets a URL, by default over HTTP).

    With ``incremental`` and a kept checkpoint that the log key signed, entries before the
    checkpoint are proven by its root alone (their bytes are not reread) and only later
    entries are checked one by one. ``jobs``: worker processes for the per-entry checks
    (:func:`verify_stream`; default ``SIGNOFF_VERIFY_JOBS``, else 1); a log of fewer than
    :data:`~.verify_parallel.MIN_PARALLEL` entries to check is checked in this process.
    """
    from signoff.audit.verify_projection import ProjectionMismatch, check_projection, check_with_sums

    try:
        info = store.info()
    except AuditError as exc:
        raise UnusableInput(str(exc)) from None
    report = Report(ok=False, log=info.id, size=info.size, root=None)
    try:
        stop = info.size
        start = 0
        verifier = Verifier()
        verifier.values = values_lookup(store)
        if incremental and against is not None and 0 < against.size < stop and _trusted(store, against, pinned_key):
            verifier = _resume_from(store, against)
            start = against.size
            report.notes.append(f"entries 0..{against.size - 1} proven by the kept checkpoint; checked from {start}")
        rows = store.iter_rows(start, stop)
        checkpoints = store.checkpoints()
        beyond = [c.size for c in checkpoints if c.size > store.size()]
        if beyond:
            raise VerificationFailed(
                stop, "stored checkpoint (truncation)", f"a log of at least {max(beyond)} entries", f"{stop} entries"
            )
        checkpoints = [c for c in checkpoints if c.size <= stop]
        workers = (env_jobs() if jobs is None else jobs) if stop - start >= verify_parallel.MIN_PARALLEL else 1
        sums = None  # the projection's and values' order-free sums, read by a worker meanwhile (verify_sums)
        if workers > 1 and start == 0:
            sums = verify_parallel.submit(workers, verify_sums.read, store.url, info.id, store.rules.sealed_values)
        v, count = verify_stream(
            rows,
            checkpoints=checkpoints,
            against=against if start == 0 else None,
            progress=progress,
            verifier=verifier,
            jobs=workers,
        )
        if pinned_key is not None and v.log_key is not None and v.log_key != pinned_key:
            raise VerificationFailed(0, "log key", pinned_key, v.log_key)
        if v.expected_seq != stop:
            raise VerificationFailed(
                v.expected_seq, "seq density (entry missing)", f"{stop} entries", f"{v.expected_seq}"
            )
        if start == 0:
            try:
                summed = sums.result() if sums is not None else None
            except Exception:  # noqa: BLE001 - the sums only save time: without them the single-core way decides
                summed = None
            settled = summed is not None and check_with_sums(store, v, summed.size, summed.reviews, summed.frontiers)
            if not settled:
                try:
                    check_projection(store, v)  # first checks what was committed meanwhile, in its snapshot
                except ProjectionMismatch:
                    full = Verifier()
                    full.keep_all = True
                    full.values = verifier.values
                    verify_stream(store.iter_rows(0, stop), verifier=full)
                    check_projection(store, full)
                    v = full
            from signoff.audit import verify_values

            sealed = v.ring.rules.sealed_values
            if settled and summed is not None and (not sealed or summed.values == v.ledger.expected):
                report.notes += verify_values.notes(v, summed.value_rows) if sealed else []
            else:
                rows_now = verify_values.store_rows(store)
                report.notes += verify_values.check(v, rows_now, verify_values.entries_of(store))
        elif v.ring.rules.sealed_values:
            report.notes.append("values beside the log not checked: an incremental verify checks only new entries")
        if witnesses:
            report.witnessed = _witnessed(store, v, witnesses, quorum, online, fetch)
        report.ok = True
        report.size = v.expected_seq
        report.root = v.root()
        report.checked_from = start
        report.checkpoints = count + (1 if against is not None else 0)
    except VerificationFailed as exc:
        report.failure = exc
    return report


def _witnessed(
    store: Store,
    v: Verifier,
    witnesses: Sequence[CosignatureVerifier],
    quorum: int,
    online: bool,
    fetch: Callable[[str], bytes | None] | None,
) -> Witnessed:
    """Steps 1 and 2 of :mod:`signoff.audit.verify_witnesses` over a log that verified."""
    if quorum < 1 or quorum > len(witnesses):
        raise UnusableInput(f"--quorum: expected 1..{len(witnesses)} (the witnesses given), found {quorum}")
    notes = [(c.size, c.note) for c in store.checkpoints() if c.note and c.size <= v.expected_seq]
    witnessed = newest_cosigned(notes, witnesses, quorum, v.expected_seq)
    if online:
        urls = {name: w.url for name, w in v.witnesses.items()}
        check_online(
            witnessed, origin=v.ring.rules.origin, witnesses=witnesses, urls=urls, size=v.expected_seq,
            root_at=lambda n: format_hash(store.root(n)), fetch=fetch or _http_fetch,
        )  # fmt: skip
    return witnessed


def _http_fetch(url: str) -> bytes | None:
    """GET ``url``: its body on 200, ``None`` on 404; ``OSError`` when it cannot be had."""
    import httpx

    try:
        response = httpx.get(url, timeout=10.0)
    except httpx.HTTPError as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from None
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise OSError(f"HTTP {response.status_code}")
    return response.content


def _trusted(store: Store, point: Checkpoint, pinned_key: str | None) -> bool:
    key = pinned_key or _first_key(store)
    same_log = point.origin == store.rules.origin if point.note else point.log == store.log_id
    return key is not None and point.verify(key) and same_log


def _first_key(store: Store) -> str | None:
    first = next(store.iter_raw(0, 1), None)
    if first is None:
        return None
    data = json.loads(first[2])
    key = data.get("body", {}).get("key")
    return key if isinstance(key, str) else None


def _resume_from(store: Store, point: Checkpoint) -> Verifier:
    """Seed a verifier at a trusted checkpoint: prove the stored prefix against its root.

    The compact range at ``point.size`` (from stored nodes) must fold to the checkpoint
    root, and the last entry before it must prove its inclusion, so its hash is a sound
    ``prev``. Review state for entries after the checkpoint comes from the projection's
    record of the prefix; reviewers and keys from their enrolment entries.
    """
    from sqlalchemy import select
    from sqlmodel import col

    from signoff.audit.tables import FrontierRow, ReviewRow

    size = point.size
    with store.read_engine.connect() as conn:
        nodes = store._range_hashes(conn, [(s, e) for s, e in _compact_ranges(size)])
    compact = merkle.CompactRange(size, nodes)
    if format_hash(compact.root()) != point.root:
        raise VerificationFailed(size - 1, "kept checkpoint root", point.root, format_hash(compact.root()))
    last_seq, last_hash, last_raw = next(store.iter_raw(size - 1, size))
    if "sha256:" + hashlib.sha256(b"\x00" + last_raw).hexdigest() != last_hash:
        raise VerificationFailed(size - 1, "entry hash", last_hash, "a different hash")
    try:
        merkle.verify_inclusion(
            bytes.fromhex(last_hash[7:]), size - 1, size, store.inclusion_proof(size - 1, size), compact.root()
        )
    except merkle.ProofError as exc:
        raise VerificationFailed(size - 1, "inclusion in kept checkpoint", point.root, str(exc)) from None
    v = Verifier(start=size, prev=last_hash, compact=compact)
    trusted = [
        item
        for kind in (
            *TRUST_KINDS,
            "log.configured",
            "log.checkpoint",
            "log.cosigned",
            *WITNESS_KINDS,
            *DELEGATION_KINDS,
            "policy.set",  # the policies in force before the checkpoint govern the reviews after it
            "policy.proposed",
            "policy.declined",
        )
        for item in store.entries(0, size, kind=kind)
    ]
    for item in sorted(trusted, key=lambda e: e.seq):
        v.replay_trusted(item.seq, item.to_json())

    def lookup_review(review_id: str) -> ReviewFacts | None:
        with store.read_engine.connect() as conn:
            row = conn.execute(select(ReviewRow).where(col(ReviewRow.id) == review_id)).first()
        if row is None or row.opened_seq >= size:
            return None
        data = json.loads(row.data)
        decided = row.decided_seq is not None and row.decided_seq < size
        executed = row.executed_seq is not None and row.executed_seq < size
        state = rules.ReviewState(
            id=row.id,
            frontier=row.frontier,
            tool=row.tool,
            status=row.status if decided else "pending",
            args=None if decided else data["call"]["args"],
            args_digest=row.args_digest,
            role=data.get("policy", {}).get("role"),
            deadline=row.deadline,
            schema=data["call"].get("tool_schema"),
            final_digest=row.final_digest if decided else None,
            executed=executed,
            approvals_needed=int(data.get("policy", {}).get("approvals", 1)),
            failed=decided and not executed and bool(row.frontier) and _named_failed(row.frontier, review_id),
            requested_by=data["call"].get("requested_by") or None,
            self_approval=data.get("policy", {}).get("self_approval") is True,
        )
        fixed = (
            row.agent, row.app, row.session, row.confirmation_id, row.call_id, row.opened_seq, row.opened_at,
            row.args_digest, row.deadline,
        )  # fmt: skip
        facts = ReviewFacts(state, row.frontier, None if decided else rules.opened_data(data), fixed)
        if decided:
            facts.decided = (row.decided_seq, row.decided_by, row.decided_at)
            facts.data_digest = json_digest(data)
        facts.executed_seq = row.executed_seq if executed else None
        if not decided and row.status != "auto_approved":  # approvals, escalation, claims within the prefix
            for item in store.entries(row.opened_seq + 1, size, review=review_id):
                v.fold_trusted(facts, item.seq, item.to_json())
        return facts

    def _named_failed(frontier_id: str, review_id: str) -> bool:
        """A ``run.resume_failed``, ``run.rewound`` or ``run.cancelled`` within the prefix names the review:
        it never runs."""
        return any(
            item.kind in NEVER_RUN and review_id in (item.body.get("reviews") or [])
            for item in store.entries(0, size, review=frontier_id)
        )

    def lookup_frontier(frontier_id: str) -> list[Any] | None:
        with store.read_engine.connect() as conn:
            row = conn.execute(select(FrontierRow).where(FrontierRow.id == frontier_id)).first()  # type: ignore[arg-type]
            if row is None or row.opened_seq >= size:
                return None
            reviews = conn.execute(
                select(ReviewRow.id, ReviewRow.decided_seq).where(ReviewRow.frontier == frontier_id)  # type: ignore[call-overload]
            ).all()
        still_open = sum(1 for (_id, d) in reviews if d is None or d >= size)
        resumed = row.resumed_seq if row.resumed_seq is not None and row.resumed_seq < size else None
        closing = store.entry(resumed).kind if resumed is not None else ""
        if resumed is not None and closing in ABANDONED:
            v.abandoned[small_id(frontier_id)] = (closing, resumed)
        return [still_open, row.size, resumed, row.opened_seq, {rid for rid, _d in reviews}]

    v.lookup_review = lookup_review
    v.lookup_frontier = lookup_frontier
    return v


def _compact_ranges(size: int) -> Iterator[tuple[int, int]]:
    start = 0
    for bit in reversed(range(size.bit_length())):
        if size >> bit & 1:
            yield start, start + (1 << bit)
            start += 1 << bit


def read_jsonl(path: Path) -> Iterator[Row]:
    """Stream an ``audit export`` file: one entry's exact canonical bytes per line."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise UnusableInput(f"{path}: expected a readable JSONL export, found {exc.strerror}") from None
    with handle:
        for line in handle:
            raw = line.rstrip(b"\n")
            if raw:
                yield None, None, raw, None, None


def verify_file(
    path: Path,
    *,
    against: Checkpoint | None = None,
    progress: Progress | None = None,
    pinned_key: str | None = None,
    jobs: int | None = None,
    values: Path | None = None,
) -> Report:
    """Verify an exported JSONL log offline, with no database (``jobs``: as :func:`verify_store`).
    ``values``: the values file of a sealed log (default ``FILE.values.jsonl`` beside it, if there is
    one); without one, the commitments still bind the entries and the values are reported not at hand."""
    report = Report(ok=False, log=None, size=0, root=None)
    values = values if values is not None else values_file_for(path)
    try:
        big = path.exists() and path.stat().st_size >= verify_parallel.MIN_PARALLEL * 300  # ~300+ bytes an entry
        jobs = (env_jobs() if jobs is None else jobs) if big else 1
        verifier = Verifier()
        rows = None
        if values is not None and values.exists():
            from signoff.audit import verify_values

            rows = verify_values.file_rows(values)
            verifier.values = verify_values.lookup_from(rows)
        v, _ = verify_stream(read_jsonl(path), against=against, progress=progress, jobs=jobs, verifier=verifier)
        report.log, report.size = v.log, v.expected_seq
        if report.size == 0:
            raise UnusableInput(f"{path}: expected at least one entry, found an empty file")
        if pinned_key is not None and v.log_key != pinned_key:
            raise VerificationFailed(0, "log key", pinned_key, str(v.log_key))
        if v.ring.rules.sealed_values and rows is not None:
            from signoff.audit import verify_values

            raws = (raw for _seq, _hash, raw, _nodes, _cols in read_jsonl(path))
            report.notes += verify_values.check(v, rows, raws)
        elif v.ring.rules.sealed_values:
            report.notes.append(
                f"values not at hand (no values file): {v.ledger.commitments} commitment(s) bind the entries, "
                "and the rules that need the values were checked when written"
            )
        report.ok = True
        report.root = v.root()
        report.checkpoints = 1 if against is not None else 0
    except VerificationFailed as exc:
        report.failure = exc
    return report


def values_file_for(path: Path) -> Path | None:
    """Where ``audit export`` writes the values of a sealed log beside FILE: ``FILE.values.jsonl``."""
    beside = path.with_name(path.name + ".values.jsonl")
    return beside if beside.exists() else None


def values_lookup(store: Store) -> Any:
    from signoff.audit import values

    return values.lookup_for(store.read_rows, store.log_id, [])


def verify_tiles(
    location: str,
    *,
    log_vkey: str,
    witnesses: Sequence[CosignatureVerifier] = (),
    quorum: int = 0,
    progress: Progress | None = None,
) -> Report:
    """Verify a mirror of the log as c2sp.org/tlog-tiles (a directory or an ``http(s)://`` prefix), with no
    database: the checkpoint must be the log's (``log_vkey``) and cosigned by ``quorum`` of ``witnesses``;
    every tile and entry must hash up to it (:mod:`signoff.audit.tlog_tiles_reader`); and every entry is
    then checked as ``audit verify`` checks a log (rules, signatures, links), entry 0 naming the key of
    ``log_vkey`` and entry 1 its origin."""
    from signoff.audit.c2sp_errors import C2SPFormatError, C2SPVerificationError
    from signoff.audit.keys import public_bytes
    from signoff.audit.signed_note import SIG_ED25519, Ed25519Verifier, parse_vkey
    from signoff.audit.tlog_tiles_reader import open_log

    try:
        parsed = parse_vkey(log_vkey)
    except C2SPFormatError as exc:
        raise UnusableInput(f"--log-vkey: {exc}") from None
    if parsed.sig_type != SIG_ED25519:
        raise UnusableInput(f"--log-vkey: expected the log's Ed25519 vkey (type 0x01), found 0x{parsed.sig_type:02x}")
    if quorum > len(witnesses):
        raise UnusableInput(f"--quorum: expected 0..{len(witnesses)} (the witnesses given), found {quorum}")
    log_key = Ed25519Verifier(parsed.name, parsed.public)
    report = Report(ok=False, log=None, size=0, root=None)
    try:
        try:
            mirror = open_log(location, [log_key, *witnesses], origin=log_key.name)
        except C2SPVerificationError as exc:
            expected = f"a checkpoint signed by {log_key.name}"
            raise VerificationFailed(None, "tiles checkpoint", expected, str(exc)) from None
        except C2SPFormatError as exc:
            raise UnusableInput(f"{location}: {exc}") from None
        try:
            verified = mirror.verified.note
            signers = sorted({v.name for v in verified.verifiers if v is not log_key})
            if log_key not in verified.verifiers:
                raise VerificationFailed(None, "tiles checkpoint", f"a signature by {log_key.name}", "none")
            if len(signers) < quorum:
                expected = f"cosignatures by {quorum} of the witnesses given"
                raise VerificationFailed(None, "tiles checkpoint", expected, str(signers))
            rows = ((None, None, raw, None, None) for raw in mirror.entries())
            try:
                v, _ = verify_stream(rows, progress=progress)
            except C2SPVerificationError as exc:
                expected = "tiles and entries that hash up to the checkpoint"
                raise VerificationFailed(None, "tiles", expected, str(exc)) from None
        finally:
            mirror.close()
        point = mirror.checkpoint
        report.log, report.size = v.log, v.expected_seq
        if v.expected_seq != point.size or v.root() != format_hash(point.root):
            raise VerificationFailed(point.size, "tiles checkpoint root", format_hash(point.root), v.root())
        if v.log_key is None or public_bytes(v.log_key) != log_key.public:
            raise VerificationFailed(0, "log key", f"the key of the vkey given, {log_vkey}", str(v.log_key))
        if v.ring.rules.origin != log_key.name:
            raise VerificationFailed(1, "log origin", log_key.name, v.ring.rules.origin)
        report.ok = True
        report.root = v.root()
        report.witnessed = Witnessed(point.size, signers, quorum, 0)
    except VerificationFailed as exc:
        report.failure = exc
    return report


def load_checkpoint(path: Path) -> Checkpoint:
    """A checkpoint you kept: the note ``audit checkpoint`` printed (or a witness's, or ``/tlog/checkpoint``),
    or the JSON of ``audit checkpoint --json`` (and of checkpoints made before notes)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise UnusableInput(f"{path}: expected a checkpoint file, found {exc}") from None
    if not text.lstrip().startswith("{"):
        from signoff.audit.c2sp_errors import C2SPError
        from signoff.audit.signed_note import parse_note
        from signoff.audit.tlog_checkpoint import parse

        try:
            point = parse(parse_note(text.encode("utf-8")).text)
        except C2SPError as exc:
            raise UnusableInput(f"{path}: expected a checkpoint note or JSON, found: {exc}") from None
        return Checkpoint("", point.size, format_hash(point.root), "", {}, text)
    try:
        return Checkpoint.from_json(json.loads(text))
    except ValueError as exc:
        raise UnusableInput(f"{path}: expected a checkpoint JSON file, found {exc}") from None
