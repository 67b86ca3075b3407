"""Signoff's audit log: an append-only, hash-linked, signed record of every review decision.

The public surface is re-exported here; modules are small and each has one job:
``canonical`` (RFC 8785), ``entry`` (records and hashes), ``merkle`` (RFC 9162),
``keys`` (Ed25519), ``store`` (SQLite/PostgreSQL; with ``reader``, ``tree``, ``tx`` and
``driver``), ``rules`` (the review lifecycle), ``reviews`` (the service; with
``review_types``, ``review_queries`` and ``reviewers``), ``verify`` (the auditor's check;
with ``verifier`` and ``verify_projection``) and ``cli`` (``audit``).

The names are loaded on first use (PEP 562), so ``import signoff.audit`` and the ``audit``
command's ``--help`` do not pay for SQLAlchemy, Alembic or fido2. ``canonical`` and ``digest``
are bound at once: ``canonical`` is also the name of a submodule, and the function must win.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from signoff.audit.canonical import canonical, digest
from signoff.audit.errors import (
    AlreadyApproved,
    AlreadyResumed,
    AuditError,
    CanonicalFormError,
    Claimed,
    DeadlinePassed,
    DelegationRefused,
    DuplicateReview,
    ExecutionMismatch,
    FrontierNotReady,
    InvalidEntry,
    LogExists,
    LogNotFound,
    ManyLogs,
    MissingReason,
    NotAllowed,
    OtherAnswer,
    PatchFailed,
    ProposalRefused,
    ReviewClosed,
    ReviewError,
    SchemaViolation,
    SelfApproval,
    StaleRound,
    StoreError,
    UnknownFrontier,
    UnknownReview,
    VerificationFailed,
)

if TYPE_CHECKING:
    from signoff.audit.entry import Entry
    from signoff.audit.keys import Signer
    from signoff.audit.reviews import CallSpec, Frontier, Policy, Review, ReviewerInfo, ReviewService
    from signoff.audit.schema import check_args
    from signoff.audit.store import Checkpoint, LogInfo, Store, open_store

__all__ = [
    "AlreadyApproved",
    "SelfApproval",
    "AlreadyResumed",
    "AuditError",
    "CallSpec",
    "CanonicalFormError",
    "Checkpoint",
    "Claimed",
    "DeadlinePassed",
    "DelegationRefused",
    "DuplicateReview",
    "Entry",
    "ExecutionMismatch",
    "Frontier",
    "FrontierNotReady",
    "InvalidEntry",
    "LogExists",
    "ManyLogs",
    "LogInfo",
    "LogNotFound",
    "MissingReason",
    "NotAllowed",
    "OtherAnswer",
    "PatchFailed",
    "ProposalRefused",
    "Policy",
    "Review",
    "ReviewClosed",
    "ReviewError",
    "ReviewService",
    "ReviewerInfo",
    "SchemaViolation",
    "Signer",
    "StaleRound",
    "Store",
    "StoreError",
    "UnknownFrontier",
    "UnknownReview",
    "VerificationFailed",
    "canonical",
    "check_args",
    "digest",
    "open_store",
]

# name -> the module that defines it, for the names loaded on first use
_LAZY = {
    "Entry": "entry",
    "Signer": "keys",
    "CallSpec": "reviews",
    "Frontier": "reviews",
    "Policy": "reviews",
    "Review": "reviews",
    "ReviewerInfo": "reviews",
    "ReviewService": "reviews",
    "check_args": "schema",
    "Checkpoint": "store",
    "LogInfo": "store",
    "Store": "store",
    "open_store": "store",
}


def __getattr__(name: str) -> Any:
    """PEP 562: import the module behind a public name when the name is first used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'signoff.audit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"signoff.audit.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
