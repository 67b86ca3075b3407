"""The verifier's checks of one entry at a time: pure over bytes and ints, with flat memory.

Feed entries in ``seq`` order: each is checked for ``seq`` density, its ``prev`` link and
hash, RFC 8785 form, its signature against keys enrolled earlier on the log, the review
rules 1–6 (:mod:`audit.rules`) and its stored Merkle nodes (RFC 9162 §2.1). A settled
review is folded into a multiset hash of its projection row (:func:`review_tuple`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from signoff.audit import merkle, rules
from signoff.audit.canonical import digest as json_digest
from signoff.audit.canonical import fast_digest, parse_canonical
from signoff.audit.entry import ACTOR, DECISIONS, KINDS, TIME, ZERO_HASH, format_hash, statement
from signoff.audit.errors import ReviewError, VerificationFailed
from signoff.audit.keys import fingerprint, verify_signature


@dataclass
class ReviewFacts:
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
        self.reviews: dict[str, ReviewFacts] = {}
        self.frontiers: dict[str, list[Any]] = {}  # id -> [open count, size, resumed seq, opened seq]
        self.lookup_review: Callable[[str], ReviewFacts | None] | None = None
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

    def _settle_review(self, facts: ReviewFacts) -> None:
        if self.keep_all:
            return
        self.review_sum += row_hash(review_tuple(facts))
        del self.reviews[facts.state.id]
        self.closed_reviews.add(_small(facts.state.id))

    def _review(self, review_id: str) -> ReviewFacts | None:
        if _small(review_id) in self.closed_reviews:
            closed = rules.ReviewState(review_id, "", "", "closed", None, "", None, None, executed=True)
            return ReviewFacts(closed, "", None, ())
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
                self.frontier_sum += row_hash(frontier_tuple(frontier_id, front))
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
        self.reviews[review_id] = ReviewFacts(state, frontier_id, rules.opened_data(body), fixed)
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
        facts: ReviewFacts | None,
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


def _small(identifier: str) -> int | str:
    """A compact set key for a closed id: ``rv_``/``fr_`` + 16 hex digits fit in one int."""
    if len(identifier) == 19 and identifier[2] == "_":
        try:
            return int(identifier[3:], 16) << 1 | (identifier[0] == "f")
        except ValueError:
            pass
    return identifier


def review_tuple(facts: ReviewFacts) -> tuple[Any, ...]:
    """A review's projection row as the log implies it (compare :func:`.verify_projection.row_tuple`)."""
    state = facts.state
    data_digest = facts.data_digest if facts.opened is None else json_digest(facts.opened)
    return (
        state.id, state.status, facts.frontier, state.tool, *facts.fixed, *facts.decided,
        state.final_digest, facts.executed_seq, data_digest,
    )  # fmt: skip


def frontier_tuple(frontier_id: str, front: list[Any]) -> tuple[Any, ...]:
    return (frontier_id, front[0], front[1], front[2])


def row_hash(values: tuple[Any, ...]) -> int:
    return int.from_bytes(hashlib.sha256(repr(values).encode()).digest()[:16], "big")
