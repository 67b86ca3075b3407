"""Log entries: their fields, canonical bytes and hashes (DESIGN.md "The record").

``hash = SHA-256(0x00 || canonical bytes)`` is the RFC 9162 §2.1.1 leaf hash, so one value
links the chain (``prev``) and forms the Merkle leaf. Every hash is written with its
algorithm prefix, ``sha256:<hex>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from signoff.audit.canonical import canonical, check, encode_checked
from signoff.audit.errors import InvalidEntry
from signoff.audit.merkle import leaf_hash

VERSION = 1
ZERO_HASH = "sha256:" + "0" * 64
TIME = re.compile(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{6}Z$")
ACTOR = re.compile(r"^(human|agent|service|admin|log):[^\s]{1,200}$")

KINDS = frozenset(
    {
        "review.opened",
        "review.approved",
        "review.edited",
        "review.rejected",
        "review.expired",
        "review.withdrawn",
        "review.auto_approved",
        "review.escalated",
        "review.claimed",
        "policy.set",
        "run.resumed",
        "run.replied",
        "run.resume_failed",
        "run.rewound",
        "run.cancelled",
        "tool.executed",
        "reviewer.enrolled",
        "reviewer.disabled",
        "key.enrolled",
        "key.revoked",
        "log.configured",
        "log.checkpoint",
        "log.cosigned",
        "witness.added",
        "witness.removed",
        "witness.quorum",
        "data.erased",
        "delegation.granted",
        "delegation.revoked",
        "policy.proposed",
        "policy.declined",
        "sso.required",
    }
)
DECISIONS = frozenset({"review.approved", "review.edited", "review.rejected"})
ABANDONED = frozenset({"run.rewound", "run.cancelled"})  # a frontier's run gone before its pause: nothing resumes
NEVER_RUN = ABANDONED | {"run.resume_failed"}  # after one of these, the approved calls it names never run
OUTCOMES = {
    "review.approved": "approved",
    "review.edited": "edited",
    "review.rejected": "rejected",
    "review.expired": "expired",
    "review.withdrawn": "withdrawn",
}


def format_hash(digest: bytes) -> str:
    return "sha256:" + digest.hex()


def parse_hash(text: str) -> bytes:
    if not text.startswith("sha256:") or len(text) != 71:
        raise ValueError(f"expected 'sha256:' and 64 hex digits, found {text[:80]!r}")
    return bytes.fromhex(text[7:])


def format_time(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC: one fixed width, so text order is time order."""
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


END_OF_TIME = datetime.max.replace(tzinfo=UTC)
"""The last moment a time on the log can name (``9999-12-31T23:59:59.999999Z``)."""


def later(moment: datetime, seconds: float) -> datetime:
    """``moment`` plus ``seconds``, or :data:`END_OF_TIME` for a span that would pass it (a retention,
    deadline, escalation or claim that long never comes). Never raises ``OverflowError``: a log that
    holds such a span, written before spans were bounded (:data:`signoff.audit.limits.MAX_SECONDS`),
    still verifies and still takes new entries."""
    room = (END_OF_TIME - moment).total_seconds()
    if not seconds < room:  # also infinity and NaN
        return END_OF_TIME
    return moment + timedelta(seconds=seconds)


def parse_time(text: str) -> datetime:
    """A time as :func:`format_time` writes it (:data:`TIME`); anything else is a ValueError."""
    if not isinstance(text, str) or TIME.match(text) is None:
        raise ValueError(f"expected a time as YYYY-MM-DDTHH:MM:SS.ffffffZ, found {text!r}")
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)  # ~4x faster than strptime


def statement(kind: str, actor: str, body: dict[str, Any], log: str | None = None) -> bytes:
    """The bytes an actor signs: ``canonical({"log", "kind", "actor", "body"})`` (no seq, prev or at).

    Logs under rules version 2 name the log (``log``); older logs sign without it
    (see :func:`signoff.audit.trust.statement`).
    """
    if log is None:
        return canonical({"kind": kind, "actor": actor, "body": body})
    return canonical({"log": log, "kind": kind, "actor": actor, "body": body})


def check_actor(actor: str, field: str = "actor") -> None:
    if not isinstance(actor, str) or not ACTOR.match(actor):
        raise InvalidEntry(
            f"{field}: expected 'human:|agent:|service:|admin:|log:' followed by a name without spaces, found {actor!r}"
        )


@dataclass(frozen=True)
class Entry:
    """One log entry as stored: its parsed fields, exact canonical bytes and leaf hash."""

    seq: int
    log: str
    prev: str
    at: str
    actor: str
    kind: str
    body: dict[str, Any]
    sig: dict[str, str] | None
    raw: bytes
    hash: str

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "v": VERSION,
            "log": self.log,
            "seq": self.seq,
            "prev": self.prev,
            "at": self.at,
            "actor": self.actor,
            "kind": self.kind,
            "body": self.body,
        }
        if self.sig is not None:
            data["sig"] = self.sig
        return data

    @property
    def review(self) -> str | None:
        value = self.body.get("review")
        return value if isinstance(value, str) else None


def build(
    *,
    log: str,
    seq: int,
    prev: str,
    at: str,
    actor: str,
    kind: str,
    body: dict[str, Any],
    sig: dict[str, str] | None = None,
) -> Entry:
    """Make an entry, refusing malformed fields before anything is written."""
    check_actor(actor)
    if kind not in KINDS:
        raise InvalidEntry(f"kind: expected one of {sorted(KINDS)}, found {kind!r}")
    if not isinstance(body, dict):
        raise InvalidEntry(f"body: expected a JSON object, found {type(body).__name__}")
    data: dict[str, Any] = {
        "v": VERSION,
        "log": log,
        "seq": seq,
        "prev": prev,
        "at": at,
        "actor": actor,
        "kind": kind,
        "body": body,
    }
    if sig is not None:
        data["sig"] = sig
    # Only the body, sig and actor can hold values from outside; the rest is ours and plain.
    slow = check(body, "$.body") | check(actor, "$.actor")
    if sig is not None:
        slow |= check(sig, "$.sig")
    raw = encode_checked(data, slow)
    return Entry(seq, log, prev, at, actor, kind, body, sig, raw, format_hash(leaf_hash(raw)))


def from_json(data: dict[str, Any], raw: bytes) -> Entry:
    """Rebuild an :class:`Entry` from parsed stored bytes (no checks; the verifier checks)."""
    return Entry(
        seq=data["seq"],
        log=data["log"],
        prev=data["prev"],
        at=data["at"],
        actor=data["actor"],
        kind=data["kind"],
        body=data["body"],
        sig=data.get("sig"),
        raw=raw,
        hash=format_hash(leaf_hash(raw)),
    )


def subject_of(body: dict[str, Any]) -> str | None:
    """What an entry is about, for the subject index: a review, frontier, reviewer or actor; the
    delegations to a reviewer (``delegation:<delegate>``); the log's witnesses (``witness:<name>``,
    ``witness:*`` for the quorum) and each one's cosignatures (``cosigned:<name>``); a policy
    (``policy:<name>``); the IdP groups a role needs (``sso:<role>``); or a proposed policy (``proposal:<id>``).
    Delegations, witnesses, policies, requirements and proposals are ranges of the index."""
    for name in ("review", "frontier", "reviewer", "actor"):
        value = body.get(name)
        if isinstance(value, str):
            return value
    delegate = body.get("delegate")
    if isinstance(delegate, str):  # delegation.granted / delegation.revoked
        return f"delegation:{delegate}"
    witness = body.get("witness")
    if isinstance(witness, str):  # an admin's witness.added / witness.removed; a witness's log.cosigned
        return f"{'cosigned' if 'cosignature' in body else 'witness'}:{witness}"
    if isinstance(body.get("quorum"), int):  # witness.quorum: in the witnesses' range of the index
        return "witness:*"
    policy = body.get("policy")
    if isinstance(policy, str):
        return f"policy:{policy}"
    if isinstance(body.get("role"), str) and "groups" in body:  # sso.required: the IdP groups a role needs
        return f"sso:{body['role']}"
    proposal = body.get("proposal")  # policy.proposed / policy.declined
    return f"proposal:{proposal}" if isinstance(proposal, str) else None
