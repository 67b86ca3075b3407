"""Domain errors from ``audit.errors`` mapped to HTTP status codes, in one place."""

from __future__ import annotations

from signoff.audit import errors as E


class ValuesDoNotMatch(E.ReviewError):
    """The desk's rule on a sealed log: a review whose values beside the log are missing or do not match
    their commitments (desk/reveal.py) is not approved or edited through the desk; nothing was written."""


VALUES_WITHHELD = (
    "This review's values beside the log do not match its record, so nothing of it is shown and it cannot be "
    "approved or edited. Nothing was recorded. This may be tampering: tell your administrator."
)

# Most specific first; the first isinstance match wins.
STATUS: list[tuple[type[Exception], int, str]] = [
    (ValuesDoNotMatch, 409, VALUES_WITHHELD),
    (E.UnknownReview, 404, "No such review."),
    (E.UnknownFrontier, 404, "No such frontier."),
    (E.ReviewClosed, 409, "This review was already decided; your decision was not recorded."),
    (E.DeadlinePassed, 409, "The deadline for this review has passed; your decision was not recorded."),
    (E.DuplicateReview, 409, "That call already has a review."),
    (E.FrontierNotReady, 409, "The frontier is not fully decided yet."),
    (E.AlreadyResumed, 409, "The frontier was already resumed."),
    (E.DelegationRefused, 403, "No delegation in force lends you this; nothing was recorded."),
    (E.ProposalRefused, 403, "The log refused this proposal; nothing was recorded."),
    (E.SelfApproval, 403, "You asked for this call: someone else approves it; nothing was recorded."),
    (E.NotAllowed, 403, "Your role does not cover this tool; nothing was recorded."),
    (E.PatchFailed, 422, "The patch does not apply to the call's args; nothing was recorded."),
    (E.SchemaViolation, 422, "The edited args break the tool's parameter schema; nothing was recorded."),
    (E.MissingReason, 422, "A rejection needs a reason; nothing was recorded."),
    (E.CanonicalFormError, 422, "A value cannot be stored as canonical JSON; nothing was recorded."),
    (E.InvalidEntry, 422, "The request is malformed; nothing was recorded."),
    (E.ExecutionMismatch, 409, "Executed args differ from the approved ones."),
    (E.LogNotFound, 503, "The store has no log yet."),
]


UNSIGNED = (
    "This decision needs your own signature (your passkey here, or your key file through the API); "
    "nothing was recorded."
)
SIGNATURE_REFUSED = (
    "Your signature does not match the decision the server would record: what this page showed you "
    "(the arguments, your changes or your answer) differs from the server's copy, or the signature is not "
    "from a key enrolled for you. Nothing was recorded."
)


MISMATCH = "What you saw differs from the record. Nothing was recorded. This may be tampering: tell your administrator."
"""A passkey signed a statement other than the one the server built from its own copy of the review."""
_CHALLENGE = "sig.client_data.challenge:"  # audit.webauthn.verify_assertion, WebAuthn §7.2 step 12


def statement_mismatch(exc: Exception) -> bool:
    """Whether a decision was refused because the person's passkey signed a statement whose SHA-256 is not
    the challenge of the statement the server built (``audit.webauthn``: the page and the server's copy of
    the review differ). Retrying the same page fails the same way; only reloading it can help."""
    return isinstance(exc, E.NotAllowed) and str(exc).startswith(_CHALLENGE)


def signature_problem(exc: Exception) -> str | None:
    """The summary for a refused or missing signature (``audit.trust`` names the ``sig`` field first)."""
    if not isinstance(exc, E.NotAllowed):
        return None
    text = str(exc)
    if statement_mismatch(exc):
        return MISMATCH
    if text.startswith("sig:") and "found none" in text:
        return UNSIGNED
    if text.startswith("sig"):
        return SIGNATURE_REFUSED
    return None


# Quorum and claims (issue 13): what ``audit.rules`` refuses, said for the person who tried. Each is
# recognised by the rule its message names (``audit.rules.decide`` / ``claim``), as signatures are above.
CLAIMED = "Someone else is on this review (their claim still holds); your claim was not recorded."
APPROVED_TWICE = (
    "You already approved this round; it needs another person's approval. Nothing was recorded. "
    "You can still change the arguments (Edit starts a new round) or reject it."
)
OTHER_ROUND = (
    "The arguments changed since this page was shown: someone edited them, which started a new round of "
    "approvals. Reload and review what will run now. Nothing was recorded."
)
OTHER_ANSWER = (
    "Your answer to the tool's question differs from the one this round's first approval gave; a round's "
    "approvals must agree. Give the same answer, or reject. Nothing was recorded."
)


def quorum_problem(exc: Exception) -> str | None:
    """The summary for a refused claim or quorum decision (the status stays the error class's)."""
    if isinstance(exc, E.Claimed):
        return CLAIMED
    if isinstance(exc, E.AlreadyApproved):
        return APPROVED_TWICE
    if isinstance(exc, E.StaleRound):
        return OTHER_ROUND
    if isinstance(exc, E.OtherAnswer):
        return OTHER_ANSWER
    return None


def classify(exc: Exception) -> tuple[int, str]:
    """(HTTP status, short human summary) for a domain error."""
    signature = signature_problem(exc)
    if signature is not None:
        return 403, signature
    quorum = quorum_problem(exc)
    for cls, status, summary in STATUS:
        if isinstance(exc, cls):
            return status, quorum or summary
    return 500, "The audit store refused the request."


def problem(exc: Exception) -> dict[str, object]:
    status, summary = classify(exc)
    body: dict[str, object] = {
        "detail": str(exc),
        "summary": summary,
        "error": type(exc).__name__,
        "recorded": False,
    }
    if isinstance(exc, E.ReviewClosed):
        body["status"] = exc.status
    if isinstance(exc, E.SchemaViolation):
        body["parameter"] = exc.parameter
    return body
