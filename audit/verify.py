"""Verification: stream the log once, with flat memory, and check everything an auditor needs.

Checks, in ``seq`` order: ``seq`` density from 0, every ``prev`` link, every hash, the RFC
8785 form of the stored bytes, every signature against keys enrolled earlier on the log,
the review rules 1–6 (:mod:`audit.rules`), every stored checkpoint's root (RFC 9162
§2.1) and signature, a kept checkpoint (``--against``), and that the review projection
matches the log. The first failure names its ``seq`` and the rule or hash that failed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlmodel import col

from signoff.audit import merkle, rules
from signoff.audit.canonical import digest as json_digest
from signoff.audit.canonical import fast_digest, parse_canonical
from signoff.audit.entry import ACTOR, DECISIONS, KINDS, TIME, ZERO_HASH, format_hash, statement
from signoff.audit.errors import AuditError, ReviewError, UnusableInput, VerificationFailed
from signoff.audit.keys import fingerprint, verify_signature
from signoff.audit.store import Checkpoint, Store
from signoff.audit.tables import FrontierRow, ReviewerRow, ReviewRow

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

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok,
            "log": self.log,
            "size": self.size,
            "root": self.root,
            "checked_from": self.checked_from,
            "checkpoints_checked": self.checkpoints,
        }
        if self.failure is not None:
            out["failure"] = {
                "seq": self.failure.seq,
                "rule": self.failure.rule,
                "expected": self.failure.expected,
                "found": self.failure.found,
                "message": str(self.failure),
            }
        return out


@dataclass
class _ReviewFacts:
    """What the verifier keeps per open review; a settled review is folded away (flat memory)."""

    state: rules.ReviewState
    frontier: str
    opened: dict[str, Any] | None  # the projection's data while pending: the call and its policy
    fixed: tuple[Any, ...]  # projection columns set at opening
    decided: tuple[Any, ...] = (None, None, None)  # (seq, by, at)
    executed_seq: int | None = None
    data_digest: str | None = None  # digest of the projection's data once closed

    @property
    def decided_seq(self) -> int | None:
        seq: int | None = self.decided[0]
        return seq


class Verifier:
    """Feed entries in order with :meth:`add`; call :meth:`finish`. Pure over bytes and ints."""

    def __init__(self, *, start: int = 0, prev: str = ZERO_HASH, compact: merkle.CompactRange | None = None) -> None:
        self.expected_seq = start
        self.prev = prev
        self.compact = compact or merkle.CompactRange()
        self.log: str | None = None
        self.log_key: str | None = None
        self.keys: dict[str, str] = {}  # fingerprint -> public key
        self.key_owners: set[tuple[str, str]] = set()  # (fingerprint, actor)
        self.signers: set[str] = set()  # actors with an enrolled key: they sign every later entry
        self.reviewers: dict[str, rules.ReviewerState] = {}
        self.reviews: dict[str, _ReviewFacts] = {}
        self.frontiers: dict[str, list[Any]] = {}  # id -> [open count, size, resumed seq, opened seq]
        self.lookup_review: Callable[[str], _ReviewFacts | None] | None = None
        self.lookup_frontier: Callable[[str], list[Any] | None] | None = None
        # Flat memory: a review that can change no more is folded into a multiset hash of
        # its projection row and only its id is kept. ``keep_all`` keeps every review, to
        # name the row when the projection does not match.
        self.keep_all = False
        self.closed_reviews: set[int | str] = set()
        self.closed_frontiers: set[int | str] = set()
        self.review_sum = 0
        self.frontier_sum = 0
        self._simple = False

    # -- one entry -------------------------------------------------------------------

    def add(
        self,
        raw: bytes,
        stored_hash: str | None = None,
        stored_seq: int | None = None,
        stored_nodes: bytes | None = None,
    ) -> None:
        seq = self.expected_seq
        if stored_seq is not None and stored_seq != seq:
            raise VerificationFailed(seq, "seq density (entry missing)", f"seq {seq}", f"seq {stored_seq}")
        leaf = hashlib.sha256(b"\x00" + raw).digest()
        digest = "sha256:" + leaf.hex()
        if stored_hash is not None and stored_hash != digest:
            raise VerificationFailed(seq, "entry hash", stored_hash, digest)
        try:
            data, self._simple = parse_canonical(raw)
        except ValueError as exc:
            raise VerificationFailed(seq, "canonical form (RFC 8785)", "canonical JSON bytes", str(exc)) from None
        if not isinstance(data, dict):
            raise VerificationFailed(seq, "entry shape", "a JSON object", type(data).__name__)
        if data.get("seq") != seq:
            raise VerificationFailed(seq, "seq density", f"seq {seq}", f"seq {data.get('seq')!r}")
        if data.get("prev") != self.prev:
            raise VerificationFailed(seq, "prev link", self.prev, str(data.get("prev")))
        self._check_fields(seq, data)
        self._check_sig(seq, data)
        try:
            self._apply(seq, data)
        except ReviewError as exc:
            rule = f"review rule {exc.rule}" if exc.rule else "review rule"
            raise VerificationFailed(seq, rule, "an entry the rules allow", str(exc)) from None
        completed = self.compact.append(leaf)
        if stored_nodes is not None:
            expected = b"".join(node for _level, _index, node in completed)
            if stored_nodes != expected:
                raise VerificationFailed(
                    seq, "stored Merkle nodes (RFC 9162 subtree hashes)", expected.hex() or "none", stored_nodes.hex()
                )
        self.prev = digest
        self.expected_seq = seq + 1

    def _check_fields(self, seq: int, data: dict[str, Any]) -> None:
        if data.get("v") != 1:
            raise VerificationFailed(seq, "entry version", "v 1", repr(data.get("v")))
        if seq == 0:
            self.log = data.get("log")
        elif data.get("log") != self.log:
            raise VerificationFailed(seq, "log id", str(self.log), str(data.get("log")))
        at, actor, kind = data.get("at"), data.get("actor"), data.get("kind")
        if not isinstance(at, str) or not TIME.match(at):
            raise VerificationFailed(seq, "timestamp", "YYYY-MM-DDTHH:MM:SS.ffffffZ", repr(at))
        if not isinstance(actor, str) or not ACTOR.match(actor):
            raise VerificationFailed(seq, "actor", "human:|agent:|service:|log: actor", repr(actor))
        if kind not in KINDS:
            raise VerificationFailed(seq, "entry kind", "a known kind", repr(kind))
        if not isinstance(data.get("body"), dict):
            raise VerificationFailed(seq, "entry body", "a JSON object", repr(data.get("body"))[:60])
        extra = set(data) - {"v", "log", "seq", "prev", "at", "actor", "kind", "body", "sig"}
        if extra:
            raise VerificationFailed(seq, "entry fields", "only the record's fields", str(sorted(extra)))

    def _check_sig(self, seq: int, data: dict[str, Any]) -> None:
        sig = data.get("sig")
        if seq == 0:
            body = data["body"]
            if (
                data["kind"] != "key.enrolled"
                or data["actor"] != f"log:{self.log}"
                or body.get("actor") != data["actor"]
            ):
                raise VerificationFailed(0, "log key", f"entry 0 enrolling log:{self.log}'s key", data["kind"])
            self.log_key = str(body.get("key"))
            self._enroll_key(0, data["actor"], self.log_key)
            if sig is None:
                raise VerificationFailed(0, "signature", "entry 0 signed by the log key", "no signature")
        actor = data["actor"]
        if sig is None:
            if actor in self.signers:
                raise VerificationFailed(seq, "signature", f"a signature by {actor}'s enrolled key", "none")
            return
        if not isinstance(sig, dict):
            raise VerificationFailed(seq, "signature", "a sig object", repr(sig)[:40])
        fp = str(sig.get("key"))
        public = self.keys.get(fp)
        if public is None or (fp, actor) not in self.key_owners:
            raise VerificationFailed(seq, "signature", f"a key enrolled for {actor} before this entry", fp)
        if not verify_signature(public, sig, statement(data["kind"], data["actor"], data["body"])):
            raise VerificationFailed(
                seq, "signature", f"a valid Ed25519 signature by {sig.get('key')}", "an invalid one"
            )

    # -- the review rules -----------------------------------------------------------

    def _settle_review(self, facts: _ReviewFacts) -> None:
        if self.keep_all:
            return
        self.review_sum += _row_hash(review_tuple(facts))
        del self.reviews[facts.state.id]
        self.closed_reviews.add(_small(facts.state.id))

    def _review(self, review_id: str) -> _ReviewFacts | None:
        if _small(review_id) in self.closed_reviews:
            closed = rules.ReviewState(review_id, "", "", "closed", None, "", None, None, executed=True)
            return _ReviewFacts(closed, "", None, ())
        facts = self.reviews.get(review_id)
        if facts is None and self.lookup_review is not None:
            facts = self.lookup_review(review_id)
            if facts is not None:
                self.reviews[review_id] = facts
        return facts

    def _frontier(self, frontier_id: str) -> list[Any] | None:
        if _small(frontier_id) in self.closed_frontiers:
            return [0, 0, -1, -1, set()]
        front = self.frontiers.get(frontier_id)
        if front is None and self.lookup_frontier is not None:
            front = self.lookup_frontier(frontier_id)
            if front is not None:
                self.frontiers[frontier_id] = front
        return front

    def _apply(self, seq: int, data: dict[str, Any]) -> None:
        kind, actor, body, at = data["kind"], data["actor"], data["body"], data["at"]
        if kind == "review.opened":
            self._open(seq, actor, body, at)
        elif kind in DECISIONS:
            rid = str(body.get("review"))
            facts = self._review(rid)
            decider = self.reviewers.get(actor)
            state, final_args = rules.decide(facts.state if facts else None, rid, kind, actor, body, at, decider)
            self._close(seq, facts, state, data, final_args)
        elif kind == "review.expired":
            facts = self._review(str(body.get("review")))
            self._close(seq, facts, rules.expire(facts.state if facts else None, str(body.get("review")), at), data)
        elif kind == "review.withdrawn":
            facts = self._review(str(body.get("review")))
            state = rules.withdraw(facts.state if facts else None, str(body.get("review")), actor, body.get("reason"))
            self._close(seq, facts, state, data)
        elif kind == "run.resumed":
            frontier_id = str(body.get("frontier"))
            front = self._frontier(frontier_id)
            if front is None:
                raise rules.FrontierNotReady(f"frontier {frontier_id}: expected a known frontier, found none")
            named = body.get("reviews")
            members: set[str] = front[4]
            if not isinstance(named, list) or set(map(str, named)) != members or len(named) != len(members):
                raise rules.FrontierNotReady(
                    f"frontier {frontier_id}: expected its reviews {sorted(members)}, found {named}"
                )
            statuses = {}
            for rid in members:
                live = self.reviews.get(rid)
                statuses[rid] = live.state.status if live is not None else "closed"
            rules.resume(frontier_id, statuses, front[2])
            front[2] = seq
            if not self.keep_all:
                self.frontier_sum += _row_hash(frontier_tuple(frontier_id, front))
                del self.frontiers[frontier_id]
                self.closed_frontiers.add(_small(frontier_id))
        elif kind == "tool.executed":
            facts = self._review(str(body.get("review")))
            state = rules.execute(facts.state if facts else None, str(body.get("review")), body.get("args_digest"))
            assert facts is not None
            facts.state = state
            facts.executed_seq = seq
            self._settle_review(facts)
        elif kind == "reviewer.enrolled":
            self._check_admin(seq, actor)
            reviewer = str(body.get("reviewer"))
            self.reviewers[reviewer] = rules.ReviewerState(
                reviewer, tuple(body.get("roles") or ()), tuple(body.get("tools") or ()), True
            )
            if body.get("key"):
                self._enroll_key(seq, reviewer, str(body["key"]))
        elif kind == "reviewer.disabled":
            self._check_admin(seq, actor)
            reviewer = str(body.get("reviewer"))
            if reviewer not in self.reviewers:
                raise VerificationFailed(seq, "reviewer", "an enrolled reviewer to disable", reviewer)
            current = self.reviewers[reviewer]
            self.reviewers[reviewer] = rules.ReviewerState(current.id, current.roles, current.tools, False)
        elif kind == "key.enrolled" and seq != 0:
            owner = str(body.get("actor"))
            if owner != actor:
                self._check_admin(seq, actor)
            self._enroll_key(seq, owner, str(body.get("key")))

    def _check_admin(self, seq: int, actor: str) -> None:
        if actor.startswith("service:"):
            return
        state = self.reviewers.get(actor)
        if state is None or not state.enabled or "admin" not in state.roles:
            raise VerificationFailed(seq, "enrolment", "a service: actor or an enabled admin", actor)

    def _enroll_key(self, seq: int, owner: str, key: str) -> None:
        try:
            fp = fingerprint(key)
        except (ValueError, TypeError):
            raise VerificationFailed(seq, "key enrolment", "an Ed25519 public key", key[:40]) from None
        if (fp, owner) in self.key_owners:
            raise VerificationFailed(seq, "key enrolment", f"a key not yet enrolled for {owner}", fp)
        self.keys[fp] = key
        self.key_owners.add((fp, owner))
        self.signers.add(owner)

    def _open(self, seq: int, actor: str, body: dict[str, Any], at: str) -> None:
        review_id, frontier_id = str(body.get("review")), str(body.get("frontier"))
        call = body.get("call")
        if not actor.startswith(("agent:", "service:")):
            raise VerificationFailed(seq, "review rule 2", "an agent: or service: opener", actor)
        if (
            review_id in self.reviews
            or _small(review_id) in self.closed_reviews
            or not isinstance(call, dict)
            or not isinstance(call.get("args"), dict)
        ):
            raise VerificationFailed(seq, "review rule 1", "a new review with call args", review_id)
        args_digest = fast_digest(call["args"]) if self._simple else json_digest(call["args"])
        if call.get("args_digest") != args_digest:
            raise VerificationFailed(seq, "args digest", args_digest, str(call.get("args_digest")))
        policy = body.get("policy") or {}
        state = rules.ReviewState(
            id=review_id,
            frontier=frontier_id,
            tool=str(call.get("tool")),
            status="pending",
            args=call["args"],
            args_digest=call["args_digest"],
            role=policy.get("role"),
            deadline=body.get("deadline"),
            schema=call.get("tool_schema"),
        )
        fixed = (
            call.get("agent"), call.get("app"), call.get("session"), call.get("confirmation_id"), call.get("call_id"),
            seq, at,
            call["args_digest"], body.get("deadline"),
        )  # fmt: skip
        self.reviews[review_id] = _ReviewFacts(state, frontier_id, rules.opened_data(body), fixed)
        front = self.frontiers.get(frontier_id)
        if _small(frontier_id) in self.closed_frontiers:
            raise VerificationFailed(seq, "review rule 5", "a frontier opened in one transaction", frontier_id)
        if front is None:
            self.frontiers[frontier_id] = [1, 1, None, seq, {review_id}]
        elif front[2] is not None or front[3] < seq - front[1]:
            raise VerificationFailed(seq, "review rule 5", "a frontier opened in one transaction", frontier_id)
        else:
            front[0] += 1
            front[1] += 1
            front[4].add(review_id)

    def _close(
        self,
        seq: int,
        facts: _ReviewFacts | None,
        state: rules.ReviewState,
        entry: dict[str, Any],
        final_args: dict[str, Any] | None = None,
    ) -> None:
        assert facts is not None and facts.opened is not None
        facts.state = state
        facts.decided = (seq, entry["actor"], entry["at"])
        data = rules.closed_data(facts.opened, entry["kind"], entry["body"], final_args)
        facts.data_digest = json_digest(data)
        facts.opened = None
        front = self._frontier(facts.frontier)
        if front is not None:
            front[0] -= 1
        if state.status not in rules.RUNNABLE:
            self._settle_review(facts)

    # -- the end ----------------------------------------------------------------------

    def root(self) -> str:
        return format_hash(self.compact.root())


def _check_checkpoint(seq_size: int, point: Checkpoint, verifier: Verifier, what: str) -> None:
    if verifier.log_key is None or not point.verify(verifier.log_key):
        raise VerificationFailed(
            None, f"{what} signature (size {point.size})", "a valid signature by the log key", "an invalid one"
        )
    if point.log != verifier.log:
        raise VerificationFailed(None, f"{what} log id", str(verifier.log), point.log)
    if point.root != verifier.root():
        raise VerificationFailed(
            seq_size - 1,
            f"{what} root (RFC 9162 tree head over entries 0..{seq_size - 1})",
            point.root,
            verifier.root(),
        )


def verify_stream(
    rows: Iterable[tuple[int | None, str | None, bytes, bytes | None]],
    *,
    checkpoints: Iterable[Checkpoint] = (),
    against: Checkpoint | None = None,
    progress: Progress | None = None,
    verifier: Verifier | None = None,
) -> tuple[Verifier, int]:
    """Check ``(stored seq, stored hash, raw)`` rows in order; stored checkpoints are checked as their size passes."""
    v = verifier or Verifier()
    pending = sorted(checkpoints, key=lambda c: c.size)
    pending = [c for c in pending if c.size > v.expected_seq or v.expected_seq == 0]
    index = 0
    for stored_seq, stored_hash, raw, stored_nodes in rows:
        v.add(raw, stored_hash, stored_seq, stored_nodes)
        size = v.expected_seq
        while index < len(pending) and pending[index].size == size:
            _check_checkpoint(size, pending[index], v, "stored checkpoint")
            index += 1
        if against is not None and against.size == size:
            _check_checkpoint(size, against, v, "kept checkpoint")
        if progress is not None and size % 10000 == 0:
            progress(size)
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
) -> Report:
    """Verify a whole store: the log, its checkpoints, the kept checkpoint and the projection.

    With ``incremental`` and a kept checkpoint that the log key signed, entries before the
    checkpoint are proven by its root alone (their bytes are not reread) and only later
    entries are checked one by one.
    """
    try:
        info = store.info()
    except AuditError as exc:
        raise UnusableInput(str(exc)) from None
    report = Report(ok=False, log=info.id, size=info.size, root=None)
    try:
        stop = info.size
        start = 0
        verifier = Verifier()
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
        v, count = verify_stream(
            rows, checkpoints=checkpoints, against=against if start == 0 else None, progress=progress, verifier=verifier
        )
        if pinned_key is not None and v.log_key is not None and v.log_key != pinned_key:
            raise VerificationFailed(0, "log key", pinned_key, v.log_key)
        if v.expected_seq != stop:
            raise VerificationFailed(
                v.expected_seq, "seq density (entry missing)", f"{stop} entries", f"{v.expected_seq}"
            )
        if start == 0:
            try:
                _check_projection(store, v)
            except ProjectionMismatch:
                full = Verifier()
                full.keep_all = True
                verify_stream(store.iter_rows(0, stop), verifier=full)
                _check_projection(store, full)
        report.ok = True
        report.root = v.root()
        report.checked_from = start
        report.checkpoints = count + (1 if against is not None else 0)
    except VerificationFailed as exc:
        report.failure = exc
    return report


def _trusted(store: Store, point: Checkpoint, pinned_key: str | None) -> bool:
    key = pinned_key or _first_key(store)
    return key is not None and point.verify(key) and point.log == store.log_id


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
    first = json.loads(next(store.iter_raw(0, 1))[2])
    v.log = first["log"]
    for kind in ("key.enrolled", "reviewer.enrolled", "reviewer.disabled"):
        for item in store.entries(0, size, kind=kind):
            data = item.to_json()
            if item.seq == 0:
                v.log_key = str(item.body["key"])
            v._apply(item.seq, data) if item.seq else v._enroll_key(0, item.actor, str(item.body["key"]))

    def lookup_review(review_id: str) -> _ReviewFacts | None:
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
        )
        fixed = (
            row.agent, row.app, row.session, row.confirmation_id, row.call_id, row.opened_seq, row.opened_at,
            row.args_digest, row.deadline,
        )  # fmt: skip
        facts = _ReviewFacts(state, row.frontier, None if decided else rules.opened_data(data), fixed)
        if decided:
            facts.decided = (row.decided_seq, row.decided_by, row.decided_at)
            facts.data_digest = json_digest(data)
        facts.executed_seq = row.executed_seq if executed else None
        return facts

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


def _small(identifier: str) -> int | str:
    """A compact set key for a closed id: ``rv_``/``fr_`` + 16 hex digits fit in one int."""
    if len(identifier) == 19 and identifier[2] == "_":
        try:
            return int(identifier[3:], 16) << 1 | (identifier[0] == "f")
        except ValueError:
            pass
    return identifier


def review_tuple(facts: _ReviewFacts) -> tuple[Any, ...]:
    """A review's projection row as the log implies it (compare :func:`row_tuple`)."""
    state = facts.state
    data_digest = facts.data_digest if facts.opened is None else json_digest(facts.opened)
    return (
        state.id, state.status, facts.frontier, state.tool, *facts.fixed, *facts.decided,
        state.final_digest, facts.executed_seq, data_digest,
    )  # fmt: skip


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
        row.decided_at, row.final_digest, row.executed_seq, json_digest(json.loads(row.data)),
    )  # fmt: skip


def frontier_tuple(frontier_id: str, front: list[Any]) -> tuple[Any, ...]:
    return (frontier_id, front[0], front[1], front[2])


def _row_hash(values: tuple[Any, ...]) -> int:
    return int.from_bytes(hashlib.sha256(repr(values).encode()).digest()[:16], "big")


class ProjectionMismatch(Exception):
    """The folded projection sums differ; a second, full-memory pass names the row."""


def _check_projection(store: Store, v: Verifier) -> None:
    """The review queue, frontiers and reviewers must be exactly what the log says.

    Compared as order-free multiset hashes of the rows, so memory stays flat; with
    ``v.keep_all`` each row is compared directly, to name the one that differs.
    """
    review_sum = v.review_sum + sum(_row_hash(review_tuple(f)) for f in v.reviews.values())
    frontier_sum = v.frontier_sum + sum(_row_hash(frontier_tuple(k, f)) for k, f in v.frontiers.items())
    found_reviews = found_frontiers = seen_reviews = seen_frontiers = 0
    with store.read_engine.connect() as conn:
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
            found_reviews += _row_hash(found)
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
            found_frontiers += _row_hash(found_f)
            seen_frontiers += 1
        if v.keep_all and seen_frontiers != len(v.frontiers):
            raise VerificationFailed(None, "projection", f"{len(v.frontiers)} frontier rows", f"{seen_frontiers}")
        if not v.keep_all and found_frontiers != frontier_sum:
            raise ProjectionMismatch()
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


def read_jsonl(path: Path) -> Iterator[tuple[int | None, str | None, bytes, bytes | None]]:
    """Stream an ``audit export`` file: one entry's exact canonical bytes per line."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise UnusableInput(f"{path}: expected a readable JSONL export, found {exc.strerror}") from None
    with handle:
        for line in handle:
            raw = line.rstrip(b"\n")
            if raw:
                yield None, None, raw, None


def verify_file(
    path: Path, *, against: Checkpoint | None = None, progress: Progress | None = None, pinned_key: str | None = None
) -> Report:
    """Verify an exported JSONL log offline, with no database."""
    report = Report(ok=False, log=None, size=0, root=None)
    try:
        v, _ = verify_stream(read_jsonl(path), against=against, progress=progress)
        report.log, report.size = v.log, v.expected_seq
        if report.size == 0:
            raise UnusableInput(f"{path}: expected at least one entry, found an empty file")
        if pinned_key is not None and v.log_key != pinned_key:
            raise VerificationFailed(0, "log key", pinned_key, str(v.log_key))
        report.ok = True
        report.root = v.root()
        report.checkpoints = 1 if against is not None else 0
    except VerificationFailed as exc:
        report.failure = exc
    return report


def load_checkpoint(path: Path) -> Checkpoint:
    try:
        return Checkpoint.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise UnusableInput(f"{path}: expected a checkpoint JSON file, found {exc}") from None
