"""The review lifecycle on the log: open, decide, expire, withdraw, resume, execute.

Every operation is one transaction (:meth:`audit.store.Store.transact`): it reads the
review projection after the head lock, checks the pure rules of :mod:`audit.rules`,
appends the entry and updates the projection, or raises and writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update
from sqlmodel import col

from signoff.audit import rules
from signoff.audit.canonical import check, digest
from signoff.audit.entry import OUTCOMES, Entry, check_actor, format_time, parse_time
from signoff.audit.errors import (
    DuplicateReview,
    InvalidEntry,
    MissingReason,
    NotAllowed,
    StoreError,
    UnknownFrontier,
    UnknownReview,
)
from signoff.audit.keys import Signer, decode_public, fingerprint
from signoff.audit.schema import check_args
from signoff.audit.store import Store, Tx
from signoff.audit.tables import FrontierRow, KeyRow, ReviewerRow, ReviewRow

SERVICE = "service:signoff"

# Statements built once (bound per call): building SQLAlchemy expressions on every
# operation cost more than running them.
_REVIEW = select(ReviewRow).where(col(ReviewRow.id) == bindparam("id"), col(ReviewRow.log) == bindparam("log"))
_FRONTIER = select(FrontierRow).where(col(FrontierRow.id) == bindparam("id"), col(FrontierRow.log) == bindparam("log"))
_FRONTIER_REVIEWS = (
    select(ReviewRow).where(col(ReviewRow.frontier) == bindparam("frontier")).order_by(col(ReviewRow.opened_seq))
)
_RESUMED_SEQ = select(col(FrontierRow.resumed_seq)).where(col(FrontierRow.id) == bindparam("id"))
_DUPLICATE = select(col(ReviewRow.id)).where(
    col(ReviewRow.log) == bindparam("log"),
    col(ReviewRow.app) == bindparam("app"),
    col(ReviewRow.session) == bindparam("session"),
    col(ReviewRow.confirmation_id) == bindparam("confirmation_id"),
)
_INSERT_REVIEW = insert(ReviewRow)
_INSERT_FRONTIER = insert(FrontierRow)
# The decision path's statements, driver-level (see ``audit.store.fetch``).
_REVIEW_SQL = "SELECT * FROM signoff_review WHERE id = ? AND log = ?"
_REVIEWER_SQL = "SELECT * FROM signoff_reviewer WHERE log = ? AND id = ?"
_CLOSE_SQL = (
    "UPDATE signoff_review SET status = ?, decided_seq = ?, decided_by = ?, decided_at = ?, final_digest = ?, "
    "data = ? WHERE id = ?"
)
_COUNT_DOWN_SQL = "UPDATE signoff_frontier SET open_count = open_count - 1 WHERE id = ?"
_REQUIRED_CALL_FIELDS = ("app", "user", "session", "invocation", "confirmation_id", "call_id", "tool")


@dataclass(frozen=True)
class CallSpec:
    """One paused tool call, as the bridge saw it."""

    app: str
    user: str
    session: str
    invocation: str
    confirmation_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    hint: str = ""
    payload: Any = None
    agent: str = ""
    node_path: str = ""
    context: dict[str, str] = field(default_factory=dict)
    tool_description: str = ""
    tool_schema: dict[str, Any] | None = None
    kind: str = "confirmation"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["args_digest"] = digest(self.args)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallSpec:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Policy:
    role: str | None = None
    deadline_seconds: float | None = None


@dataclass(frozen=True)
class ReviewerInfo:
    id: str
    roles: tuple[str, ...]
    tools: tuple[str, ...]
    enabled: bool

    def state(self) -> rules.ReviewerState:
        return rules.ReviewerState(self.id, self.roles, self.tools, self.enabled)


@dataclass(frozen=True)
class Review:
    id: str
    frontier: str
    status: str
    call: CallSpec
    args_digest: str
    policy: Policy
    deadline: datetime | None
    opened_at: datetime
    opened_seq: int
    decided_at: datetime | None
    decided_by: str | None
    decision_seq: int | None
    final_args: dict[str, Any] | None
    patch: list[Any] | None
    rationale: str
    reason: str
    answer_payload: Any
    executed: bool
    resumed: bool

    @property
    def final(self) -> bool:
        return self.status in rules.FINAL

    @property
    def tool(self) -> str:
        return self.call.tool


@dataclass(frozen=True)
class Frontier:
    id: str
    reviews: tuple[Review, ...]
    resumed: bool

    @property
    def decided(self) -> bool:
        return all(review.final for review in self.reviews)


def _review_from_row(row: Any, resumed: bool) -> Review:
    data = json.loads(row.data)
    policy = Policy(**data.get("policy", {}))
    return Review(
        id=row.id,
        frontier=row.frontier,
        status=row.status,
        call=CallSpec.from_json(data["call"]),
        args_digest=row.args_digest,
        policy=policy,
        deadline=parse_time(row.deadline) if row.deadline else None,
        opened_at=parse_time(row.opened_at),
        opened_seq=row.opened_seq,
        decided_at=parse_time(row.decided_at) if row.decided_at else None,
        decided_by=row.decided_by,
        decision_seq=row.decided_seq,
        final_args=data.get("final_args"),
        patch=data.get("patch"),
        rationale=data.get("rationale", ""),
        reason=data.get("reason", ""),
        answer_payload=data.get("answer_payload"),
        executed=row.executed_seq is not None,
        resumed=resumed,
    )


def _closed_review(row: Any, closed: dict[str, Any]) -> Review:
    """The review as the closing transaction left it, without reading it back. A review that
    was open cannot belong to a resumed frontier (rule 5)."""
    return _review_from_row(SimpleNamespace(**{**row._asdict(), **closed}), resumed=False)


def _state_from_row(row: Any) -> rules.ReviewState:
    data = json.loads(row.data)
    call = data["call"]
    return rules.ReviewState(
        id=row.id,
        frontier=row.frontier,
        tool=row.tool,
        status=row.status,
        args=call["args"] if row.status == "pending" else None,
        args_digest=row.args_digest,
        role=data.get("policy", {}).get("role"),
        deadline=row.deadline,
        schema=call.get("tool_schema"),
        final_digest=row.final_digest,
        executed=row.executed_seq is not None,
    )


class ReviewService:
    """Review operations over a :class:`Store`. Thread-safe; one instance per process is enough."""

    def __init__(self, store: Store, *, signer: Signer | None = None) -> None:
        """``signer`` signs the entries of every actor its key is enrolled for (see :meth:`enroll_key`)."""
        self.store = store
        self.signer = signer
        if signer is not None and not any(
            fp == signer.fingerprint and owner.startswith("service:") for fp, owner in store.key_owners()
        ):
            raise NotAllowed(
                f"signer: expected a key enrolled on the log for a service: actor, found {signer.fingerprint} "
                "not enrolled for one (enroll it first: ReviewService(store).enroll_key('service:signoff', key))"
            )

    # -- helpers inside a transaction --------------------------------------------------

    def _row(self, tx: Tx, review_id: str) -> Any:
        found = tx.rows(_REVIEW_SQL, review_id, tx.log)
        return found[0] if found else None

    def _reviewer_state(self, tx: Tx, actor: str) -> rules.ReviewerState | None:
        found = tx.rows(_REVIEWER_SQL, tx.log, actor)
        return _reviewer_info(found[0]).state() if found else None

    def _signature(
        self, tx: Tx, actor: str, kind: str, body: dict[str, Any], sig: dict[str, str] | None = None
    ) -> dict[str, str] | None:
        return tx.signature(actor, kind, body, sig, self.signer)

    def _close(
        self, tx: Tx, row: Any, entry: Entry, status: str, final_args: dict[str, Any] | None, final_digest: str | None
    ) -> dict[str, Any]:
        """Close the review's projection row for ``entry``; return the columns written."""
        data = rules.closed_data(json.loads(row.data), entry.kind, entry.body, final_args)
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
            check(call.args, f"$.calls[{index}].args")
            policy = per_call[index]
            if policy.deadline_seconds is not None and not policy.deadline_seconds > 0:
                raise InvalidEntry(f"policies[{index}].deadline_seconds: expected > 0, found {policy.deadline_seconds}")
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

        def work(tx: Tx) -> str:
            for index, (call, _json, _policy) in enumerate(bodies):
                duplicate = tx.conn.execute(
                    _DUPLICATE,
                    {"log": tx.log, "app": call.app, "session": call.session, "confirmation_id": call.confirmation_id},
                ).first()
                if duplicate is not None:
                    raise DuplicateReview(
                        f"calls[{index}].confirmation_id: expected a new paused call, found review "
                        f"{duplicate[0]} for {call.confirmation_id!r} in session {call.session!r}"
                    )
            first_seq = tx.size
            for call, call_json, policy in bodies:
                review_id = "rv_" + secrets.token_hex(8)
                deadline = (
                    format_time(tx.now + timedelta(seconds=policy.deadline_seconds))
                    if policy.deadline_seconds is not None
                    else None
                )
                body = {
                    "review": review_id,
                    "frontier": frontier_id,
                    "call": call_json,
                    "policy": asdict(policy),
                    "deadline": deadline,
                }
                opened = tx.append(actor, "review.opened", body, self._signature(tx, actor, "review.opened", body))
                tx.conn.execute(
                    _INSERT_REVIEW,
                    {
                        "id": review_id,
                        "log": tx.log,
                        "frontier": frontier_id,
                        "status": "pending",
                        "tool": call.tool,
                        "agent": call.agent,
                        "app": call.app,
                        "session": call.session,
                        "confirmation_id": call.confirmation_id,
                        "call_id": call.call_id,
                        "opened_seq": opened.seq,
                        "opened_at": opened.at,
                        "deadline": deadline,
                        "args_digest": call_json["args_digest"],
                        "data": json.dumps(rules.opened_data(body)),
                    },
                )
            tx.conn.execute(
                _INSERT_FRONTIER,
                {
                    "id": frontier_id,
                    "log": tx.log,
                    "opened_seq": first_seq,
                    "size": len(bodies),
                    "open_count": len(bodies),
                },
            )
            return frontier_id

        return self.frontier(self.store.transact(work))

    # -- deciding ----------------------------------------------------------------------

    def _decide(self, review_id: str, kind: str, reviewer: str, make_body: Any, sig: dict[str, str] | None) -> Review:
        def work(tx: Tx) -> Review:
            row = self._row(tx, review_id)
            state = _state_from_row(row) if row is not None else None
            decider = self._reviewer_state(tx, reviewer)
            current = rules.check_open(state, review_id)
            rules.check_decider(reviewer, decider, current)
            rules.check_deadline(current, tx.at)
            body = make_body(current)
            new_state, final_args = rules.decide(state, review_id, kind, reviewer, body, tx.at, decider)
            entry = tx.append(reviewer, kind, body, self._signature(tx, reviewer, kind, body, sig))
            closed = self._close(tx, row, entry, OUTCOMES[kind], final_args, new_state.final_digest)
            return _closed_review(row, closed)

        return self.store.transact(work)

    def approve(
        self,
        review_id: str,
        *,
        reviewer: str,
        rationale: str = "",
        payload: Any = None,
        sig: dict[str, str] | None = None,
    ) -> Review:
        """Approve the args as opened (``review.approved``); ``payload`` answers the tool's own question."""
        check(payload, "$.payload")

        def body(state: rules.ReviewState) -> dict[str, Any]:
            out: dict[str, Any] = {"review": review_id, "args_digest": state.args_digest, "rationale": rationale or ""}
            if payload is not None:
                out["payload"] = payload
            return out

        return self._decide(review_id, "review.approved", reviewer, body, sig)

    def edit(
        self,
        review_id: str,
        *,
        reviewer: str,
        patch: list[dict[str, Any]],
        rationale: str = "",
        payload: Any = None,
        sig: dict[str, str] | None = None,
    ) -> Review:
        """Approve patched args (``review.edited``): the RFC 6902 patch is stored exactly as given."""
        check(patch, "$.patch")
        check(payload, "$.payload")

        def body(state: rules.ReviewState) -> dict[str, Any]:
            assert state.args is not None
            result = rules.patched_args(state.args, patch)
            check_args(state.schema, result)
            out: dict[str, Any] = {
                "review": review_id,
                "patch": patch,
                "args_digest": digest(result),
                "rationale": rationale or "",
            }
            if payload is not None:
                out["payload"] = payload
            return out

        return self._decide(review_id, "review.edited", reviewer, body, sig)

    def reject(self, review_id: str, *, reviewer: str, reason: str, sig: dict[str, str] | None = None) -> Review:
        """Reject with a required reason (``review.rejected``); the tool never runs."""
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"reason: expected a non-empty reason for the rejection, found {reason!r}")

        def body(_state: rules.ReviewState) -> dict[str, Any]:
            return {"review": review_id, "reason": reason}

        return self._decide(review_id, "review.rejected", reviewer, body, sig)

    def withdraw(self, review_id: str, *, actor: str, reason: str) -> Review:
        """Withdraw an open review because the run was cancelled or abandoned."""
        check_actor(actor)

        def work(tx: Tx) -> Review:
            row = self._row(tx, review_id)
            state = _state_from_row(row) if row is not None else None
            rules.withdraw(state, review_id, actor, reason)
            body = {"review": review_id, "reason": reason}
            entry = tx.append(actor, "review.withdrawn", body, self._signature(tx, actor, "review.withdrawn", body))
            return _closed_review(row, self._close(tx, row, entry, "withdrawn", None, None))

        return self.store.transact(work)

    def expire_due(self, now: datetime | None = None, *, actor: str = SERVICE) -> list[Review]:
        """Expire every open review whose deadline has passed (``review.expired``), in one transaction."""
        check_actor(actor)

        def work(tx: Tx) -> list[str]:
            at = tx.at if now is None else max(tx.at, format_time(now))
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
                rules.expire(_state_from_row(row), row.id, at)
                body = {"review": row.id}
                entry = tx.append(actor, "review.expired", body, self._signature(tx, actor, "review.expired", body))
                self._close(tx, row, entry, "expired", None, None)
                expired.append(row.id)
            return expired

        return [self.get(review_id) for review_id in self.store.transact(work)]

    # -- after the decision ------------------------------------------------------------

    def claim_resume(self, frontier_id: str, *, actor: str) -> Entry:
        """Append ``run.resumed`` for a fully decided frontier, at most once (rule 5)."""
        check_actor(actor)

        def work(tx: Tx) -> Entry:
            front = tx.conn.execute(_FRONTIER, {"id": frontier_id, "log": tx.log}).first()
            if front is None:
                raise UnknownFrontier(frontier_id)
            rows = tx.conn.execute(_FRONTIER_REVIEWS, {"frontier": frontier_id}).all()
            rules.resume(frontier_id, {row.id: row.status for row in rows}, front.resumed_seq)
            first = json.loads(rows[0].data)["call"]
            body = {
                "frontier": frontier_id,
                "reviews": [row.id for row in rows],
                "invocation": first["invocation"],
                "session": first["session"],
            }
            entry = tx.append(actor, "run.resumed", body, self._signature(tx, actor, "run.resumed", body))
            tx.conn.execute(
                update(FrontierRow).where(FrontierRow.id == frontier_id).values(resumed_seq=entry.seq)  # type: ignore[arg-type]
            )
            return entry

        return self.store.transact(work)

    def record_execution(self, review_id: str, *, actor: str, args: dict[str, Any]) -> Entry:
        """Append ``tool.executed`` with the digest of the args the tool really ran with (rule 6)."""
        check_actor(actor)
        found = digest(args)

        def work(tx: Tx) -> Entry:
            row = self._row(tx, review_id)
            rules.execute(_state_from_row(row) if row is not None else None, review_id, found)
            body = {"review": review_id, "args_digest": found}
            entry = tx.append(actor, "tool.executed", body, self._signature(tx, actor, "tool.executed", body))
            tx.conn.execute(update(ReviewRow).where(ReviewRow.id == review_id).values(executed_seq=entry.seq))  # type: ignore[arg-type]
            return entry

        return self.store.transact(work)

    # -- reviewers and keys ------------------------------------------------------------

    def _check_admin(self, tx: Tx, actor: str) -> None:
        if actor.startswith("service:"):
            return
        state = self._reviewer_state(tx, actor)
        if not actor.startswith("human:") or state is None or not state.enabled or "admin" not in state.roles:
            raise NotAllowed(f"enroller: expected a service: actor or an enabled admin, found {actor!r}")

    def enroll_reviewer(
        self,
        reviewer: str,
        *,
        roles: Sequence[str],
        tools: Sequence[str] = (),
        key: str | None = None,
        actor: str = SERVICE,
    ) -> Entry:
        """Put a reviewer, their roles and tool globs (and optionally a public key) on the log."""
        check_actor(actor)
        check_actor(reviewer, "reviewer")
        if not reviewer.startswith("human:"):
            raise NotAllowed(f"reviewer: expected a human: actor, found {reviewer!r}")
        role_list = [str(r) for r in roles if str(r).strip()]
        if not role_list:
            raise InvalidEntry("roles: expected at least one role, found none")
        body: dict[str, Any] = {"reviewer": reviewer, "roles": role_list, "tools": [str(t) for t in tools]}
        if key is not None:
            decode_public(key)
            body["key"] = key

        def work(tx: Tx) -> Entry:
            self._check_admin(tx, actor)
            entry = tx.append(actor, "reviewer.enrolled", body, self._signature(tx, actor, "reviewer.enrolled", body))
            values = {"roles": json.dumps(role_list), "tools": json.dumps(body["tools"]), "enabled": True}
            exists = self._reviewer_state(tx, reviewer) is not None
            if exists:
                tx.conn.execute(
                    update(ReviewerRow)
                    .where(ReviewerRow.log == tx.log, ReviewerRow.id == reviewer)  # type: ignore[arg-type]
                    .values(**values, enrolled_seq=entry.seq)
                )
            else:
                tx.conn.execute(
                    insert(ReviewerRow), {"log": tx.log, "id": reviewer, "enrolled_seq": entry.seq, **values}
                )
            if key is not None:
                tx.conn.execute(
                    insert(KeyRow),
                    {"log": tx.log, "fingerprint": fingerprint(key), "actor": reviewer, "public_key": key,
                     "enrolled_seq": entry.seq},
                )  # fmt: skip
            return entry

        return self.store.transact(work)

    def enroll_key(self, owner: str, key: str, *, actor: str = SERVICE) -> Entry:
        """``key.enrolled``: bind a public Ed25519 key to an actor; from then on it signs its entries."""
        check_actor(actor)

        def work(tx: Tx) -> Entry:
            if actor != owner:
                self._check_admin(tx, actor)
            return tx.enroll_key(actor, owner, key, signer=self.signer)

        return self.store.transact(work)

    def disable_reviewer(self, reviewer: str, *, reason: str, actor: str = SERVICE) -> Entry:
        check_actor(actor)
        if not isinstance(reason, str) or not reason.strip():
            raise MissingReason(f"reason: expected a reason for disabling {reviewer}, found {reason!r}")
        body = {"reviewer": reviewer, "reason": reason}

        def work(tx: Tx) -> Entry:
            self._check_admin(tx, actor)
            if self._reviewer_state(tx, reviewer) is None:
                raise NotAllowed(f"reviewer: expected an enrolled reviewer, found {reviewer!r} not enrolled")
            entry = tx.append(actor, "reviewer.disabled", body, self._signature(tx, actor, "reviewer.disabled", body))
            tx.conn.execute(
                update(ReviewerRow)
                .where(ReviewerRow.log == tx.log, ReviewerRow.id == reviewer)  # type: ignore[arg-type]
                .values(enabled=False)
            )
            return entry

        return self.store.transact(work)

    def reviewer(self, reviewer: str) -> ReviewerInfo | None:
        found = self.store.read_rows(_REVIEWER_SQL, self.store.log_id, reviewer)
        return _reviewer_info(found[0]) if found else None

    def reviewers(self) -> list[ReviewerInfo]:
        with self.store.read_engine.connect() as conn:
            rows = conn.execute(
                select(ReviewerRow).where(ReviewerRow.log == self.store.log_id).order_by(ReviewerRow.id)  # type: ignore[arg-type]
            ).all()
        return [_reviewer_info(row) for row in rows]

    def can_decide(self, reviewer: str, review: Review) -> bool:
        info = self.reviewer(reviewer)
        return (
            info is not None
            and reviewer.startswith("human:")
            and review.status == "pending"
            and rules.covers(info.state(), review.tool, review.policy.role)
        )

    # -- queries -----------------------------------------------------------------------

    def get(self, review_id: str) -> Review:
        with self.store.read_engine.connect() as conn:
            row = conn.execute(_REVIEW, {"id": review_id, "log": self.store.log_id}).first()
            if row is None:
                raise UnknownReview(review_id)
            resumed = conn.execute(_RESUMED_SEQ, {"id": row.frontier}).scalar()
        review = _review_from_row(row, resumed is not None)
        if row.final_digest is not None:
            self._check_final_args(review, row.final_digest)
        return review

    def find(self, session: str, *, confirmation_id: str | None = None, call_id: str | None = None) -> Review | None:
        """The review of one paused call in a session, by its confirmation call id or original call id."""
        if (confirmation_id is None) == (call_id is None):
            raise ValueError("find: expected exactly one of confirmation_id or call_id")
        query = select(col(ReviewRow.id)).where(
            col(ReviewRow.log) == self.store.log_id, col(ReviewRow.session) == session
        )
        if confirmation_id is not None:
            query = query.where(col(ReviewRow.confirmation_id) == confirmation_id)
        else:
            query = query.where(col(ReviewRow.call_id) == call_id)
        with self.store.read_engine.connect() as conn:
            found = conn.execute(query.order_by(col(ReviewRow.opened_seq).desc()).limit(1)).first()
        return None if found is None else self.get(found[0])

    def _check_final_args(self, review: Review, final_digest: str) -> None:
        """What the tool will run with must be what the log says was decided, not just what the queue says."""
        found = digest(review.final_args) if review.final_args is not None else None
        decided = self.store.entry(review.decision_seq).body.get("args_digest") if review.decision_seq else None
        if not (found == final_digest == decided):
            raise StoreError(
                f"review {review.id}: expected the projection's args to match the decision at seq "
                f"{review.decision_seq} ({decided}), found {found} (run `audit verify`)"
            )

    def frontier(self, frontier_id: str) -> Frontier:
        with self.store.read_engine.connect() as conn:
            front = conn.execute(_FRONTIER, {"id": frontier_id, "log": self.store.log_id}).first()
            if front is None:
                raise UnknownFrontier(frontier_id)
            rows = conn.execute(_FRONTIER_REVIEWS, {"frontier": frontier_id}).all()
        resumed = front.resumed_seq is not None
        return Frontier(frontier_id, tuple(_review_from_row(row, resumed) for row in rows), resumed)

    def _pending_query(self, tool: str | None, agent: str | None) -> Any:
        query = select(ReviewRow).where(ReviewRow.log == self.store.log_id, ReviewRow.status == "pending")  # type: ignore[arg-type]
        if tool:
            query = query.where(ReviewRow.tool == tool)  # type: ignore[arg-type]
        if agent:
            query = query.where(ReviewRow.agent == agent)  # type: ignore[arg-type]
        return query

    def pending(
        self, *, tool: str | None = None, agent: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[Review]:
        """Open reviews, oldest first."""
        query = self._pending_query(tool, agent).order_by(ReviewRow.opened_seq).limit(limit).offset(offset)
        with self.store.read_engine.connect() as conn:
            rows = conn.execute(query).all()
        return [_review_from_row(row, False) for row in rows]

    def count_pending(self, *, tool: str | None = None, agent: str | None = None) -> int:
        query = self._pending_query(tool, agent).with_only_columns(func.count())
        with self.store.read_engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def next_deadline(self) -> datetime | None:
        """The earliest deadline among open reviews (for waking to expire them), or None."""
        query = select(func.min(col(ReviewRow.deadline))).where(
            col(ReviewRow.log) == self.store.log_id, col(ReviewRow.status) == "pending"
        )
        with self.store.read_engine.connect() as conn:
            found = conn.execute(query).scalar()
        return parse_time(found) if found else None

    def ready_frontiers(self, limit: int = 100) -> list[Frontier]:
        """Frontiers whose every review is final and that nobody has resumed yet."""
        with self.store.read_engine.connect() as conn:
            ids = conn.execute(
                select(FrontierRow.id)  # type: ignore[call-overload]
                .where(
                    FrontierRow.log == self.store.log_id,
                    FrontierRow.open_count == 0,
                    FrontierRow.resumed_seq.is_(None),  # type: ignore[union-attr]
                )
                .order_by(FrontierRow.opened_seq)
                .limit(limit)
            ).all()
        return [self.frontier(row[0]) for row in ids]

    def history(self, review_id: str) -> list[Entry]:
        """Every entry about one review, oldest first (including its frontier's ``run.resumed``)."""
        review = self.get(review_id)
        found = list(self.store.entries(review=review_id))
        for resumed in self.store.entries(start=review.opened_seq, kind="run.resumed"):
            if resumed.body.get("frontier") == review.frontier:
                found.append(resumed)
                break
        return sorted(found, key=lambda e: e.seq)

    # -- waiting -----------------------------------------------------------------------

    def wait_for_decision(
        self, review_id: str | None = None, frontier_id: str | None = None, timeout: float = 30.0
    ) -> Review | Frontier | None:
        """Block until the review is final (or every review of the frontier is); ``None`` on timeout.

        Wakes at once on a commit in this process, and within milliseconds on one elsewhere
        (:mod:`audit.notify`); there is no slow poll.
        """
        if (review_id is None) == (frontier_id is None):
            raise ValueError("wait_for_decision: expected exactly one of review_id or frontier_id")
        deadline = time.monotonic() + timeout
        while True:
            seen = self.store.feed.version
            if review_id is not None:
                review = self.get(review_id)
                if review.final:
                    return review
            else:
                assert frontier_id is not None
                front = self.frontier(frontier_id)
                if front.decided:
                    return front
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.store.feed.wait(seen, remaining)

    async def wait_for_decision_async(
        self, review_id: str | None = None, frontier_id: str | None = None, timeout: float = 30.0
    ) -> Review | Frontier | None:
        return await asyncio.to_thread(self.wait_for_decision, review_id, frontier_id, timeout)

    def wait_for_change(self, after_size: int, timeout: float) -> int:
        return self.store.wait_for_change(after_size, timeout)


def _reviewer_info(row: Any) -> ReviewerInfo:
    return ReviewerInfo(row.id, tuple(json.loads(row.roles)), tuple(json.loads(row.tools)), bool(row.enabled))
