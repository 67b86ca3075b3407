"""What was decided about one review, read from the review's own log entries, not from a projection.

Two readers, both bound by review id (an entry counts only when its own body names the review):

* :func:`read_review`: the :class:`~signoff.audit.review_types.Review` that
  ``ReviewService.get`` returns. Status, final args, patch and answer come from the opening and
  the closing entry; a queue row that says otherwise changes nothing.
* :func:`prove_decision`: what the gate runs before a tool (DESIGN.md "Who holds which key"). On
  top of that it checks each entry's hash and link, the decider's signature against the key the
  log enrolled for them, that key's enrolment under an admin's signature, the admin's under the
  log key (which the caller may pin), and that the decider was enabled and covered the tool.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from signoff.audit import rules, trust
from signoff.audit.canonical import digest
from signoff.audit.entry import OUTCOMES, Entry, parse_time
from signoff.audit.errors import AuditError, NotAllowed, ReviewError, UnknownReview
from signoff.audit.merkle import leaf_hash
from signoff.audit.reader import LogReader, parse_entry
from signoff.audit.review_types import CallSpec, Policy, Review
from signoff.audit.trust import Keyring, LogRules

DECISIONS = trust.DECISIONS
_BY_SUBJECT = "SELECT seq, hash, raw FROM signoff_entry WHERE subject = ? AND log = ? ORDER BY seq"
_BY_SEQ = "SELECT seq, hash, raw FROM signoff_entry WHERE log = ? AND seq = ?"
_ADMIN_ENTRIES = (
    "SELECT seq, hash, raw FROM signoff_entry WHERE log = ? AND subject >= 'admin:' AND subject < 'admin;' "
    "AND seq < ? ORDER BY seq"
)


class DecisionNotProven(AuditError):
    """The log does not prove that a person decided this call as claimed; the tool must not run."""


# -- a review from its entries (pure) -----------------------------------------------------


def review_from_entries(review_id: str, own: Sequence[Entry], resumed: bool) -> Review:
    """The review that ``own`` (its entries, oldest first, each naming ``review_id``) describe."""
    opened = next((e for e in own if e.kind == "review.opened"), None)
    if opened is None:
        raise UnknownReview(review_id)
    body = opened.body
    call = CallSpec.from_json(body["call"])
    closing = next((e for e in own if e.kind in OUTCOMES), None)
    status = OUTCOMES[closing.kind] if closing is not None else "pending"
    final_args: dict[str, Any] | None = None
    patch = None
    answer = None
    rationale = reason = ""
    problem = ""
    if closing is not None:
        try:
            final_args, patch = _final_args(review_id, call.args, closing)
        except DecisionNotProven as exc:  # tampered: say so, and offer nothing to run
            final_args, patch, problem = None, closing.body.get("patch"), str(exc)
        answer = closing.body.get("payload")
        rationale = str(closing.body.get("rationale") or "")
        reason = "deadline passed" if closing.kind == "review.expired" else str(closing.body.get("reason") or "")
    return Review(
        id=review_id,
        frontier=str(body.get("frontier")),
        status=status,
        call=call,
        args_digest=str(body["call"].get("args_digest")),
        policy=Policy(**(body.get("policy") or {})),
        deadline=parse_time(body["deadline"]) if body.get("deadline") else None,
        opened_at=parse_time(opened.at),
        opened_seq=opened.seq,
        decided_at=parse_time(closing.at) if closing is not None else None,
        decided_by=closing.actor if closing is not None else None,
        decision_seq=closing.seq if closing is not None else None,
        final_args=final_args,
        patch=patch,
        rationale=rationale,
        reason=reason,
        answer_payload=answer,
        executed=any(e.kind == "tool.executed" for e in own),
        resumed=resumed,
        problem=problem,
    )


def _final_args(review_id: str, opened_args: dict[str, Any], closing: Entry) -> tuple[dict[str, Any] | None, Any]:
    """The args an approval or edit decided, recomputed from the opened args (rule 3), digest-checked."""
    if closing.kind == "review.approved":
        result, patch = opened_args, None
    elif closing.kind == "review.edited":
        patch = closing.body.get("patch")
        try:
            result = rules.patched_args(opened_args, patch)
        except ReviewError as exc:
            raise DecisionNotProven(
                f"review {review_id}: the edit at seq {closing.seq} does not apply: {exc}"
            ) from None
    else:
        return None, None
    if digest(result) != closing.body.get("args_digest"):
        raise DecisionNotProven(
            f"review {review_id}: expected the decision at seq {closing.seq} to name args {digest(result)}, "
            f"found {closing.body.get('args_digest')}"
        )
    return result, patch


def _own(review_id: str, rows: Iterable[Any], *, check_hashes: bool) -> list[Entry]:
    out = []
    for row in rows:
        raw = bytes(row.raw)
        if check_hashes and "sha256:" + leaf_hash(raw).hex() != row.hash:
            raise DecisionNotProven(f"seq {row.seq}: expected its stored hash {row.hash} over its bytes, found other")
        item = parse_entry(raw)
        if item.seq != row.seq:
            raise DecisionNotProven(f"seq {row.seq}: expected an entry at seq {row.seq}, found seq {item.seq}")
        if item.body.get("review") == review_id:  # bound by the entry's own body, not by the index
            out.append(item)
    return out


def read_review(store: LogReader, review_id: str) -> Review:
    """``ReviewService.get``: one review as its own log entries tell it (raises ``UnknownReview``)."""
    own = _own(review_id, store.read_rows(_BY_SUBJECT, review_id, store.log_id), check_hashes=False)
    if not own:
        raise UnknownReview(review_id)
    frontier = own[0].body.get("frontier")
    resumed = isinstance(frontier, str) and any(
        e.kind == "run.resumed" and e.body.get("frontier") == frontier
        for e in (parse_entry(bytes(row.raw)) for row in store.read_rows(_BY_SUBJECT, frontier, store.log_id))
    )
    return review_from_entries(review_id, own, resumed)


# -- the proof the gate checks ----------------------------------------------------------------


@dataclass(frozen=True)
class SignedDecision:
    """A decision the log proves: who decided, what the tool runs with, and the signature on it."""

    review: Review
    signed_by: str | None  # the key fingerprint; None only where the log allows unsigned decisions

    @property
    def status(self) -> str:
        return self.review.status


@dataclass
class TrustCache:
    """Entries whose hash, link and signature one process already checked (they never change)."""

    log_key: str | None = None  # pinned by the caller, or learnt from entry 0
    checked: dict[int, str] = field(default_factory=dict)  # seq -> hash
    lock: threading.Lock = field(default_factory=threading.Lock)


def prove_decision(store: LogReader, review_id: str, *, cache: TrustCache | None = None) -> SignedDecision:
    """The gate's check before a tool runs; raises :class:`DecisionNotProven` (or ``UnknownReview``).

    Returns for every final status; only approved and edited decisions carry final args.
    """
    cache = cache or TrustCache()
    log_id = store.log_id
    own = _own(review_id, store.read_rows(_BY_SUBJECT, review_id, log_id), check_hashes=True)
    if not own:
        raise UnknownReview(review_id)
    closing = next((e for e in own if e.kind in OUTCOMES), None)
    review = review_from_entries(review_id, own, resumed=False)
    if review.problem:
        raise DecisionNotProven(review.problem)
    if closing is None or closing.kind not in DECISIONS:
        return SignedDecision(review, None)
    _check_link(store, closing, cache)
    rules_, ring, reviewer = _trust_at(store, closing.seq, closing.actor, cache)
    try:
        ring.check(closing.seq, closing.kind, closing.actor, closing.body, closing.sig)
    except NotAllowed as exc:
        raise DecisionNotProven(f"review {review_id}: the decision at seq {closing.seq} is not proven: {exc}") from None
    if reviewer is None or not rules.covers(reviewer, review.tool, review.policy.role):
        raise DecisionNotProven(
            f"review {review_id}: expected {closing.actor} enrolled, enabled and covering {review.tool} "
            f"at seq {closing.seq}, found {reviewer}"
        )
    signed = str(closing.sig.get("key")) if closing.sig else None
    if signed is None and rules_.signed_decisions:  # check_signature refuses this already; kept explicit
        raise DecisionNotProven(f"review {review_id}: expected a signed decision, found none")
    return SignedDecision(review, signed)


def _row_entry(store: LogReader, seq: int) -> Entry:
    found = store.read_rows(_BY_SEQ, store.log_id, seq)
    if not found:
        raise DecisionNotProven(f"seq {seq}: expected an entry, found none")
    raw = bytes(found[0].raw)
    if "sha256:" + leaf_hash(raw).hex() != found[0].hash:
        raise DecisionNotProven(f"seq {seq}: expected its stored hash over its bytes, found another")
    return parse_entry(raw)


def _check_link(store: LogReader, item: Entry, cache: TrustCache) -> None:
    """The entry links to the one before it (a row slipped in out of the chain is refused)."""
    if item.seq == 0:
        return
    with cache.lock:
        known = cache.checked.get(item.seq - 1)
    prev_hash = known if known is not None else _row_entry(store, item.seq - 1).hash
    if item.prev != prev_hash:
        raise DecisionNotProven(f"seq {item.seq}: expected prev {prev_hash}, found {item.prev}")


def _trust_at(
    store: LogReader, seq: int, actor: str, cache: TrustCache
) -> tuple[LogRules, Keyring, rules.ReviewerState | None]:
    """Replay the trust entries that matter for ``actor`` before ``seq``: the log key (entry 0, pinned
    or not), the rules and first admin (entry 1), every admin entry, and the actor's own enrolments."""
    first = _row_entry(store, 0)
    log_key = str(first.body.get("key"))
    if cache.log_key is not None and cache.log_key != log_key:
        raise DecisionNotProven(f"seq 0: expected the pinned log key {cache.log_key}, found {log_key}")
    ring = Keyring(LogRules(store.log_id))
    chain: list[Entry] = [first]
    if seq > 1:
        second = _row_entry(store, 1)
        if second.kind == "log.configured":
            chain.append(second)
    rows = list(store.read_rows(_ADMIN_ENTRIES, store.log_id, seq))
    rows += list(store.read_rows(_BY_SUBJECT, actor, store.log_id))
    seen = {e.seq for e in chain}
    for row in sorted(rows, key=lambda r: r.seq):
        if row.seq >= seq or row.seq in seen:
            continue
        seen.add(row.seq)
        raw = bytes(row.raw)
        if "sha256:" + leaf_hash(raw).hex() != row.hash:
            raise DecisionNotProven(f"seq {row.seq}: expected its stored hash over its bytes, found another")
        chain.append(parse_entry(raw))
    reviewers: dict[str, rules.ReviewerState] = {}
    for item in sorted(chain, key=lambda e: e.seq):
        if item.kind not in trust.ENROLMENT and item.kind not in trust.LOG_KINDS:
            continue
        with cache.lock:
            known = cache.checked.get(item.seq) == item.hash
        try:
            # Rules version 1 named no admin: any service: actor could enroll, so only signatures prove anything.
            if not known and (
                ring.rules.version >= trust.RULES_VERSION or item.seq == 0 or item.kind == "log.configured"
            ):
                ring.check(item.seq, item.kind, item.actor, item.body, item.sig)
            elif not known:
                trust.check_signature(ring.rules, item.kind, item.actor, item.body, item.sig, ring.of(item.actor))
            ring.apply(item.seq, item.kind, item.actor, item.body)
        except NotAllowed as exc:
            raise DecisionNotProven(f"seq {item.seq}: {item.kind} by {item.actor} is not proven: {exc}") from None
        _apply_reviewer(reviewers, item)
        with cache.lock:
            cache.checked[item.seq] = item.hash
    if cache.log_key is None:
        cache.log_key = log_key
    return ring.rules, ring, reviewers.get(actor)


def _apply_reviewer(reviewers: dict[str, rules.ReviewerState], item: Entry) -> None:
    body = item.body
    if item.kind == "reviewer.enrolled":
        name = str(body.get("reviewer"))
        reviewers[name] = rules.ReviewerState(name, tuple(body.get("roles") or ()), tuple(body.get("tools") or ()))
    elif item.kind == "reviewer.disabled":
        name = str(body.get("reviewer"))
        current = reviewers.get(name)
        if current is not None:
            reviewers[name] = rules.ReviewerState(current.id, current.roles, current.tools, False)
