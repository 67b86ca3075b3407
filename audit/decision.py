"""A person's decision as they sign it: the entry body and the statement over it (pure).

DESIGN.md "Who holds which key": the decision statement is the RFC 8785 form of
``{"log", "kind", "actor", "body"}``, and the body names the review, the final args digest,
the patch, the answer to the tool's own question, and the rationale or reason. The review
service builds the body with these functions inside the write transaction and checks the
signature against it; a script, the CLI or the desk's page builds the very same body to sign
it beforehand (the page does it in JavaScript, ``desk/static/desk.js``, from what it shows).

A passkey signs ``SHA-256(statement)`` as its WebAuthn challenge; an Ed25519 key file signs
the statement itself.
"""

from __future__ import annotations

from typing import Any

from signoff.audit.canonical import digest
from signoff.audit.keys import Signer
from signoff.audit.trust import RULES_VERSION, LogRules, statement

APPROVED = "review.approved"
EDITED = "review.edited"
REJECTED = "review.rejected"


def approve_body(
    review: str, args_digest: str, rationale: str = "", payload: Any = None, round: int | None = None
) -> dict[str, Any]:
    """``review.approved``: the args approved (their digest), the answer to the tool's own question, and
    (for a review that needs several people) the round of approvals it belongs to."""
    body: dict[str, Any] = {"review": review, "args_digest": args_digest, "rationale": rationale or ""}
    if payload is not None:
        body["payload"] = payload
    if round is not None:
        body["round"] = round
    return body


def edit_body(
    review: str,
    patch: list[Any],
    final_args: dict[str, Any],
    rationale: str = "",
    payload: Any = None,
    round: int | None = None,
) -> dict[str, Any]:
    """``review.edited``: the RFC 6902 patch exactly as made (on the round's args), and the digest of the
    args it produces; with several approvers, the round it edits (the edit starts the next one)."""
    body: dict[str, Any] = {
        "review": review,
        "patch": patch,
        "args_digest": digest(final_args),
        "rationale": rationale or "",
    }
    if payload is not None:
        body["payload"] = payload
    if round is not None:
        body["round"] = round
    return body


def reject_body(review: str, reason: str) -> dict[str, Any]:
    """``review.rejected``: the reason the model will read."""
    return {"review": review, "reason": reason}


def decision_statement(log: str, kind: str, actor: str, body: dict[str, Any]) -> bytes:
    """The bytes a person signs for a decision on a log under rules version 2."""
    return statement(LogRules(log, RULES_VERSION), kind, actor, body)


def sign_decision(signer: Signer, log: str, kind: str, actor: str, body: dict[str, Any]) -> dict[str, str]:
    """An Ed25519 key file's signature on a decision: the ``sig`` a script sends with it."""
    return signer.sign(decision_statement(log, kind, actor, body))
