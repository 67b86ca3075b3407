"""A person's decision as they sign it: the entry body and the statement over it (pure).

DESIGN.md "Who holds which key": the decision statement is the RFC 8785 form of
``{"log", "kind", "actor", "body"}``, and the body names the review, the final args digest,
the patch, the answer to the tool's own question, and the rationale or reason. The review
service builds the body with these functions inside the write transaction and checks the
signature against it; a script, the CLI or the desk's page builds the very same body to sign
it beforehand (the page does it in JavaScript, ``desk/static/desk.js``, from what it shows).

A passkey signs ``SHA-256(statement)`` as its WebAuthn challenge; an Ed25519 key file signs
the statement itself. On a sealed log (SPEC.md "Values beside the log") the body holds commitments
in place of values: :func:`prepare_approve` and :func:`prepare_edit` build it from a review as
``ReviewService.get`` returns it, with the salts to send beside the signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from signoff.audit import sealing
from signoff.audit.canonical import digest
from signoff.audit.keys import Signer
from signoff.audit.trust import RULES_VERSION, LogRules, statement

APPROVED = "review.approved"
EDITED = "review.edited"
REJECTED = "review.rejected"


def approve_body(
    review: str,
    args_digest: str,
    rationale: str = "",
    payload: Any = None,
    round: int | None = None,
    acting_for: str | None = None,
) -> dict[str, Any]:
    """``review.approved``: the args approved (their digest), the answer to the tool's own question,
    (for a review that needs several people) the round of approvals it belongs to, and (for a delegate)
    the reviewer whose delegation they decide under (SPEC.md §7 rule 2b)."""
    body: dict[str, Any] = {"review": review, "args_digest": args_digest, "rationale": rationale or ""}
    if payload is not None:
        body["payload"] = payload
    if round is not None:
        body["round"] = round
    if acting_for is not None:
        body["acting_for"] = acting_for
    return body


def edit_body(
    review: str,
    patch: list[Any],
    final_args: dict[str, Any],
    rationale: str = "",
    payload: Any = None,
    round: int | None = None,
    acting_for: str | None = None,
) -> dict[str, Any]:
    """``review.edited``: the RFC 6902 patch exactly as made (on the round's args), and the digest of the
    args it produces; with several approvers, the round it edits (the edit starts the next one); for a
    delegate, whom they act for."""
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
    if acting_for is not None:
        body["acting_for"] = acting_for
    return body


def reject_body(review: str, reason: str, acting_for: str | None = None) -> dict[str, Any]:
    """``review.rejected``: the reason the model will read; for a delegate, whom they act for."""
    body = {"review": review, "reason": reason}
    if acting_for is not None:
        body["acting_for"] = acting_for
    return body


def decision_statement(log: str, kind: str, actor: str, body: dict[str, Any]) -> bytes:
    """The bytes a person signs for a decision on a log under rules version 2."""
    return statement(LogRules(log, RULES_VERSION), kind, actor, body)


def sign_decision(signer: Signer, log: str, kind: str, actor: str, body: dict[str, Any]) -> dict[str, str]:
    """An Ed25519 key file's signature on a decision: the ``sig`` a script sends with it."""
    return signer.sign(decision_statement(log, kind, actor, body))


@dataclass(frozen=True)
class Prepared:
    """A decision built ahead of its signature, for a signer other than the service (a script with a
    key file, a passkey): the body to sign, and on a sealed log the salts to send with it (hex) so that
    the service builds the very same body (``ReviewService.edit(..., salts=, payload_salt=)``)."""

    kind: str
    body: dict[str, Any]
    salts: dict[str, str] | None = None
    payload_salt: str | None = None

    def sign(self, signer: Signer, log: str, actor: str) -> dict[str, str]:
        return sign_decision(signer, log, self.kind, actor, self.body)


def _round_sealed(review: Any) -> dict[str, Any]:
    sealed = review.sealed_round_args
    if sealed is None:
        raise ValueError(f"review {review.id}: expected an open review, found it {review.status}")
    return dict(sealed)


def _sealed_payload(review: Any, payload: Any, *, same_round: bool) -> tuple[Any, str | None]:
    """The answer sealed: an approval in a round that has an answer uses that answer's salt (the same
    answer, the same commitment); an edit starts a round, with a salt of its own."""
    if payload is None or not review.sealed:
        return payload, None
    reuse = same_round and review.round_payload_salt
    salt = bytes.fromhex(review.round_payload_salt) if reuse else sealing.new_salt()
    return sealing.commit(payload, salt), salt.hex()


def prepare_approve(review: Any, rationale: str = "", payload: Any = None, acting_for: str | None = None) -> Prepared:
    """``review.approved`` of ``review`` (a :class:`~signoff.audit.review_types.Review` as
    ``ReviewService.get`` returns it) as the service will build it: the digest of the round's args as
    the entries hold them (sealed, on a sealed log), the answer sealed with the round's salt."""
    answer, salt = _sealed_payload(review, payload, same_round=True)
    round_ = review.round if review.approvals_needed > 1 else None
    body = approve_body(review.id, digest(_round_sealed(review)), rationale, answer, round_, acting_for)
    return Prepared(APPROVED, body, None, salt)


def prepare_edit(
    review: Any, patch: list[Any], rationale: str = "", payload: Any = None, acting_for: str | None = None
) -> Prepared:
    """``review.edited`` of ``review`` with ``patch`` (RFC 6902, on the args the page shows), as the
    service will build it; on a sealed log with fresh salts for the changed values."""
    from signoff.audit.rules import patched_args

    round_ = review.round if review.approvals_needed > 1 else None
    plain = dict(review.round_args or {})
    result = patched_args(plain, patch)
    if not review.sealed:
        return Prepared(EDITED, edit_body(review.id, patch, result, rationale, payload, round_, acting_for))
    salts = {name: sealing.new_salt() for name in [*result, sealing.WHOLE]}
    sealed_round = _round_sealed(review)
    recorded, _kept = sealing.edit_patch(plain, result, sealed_round, review.policy.private, salts)
    final = patched_args(sealed_round, recorded)
    answer, salt = _sealed_payload(review, payload, same_round=False)
    body = edit_body(review.id, recorded, final, rationale, answer, round_, acting_for)
    return Prepared(EDITED, body, {name: s.hex() for name, s in salts.items()}, salt)
