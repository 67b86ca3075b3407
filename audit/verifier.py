"""The verifier's checks of one entry at a time: pure over bytes and ints, with flat memory.

Feed entries in ``seq`` order: each is checked for ``seq`` density, its ``prev`` link and
hash, RFC 8785 form, the index columns stored beside it, who may write it and its signature
against keys enrolled earlier on the log (:mod:`signoff.audit.trust`), the review rules 1–6
(:mod:`signoff.audit.rules`), the checkpoints recorded on the log, and its stored Merkle nodes
(RFC 9162 §2.1). A settled review is folded into a multiset hash of its projection row
(:func:`review_tuple`). On a sealed log the values' checks are :mod:`.verifier_values`'.

Over ~400 lines on purpose: what is left here is one state machine over the entries, whose kinds
share the same per-review state; the checks that need none of it live in their own modules.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import orjson

from signoff.audit import c2sp, delegation, entry_form, merkle, policies, proposals, rules, sealing, sso_required, trust
from signoff.audit.canonical import canonical, fast_digest, parse_canonical
from signoff.audit.canonical import digest as json_digest
from signoff.audit.entry import (
    ABANDONED,
    DECISIONS,
    ZERO_HASH,
    format_hash,
    format_time,
    later,
    parse_time,
)
from signoff.audit.errors import AuditError, InvalidEntry, NotAllowed, ReviewError, VerificationFailed
from signoff.audit.keys import verify_signature
from signoff.audit.value_ledger import ValueLedger
from signoff.audit.verifier_values import ReviewFacts, SealedChecks, check_sealed_call
from signoff.audit.verifier_values import small_id as _small


class Verifier(SealedChecks):
    """Feed entries in order with :meth:`add`; call :meth:`finish`. Pure over bytes and ints."""

    def __init__(self, *, start: int = 0, prev: str = ZERO_HASH, compact: merkle.CompactRange | None = None) -> None:
        self.expected_seq = start
        self.prev = prev
        self.compact = compact or merkle.CompactRange()
        self.log: str | None = None
        self.log_key: str | None = None
        self.ring = trust.Keyring(trust.LogRules(""))  # who holds which key; set up at entry 0
        self.checkpoints: dict[int, str] = {}  # size -> root of every log.checkpoint entry
        # size -> what the log implies its stored note checkpoint holds: [its time, its note and, in log
        # order, the witnesses' cosignature lines (log.cosigned)]
        self.notes: dict[int, list[str]] = {}
        self.cosigned: dict[int, set[str]] = {}  # size -> the witnesses whose cosignature the log recorded
        self.witnesses: dict[str, c2sp.Witness] = {}  # the witnesses an admin named on the log (witness.added)
        self.quorum = 0
        self.reviewers: dict[str, rules.ReviewerState] = {}
        self.delegations = delegation.Delegations()  # every delegation.granted so far, and its revocation
        self.policies: list[policies.PolicyDef] = []  # every policy.set so far (signoff.audit.policies)
        self.proposals = proposals.Proposals()  # every policy.proposed so far, and what became of it
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
        # frontier (small id) -> the kind and seq of its run.rewound or run.cancelled
        self.abandoned: dict[int | str, tuple[str, int]] = {}
        self.replied: set[int | str] = set()  # frontiers with their run.replied
        self.review_sum = 0
        self.frontier_sum = 0
        self._simple = False
        # Sealed logs (signoff.audit.value_ledger): the commitments the entries hold, less the erased ones;
        # when each settled review's values may be erased by retention; and, where the caller has them,
        # the values themselves (to check again the rules that need them: auto-approval rules, schemas).
        self.ledger = ValueLedger()
        self.retention: dict[int | str, str] = {}
        self.values: sealing.Lookup | None = None

    # -- one entry -------------------------------------------------------------------

    def add(
        self,
        raw: bytes,
        stored_hash: str | None = None,
        stored_seq: int | None = None,
        stored_nodes: bytes | None = None,
        stored_columns: tuple[Any, ...] | None = None,
    ) -> None:
        """Check one entry; ``stored_*`` are what the store keeps beside its bytes (None: not stored)."""
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
        self._check_entry(seq, data, leaf, digest, stored_nodes, stored_columns)

    def add_checked(
        self,
        raw: bytes,
        leaf: bytes,
        simple: bool,
        stored_seq: int | None = None,
        stored_nodes: bytes | None = None,
        stored_columns: tuple[Any, ...] | None = None,
        form: entry_form.Failure | None | bool = True,
    ) -> None:
        """:meth:`add` for an entry whose leaf hash (checked against the stored hash), RFC 8785 form, fields
        and stored columns a worker already checked (:mod:`signoff.audit.verify_parallel`); ``simple``: it
        parsed on the fast path of :func:`parse_canonical`, where ``orjson`` reads exactly the same value;
        ``form``: what :func:`entry_form.failure` found wrong with it (None: nothing; raised here, in the
        verifier's order), or True: not checked yet (checked here)."""
        seq = self.expected_seq
        if stored_seq is not None and stored_seq != seq:
            raise VerificationFailed(seq, "seq density (entry missing)", f"seq {seq}", f"seq {stored_seq}")
        data = orjson.loads(raw) if simple else parse_canonical(raw)[0]
        self._simple = simple
        self._check_entry(seq, data, leaf, "sha256:" + leaf.hex(), stored_nodes, stored_columns, form)

    def _check_entry(
        self,
        seq: int,
        data: Any,
        leaf: bytes,
        digest: str,
        stored_nodes: bytes | None,
        stored_columns: tuple[Any, ...] | None,
        form: entry_form.Failure | None | bool = True,
    ) -> None:
        """Everything after the bytes: fields, links, index columns, trust, rules, Merkle nodes. ``form``:
        :func:`entry_form.failure` of the entry as a worker found it (None: none), or True: not yet checked."""
        if not isinstance(data, dict):
            raise VerificationFailed(seq, "entry shape", "a JSON object", type(data).__name__)
        if data.get("seq") != seq:
            raise VerificationFailed(seq, "seq density", f"seq {seq}", f"seq {data.get('seq')!r}")
        if data.get("prev") != self.prev:
            raise VerificationFailed(seq, "prev link", self.prev, str(data.get("prev")))
        found = entry_form.failure(data, stored_columns) if form is True else form
        if isinstance(found, tuple) and found[0] == entry_form.VERSION:
            raise VerificationFailed(seq, *found)
        if seq == 0:
            self.log = data.get("log")
        elif data.get("log") != self.log:
            raise VerificationFailed(seq, "log id", str(self.log), str(data.get("log")))
        if isinstance(found, tuple):
            raise VerificationFailed(seq, *found)
        self._check_trust(seq, data)
        try:
            self._apply(seq, data)
        except InvalidEntry as exc:
            raise VerificationFailed(seq, "entry body", "a body its kind allows", str(exc)) from None
        except ReviewError as exc:
            rule = f"review rule {exc.rule}" if exc.rule else "review rule"
            raise VerificationFailed(seq, rule, "an entry the rules allow", str(exc)) from None
        self._apply_trust(seq, data)
        completed = self.compact.append(leaf)
        if stored_nodes is not None:
            expected = b"".join(node for _level, _index, node in completed)
            if stored_nodes != expected:
                raise VerificationFailed(
                    seq, "stored Merkle nodes (RFC 9162 subtree hashes)", expected.hex() or "none", stored_nodes.hex()
                )
        self.prev = digest
        self.expected_seq = seq + 1

    def _check_trust(self, seq: int, data: dict[str, Any]) -> None:
        """Who may write this entry, and its signature (:mod:`signoff.audit.trust`)."""
        kind, actor, body, sig = data["kind"], data["actor"], data["body"], data.get("sig")
        if seq == 0:
            if kind != "key.enrolled" or actor != f"log:{self.log}" or body.get("actor") != actor:
                raise VerificationFailed(0, "log key", f"entry 0 enrolling log:{self.log}'s key", kind)
            if sig is None:
                raise VerificationFailed(0, "signature", "entry 0 signed by the log key", "no signature")
            self.log_key = str(body.get("key"))
            self.ring = trust.Keyring(trust.LogRules(str(self.log)))
        if sig is not None and not isinstance(sig, dict):
            raise VerificationFailed(seq, "signature", "a sig object", repr(sig)[:40])
        state = self.reviewers.get(actor)
        try:
            self.ring.check(
                seq, kind, actor, body, sig, legacy_admin=state is not None and state.enabled and "admin" in state.roles
            )
        except NotAllowed as exc:
            rule = "signature" if str(exc).startswith("sig") else "enrolment authority"
            expected = f"an entry {actor} may write, signed as the rules require"
            raise VerificationFailed(seq, rule, expected, str(exc)) from None

    def replay_trusted(self, seq: int, data: dict[str, Any]) -> None:
        """Take in a trust entry (keys, reviewers, rules, checkpoints) of a prefix that a kept checkpoint
        proves, without checking it again (``audit verify --incremental``)."""
        if seq == 0:
            self.log = data["log"]
            self.log_key = str(data["body"].get("key"))
            self.ring = trust.Keyring(trust.LogRules(str(self.log)))
        if data["kind"] in ("reviewer.enrolled", "reviewer.disabled", "policy.set"):
            self._apply(seq, data)
        if data["kind"] in ("policy.set", proposals.PROPOSED, proposals.DECLINED):
            self.proposals.apply(seq, data["kind"], data["actor"], data["body"], data["at"])
        elif data["kind"] in delegation.KINDS:
            self.delegations.apply(seq, data["kind"], data["actor"], data["body"], data["at"])
        if data["kind"] == "log.checkpoint":
            self.checkpoints[seq] = str(data["body"].get("root"))
            if isinstance(data["body"].get("note"), str):
                self.notes[seq] = [str(data["body"].get("at")), data["body"]["note"]]
        elif data["kind"] in c2sp.WITNESS_KINDS:
            self.quorum = c2sp.apply_witness_entry(data["kind"], data["body"], self.witnesses, self.quorum)
        elif data["kind"] == "log.cosigned" and data["body"].get("size") in self.notes:
            self.notes[data["body"]["size"]][1] += f"{data['body'].get('cosignature')}\n"
            self.cosigned.setdefault(data["body"]["size"], set()).add(str(data["body"].get("witness")))
        elif data["kind"] in trust.ENROLMENT or data["kind"] == "log.configured" or seq == 0:
            self.ring.apply(seq, data["kind"], data["actor"], data["body"])

    def fold_trusted(self, facts: ReviewFacts, seq: int, data: dict[str, Any]) -> None:
        """Take in an approval, escalation or claim of a review still open at a kept checkpoint, from the
        prefix the checkpoint proves (``audit verify --incremental``), without checking it again."""
        kind, actor, body, at = data["kind"], data["actor"], data["body"], data["at"]
        if body.get("review") != facts.state.id or facts.opened is None:
            return
        state = facts.state
        if kind in ("review.approved", "review.edited"):
            allowed = rules.ReviewerState(actor, tuple(r for r in state.roles_that_decide() if r), ())
            facts.state, _args = rules.decide(state, state.id, kind, actor, body, at, allowed)
            patch = body.get("patch") if kind == "review.edited" else None
            facts.opened = rules.progress_data(facts.opened, facts.state, actor, seq, patch, body.get("acting_for"))
        elif kind == "review.escalated":
            facts.state = rules.evolve(state, escalated_role=str(body.get("role")))
            facts.opened = {**facts.opened, "escalated_role": body.get("role")}
        elif kind == "review.claimed":
            facts.state = rules.evolve(state, claim=(str(body.get("reviewer")), str(body.get("until"))))
            facts.opened = {**facts.opened, "claim": {"reviewer": body.get("reviewer"), "until": body.get("until")}}

    def _apply_trust(self, seq: int, data: dict[str, Any]) -> None:
        kind, body = data["kind"], data["body"]
        if kind == "log.checkpoint":
            self._logged_checkpoint(seq, body)
        if kind not in trust.ENROLMENT and kind != "log.configured" and seq != 0:
            return
        try:
            self.ring.apply(seq, kind, data["actor"], body)
        except NotAllowed as exc:
            expected = "a usable key, not yet enrolled for its actor"
            raise VerificationFailed(seq, "key enrolment", expected, str(exc)) from None

    def _logged_checkpoint(self, seq: int, body: dict[str, Any]) -> None:
        """A checkpoint recorded on the log: the tree head of every entry before it, signed by the log key:
        a C2SP signed note under the log's origin (``note``), or, before those, JSON (``sig``)."""
        root = format_hash(self.compact.root())
        if body.get("size") != seq or body.get("root") != root:
            raise VerificationFailed(
                seq, "logged checkpoint (RFC 9162 tree head)", f"size {seq}, root {root}",
                f"size {body.get('size')!r}, root {body.get('root')!r}",
            )  # fmt: skip
        if "note" in body:
            origin = self.ring.rules.origin
            note = body.get("note")
            try:
                if not isinstance(note, str) or self.log_key is None:
                    raise ValueError("no note text")
                note_point = c2sp.verify_log_note(note.encode("utf-8"), origin, self.log_key)
            except (ValueError, AuditError) as exc:
                raise VerificationFailed(
                    seq, "logged checkpoint note (c2sp.org/tlog-checkpoint)",
                    f"a note signed by the log key under origin {origin}", str(exc),
                ) from None  # fmt: skip
            if note_point.size != seq or format_hash(note_point.root) != root or note_point.extensions:
                found = f"size {note_point.size}, root {format_hash(note_point.root)}, {list(note_point.extensions)}"
                raise VerificationFailed(
                    seq, "logged checkpoint note (c2sp.org/tlog-checkpoint)", f"size {seq}, root {root}", found
                )
            self.notes[seq] = [str(body.get("at")), note]
            self.checkpoints[seq] = root
            return
        point = {"log": self.log, "size": seq, "root": root, "at": body.get("at")}
        sig = body.get("sig")
        if (
            not isinstance(sig, dict)
            or self.log_key is None
            or not verify_signature(self.log_key, sig, canonical(point))
        ):
            raise VerificationFailed(seq, "logged checkpoint signature", "a valid signature by the log key", "none")
        self.checkpoints[seq] = root

    # -- the review rules -----------------------------------------------------------

    def _settle_review(self, facts: ReviewFacts) -> None:
        if facts.retain_until is not None:
            self.retention[_small(facts.state.id)] = facts.retain_until
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
        if self.ring.rules.sealed_values:
            self._hold_values(kind, body)
        if kind == trust.ERASED:
            self._erased(seq, actor, body, at)
        elif kind == "review.opened":
            self._open(seq, actor, body, at)
        elif kind in DECISIONS:
            rid = str(body.get("review"))
            facts = self._review(rid)
            decider = self._decider(actor, body, at)
            state, final_args = rules.decide(facts.state if facts else None, rid, kind, actor, body, at, decider)
            if kind == "review.edited" and facts is not None and state.args is not None:
                self._sealed_schema(seq, rid, facts.state.schema, state.args)
            if state.status == "pending":  # one approval toward the policy's quorum
                assert facts is not None and facts.opened is not None
                patch = body.get("patch") if kind == "review.edited" else None
                facts.opened = rules.progress_data(facts.opened, state, actor, seq, patch, body.get("acting_for"))
                facts.state = state
            else:
                self._close(seq, facts, state, data, final_args)
        elif kind == "review.auto_approved":
            self._auto_approved(seq, actor, body, at)
        elif kind == "review.escalated":
            self._escalated(actor, body, at)
        elif kind == "review.claimed":
            self._claimed(actor, body, at)
        elif kind in delegation.KINDS:
            self._delegation(seq, kind, actor, body, at)
        elif kind == "policy.set":
            if "proposal" in body:  # an admin approving a reviewer's proposal (rule 7)
                found = self.proposals.by_id.get(str(body.get("proposal")))
                in_force = policies.in_force(self.policies, found.tool) if found is not None else None
                proposals.check_approval(body, found, in_force)
            self.policies.append(policies.parse(body, seq, on_log=True))
            self.proposals.apply(seq, kind, actor, body, at)
        elif kind == proposals.PROPOSED:
            tool = str(body.get("tool"))
            known = str(body.get("proposal")) in self.proposals.by_id
            in_force = policies.in_force(self.policies, tool)
            proposals.check_proposal(actor, body, self.reviewers.get(actor), in_force, known=known)
            self.proposals.apply(seq, kind, actor, body, at)
        elif kind == proposals.DECLINED:
            proposals.check_decline(body, self.proposals.by_id.get(str(body.get("proposal"))))
            self.proposals.apply(seq, kind, actor, body, at)
        elif kind == "review.expired":
            facts = self._review(str(body.get("review")))
            self._close(seq, facts, rules.expire(facts.state if facts else None, str(body.get("review")), at), data)
        elif kind == "review.withdrawn":
            facts = self._review(str(body.get("review")))
            state = rules.withdraw(facts.state if facts else None, str(body.get("review")), actor, body.get("reason"))
            self._close(seq, facts, state, data)
        elif kind in ABANDONED:
            self._abandoned(seq, kind, actor, body)
        elif kind == "run.resumed":
            frontier_id = str(body.get("frontier"))
            if _small(frontier_id) in self.abandoned:
                rules.resume(frontier_id, {}, None, self.abandoned[_small(frontier_id)])
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
        elif kind == "run.replied":
            frontier_id = str(body.get("frontier"))
            front = self._frontier(frontier_id)
            if not actor.startswith(("agent:", "service:")):
                raise rules.NotAllowed(f"actor: expected an agent: or service: actor, found {actor!r}")
            rules.reply(
                frontier_id, front[2] if front is not None else None, replied=_small(frontier_id) in self.replied
            )
            self.replied.add(_small(frontier_id))
        elif kind == "run.resume_failed":
            self._resume_failed(actor, body)
        elif kind in c2sp.WITNESS_KINDS:
            self._witness_entry(kind, body)
        elif kind == sso_required.KIND:  # an admin's (checked by _check_trust); its form here
            sso_required.check_body(body)
        elif kind == "log.cosigned":
            self._cosigned(body)
        elif kind == "tool.executed":
            facts = self._review(str(body.get("review")))
            state = rules.execute(facts.state if facts else None, str(body.get("review")), body.get("args_digest"))
            assert facts is not None
            if self.ring.rules.version >= trust.RULES_VERSION:
                front = self._frontier(facts.frontier) if facts.frontier else [0, 0, -1]
                rules.executed_after_resume(facts.state.id, front[2] if front is not None else None)
            facts.state = state
            facts.executed_seq = seq
            self._settle_review(facts)
        elif kind == "reviewer.enrolled":
            reviewer = str(body.get("reviewer"))
            self.reviewers[reviewer] = rules.ReviewerState(
                reviewer, tuple(body.get("roles") or ()), tuple(body.get("tools") or ()), True
            )
        elif kind == "reviewer.disabled":
            reviewer = str(body.get("reviewer"))
            if reviewer not in self.reviewers:
                raise VerificationFailed(seq, "reviewer", "an enrolled reviewer to disable", reviewer)
            current = self.reviewers[reviewer]
            self.reviewers[reviewer] = rules.ReviewerState(current.id, current.roles, current.tools, False)

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
        self._check_opened_policy(seq, str(call.get("tool")), policy)
        if self.ring.rules.sealed_values:
            check_sealed_call(seq, review_id, call, policy.get("private"))
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
            approvals_needed=int(policy.get("approvals", 1)),
            requested_by=call.get("requested_by") or None,
            self_approval=policy.get("self_approval") is True,
        )
        fixed = (
            call.get("agent"), call.get("app"), call.get("session"), call.get("confirmation_id"), call.get("call_id"),
            seq, at,
            call["args_digest"], body.get("deadline"),
        )  # fmt: skip
        retain = policy.get("retain_seconds")
        until = (
            format_time(later(parse_time(at), float(retain)))
            if isinstance(retain, int | float) and self.ring.rules.sealed_values
            else None
        )
        self.reviews[review_id] = ReviewFacts(
            state, frontier_id, rules.opened_data(body), fixed, simple=self._simple, retain_until=until
        )
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

    def _check_opened_policy(self, seq: int, tool: str, policy: dict[str, Any]) -> None:
        """A review opens under the log's policy in force for its tool, as strict as the admin set it."""
        if not isinstance(policy.get("approvals", 1), int) or not 1 <= policy.get("approvals", 1) <= 10:
            raise VerificationFailed(seq, "review policy", "approvals from 1 to 10", repr(policy.get("approvals")))
        in_force = policies.in_force(self.policies, tool)
        if in_force is None:
            if policy.get("name") is not None:
                raise VerificationFailed(seq, "review policy", "no log policy (none is in force)", str(policy))
            if policy.get("self_approval", False) is not False:  # only an admin's policy may allow it
                raise VerificationFailed(seq, "review policy", "no self_approval without a log policy", str(policy))
            return
        found = (policy.get("name"), policy.get("seq"), policy.get("digest"))
        if found != (in_force.name, in_force.seq, in_force.digest):
            raise VerificationFailed(
                seq, "review policy", f"the policy in force, {in_force.name} at seq {in_force.seq}", repr(found)
            )
        weaker = [
            name
            for name, ok in (
                ("approvals", policy.get("approvals", 1) >= in_force.approvals),
                ("role", in_force.role is None or policy.get("role") == in_force.role),
                ("deadline_seconds", in_force.deadline_seconds is None
                 or policy.get("deadline_seconds") == in_force.deadline_seconds),
                ("escalate", policy.get("escalate") == in_force.escalate),
                ("self_approval", (policy.get("self_approval", False) is True) == in_force.self_approval),
                ("private", not self.ring.rules.sealed_values
                 or policy.get("private") == (list(in_force.private) if in_force.private is not None else None)),
                ("retain_seconds", not self.ring.rules.sealed_values
                 or policy.get("retain_seconds") == policies.retention_for(self.policies, tool)),
            )
            if not ok
        ]  # fmt: skip
        if weaker:
            raise VerificationFailed(
                seq, "review policy", f"the terms of policy {in_force.name}", f"other {', '.join(weaker)}"
            )

    def _auto_approved(self, seq: int, actor: str, body: dict[str, Any], at: str) -> None:
        """``review.auto_approved``: the rule of the policy in force, evaluated again on the recorded
        inputs, which must be the call's own, lets the call through."""
        review_id, call = str(body.get("review")), body.get("call")
        if not actor.startswith(("agent:", "service:")):
            raise NotAllowed(f"actor: expected an agent: or service: actor, found {actor!r}")
        if review_id in self.reviews or _small(review_id) in self.closed_reviews:
            raise VerificationFailed(seq, "review rule 1", "a new review", review_id)
        if not isinstance(call, dict) or not isinstance(call.get("args"), dict):
            raise VerificationFailed(seq, "review rule 1", "a call with args", repr(call)[:60])
        args_digest = json_digest(call["args"])
        if call.get("args_digest") != args_digest:
            raise VerificationFailed(seq, "args digest", args_digest, str(call.get("args_digest")))
        tool = str(call.get("tool"))
        in_force = policies.in_force(self.policies, tool)
        needed, why = True, "no policy is in force"
        sealed = self.ring.rules.sealed_values
        if in_force is not None:
            inputs = policies.rule_inputs(
                in_force, args=call["args"], tool=tool, agent=str(call.get("agent")), app=str(call.get("app")),
                user=str(call.get("user")),
            )  # fmt: skip
            if body.get("inputs") != inputs:
                raise VerificationFailed(seq, "auto-approval inputs", "the call's own args and names", "others")
            plain = self._revealed(call["args"], review_id) if sealed else call["args"]
            if plain is None:  # its values are not at hand (erased, or no values file): checked when written
                needed, why = False, "checked at write time"
            else:
                needed, why = policies.needs_person(in_force, {**inputs, "args": plain})
        named = body.get("policy")
        if sealed and isinstance(named, dict):
            retain = policies.retention_for(self.policies, tool)
            if named.get("retain_seconds") != retain:
                raise VerificationFailed(
                    seq, "review policy", f"retain_seconds {retain}", repr(named.get("retain_seconds"))
                )
            named = {k: v for k, v in named.items() if k != "retain_seconds"}
            check_sealed_call(
                seq,
                review_id,
                call,
                list(in_force.private) if in_force is not None and in_force.private is not None else None,
            )
        rules.auto_approve(in_force, named, needed, why)
        state = rules.ReviewState(
            review_id, "", tool, "auto_approved", None, args_digest, None, None, final_digest=args_digest
        )
        fixed = (
            call.get("agent"), call.get("app"), call.get("session"), call.get("confirmation_id"), call.get("call_id"),
            seq, at, args_digest, None,
        )  # fmt: skip
        facts = ReviewFacts(state, "", None, fixed, decided=(seq, actor, at))
        facts.data_digest = json_digest(rules.auto_data(body))
        self.reviews[review_id] = facts

    def _abandoned(self, seq: int, kind: str, actor: str, body: dict[str, Any]) -> None:
        """``run.rewound`` / ``run.cancelled`` (rule 5a): a frontier neither resumed nor abandoned, every
        review final, all named; its approved calls are marked as never running (a later
        ``tool.executed`` is named)."""
        frontier_id = str(body.get("frontier"))
        front = self._frontier(frontier_id)
        if front is None:
            raise rules.FrontierNotReady(f"frontier {frontier_id}: expected a known frontier, found none")
        members: set[str] = front[4]
        statuses = {}
        for rid in members:
            live = self.reviews.get(rid)
            statuses[rid] = live.state.status if live is not None else "closed"
        gone = self.abandoned.get(_small(frontier_id))
        closed_at = gone[1] if gone is not None else front[2]
        closed = None if closed_at is None else max(closed_at, 0)  # (-1: resumed before an incremental start)
        rules.abandon(kind, frontier_id, actor, statuses, closed, body.get("reviews"))
        for rid in members:
            facts = self.reviews.get(rid)
            if facts is not None and facts.state.status in rules.RUNNABLE:
                facts.state = rules.evolve(facts.state, failed=True)
        front[2] = seq
        self.abandoned[_small(frontier_id)] = (kind, seq)
        if not self.keep_all:
            self.frontier_sum += row_hash(frontier_tuple(frontier_id, front))
            del self.frontiers[frontier_id]
            self.closed_frontiers.add(_small(frontier_id))

    def _resume_failed(self, actor: str, body: dict[str, Any]) -> None:
        """``run.resume_failed``: calls of a resumed frontier that will never run; each is approved, has not
        run, and was not named before. They stay live here, so that a later ``tool.executed`` is named."""
        frontier_id = str(body.get("frontier"))
        front = self.frontiers.get(frontier_id)
        resumed = _small(frontier_id) in self.closed_frontiers or (front is not None and front[2] is not None)
        named = body.get("reviews")
        open_calls: dict[str, bool] = {}
        for rid in named if isinstance(named, list) else []:
            facts = self.reviews.get(str(rid))
            open_calls[str(rid)] = (
                facts is not None
                and facts.frontier == frontier_id
                and facts.state.status in rules.RUNNABLE
                and not facts.state.executed
                and not facts.state.failed
            )
        rules.resume_failed(frontier_id, actor, 0 if resumed else None, named, open_calls)
        for rid in open_calls:
            facts = self.reviews[rid]
            facts.state = rules.evolve(facts.state, failed=True)

    def _witness_entry(self, kind: str, body: dict[str, Any]) -> None:
        """``witness.added`` / ``witness.removed`` / ``witness.quorum`` (an admin's: :meth:`_check_trust`)."""
        try:
            c2sp.check_witness_body(kind, body, self.witnesses, self.quorum)
        except ValueError as exc:
            raise InvalidEntry(str(exc)) from None
        self.quorum = c2sp.apply_witness_entry(kind, body, self.witnesses, self.quorum)

    def _cosigned(self, body: dict[str, Any]) -> None:
        """``log.cosigned``: a witness on the log cosigned (c2sp.org/tlog-cosignature) a note checkpoint the
        log recorded; once per witness and checkpoint. Its line joins the stored checkpoint's note."""
        name, size, line = body.get("witness"), body.get("size"), body.get("cosignature")
        witness = self.witnesses.get(str(name))
        if witness is None:
            raise InvalidEntry(f"body.witness: expected a witness on the log, found {name!r}")
        if not isinstance(size, int) or size not in self.notes:
            raise InvalidEntry(f"body.size: expected the size of a note checkpoint on the log, found {size!r}")
        if name in self.cosigned.get(size, set()):
            raise InvalidEntry(f"body.witness: expected one cosignature by {name} of size {size}, found another")
        text = c2sp.checkpoint_of(self.ring.rules.origin, size, self.checkpoints[size]).text()
        try:
            timestamp = c2sp.check_cosignature(witness, text, str(line))
        except ValueError as exc:
            raise InvalidEntry(str(exc)) from None
        if body.get("timestamp") != timestamp:
            found = body.get("timestamp")
            raise InvalidEntry(f"body.timestamp: expected {timestamp}, the cosignature's, found {found!r}")
        self.notes[size][1] += f"{line}\n"
        self.cosigned.setdefault(size, set()).add(str(name))

    def _escalated(self, actor: str, body: dict[str, Any], at: str) -> None:
        review_id = str(body.get("review"))
        if not actor.startswith(("agent:", "service:")):
            raise NotAllowed(f"actor: expected an agent: or service: actor to escalate, found {actor!r}")
        facts = self._review(review_id)
        if facts is None or facts.opened is None:
            raise rules.UnknownReview(review_id)
        policy = facts.opened.get("policy") or {}
        due = policies.escalation_due(policy.get("escalate"), policy.get("deadline_seconds"), str(facts.fixed[6]))
        role = (policy.get("escalate") or {}).get("to_role")
        if due is None or body.get("role") != role:
            raise NotAllowed(f"review {review_id}: expected an escalation its policy sets ({role!r}), found {body}")
        facts.state = rules.escalate(facts.state, review_id, role, at, due)
        facts.opened = {**facts.opened, "escalated_role": role}

    def _claimed(self, actor: str, body: dict[str, Any], at: str) -> None:
        review_id, reviewer = str(body.get("review")), str(body.get("reviewer"))
        if not actor.startswith("service:") and actor != reviewer:
            raise NotAllowed(f"actor: expected the desk (service:) or {reviewer} to claim, found {actor!r}")
        facts = self._review(review_id)
        who = self._decider(reviewer, body, at)
        state = rules.claim(facts.state if facts else None, review_id, reviewer, who, at, body.get("until"))
        assert facts is not None and facts.opened is not None
        facts.state = state
        facts.opened = {**facts.opened, "claim": {"reviewer": reviewer, "until": body.get("until")}}

    def _decider(self, actor: str, body: dict[str, Any], at: str) -> rules.ReviewerState | None:
        """Who decides (or claims): the reviewer as enrolled, or, when the body names ``acting_for``, what
        the delegations in force lend them (rule 2b)."""
        own = self.reviewers.get(actor)
        if "acting_for" not in body:
            return own
        acting_for = body["acting_for"]
        giver = self.reviewers.get(acting_for) if isinstance(acting_for, str) else None
        return delegation.acting(actor, acting_for, at, own, giver, self.delegations.to(actor))

    def _delegation(self, seq: int, kind: str, actor: str, body: dict[str, Any], at: str) -> None:
        """``delegation.granted`` / ``delegation.revoked`` (rule 2b): only roles the delegator holds
        themselves, to another enabled reviewer, for a window; ended by its delegator, delegate or an admin."""
        ident = str(body.get("delegation"))
        if kind == delegation.GRANTED:
            giver, taker = body.get("delegator"), body.get("delegate")
            delegation.check_grant(
                actor,
                body,
                at,
                self.reviewers.get(giver) if isinstance(giver, str) else None,
                self.reviewers.get(taker) if isinstance(taker, str) else None,
                known=ident in self.delegations.by_id,
            )
        else:
            delegation.check_revoke(actor, body, self.delegations.by_id.get(ident))
        self.delegations.apply(seq, kind, actor, body, at)

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
        data = rules.closed_data(facts.opened, entry["kind"], entry["body"], final_args, entry["actor"], seq)
        # Both entries the data comes from are simple: sorted compact JSON is its RFC 8785 form.
        facts.data_digest = fast_digest(data) if self._simple and facts.simple else json_digest(data)
        facts.opened = None
        front = self._frontier(facts.frontier)
        if front is not None:
            front[0] -= 1
        if state.status not in rules.RUNNABLE:
            self._settle_review(facts)

    # -- the end ----------------------------------------------------------------------

    def root(self) -> str:
        return format_hash(self.compact.root())


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
