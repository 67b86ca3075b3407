"""The review lifecycle on the log: open, decide, expire, withdraw, resume, execute.

Every operation is one transaction (:meth:`audit.store.Store.transact`): it reads the
review projection after the head lock, checks the pure rules of :mod:`audit.rules`,
appends the entry and updates the projection, or raises and writes nothing.

:class:`ReviewService` writes the lifecycle here; its bases read reviews
(:mod:`audit.review_queries`) and enroll reviewers and keys (:mod:`audit.reviewers`); a sealed
log's values are :mod:`audit.review_sealing`'s. Over ~400 lines on purpose: each operation is one
transaction, written out where its checks can be read in order.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select, update
from sqlmodel import col

from signoff.audit import decision, resume_leases, rules, sealing, values
from signoff.audit.canonical import check, digest
from signoff.audit.decided import TrustCache, review_from_entries
from signoff.audit.entry import ACTOR, Entry, check_actor, format_time, later
from signoff.audit.errors import (
    DuplicateReview,
    ExecutionMismatch,
    InvalidEntry,
    MissingReason,
    NotAllowed,
    StaleRound,
    UnknownFrontier,
    UnknownReview,
)
from signoff.audit.keys import Signer
from signoff.audit.limits import (
    MAX_ARGS_BYTES,
    MAX_PAYLOAD_BYTES,
    bounded,
    bounded_patch,
    bounded_seconds,
    bounded_text,
)
from signoff.audit.log_state import FrontierOnLog, alarm, read_frontier, read_review_in
from signoff.audit.review_leases import ReviewLeases
from signoff.audit.review_policies import check_policies
from signoff.audit.review_proposals import ReviewProposals
from signoff.audit.review_queries import FRONTIER, FRONTIER_REVIEWS, ReviewQueries
from signoff.audit.review_sealing import Sealer
from signoff.audit.review_types import (
    CallSpec,
    Frontier,
    Policy,
    Review,
    ReviewerInfo,
    closed_review,
    state_from_row,
)
from signoff.audit.reviewers import SERVICE
from signoff.audit.schema import check_args
from signoff.audit.store import Store, Tx
from signoff.audit.tables import FrontierRow, ReviewRow
from signoff.audit.trust import RULES_VERSION

__all__ = ["SERVICE", "CallSpec", "Frontier", "Policy", "Review", "ReviewService", "ReviewerInfo"]

# Statements built once (bound per call), as in :mod:`signoff.audit.review_queries`.
# The decision path's statements, driver-level (see ``audit.driver.fetch``).
_REVIEW_SQL = "SELECT * FROM signoff_review WHERE id = ? AND log = ?"
_CLOSE_SQL = (
    "UPDATE signoff_review SET status = ?, decided_seq = ?, decided_by = ?, decided_at = ?, final_digest = ?, "
    "data = ? WHERE id = ?"
)
_PROGRESS_SQL = "UPDATE signoff_review SET data = ? WHERE id = ?"
_COUNT_DOWN_SQL = "UPDATE signoff_frontier SET open_count = open_count - 1 WHERE id = ?"
# Opening, driver-level too (a SQLAlchemy statement costs ~0.1 ms of Python to run).
_DUPLICATE_SQL = "SELECT id FROM signoff_review WHERE log = ? AND app = ? AND session = ? AND confirmation_id = ?"
_INSERT_REVIEW_SQL = (
    "INSERT INTO signoff_review (id, log, frontier, status, tool, agent, app, session, confirmation_id, call_id, "
    "opened_seq, opened_at, deadline, args_digest, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_FRONTIER_SQL = "INSERT INTO signoff_frontier (id, log, opened_seq, size, open_count) VALUES (?, ?, ?, ?, ?)"
_REQUIRED_CALL_FIELDS = ("app", "user", "session", "invocation", "confirmation_id", "call_id", "tool")


class ReviewService(ReviewQueries, ReviewProposals, ReviewLeases):
    """Review operations over a :class:`Store`. Thread-safe; one instance per process is enough."""

    def __init__(self, store: Store, *, signer: Signer | None = None) -> None:
        """``signer`` (an agent host's service key) signs the entries of every service: or agent: actor
        its key is enrolled for (see :meth:`enroll_key`)."""
        self.store = store
        self.signer = signer
        self.trust_cache = TrustCache()
        if signer is not None and not any(
            fp == signer.fingerprint and owner.startswith(("service:", "agent:")) for fp, owner in store.key_owners()
        ):
            raise NotAllowed(
                "signer: expected a key enrolled on the log for a service: or agent: actor, found "
                f"{signer.fingerprint} not enrolled for one "
                "(an admin enrolls it: audit enroll-key service:signoff KEY --admin-key …)"
            )

    # -- helpers inside a transaction --------------------------------------------------

    def _row(self, tx: Tx, review_id: str) -> Any:
        found = tx.rows(_REVIEW_SQL, review_id, tx.log)
        return found[0] if found else None

    def _close(
        self, tx: Tx, row: Any, entry: Entry, status: str, final_args: dict[str, Any] | None, final_digest: str | None
    ) -> dict[str, Any]:
        """Close the review's projection row for ``entry``; return the columns written."""
        data = rules.closed_data(json.loads(row.data), entry.kind, entry.body, final_args, entry.actor, entry.seq)
        values: dict[str, Any] = {
            "status": status,
            "decided_seq": entry.seq,
            "decided_by": entry.actor,
            "decided_at": entry.at,
            "final_digest": final_digest,
            "data": json.dumps(data),
        }
        tx.rows(_CLOSE_SQL, *values.values(), row.id)
        tx.rows(_COUNT_DOWN_SQL, row.frontier)
        return values

    # -- opening -----------------------------------------------------------------------

    def open_frontier(
        self,
        calls: Sequence[CallSpec],
        *,
        actor: str = "agent:signoff",
        policies: Sequence[Policy] | Policy | None = None,
    ) -> Frontier:
        """Open one review per paused call, all in one transaction (one pause, one frontier)."""
        check_actor(actor)
        if not actor.startswith(("agent:", "service:")):
            raise NotAllowed(f"opener: expected an agent: or service: actor, found {actor!r}")
        if not calls:
            raise InvalidEntry("calls: expected at least one paused call, found none")
        if policies is None or isinstance(policies, Policy):
            per_call = [policies or Policy()] * len(calls)
        else:
            per_call = list(policies)
            if len(per_call) != len(calls):
                raise InvalidEntry(f"policies: expected {len(calls)} (one per call), found {len(per_call)}")
        bodies = []
        for index, call in enumerate(calls):
            for name in _REQUIRED_CALL_FIELDS:
                value = getattr(call, name)
                if not isinstance(value, str) or not value:
                    raise InvalidEntry(f"calls[{index}].{name}: expected a non-empty string, found {value!r}")
            if not isinstance(call.args, dict):
                raise InvalidEntry(f"calls[{index}].args: expected a JSON object, found {type(call.args).__name__}")
            bounded(call.args, f"$.calls[{index}].args", MAX_ARGS_BYTES)
            if call.payload is not None:
                bounded(call.payload, f"$.calls[{index}].payload", MAX_PAYLOAD_BYTES)
            bounded_text(call.hint, f"$.calls[{index}].hint")
            if call.requested_by and (not call.requested_by.startswith("human:") or not ACTOR.match(call.requested_by)):
                raise InvalidEntry(
                    f"calls[{index}].requested_by: expected the human: actor the agent acts for, "
                    f"found {call.requested_by!r}"
                )
            for name, text in call.context.items():
                bounded_text(text, f"$.calls[{index}].context.{name}")
            policy = per_call[index]
            check_policies([policy], index)
            if policy.deadline_seconds is not None:
                bounded_seconds(policy.deadline_seconds, f"policies[{index}].deadline_seconds")
            call_json = call.to_json()
            check(call_json, f"$.calls[{index}]")
            bodies.append((call, call_json, policy))
        seen: dict[tuple[str, str, str], int] = {}
        for index, (call, _json, _policy) in enumerate(bodies):
            first = seen.setdefault((call.app, call.session, call.confirmation_id), index)
            if first != index:
                raise DuplicateReview(
                    f"calls[{index}].confirmation_id: expected a new paused call, found "
                    f"{call.confirmation_id!r} already at calls[{first}]"
                )
        frontier_id = "fr_" + secrets.token_hex(8)
        shown: dict[str, tuple[bytes, Any]] = {}  # the values kept, to reveal the reviews returned

        def work(tx: Tx) -> list[Entry]:
            for index, (call, _json, _policy) in enumerate(bodies):
                found = tx.rows(_DUPLICATE_SQL, tx.log, call.app, call.session, call.confirmation_id)
                duplicate = found[0] if found else None
                if duplicate is not None:
                    raise DuplicateReview(
                        f"calls[{index}].confirmation_id: expected a new paused call, found review "
                        f"{duplicate[0]} for {call.confirmation_id!r} in session {call.session!r}"
                    )
            first_seq, first_entry = tx.size, len(tx.appended)
            for call, plain_json, given in bodies:
                # The log's policy for the tool (an admin's policy.set), read in this transaction, governs.
                policy = self._opening_policy(tx, given, call.tool)
                review_id = "rv_" + secrets.token_hex(8)
                call_json, kept = (
                    sealing.seal_call(plain_json, policy.private) if tx.rules.sealed_values else (plain_json, [])
                )
                deadline = (
                    format_time(later(tx.now, policy.deadline_seconds)) if policy.deadline_seconds is not None else None
                )
                body = {
                    "review": review_id,
                    "frontier": frontier_id,
                    "call": call_json,
                    "policy": policy.to_json(),
                    "deadline": deadline,
                }
                opened = tx.append(actor, "review.opened", body, self._signature(tx, actor, "review.opened", body))
                values.keep(tx.rows, tx.log, review_id, kept)
                shown.update({item.commitment: (item.salt, item.value) for item in kept})
                tx.rows(
                    _INSERT_REVIEW_SQL,
                    review_id, tx.log, frontier_id, "pending", call.tool, call.agent, call.app, call.session,
                    call.confirmation_id, call.call_id, opened.seq, opened.at, deadline, call_json["args_digest"],
                    json.dumps(rules.opened_data(body)),
                )  # fmt: skip
            tx.rows(_INSERT_FRONTIER_SQL, frontier_id, tx.log, first_seq, len(bodies), len(bodies))
            return tx.appended[first_entry:]

        # The frontier as its own entries tell it: the entries this transaction committed (no reread).
        written = self.store.transact(work)
        ids = [str(item.body["review"]) for item in written if item.kind == "review.opened"]
        own = {rid: [item for item in written if item.body.get("review") == rid] for rid in ids}
        reviews = tuple(review_from_entries(rid, own[rid], False, lookup=shown.get) for rid in ids)
        return Frontier(frontier_id, reviews, False)

    # -- deciding ----------------------------------------------------------------------

    def _decide(
        self,
        review_id: str,
        kind: str,
        reviewer: str,
        make_body: Any,
        sig: dict[str, Any] | None,
        signer: Signer | None,
        acting_for: str | None = None,
    ) -> Review:
        """One decision in one transaction: rules 1-4, then the person's signature over the body
        built here (``sig``, made elsewhere over :func:`signoff.audit.trust.statement`, or made
        here by ``signer``, the reviewer's own key). ``make_body(state, sealer)`` builds the body; on a
        sealed log ``sealer`` reveals the round's values and keeps the decision's new ones. ``acting_for``:
        the reviewer whose delegation the decider acts under (rule 2b), named in the body."""

        def work(tx: Tx) -> Review:
            row = self._row(tx, review_id)
            state = state_from_row(row) if row is not None else None
            decider = self._reviewer_state(tx, reviewer)
            if acting_for is not None:  # what the delegations in force lend them, from the log
                decider = self._acting(tx, reviewer, acting_for, decider)
            current = rules.check_open(state, review_id)
            rules.check_decider(reviewer, decider, current)
            rules.check_deadline(current, tx.at)
            sealer = Sealer(tx, row, review_id)
            body = make_body(current, sealer)
            new_state, final_args = rules.decide(state, review_id, kind, reviewer, body, tx.at, decider)
            entry = tx.append(reviewer, kind, body, tx.signature(reviewer, kind, body, sig, signer or self.signer))
            values.keep(tx.rows, tx.log, review_id, sealer.kept)
            if new_state.status == "pending":  # an approval toward a quorum: the review stays open
                patch = body.get("patch") if kind == "review.edited" else None
                data = rules.progress_data(
                    json.loads(row.data), new_state, reviewer, entry.seq, patch, body.get("acting_for")
                )
                tx.rows(_PROGRESS_SQL, json.dumps(data), row.id)
                return sealer.shown(closed_review(row, {"data": json.dumps(data)}))
            closed = self._close(tx, row, entry, new_state.status, final_args, new_state.final_digest)
            return sealer.shown(closed_review(row, closed))

        return self.store.transact(work)

    def approve(
        self,
        review_id: str,
        *,
        reviewer: str,
        rationale: str = "",
        payload: Any = None,
        sig: dict[str, Any] | None = None,
        signer: Signer | None = None,
        round: int | None = None,
        payload_salt: str | None = None,
        acting_for: str | None = None,
    ) -> Review:
        """Approve the args as opened, or as the round's edit left them (``review.approved``); ``payload``
        answers the tool's own question. ``round``: the round the person saw; a review edited since is
        refused (:class:`StaleRound`), in the same transaction. ``payload_salt`` (hex): on a sealed log,
        the salt the signer sealed ``payload`` with (:func:`signoff.audit.decision.prepare_approve`);
        by default the round's earlier answer's salt, or a new one."""
        bounded_text(rationale, "$.rationale")
        if payload is not None:
            bounded(payload, "$.payload", MAX_PAYLOAD_BYTES)
        salt = sealing.salts_from_hex({"payload_salt": payload_salt}, "$")["payload_salt"] if payload_salt else None

        def body(state: rules.ReviewState, sealer: Sealer) -> dict[str, Any]:
            _check_round(review_id, state, round)
            if sealer.sealed and state.args is not None:
                sealer.args(state.args)  # the values approved are the ones beside the log, checked here
            answer = sealer.payload(payload, salt, state.round_payload)
            return decision.approve_body(review_id, state.args_digest, rationale, answer, _round_of(state), acting_for)

        return self._decide(review_id, "review.approved", reviewer, body, sig, signer, acting_for)

    def edit(
        self,
        review_id: str,
        *,
        reviewer: str,
        patch: list[dict[str, Any]],
        rationale: str = "",
        payload: Any = None,
        sig: dict[str, Any] | None = None,
        signer: Signer | None = None,
        round: int | None = None,
        salts: dict[str, str] | None = None,
        payload_salt: str | None = None,
        acting_for: str | None = None,
    ) -> Review:
        """Approve patched args (``review.edited``): the RFC 6902 patch applies to the round's args.
        ``round``: as for :meth:`approve`. On a log that keeps values in its entries the patch is stored
        exactly as given; on a sealed log the entry records whole top-level members replaced, each
        changed private value by a new commitment (:func:`signoff.audit.sealing.edit_patch`), with the
        ``salts`` (hex, per member) the signer used (:func:`signoff.audit.decision.prepare_edit`)."""
        bounded_patch(patch)
        bounded_text(rationale, "$.rationale")
        if payload is not None:
            bounded(payload, "$.payload", MAX_PAYLOAD_BYTES)
        given = sealing.salts_from_hex(salts) if salts is not None else None
        salt = sealing.salts_from_hex({"payload_salt": payload_salt}, "$")["payload_salt"] if payload_salt else None

        def body(state: rules.ReviewState, sealer: Sealer) -> dict[str, Any]:
            _check_round(review_id, state, round)
            assert state.args is not None
            plain = sealer.args(state.args)
            result = rules.patched_args(plain, patch)
            bounded(result, "$.args", MAX_ARGS_BYTES)
            check_args(state.schema, result)
            answer = sealer.payload(payload, salt, None)
            if not sealer.sealed:
                return decision.edit_body(review_id, patch, result, rationale, answer, _round_of(state), acting_for)
            recorded, final = sealer.edit(state.args, plain, result, given)
            return decision.edit_body(review_id, recorded, final, rationale, answer, _round_of(state), acting_for)

        return self._decide(review_id, "review.edited", reviewer, body, sig, signer, acting_for)

    def reject(
        self,
        review_id: str,
        *,
        reviewer: str,
        reason: str,
        sig: dict[str, Any] | None = None,
        signer: Signer | None = None,
        acting_for: str | None = None,
    ) -> Review:
        """Reject with a required reason (``review.rejected``); the tool never runs."""
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"reason: expected a non-empty reason for the rejection, found {reason!r}")
        bounded_text(reason, "$.reason")

        def body(_state: rules.ReviewState, _sealer: Sealer) -> dict[str, Any]:
            return decision.reject_body(review_id, reason, acting_for)

        return self._decide(review_id, "review.rejected", reviewer, body, sig, signer, acting_for)

    def withdraw(self, review_id: str, *, actor: str, reason: str) -> Review:
        """Withdraw an open review because the run was cancelled or abandoned."""
        check_actor(actor)

        def work(tx: Tx) -> Review:
            row = self._row(tx, review_id)
            state = state_from_row(row) if row is not None else None
            rules.withdraw(state, review_id, actor, reason)
            body = {"review": review_id, "reason": reason}
            entry = tx.append(actor, "review.withdrawn", body, self._signature(tx, actor, "review.withdrawn", body))
            return closed_review(row, self._close(tx, row, entry, "withdrawn", None, None))

        return self.store.transact(work)

    def expire_due(self, *, actor: str = SERVICE) -> list[Review]:
        """Expire every open review whose deadline has passed by the log's clock (``review.expired``), in
        one transaction. The entry's own time is the time checked (rule 4), so ``audit verify`` agrees."""
        check_actor(actor)

        def work(tx: Tx) -> list[str]:
            at = tx.at
            rows = tx.conn.execute(
                select(ReviewRow)
                .where(
                    col(ReviewRow.log) == tx.log,
                    col(ReviewRow.status) == "pending",
                    col(ReviewRow.deadline).is_not(None),
                    col(ReviewRow.deadline) <= at,
                )
                .order_by(col(ReviewRow.opened_seq))
            ).all()
            expired = []
            for row in rows:
                rules.expire(state_from_row(row), row.id, at)
                body = {"review": row.id}
                entry = tx.append(actor, "review.expired", body, self._signature(tx, actor, "review.expired", body))
                self._close(tx, row, entry, "expired", None, None)
                expired.append(row.id)
            return expired

        return [self.get(review_id) for review_id in self.store.transact(work)]

    # -- after the decision ------------------------------------------------------------

    def claim_resume(
        self, frontier_id: str, *, actor: str, via: str | None = None, lease: tuple[str, float] | None = None
    ) -> Entry:
        """Append ``run.resumed`` for a fully decided frontier, at most once (rule 5).

        Decided from the log, in the transaction: the frontier's ``review.opened`` entries, each review's
        decisions and the frontier's own entries (:func:`signoff.audit.log_state.read_frontier`). The
        projection rows only say where to look; a row that disagrees is an alarm, never the answer.
        ``via`` says who sends the answers, as far as the caller can tell (``resumer``, ``client:<user>``).
        ``lease``: ``(holder, seconds)``, the sender's resume lease, written in the same transaction
        (:mod:`signoff.audit.resume_leases`)."""
        check_actor(actor)
        if via is not None:
            bounded_text(via, "$.via", 200)

        def work(tx: Tx) -> Entry:
            front, on_log = _frontier_in(tx, frontier_id)
            resumed_seq = on_log.resumed.seq if on_log.resumed is not None else None
            gone = on_log.abandoned
            _compare_frontier(tx, front, on_log, resumed_seq if gone is None else gone.seq)
            statuses = {r.id: r.status for r in on_log.reviews}
            rules.resume(frontier_id, statuses, resumed_seq, (gone.kind, gone.seq) if gone else None)
            first = on_log.reviews[0].call
            body = {
                "frontier": frontier_id,
                "reviews": [r.id for r in on_log.reviews],
                "invocation": first.invocation,
                "session": first.session,
            }
            if via is not None:
                body["via"] = via
            entry = tx.append(actor, "run.resumed", body, self._signature(tx, actor, "run.resumed", body))
            tx.conn.execute(
                update(FrontierRow).where(FrontierRow.id == frontier_id).values(resumed_seq=entry.seq)  # type: ignore[arg-type]
            )
            if lease is not None:
                resume_leases.hold(tx, frontier_id, lease[0], tx.now.timestamp() + lease[1])
            return entry

        return self.store.transact(work)

    def record_execution(self, review_id: str, *, actor: str, args: dict[str, Any], result: Any = None) -> Entry:
        """Append ``tool.executed`` with the digest of the args the tool really ran with (rule 6), and,
        when given, the digest of its result and a short preview of it for the people who decided.

        Decided from the log (the review's decision entries and its frontier's ``run.resumed``), never
        from the projection row alone. When the args the tool ran with are not the decided ones, the
        entry written instead is ``run.resume_failed`` naming the review: the call is then never run
        again, by any later pass (the caller checks the returned entry's kind)."""
        check_actor(actor)
        plain_digest = digest(args)
        outcome = result_fields(result) if result is not None else {}

        def work(tx: Tx) -> Entry:
            row = self._row(tx, review_id)
            if row is None:
                raise UnknownReview(review_id)
            review, on_log = read_review_in(tx.rows, tx.log, review_id, row.frontier or None, pending=tx.appended)
            found, kept, body_outcome = plain_digest, [], outcome
            if review.sealed:  # the args it ran with, sealed under the salts of the decided ones (sealing.py)
                lookup = values.lookup_for(tx.rows, tx.log, [review_id])
                decided = review.final_args if review.final_args is not None else review.call.args
                found = digest(sealing.reseal_like(args, decided, lookup))
                if outcome:
                    preview = sealing.seal(outcome["result_preview"])
                    kept, body_outcome = [preview], {"result_preview": preview.commitment}
            resumed_seq = on_log.resumed.seq if on_log is not None and on_log.resumed is not None else None
            state = _log_state(review)
            _compare_review(row, state)
            try:
                rules.execute(state, review_id, found)
                if tx.rules.version >= RULES_VERSION and row.frontier:  # an auto-approved call never paused
                    rules.executed_after_resume(review_id, resumed_seq)
            except ExecutionMismatch as exc:
                runnable = state.status in rules.RUNNABLE and not state.executed and not state.failed
                if on_log is None or resumed_seq is None or not runnable:
                    raise
                failed = {
                    "frontier": on_log.id,
                    "reviews": [review_id],
                    "reason": f"tool.executed refused: {exc}",
                    "args_digest": found,
                }
                return tx.append(
                    actor, "run.resume_failed", failed, self._signature(tx, actor, "run.resume_failed", failed)
                )
            body = {"review": review_id, "args_digest": found, **body_outcome}
            entry = tx.append(actor, "tool.executed", body, self._signature(tx, actor, "tool.executed", body))
            values.keep(tx.rows, tx.log, review_id, kept)
            tx.conn.execute(update(ReviewRow).where(ReviewRow.id == review_id).values(executed_seq=entry.seq))  # type: ignore[arg-type]
            return entry

        return self.store.transact(work)

    def record_resume_failure(self, frontier_id: str, *, actor: str, reviews: Sequence[str], reason: str) -> Entry:
        """Append ``run.resume_failed``: the approved calls ``reviews`` of a resumed frontier will not run
        (the answer could not be sent, or the log shows it cannot be). Once per call; from then on no
        resumer sends it and the gate runs none of them. Decided from the log, in the transaction."""
        check_actor(actor)
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"reason: expected why the resume failed, found {reason!r}")
        bounded_text(reason, "$.reason")

        def work(tx: Tx) -> Entry:
            on_log = read_frontier(tx.rows, tx.log, frontier_id, pending=tx.appended)
            resumed_seq = on_log.resumed.seq if on_log.resumed is not None else None
            rules.resume_failed(frontier_id, actor, resumed_seq, list(reviews), _open_calls(on_log))
            body = {"frontier": frontier_id, "reviews": list(reviews), "reason": reason}
            return tx.append(actor, "run.resume_failed", body, self._signature(tx, actor, "run.resume_failed", body))

        return self.store.transact(work)

    def record_rewind(self, frontier_id: str, *, actor: str, before: str) -> Entry:
        """Append ``run.rewound``: the run of a frontier not yet resumed went back before its pause (ADK's
        ``Runner.rewind_async(rewind_before_invocation_id=before)``). In the same transaction each of its
        open reviews is withdrawn with reason ``rewound``; its approved calls never run (rule 5a).
        Decided from the log; raises ``AlreadyResumed`` for a frontier resumed, rewound or cancelled
        already (a rewind after the resume is a ``run.resume_failed``)."""
        bounded_text(before, "$.before", 200)
        why = f"rewound: the run went back before invocation {before}"
        return self._abandon("run.rewound", frontier_id, actor, REWOUND, {"before": before, "reason": why})

    def record_cancel(self, frontier_id: str, *, actor: str, reason: str) -> Entry:
        """Append ``run.cancelled``: the run of a frontier not yet resumed was cancelled and ADK sealed its
        pause (``abort_signal``, a client disconnect: ``INVOCATION_ABORTED``), so it is never resumed. In
        the same transaction each open review is withdrawn with ``reason``; its approved calls never run
        (rule 5a). Raises ``AlreadyResumed`` for a frontier resumed, rewound or cancelled already."""
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"reason: expected why the run was cancelled, found {reason!r}")
        bounded_text(reason, "$.reason")
        return self._abandon("run.cancelled", frontier_id, actor, reason, {"reason": reason})

    def _abandon(self, kind: str, frontier_id: str, actor: str, withdrawal: str, extra: dict[str, Any]) -> Entry:
        """``run.rewound`` or ``run.cancelled`` and the withdrawals before it, in one transaction."""
        check_actor(actor)

        def work(tx: Tx) -> Entry:
            front, on_log = _frontier_in(tx, frontier_id)
            closed_seq = on_log.closed.seq if on_log.closed is not None else None
            _compare_frontier(tx, front, on_log, closed_seq)
            ids = [r.id for r in on_log.reviews]
            withdrawn: list[str] = []
            for review in on_log.reviews:
                if review.final or closed_seq is not None:
                    continue
                row = self._row(tx, review.id)
                rules.withdraw(state_from_row(row) if row is not None else None, review.id, actor, withdrawal)
                said = {"review": review.id, "reason": withdrawal}
                entry = tx.append(actor, "review.withdrawn", said, self._signature(tx, actor, "review.withdrawn", said))
                self._close(tx, row, entry, "withdrawn", None, None)
                withdrawn.append(review.id)
            statuses = {r.id: "withdrawn" if r.id in withdrawn else r.status for r in on_log.reviews}
            rules.abandon(kind, frontier_id, actor, statuses, closed_seq, ids)
            first = on_log.reviews[0].call
            body = {
                "frontier": frontier_id,
                "reviews": ids,
                "invocation": first.invocation,
                "session": first.session,
                **extra,
                "withdrawn": withdrawn,
            }
            entry = tx.append(actor, kind, body, self._signature(tx, actor, kind, body))
            tx.conn.execute(
                update(FrontierRow).where(FrontierRow.id == frontier_id).values(resumed_seq=entry.seq)  # type: ignore[arg-type]
            )
            return entry

        return self.store.transact(work)

    def record_reply(self, frontier_id: str, *, actor: str, text: str) -> Entry:
        """Append ``run.replied``: the agent's next words after a resumed run (bounded), once per frontier."""
        check_actor(actor)
        if not actor.startswith(("agent:", "service:")):
            raise NotAllowed(f"actor: expected an agent: or service: actor, found {actor!r}")
        said = str(text)[:MAX_REPLY]

        def work(tx: Tx) -> Entry:
            front = tx.conn.execute(FRONTIER, {"id": frontier_id, "log": tx.log}).first()
            if front is None:
                raise UnknownFrontier(frontier_id)
            replied = bool(tx.rows(_REPLIED_SQL, frontier_id, tx.log)) or any(
                e.kind == "run.replied" and e.body.get("frontier") == frontier_id for e in tx.appended
            )  # committed, or earlier in this (group) transaction
            rules.reply(frontier_id, front.resumed_seq, replied=replied)
            kept = [sealing.seal(said)] if tx.rules.sealed_values else []
            body = {"frontier": frontier_id, "text": kept[0].commitment if kept else said}
            entry = tx.append(actor, "run.replied", body, self._signature(tx, actor, "run.replied", body))
            values.keep(tx.rows, tx.log, frontier_id, kept)  # the frontier's: erased with any of its reviews
            return entry

        return self.store.transact(work)


REWOUND = "rewound"  # the reason of a review withdrawn because its run went back before its pause
MAX_PREVIEW = 500
MAX_REPLY = 2000
_REPLIED_SQL = "SELECT seq FROM signoff_entry WHERE subject = ? AND log = ? AND kind = 'run.replied' LIMIT 1"


def result_fields(result: Any) -> dict[str, str]:
    """``result_digest`` (of its canonical JSON, or of its text when it is not JSON) and a preview; on a
    sealed log only the preview, sealed (an unsalted digest of a result would let its values be guessed)."""
    try:
        check(result)
        text = json.dumps(result, ensure_ascii=False, sort_keys=True)
        fingerprint = digest(result)
    except (ValueError, TypeError):
        text = repr(result)
        fingerprint = digest(text)
    return {"result_digest": fingerprint, "result_preview": text[:MAX_PREVIEW]}


def _log_state(review: Review) -> rules.ReviewState:
    """What rule 6 needs of a review, as its log entries tell it."""
    runs = review.status in rules.RUNNABLE and not review.problem
    return rules.ReviewState(
        id=review.id,
        frontier=review.frontier,
        tool=review.tool,
        status=review.status if not review.problem else "tampered",
        args=None,
        args_digest=review.args_digest,
        role=review.policy.role,
        deadline=None,
        final_digest=digest(review.final_args) if runs and review.final_args is not None else None,
        executed=review.executed,
        failed=bool(review.resume_failed),
    )


def _open_calls(on_log: FrontierOnLog) -> dict[str, bool]:
    """The frontier's approved calls, each mapped to whether it may still run (per the log)."""
    return {
        r.id: not r.executed and not r.resume_failed and not r.problem
        for r in on_log.reviews
        if r.status in rules.RUNNABLE
    }


def _compare_review(row: Any, state: rules.ReviewState) -> None:
    """A review row that says other than the log about what rule 6 checks raises an alarm (the log decides)."""
    found = (row.status, row.final_digest, row.executed_seq is not None)
    expected = (state.status, state.final_digest, state.executed)
    if found != expected:
        alarm("review row", f"review {row.id}: the row says (status, digest, executed) {found}, the log {expected}")


def _frontier_in(tx: Tx, frontier_id: str) -> tuple[Any, FrontierOnLog]:
    """The frontier's projection row (where its openings lie) and the frontier as its entries tell it,
    in the transaction (this group commit's earlier entries included); raises ``UnknownFrontier``."""
    front = tx.conn.execute(FRONTIER, {"id": frontier_id, "log": tx.log}).first()
    if front is None:
        raise UnknownFrontier(frontier_id)
    on_log = read_frontier(tx.rows, tx.log, frontier_id, pending=tx.appended, hint=(front.opened_seq, front.size))
    return front, on_log


def _compare_frontier(tx: Tx, front: Any, on_log: FrontierOnLog, resumed_seq: int | None) -> None:
    """A frontier row, or a review row of it, that says other than the log raises an alarm."""
    still_open = sum(1 for r in on_log.reviews if not r.final)
    if (front.open_count, front.resumed_seq) != (still_open, resumed_seq):
        alarm(
            "frontier row",
            f"frontier {front.id}: the row says (open_count, resumed_seq) = {(front.open_count, front.resumed_seq)}, "
            f"the log {(still_open, resumed_seq)}",
        )
    statuses = {row.id: row.status for row in tx.conn.execute(FRONTIER_REVIEWS, {"frontier": front.id}).all()}
    expected = {r.id: r.status for r in on_log.reviews}
    if statuses != expected:
        alarm("review row", f"frontier {front.id}: its review rows say {statuses}, the log {expected}")


def _check_round(review_id: str, state: rules.ReviewState, seen: int | None) -> None:
    if seen is not None and seen != state.round:
        raise StaleRound(
            f"review {review_id}: expected a decision on round {state.round} (someone edited it since you saw "
            f"it; look at it again), found round {seen}"
        )


def _round_of(state: rules.ReviewState) -> int | None:
    """The round a decision names: only on reviews that need several people (their bodies say which)."""
    return state.round if state.approvals_needed > 1 else None
