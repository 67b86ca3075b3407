"""Signoff's audit log: an append-only, hash-linked, signed record of every review decision.

The public surface is re-exported here; modules are small and each has one job:
``canonical`` (RFC 8785), ``entry`` (records and hashes), ``merkle`` (RFC 9162),
``keys`` (Ed25519), ``store`` (SQLite/PostgreSQL; with ``reader``, ``tree``, ``tx`` and
``driver``), ``rules`` (the review lifecycle), ``reviews`` (the service; with
``review_types``, ``review_queries`` and ``reviewers``), ``verify`` (the auditor's check;
with ``verifier`` and ``verify_projection``) and ``cli`` (``audit``).
"""

from signoff.audit.canonical import canonical, digest
from signoff.audit.entry import Entry
from signoff.audit.errors import (
    AlreadyApproved,
    AlreadyResumed,
    AuditError,
    CanonicalFormError,
    Claimed,
    DeadlinePassed,
    DuplicateReview,
    ExecutionMismatch,
    FrontierNotReady,
    InvalidEntry,
    LogExists,
    LogNotFound,
    MissingReason,
    NotAllowed,
    OtherAnswer,
    PatchFailed,
    ReviewClosed,
    ReviewError,
    SchemaViolation,
    StaleRound,
    StoreError,
    UnknownFrontier,
    UnknownReview,
    VerificationFailed,
)
from signoff.audit.keys import Signer
from signoff.audit.reviews import CallSpec, Frontier, Policy, Review, ReviewerInfo, ReviewService
from signoff.audit.schema import check_args
from signoff.audit.store import Checkpoint, LogInfo, Store, open_store

__all__ = [
    "AlreadyApproved",
    "AlreadyResumed",
    "AuditError",
    "CallSpec",
    "CanonicalFormError",
    "Checkpoint",
    "Claimed",
    "DeadlinePassed",
    "DuplicateReview",
    "Entry",
    "ExecutionMismatch",
    "Frontier",
    "FrontierNotReady",
    "InvalidEntry",
    "LogExists",
    "LogInfo",
    "LogNotFound",
    "MissingReason",
    "NotAllowed",
    "OtherAnswer",
    "PatchFailed",
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
