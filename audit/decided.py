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

from signoff.audit import delegation, policies, rules, sealing, trust, values
from signoff.audit.canonical import digest
from signoff.audit.entry import NEVER_RUN, OUTCOMES, Entry, parse_time
from signoff.audit.errors import AuditError, NotAllowed, ReviewError, UnknownReview
from signoff.audit.merkle import leaf_hash
from signoff.audit.reader import LogReader, parse_entry
from signoff.audit.revealing import reveal_review
from signoff.audit.review_types import CallSpec, Policy, Review
from signoff.audit.sealing import Lookup
from signoff.audit.trust import Keyring, LogRules

DECISIONS = trust.DECISIONS
_BY_SUBJECT = "SELECT seq, hash, raw FROM signoff_entry WHERE subject = ? AND log = ? ORDER BY seq"
_BY_SEQ = "SELECT seq, hash, raw FROM signoff_entry WHERE log = ? AND seq = ?"
# ``log || ''`` keeps the planner on the subject index (a plain ``log = ?`` with ``seq < ?`` walks the
# (log, seq) key: every entry before the decision, on every proof).
_POLICIES = (
    "SELECT seq, hash, raw FROM signoff_entry WHERE log || '' = ? AND subject >= 'policy:' AND subject < 'policy;' "
    "AND seq < ? ORDER BY seq"
)
_ADMIN_ENTRIES = (
    "SELECT seq, hash, raw FROM signoff_entry WHERE log || '' = ? AND subject >= 'admin:' AND subject < 'admin;' "
    "AND seq < ? ORDER BY seq"
)


class DecisionNotProven(AuditError):
    """The log does not prove that a person decided this call as claimed; the tool must not run."""


# -- a review from its entries (pure) -----------------------------------------------------


@dataclass
class _Replay:
    """A review's decisions replayed from its own entries (quorum rounds, escalation, claims)."""

    args: dict[str, Any]
    needed: int
    status: str = "pending"
    closing: Entry | None = None
    round: int = 0
    patch: Any = None  # the edit that started the current round
    approvals: list[Entry] = field(default_factory=list)  # the current round's, the editor's first
    escalated_role: str | None = None
    claim: tuple[str, str] | None = None
    problem: str = ""


def replay(review_id: str, opened: Entry, own: Sequence[Entry]) -> _Replay:
    """Fold a review's entries (oldest first): each approval must name the round's args (and, where
    several people must approve, its round and the same answer); an edit starts a new round that
    the editor's approval opens. A tampered entry ends the replay with ``problem`` set."""
    body = opened.body
    policy = Policy.from_json(body.get("policy"))
    state = _Replay(dict(body["call"]["args"]), max(1, int(policy.approvals)))
    for item in own:
        if item.seq <= opened.seq or state.closing is not None:
            continue
        if item.kind == "review.escalated":
            due = policies.escalation_due(policy.escalate, policy.deadline_seconds, opened.at)
            wanted = (policy.escalate or {}).get("to_role")
            if due is None or item.at < due or item.body.get("role") != wanted:
                state.problem = (
                    f"review {review_id}: the escalation at seq {item.seq} is not its policy's "
                    f"(to {wanted!r} from {due}), found to {item.body.get('role')!r} at {item.at}"
                )
                break
            state.escalated_role = str(item.body.get("role"))
        elif item.kind == "review.claimed":
            state.claim = (str(item.body.get("reviewer")), str(item.body.get("until")))
        elif item.kind in ("review.approved", "review.edited"):
            state.problem = _take_approval(review_id, state, item)
            if state.problem:
                state.closing, state.status = item, OUTCOMES[item.kind]
        elif item.kind in OUTCOMES:
            state.closing, state.status = item, OUTCOMES[item.kind]
    return state


def _take_approval(review_id: str, state: _Replay, item: Entry) -> str:
    """One approval or edit into ``state``; what is wrong with it, if anything."""
    if state.needed > 1 and item.body.get("round") != state.round:
        found = item.body.get("round")
        return f"review {review_id}: the decision at seq {item.seq} names round {found!r}, not {state.round}"
    if item.kind == "review.edited":
        try:
            result = rules.patched_args(state.args, item.body.get("patch"))
        except ReviewError as exc:
            return f"review {review_id}: the edit at seq {item.seq} does not apply: {exc}"
        state.args, state.round, state.patch, state.approvals = result, state.round + 1, item.body.get("patch"), []
    elif any(earlier.actor == item.actor for earlier in state.approvals):
        return f"review {review_id}: {item.actor} approved round {state.round} twice (seq {item.seq})"
    elif _seat_taken(state.approvals, item):
        return (
            f"review {review_id}: the approval at seq {item.seq} counts {item.body.get('acting_for') or item.actor} "
            f"twice in round {state.round} (a delegate sits in their delegator's seat)"
        )
    elif state.approvals and item.body.get("payload") != state.approvals[0].body.get("payload"):
        return f"review {review_id}: the approval at seq {item.seq} gives another answer than its round's first"
    if digest(state.args) != item.body.get("args_digest"):
        return (
            f"review {review_id}: expected the decision at seq {item.seq} to name args {digest(state.args)}, "
            f"found {item.body.get('args_digest')}"
        )
    state.approvals.append(item)
    if len(state.approvals) >= state.needed:
        state.closing, state.status = item, "edited" if state.round else "approved"
    return ""


def _seat_taken(approvals: Sequence[Entry], item: Entry) -> bool:
    """Rule 2b in a quorum: each person counts once per round, approving themselves or through a delegate."""
    taken = {e.actor for e in approvals} | {str(e.body["acting_for"]) for e in approvals if "acting_for" in e.body}
    seats = {e.body["acting_for"] for e in approvals if "acting_for" in e.body}
    acting_for = item.body.get("acting_for")
    return item.actor in seats or (isinstance(acting_for, str) and acting_for in taken)


def review_from_entries(
    review_id: str, own: Sequence[Entry], resumed: bool, *, failed: str = "", lookup: Lookup | None = None
) -> Review:
    """The review that ``own`` (its entries, oldest first, each naming ``review_id``) describe; ``failed``:
    the reason of a ``run.resume_failed`` naming it (its call is never run, or run again). ``lookup``:
    the values beside the log (:mod:`signoff.audit.values`); on a sealed review each value is revealed
    and checked against its commitment, and one that is missing (with no ``data.erased`` naming it) or
    does not match makes the review's ``problem`` (nothing of it runs)."""
    sealed = review_from_sealed(review_id, own, resumed, failed)
    if not sealed.sealed or lookup is None:
        return sealed
    return reveal_review(sealed, own, lookup)


def review_from_sealed(review_id: str, own: Sequence[Entry], resumed: bool, failed: str = "") -> Review:
    """The review as its entries hold it: on a sealed log, with commitments in place of its values."""
    auto = next((e for e in own if e.kind == "review.auto_approved"), None)
    if auto is not None:
        return _auto_review(review_id, auto, own, resumed)
    opened = next((e for e in own if e.kind == "review.opened"), None)
    if opened is None:
        raise UnknownReview(review_id)
    body = opened.body
    call = CallSpec.from_json(body["call"])
    state = replay(review_id, opened, own)
    closing = state.closing
    runs = state.status in ("approved", "edited") and not state.problem
    return Review(
        id=review_id,
        frontier=str(body.get("frontier")),
        status=state.status,
        call=call,
        args_digest=str(body["call"].get("args_digest")),
        policy=Policy.from_json(body.get("policy")),
        deadline=parse_time(body["deadline"]) if body.get("deadline") else None,
        opened_at=parse_time(opened.at),
        opened_seq=opened.seq,
        decided_at=parse_time(closing.at) if closing is not None else None,
        decided_by=closing.actor if closing is not None else None,
        decision_seq=closing.seq if closing is not None else None,
        final_args=state.args if runs else None,
        patch=closing.body.get("patch") if closing is not None and closing.kind == "review.edited" else state.patch,
        rationale=str(closing.body.get("rationale") or "") if closing is not None else "",
        reason=_reason(closing),
        answer_payload=closing.body.get("payload") if closing is not None else None,
        executed=any(e.kind == "tool.executed" for e in own),
        resumed=resumed,
        problem=state.problem,
        approvals=tuple((e.actor, e.seq) for e in state.approvals),
        round=state.round,
        round_args=state.args if closing is None else None,
        escalated_role=state.escalated_role,
        claim=state.claim,
        round_payload=state.approvals[0].body.get("payload") if closing is None and state.approvals else None,
        resume_failed=failed,
        sealed=sealing.any_sealed(body["call"]),
        sealed_round_args=dict(state.args) if closing is None else None,
        delegated=tuple(
            (e.seq, str(e.body["acting_for"]))
            for e in own
            if e.kind in DECISIONS and isinstance(e.body.get("acting_for"), str)
        ),
    )


def _reason(closing: Entry | None) -> str:
    if closing is None:
        return ""
    return "deadline passed" if closing.kind == "review.expired" else str(closing.body.get("reason") or "")


def _auto_review(review_id: str, auto: Entry, own: Sequence[Entry], resumed: bool) -> Review:
    """A call the policy in force let through (``review.auto_approved``): it runs with its own args."""
    call = CallSpec.from_json(auto.body["call"])
    named = auto.body.get("policy") or {}
    return Review(
        id=review_id,
        frontier="",
        status="auto_approved",
        call=call,
        args_digest=str(auto.body["call"].get("args_digest")),
        policy=Policy(name=named.get("name"), seq=named.get("seq"), digest=named.get("digest")),
        deadline=None,
        opened_at=parse_time(auto.at),
        opened_seq=auto.seq,
        decided_at=parse_time(auto.at),
        decided_by=auto.actor,
        decision_seq=auto.seq,
        final_args=dict(call.args),
        patch=None,
        rationale=f"policy {named.get('name')}: its rule lets this call through",
        reason="",
        answer_payload=None,
        executed=any(e.kind == "tool.executed" for e in own),
        resumed=resumed,
        sealed=sealing.any_sealed(auto.body["call"]),
    )


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
    resumed, failed = frontier_facts(store, own[0].body.get("frontier"), review_id)
    return review_from_entries(review_id, own, resumed, failed=failed, lookup=lookup_of(store, review_id))


def lookup_of(store: LogReader, review_id: str) -> Lookup:
    """The values beside the log that one review's reader needs."""
    return values.lookup_for(store.read_rows, store.log_id, [review_id])


def failure_reason(item: Entry) -> str:
    """Why the calls a ``run.resume_failed``, ``run.rewound`` or ``run.cancelled`` names never run, as its
    body says."""
    default = {"run.rewound": "the run was rewound before it", "run.cancelled": "the run was cancelled"}
    return str(item.body.get("reason") or default.get(item.kind, "the resume failed"))


def frontier_facts(store: LogReader, frontier: Any, review_id: str) -> tuple[bool, str]:
    """Whether the review's frontier was resumed (``run.resumed``), and the reason of a
    ``run.resume_failed``, ``run.rewound`` or ``run.cancelled`` naming the review ("" if none), from the
    frontier's own entries."""
    if not isinstance(frontier, str) or not frontier:
        return False, ""
    about = [parse_entry(bytes(row.raw)) for row in store.read_rows(_BY_SUBJECT, frontier, store.log_id)]
    resumed = any(e.kind == "run.resumed" and e.body.get("frontier") == frontier for e in about)
    failed = next(
        (
            failure_reason(e)
            for e in about
            if e.kind in NEVER_RUN and e.body.get("frontier") == frontier and review_id in (e.body.get("reviews") or [])
        ),
        "",
    )
    return resumed, failed


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
    refused: dict[int, tuple[str, str]] = field(default_factory=dict)  # seq -> (hash, why): proven not to hold
    lock: threading.Lock = field(default_factory=threading.Lock)


def prove_decision(store: LogReader, review_id: str, *, cache: TrustCache | None = None) -> SignedDecision:
    """The gate's check before a tool runs; raises :class:`DecisionNotProven` (or ``UnknownReview``).

    Returns for every final status; only approved, edited and auto-approved calls carry final args.
    Where a policy asks several people, every approval of the deciding round is proven the same way.
    An auto-approval is proven by the policy it names: the one in force, set by an admin's signed
    ``policy.set``, whose rule lets the call through when evaluated again here.
    """
    cache = cache or TrustCache()
    log_id = store.log_id
    own = _own(review_id, store.read_rows(_BY_SUBJECT, review_id, log_id), check_hashes=True)
    if not own:
        raise UnknownReview(review_id)
    resumed, failed = frontier_facts(store, own[0].body.get("frontier"), review_id)
    review = review_from_entries(review_id, own, resumed, failed=failed, lookup=lookup_of(store, review_id))
    if review.problem:
        raise DecisionNotProven(review.problem)
    if review.status == "auto_approved":
        auto = next(e for e in own if e.kind == "review.auto_approved")
        return SignedDecision(review, _prove_auto(store, review, auto, cache))
    closing = next((e for e in own if e.seq == review.decision_seq), None)
    if closing is None or closing.kind not in DECISIONS:
        return SignedDecision(review, None)
    deciders = (
        [closing] if closing.kind == "review.rejected" else [e for e in own if (e.actor, e.seq) in review.approvals]
    )
    roles = (review.policy.role,) if review.escalated_role is None else (review.policy.role, review.escalated_role)
    signed: str | None = None
    for item in deciders:
        signed = _prove_signed(store, review, item, roles, cache)
    return SignedDecision(review, signed)


def _prove_signed(
    store: LogReader, review: Review, item: Entry, roles: tuple[str | None, ...], cache: TrustCache
) -> str | None:
    """One person's decision entry: its link, their signature under the log's chain of keys, and that
    they were enrolled, enabled and covering the tool then."""
    _check_link(store, item, cache)
    rules_, ring, reviewer = _trust_at(store, item.seq, item.actor, cache)
    try:
        ring.check(item.seq, item.kind, item.actor, item.body, item.sig)
    except NotAllowed as exc:
        raise DecisionNotProven(f"review {review.id}: the decision at seq {item.seq} is not proven: {exc}") from None
    if "acting_for" in item.body:
        reviewer = _lent(store, review, item, reviewer, cache)
    if reviewer is None or not any(rules.covers(reviewer, review.tool, role) for role in roles):
        raise DecisionNotProven(
            f"review {review.id}: expected {item.actor} enrolled, enabled and covering {review.tool} "
            f"at seq {item.seq}, found {reviewer}"
        )
    signed = str(item.sig.get("key")) if item.sig else None
    if signed is None and rules_.signed_decisions:  # check_signature refuses this already; kept explicit
        raise DecisionNotProven(f"review {review.id}: expected a signed decision, found none")
    return signed


def _lent(
    store: LogReader, review: Review, item: Entry, own: rules.ReviewerState | None, cache: TrustCache
) -> rules.ReviewerState:
    """Rule 2b at the gate: a delegate's decision names whom they act for; what that person lent them is
    read from the delegations to the delegate before the decision, each entry's link, hash, writer and
    signature proven as the decision's own are, and what the delegator still held at the decision."""
    found: list[Entry] = []
    for row in store.read_rows(_BY_SUBJECT, f"delegation:{item.actor}", store.log_id):
        if row.seq >= item.seq:
            continue
        entry = _own_entry(row)
        if entry.kind not in delegation.KINDS or entry.body.get("delegate") != item.actor:
            continue  # bound by the entry's own body, not by the index
        try:
            prove_entry(store, entry, cache)
        except DecisionNotProven as exc:
            raise DecisionNotProven(
                f"review {review.id}: the delegation at seq {entry.seq} is not proven: {exc}"
            ) from None
        found.append(entry)
    acting_for = item.body.get("acting_for")
    giver = _trust_at(store, item.seq, acting_for, cache)[2] if isinstance(acting_for, str) else None
    try:
        return delegation.acting(item.actor, acting_for, item.at, own, giver, delegation.replay(found).to(item.actor))
    except NotAllowed as exc:
        raise DecisionNotProven(f"review {review.id}: the decision at seq {item.seq} is not proven: {exc}") from None


def _own_entry(row: Any) -> Entry:
    raw = bytes(row.raw)
    if "sha256:" + leaf_hash(raw).hex() != row.hash:
        raise DecisionNotProven(f"seq {row.seq}: expected its stored hash {row.hash} over its bytes, found other")
    item = parse_entry(raw)
    if item.seq != row.seq:
        raise DecisionNotProven(f"seq {row.seq}: expected an entry at seq {row.seq}, found seq {item.seq}")
    return item


def _prove_auto(store: LogReader, review: Review, auto: Entry, cache: TrustCache) -> str | None:
    """An auto-approval: the policy it names is the one in force for the tool at that seq, an admin
    signed it, and its rule, evaluated again on the call's own inputs, lets the call through."""
    _check_link(store, auto, cache)
    found = [parse_entry(bytes(r.raw)) for r in store.read_rows(_POLICIES, store.log_id, auto.seq)]
    defs = [policies.parse(e.body, e.seq, on_log=True) for e in found if e.kind == "policy.set"]
    in_force = policies.in_force(defs, review.tool)
    call = review.call
    needed, why = True, "no policy is in force"
    if in_force is not None:
        inputs = policies.rule_inputs(
            in_force, args=call.args, tool=call.tool, agent=call.agent, app=call.app, user=call.user
        )
        needed, why = policies.needs_person(in_force, inputs)
    try:
        rules.auto_approve(in_force, auto.body.get("policy"), needed, why)
    except NotAllowed as exc:
        raise DecisionNotProven(
            f"review {review.id}: the auto-approval at seq {auto.seq} is not proven: {exc}"
        ) from None
    assert in_force is not None
    entry = _row_entry(store, in_force.seq)
    try:
        prove_entry(store, entry, cache)  # an admin's authority and signature
    except DecisionNotProven as exc:
        raise DecisionNotProven(f"policy {in_force.name} at seq {entry.seq} is not proven: {exc}") from None
    return str(entry.sig.get("key")) if entry.sig else None


def prove_entry(store: LogReader, entry: Entry, cache: TrustCache) -> None:
    """One trust entry that a decision rests on (a ``policy.set``, a ``delegation.granted`` or
    ``.revoked``), as the gate proves it: its link, and its writer's authority and signature under the
    log's chain of keys before it; a delegation granted by anyone but its delegator is an admin's.
    Raises :class:`DecisionNotProven`; proven (or refused) once per ``cache`` and entry bytes (an entry
    never changes; one edited behind the service's back has another hash and is proven again)."""
    with cache.lock:
        if cache.checked.get(entry.seq) == entry.hash:
            return
        known = cache.refused.get(entry.seq)
    if known is not None and known[0] == entry.hash:
        raise DecisionNotProven(known[1])
    try:
        _check_link(store, entry, cache)
        _rules, ring, _who = _trust_at(store, entry.seq, entry.actor, cache)
        try:
            ring.check(entry.seq, entry.kind, entry.actor, entry.body, entry.sig)
            granted_by_other = entry.kind == delegation.GRANTED and entry.actor != entry.body.get("delegator")
            if granted_by_other and not entry.actor.startswith("admin:"):
                raise NotAllowed(f"actor: expected the delegator or an admin, found {entry.actor}")
        except NotAllowed as exc:
            raise DecisionNotProven(f"{entry.kind} by {entry.actor}: {exc}") from None
    except DecisionNotProven as exc:
        with cache.lock:
            cache.refused[entry.seq] = (entry.hash, str(exc))
        raise
    with cache.lock:
        cache.checked[entry.seq] = entry.hash


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


def key_on_log(store: LogReader, actor: str, fingerprint: str, size: int, *, cache: TrustCache | None = None) -> None:
    """Raise :class:`DecisionNotProven` unless the log, replayed as the gate replays it (the log key, the
    admins' entries under it, ``actor``'s own enrolments, each signature checked), has ``fingerprint``
    enrolled for ``actor`` and not revoked before ``size``."""
    _rules, ring, _reviewer = _trust_at(store, size, actor, cache or TrustCache())
    if fingerprint not in ring.of(actor):
        raise DecisionNotProven(
            f"key {fingerprint} of {actor}: expected it enrolled on the log under an admin's signature, found "
            "a key row with no such enrolment (added or restored behind the log's back)"
        )


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
