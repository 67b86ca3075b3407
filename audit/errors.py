"""One error hierarchy for the audit log.

Every message says what was expected and what was found. The CLI turns these into a
message and an exit code in one place (``audit.cli``); the desk maps them to HTTP
status codes at its route edge.
"""

from __future__ import annotations


class AuditError(Exception):
    """Base of every error raised by ``audit``."""


# -- canonical form -------------------------------------------------------------------


class CanonicalFormError(AuditError, ValueError):
    """A value cannot be written in RFC 8785 canonical form (or the I-JSON domain)."""

    def __init__(self, path: str, rule: str) -> None:
        self.path = path
        self.rule = rule
        super().__init__(f"{path}: {rule}")


# -- storage ---------------------------------------------------------------------------


class StoreError(AuditError):
    """The store could not do what was asked; nothing was reported as written."""


class LogNotFound(StoreError):
    """The store has no log yet (run ``audit init``)."""


class ManyLogs(StoreError):
    """The store holds several logs and none was named (``--log ID``)."""


class LogExists(StoreError):
    """``init`` was asked for a store that already holds a log."""


class AppendConflict(StoreError):
    """The head moved under a compare-and-swap append too many times."""


class KeyFileError(AuditError):
    """A key file is missing, unreadable, or not an Ed25519 private key."""


# -- review lifecycle (DESIGN.md "The review lifecycle", rules 1-6) ----------------------


class ReviewError(AuditError):
    """A review operation broke a lifecycle rule; nothing was written."""

    rule: int | str | None = None  # SPEC.md §7's number (2b: a sub-rule)


class UnknownReview(ReviewError):
    rule = 1

    def __init__(self, review_id: str) -> None:
        self.review_id = review_id
        super().__init__(f"review {review_id!r}: expected an open review, found no such review")


class UnknownFrontier(ReviewError):
    rule = 5

    def __init__(self, frontier_id: str) -> None:
        self.frontier_id = frontier_id
        super().__init__(f"frontier {frontier_id!r}: expected a known frontier, found none")


class ReviewClosed(ReviewError):
    rule = 1

    def __init__(self, review_id: str, status: str) -> None:
        self.review_id = review_id
        self.status = status
        super().__init__(f"review {review_id}: expected an open review, found it already {status}")


class DeadlinePassed(ReviewError):
    rule = 4

    def __init__(self, review_id: str, deadline: str, now: str) -> None:
        self.review_id = review_id
        self.deadline = deadline
        super().__init__(f"review {review_id}: expected a decision before the deadline {deadline}, found it at {now}")


class NotAllowed(ReviewError):
    """The actor may not do this: not human, not enrolled, disabled, or outside their role."""

    rule: int | str | None = 2


class PatchFailed(ReviewError):
    rule = 3


class SchemaViolation(ReviewError):
    """Edited args break the tool's declared parameters."""

    rule = 3

    def __init__(self, parameter: str, rule_text: str) -> None:
        self.parameter = parameter
        self.rule_text = rule_text
        super().__init__(f"parameter {parameter!r}: {rule_text}")


class MissingReason(ReviewError):
    rule = 1


class FrontierNotReady(ReviewError):
    rule = 5


class AlreadyResumed(ReviewError):
    rule = 5


class ExecutionMismatch(ReviewError):
    rule = 6


class DuplicateReview(ReviewError):
    rule = 1


class Claimed(ReviewClosed):
    """Someone else's claim ("I'm on it") on the review still holds."""

    def __init__(self, review_id: str, reviewer: str, until: str) -> None:
        self.reviewer = reviewer
        self.until = until
        super().__init__(review_id, f"claimed by {reviewer} until {until}")


class AlreadyApproved(NotAllowed):
    """This person approved the review's current round already (a quorum needs different people)."""


class SelfApproval(NotAllowed):
    """The person on whose behalf the agent asked for a call may not approve or edit it (rule 2a), unless
    the log's policy for the tool (an admin's) says ``self_approval``."""


class DelegationRefused(NotAllowed):
    """A delegation, its revocation, or a decision made under one breaks rule 2b (SPEC.md §7); nothing
    was written."""

    rule = "2b"


class ProposalRefused(NotAllowed):
    """A proposed standing rule, its approval or its decline breaks rule 7 (SPEC.md §7); nothing was written."""

    rule = 7


class StaleRound(ExecutionMismatch):
    """A decision names a round the review has left (someone edited it since)."""

    rule = 2


class OtherAnswer(ExecutionMismatch):
    """A round's later approval gives another answer to the tool's own question than its first did."""

    rule = 2


class InvalidEntry(AuditError, ValueError):
    """An entry's fields are malformed (bad actor, kind or body field)."""


# -- verification ----------------------------------------------------------------------


class VerificationFailed(AuditError):
    """The log is tampered with or breaks a rule. ``seq`` names the first bad entry."""

    def __init__(self, seq: int | None, rule: str, expected: str = "", found: str = "") -> None:
        self.seq = seq
        self.rule = rule
        self.expected = expected
        self.found = found
        where = f"seq {seq}" if seq is not None else "log"
        detail = f": expected {expected}, found {found}" if expected or found else ""
        super().__init__(f"{where}: {rule}{detail}")


class UnusableInput(AuditError):
    """The verifier's input cannot be read at all (exit code 2)."""
