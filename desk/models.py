"""Wire models for the JSON API. Internal values (``audit.Review``, ``audit.Entry``) are
frozen dataclasses; these pydantic models are what leaves the process. Routes never return
a dataclass or a table row directly."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from signoff.desk import quorum


class CallPublic(BaseModel):
    app: str
    user: str
    session: str
    invocation: str
    confirmation_id: str
    call_id: str
    tool: str
    tool_description: str = ""
    tool_schema: dict[str, Any] | None = None
    args: dict[str, Any]
    hint: str = ""
    payload: Any = None
    agent: str = ""
    node_path: str = ""
    context: dict[str, str] = {}
    kind: str = "confirmation"


class KeyArgPublic(BaseModel):
    name: str
    text: str = Field(description="the value as a person reads it, cut for a list")
    full: str = Field(description="the value as a person reads it")
    was: str = Field("", description="the agent's proposed value, when a reviewer changed this argument")


class SummaryPublic(BaseModel):
    """What the agent wants to do, in plain words (desk/summary.py); the line a reviewer reads first."""

    headline: str = Field(description='e.g. "back_office wants to transfer_money: 1,250.00 EUR to DE89 …"')
    purpose: str = Field(description="the first sentence of the tool's description")
    question: str = Field(description="the tool's own question (its hint), empty for ADK's protocol text")
    key_args: list[KeyArgPublic]
    more: int = Field(description="arguments not among key_args")
    changed: bool = Field(
        False, description="a reviewer changed the arguments: the summary reads as what will run (or runs)"
    )

    @classmethod
    def of(cls, s: Any) -> SummaryPublic:
        return cls(**s.to_json())


class ApprovalPublic(BaseModel):
    """One approval of the current round toward a review's quorum."""

    by: str = Field(description="the reviewer who approved (after an edit, the editor is the round's first)")
    seq: int = Field(description="the log entry of the approval (review.approved or review.edited)")
    acting_for: str | None = Field(None, description="a delegate's approval: the reviewer they approved for")


class ErasurePublic(BaseModel):
    """A ``data.erased`` entry naming a review of a sealed log: its values were deleted from beside the log."""

    at: str = Field(description="the entry's time")
    by: str = Field(description="who erased them (an admin, or the service for a retention policy)")
    reason: str = Field(description="why (`retention` when a retention policy erased them)")


class ClaimPublic(BaseModel):
    """A reviewer's "I'm on it" (review.claimed): advice to the others, never a lock; it lapses at ``until``."""

    reviewer: str
    until: datetime


class ReviewPublic(BaseModel):
    id: str
    frontier: str
    status: str
    tool: str
    agent: str
    call: CallPublic
    args_digest: str
    role: str | None = None
    deadline: datetime | None = None
    opened_at: datetime
    opened_seq: int
    decided_at: datetime | None = None
    decided_by: str | None = None
    decision_seq: int | None = None
    final_args: dict[str, Any] | None = None
    patch: list[Any] | None = None
    rationale: str = ""
    reason: str = ""
    answer_payload: Any = None
    executed: bool = False
    resumed: bool = False
    summary: SummaryPublic | None = None
    approvals: list[ApprovalPublic] = Field(
        [],
        description="the current round's approvals, oldest first; once decided, those of the deciding round "
        "(on a review that needs one approval: empty while pending)",
    )
    approvals_needed: int = Field(1, description="distinct people who must approve (the policy's `approvals`)")
    round: int = Field(0, description="edits so far; each edit starts a new round of approvals on the patched args")
    round_args: dict[str, Any] | None = Field(
        None,
        description="while pending, the args the current round approves: what will run (call.args in round 0); "
        "an approval's args_digest and an edit's patch are on these",
    )
    escalated_role: str | None = Field(
        None, description="the role the review was handed to (review.escalated); it may decide too"
    )
    claim: ClaimPublic | None = Field(None, description="who is on it, while the claim holds; null once it lapsed")
    row_disagrees: str = Field(
        "",
        description="in a list of pending reviews: what the review's projection row says other than the log "
        "(every value here is the log's; the row raised a projection alarm), empty when they agree",
    )
    problem: str = Field(
        "",
        description="what is wrong with the review on the log (a tampered record; on a sealed log, a value beside "
        "the log that is missing or does not match its commitment): nothing of it runs, and on a sealed log none "
        "of its values are returned; empty when nothing is",
    )
    sealed: bool = Field(
        False,
        description="its entries hold salted commitments in place of its values (a log made with "
        "`audit init` without `--values-in-entries`); the values here are revealed from beside the log, each checked",
    )
    sealed_round_args: dict[str, Any] | None = Field(
        None,
        description="sealed, while pending: the round's args as the entries hold them (commitments); an "
        "approval's args_digest is their digest (`signoff.audit.decision.prepare_approve`)",
    )
    private: list[str] | None = Field(
        None, description="sealed: the args members its policy keeps beside the log (null: all of them)"
    )
    round_payload_salt: str | None = Field(
        None,
        description="sealed, while pending: the hex salt of the round's first answer, which a later approval "
        "of the round seals its answer with (send it as `payload_salt`)",
    )
    erasures: list[ErasurePublic] = Field(
        [], description="sealed: each `data.erased` naming the review (its erased values stay commitments here)"
    )
    decided_for: str | None = Field(
        None, description="a delegate decided: the reviewer whose delegation they decided under (SPEC.md rule 2b)"
    )

    @classmethod
    def of(cls, r: Any, summary: Any = None, disagrees: str = "") -> ReviewPublic:
        from signoff.desk import summary as summaries

        c = r.call
        return cls(
            summary=SummaryPublic.of(summary if summary is not None else summaries.of_review(r)),
            row_disagrees=disagrees,
            id=r.id,
            frontier=r.frontier,
            status=r.status,
            tool=c.tool,
            agent=c.agent,
            call=CallPublic(
                app=c.app,
                user=c.user,
                session=c.session,
                invocation=c.invocation,
                confirmation_id=c.confirmation_id,
                call_id=c.call_id,
                tool=c.tool,
                tool_description=c.tool_description,
                tool_schema=c.tool_schema,
                args=c.args,
                hint=c.hint,
                payload=c.payload,
                agent=c.agent,
                node_path=c.node_path,
                context=dict(c.context or {}),
                kind=c.kind,
            ),
            args_digest=r.args_digest,
            role=getattr(r.policy, "role", None),
            deadline=r.deadline,
            opened_at=r.opened_at,
            opened_seq=r.opened_seq,
            decided_at=r.decided_at,
            decided_by=r.decided_by,
            decision_seq=r.decision_seq,
            final_args=r.final_args,
            patch=r.patch,
            rationale=r.rationale or "",
            reason=r.reason or "",
            answer_payload=r.answer_payload,
            executed=r.executed,
            resumed=r.resumed,
            approvals=[
                ApprovalPublic(by=by, seq=seq, acting_for=_for(r, seq)) for by, seq in getattr(r, "approvals", ())
            ],
            approvals_needed=int(getattr(r, "approvals_needed", 1) or 1),
            round=int(getattr(r, "round", 0) or 0),
            round_args=quorum.round_args(r) if r.status == "pending" else None,
            escalated_role=getattr(r, "escalated_role", None),
            claim=_claim(r),
            problem=getattr(r, "problem", "") or "",
            sealed=bool(getattr(r, "sealed", False)),
            sealed_round_args=getattr(r, "sealed_round_args", None) if r.status == "pending" else None,
            private=list(r.policy.private) if getattr(r.policy, "private", None) is not None else None,
            round_payload_salt=getattr(r, "round_payload_salt", None) if r.status == "pending" else None,
            erasures=[ErasurePublic(at=at, by=by, reason=why) for at, by, why in getattr(r, "erasures", ())],
            decided_for=_for(r, r.decision_seq),
        )


def _for(r: Any, seq: int | None) -> str | None:
    acting_for = getattr(r, "acting_for", None)
    return acting_for(seq) if callable(acting_for) else None


def _claim(r: Any) -> ClaimPublic | None:
    found = quorum.active_claim(r, "")
    return ClaimPublic(reviewer=found.reviewer, until=found.until) if found is not None else None


class ClaimedOut(BaseModel):
    """A claim just recorded (review.claimed)."""

    review: str
    reviewer: str
    until: datetime = Field(description="when it lapses by itself (the policy's claim_seconds, 15 minutes by default)")


class OutcomePublic(BaseModel):
    """What happened after the decision, from the log: the run resumed, the tool ran, the agent replied."""

    resumed: bool
    resumed_seq: int | None = None
    executed: bool
    executed_seq: int | None = None
    result_preview: str | None = Field(None, description="at most 500 characters of the tool's result as JSON")
    reply: str | None = Field(None, description="the agent's next words after the resumed run")
    reply_seq: int | None = None
    failed: bool = Field(False, description="a run.resume_failed names this call: it runs no more")
    failed_seq: int | None = None
    failed_reason: str | None = None
    result_note: str = Field(
        "",
        description="sealed: why the result preview is not given (erased; missing or tampered beside the log)",
    )
    reply_note: str = Field("", description="sealed: why the reply is not given (as result_note)")


class ReviewDetail(ReviewPublic):
    frontier_reviews: list[ReviewPublic] = []
    can_decide: bool = False
    acting_for: str | None = Field(
        None,
        description="for you: whom you decide this review for, under their delegation to you; put it in your "
        "decision's body and request as `acting_for` (null: your own roles cover it)",
    )
    outcome: OutcomePublic | None = None


class DecidedPage(BaseModel):
    items: list[ReviewPublic]
    total: int
    older: int | None = Field(None, description="pass as `before` for the next older page")
    newer: int | None = Field(None, description="pass as `after` for the next newer page")


class ReviewPage(BaseModel):
    items: list[ReviewPublic]
    total: int
    limit: int
    offset: int


SIG_DOC = """Your own signature on this decision (DESIGN.md "Who holds which key"). Required on a log
that requires signed decisions, and whenever a key is enrolled for you; omit it only on a log that
allows unsigned decisions.

It signs the **decision statement**: the RFC 8785 canonical JSON of
`{"log": <log id>, "kind": <"review.approved" | "review.edited" | "review.rejected">,
"actor": <"human:you@example.org">, "body": <the decision body>}` (UTF-8), where the body is what the
log will record (`signoff.audit.decision` builds it the same way):

* approve: `{"review": <id>, "args_digest": <the review's args_digest, i.e. the args as opened>,
  "rationale": <your rationale, "" if none>}` plus `"payload": <answer>` only when you send one;
* edit: `{"review": <id>, "patch": <your RFC 6902 patch, exactly as sent>, "args_digest":
  "sha256:" + hex(SHA-256(RFC 8785 of the patched args)), "rationale": <"" if none>}` plus `"payload"`;
* reject: `{"review": <id>, "reason": <your reason>}`.

A delegate deciding under someone's delegation (the review's `acting_for` for you) adds
`"acting_for": <that reviewer>` to any of the three bodies, and sends it beside the signature.

On a review that needs several approvals (`approvals_needed` > 1) the approve and edit bodies also carry
`"round": <the review's round>`, and the args are the round's (`round_args`), not the opened ones: an
approve's `args_digest` is the digest of `round_args`, an edit's `patch` applies to `round_args` and its
`args_digest` is the digest of the patched round args. An edit starts the next round, with your approval as
its first. A round's later approvals must give the same `payload` as its first. A reject carries no `round`.
With `approvals_needed` = 1 the bodies are exactly as above (no `round` key; `round_args` = the opened args).

On a sealed log (`sealed` is true) the body holds commitments in place of values: an approve's `args_digest`
is the digest of `sealed_round_args`; an edit's `patch` is the one the log records (whole top-level members
replaced, each changed private value by a new commitment `sealed:sha256:<hex SHA-256(salt ‖ RFC 8785 of the
value)>`), its `args_digest` that of `sealed_round_args` patched with it; an answer (`payload`) is its
commitment. Send the 32-byte salts you chose (hex) as `salts` (one per argument, `""` for args sealed whole)
and `payload_salt`; `signoff.audit.decision.prepare_approve` / `prepare_edit` build exactly these bodies and
salts from the review as `ReviewService.get` returns it.

The log id is `GET /api/me` → `log`. Two forms:

* **Ed25519** key file: `{"key": "ed25519:<hex SHA-256 of the raw public key>", "alg": "Ed25519",
  "value": <base64 Ed25519 signature over the statement bytes>}` (`signoff.audit.decision.sign_decision`).
* **WebAuthn** passkey: an assertion whose challenge is SHA-256 of the statement bytes:
  `{"key": "webauthn:<hex SHA-256 of the COSE key>", "alg": "WebAuthn", "authenticator_data": <base64>,
  "client_data": <base64 clientDataJSON>, "value": <base64 signature>}`
  (`signoff.audit.webauthn.assertion_sig`); base64url is accepted too.

If the server's copy of the review differs from what you signed, the signature does not verify:
403 `NotAllowed`, nothing recorded."""


class Ed25519Sig(BaseModel):
    """A signature by an Ed25519 key file enrolled for you on the log."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(description="ed25519:<hex SHA-256 of the raw public key>, a key enrolled for you")
    alg: Literal["Ed25519"]
    value: str = Field(description="base64 Ed25519 signature over the decision statement's bytes")


class WebAuthnSig(BaseModel):
    """A WebAuthn assertion by a passkey enrolled for you; its challenge is SHA-256 of the statement."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(description="webauthn:<hex SHA-256 of the passkey's COSE key>, a passkey enrolled for you")
    alg: Literal["WebAuthn"]
    authenticator_data: str = Field(description="base64 authenticatorData")
    client_data: str = Field(description="base64 clientDataJSON (type webauthn.get)")
    value: str = Field(description="base64 assertion signature over authenticatorData || SHA-256(clientDataJSON)")


DecisionSig = Annotated[Ed25519Sig | WebAuthnSig, Field(discriminator="alg")]


PAYLOAD_SALT_DOC = (
    "sealed log: the hex salt your `payload` commitment was made with (a later approval of a round gives the "
    "round's `round_payload_salt`); omitted: the server picks it, which a signed body cannot know beforehand"
)


ACTING_FOR_DOC = (
    "the reviewer you decide for, under their delegation to you (the review's `acting_for`); it is part of the "
    "body you sign"
)


class ApproveIn(BaseModel):
    rationale: str = Field("", max_length=10_000)
    payload: Any = None
    payload_salt: str | None = Field(None, max_length=64, description=PAYLOAD_SALT_DOC)
    round: int | None = Field(
        None,
        description="the round you reviewed (`round` of the review); on a review that needs several approvals, "
        "a decision on a round the review has left (someone edited since) is refused with 409",
    )
    acting_for: str | None = Field(None, max_length=220, description=ACTING_FOR_DOC)
    sig: DecisionSig | None = Field(None, description=SIG_DOC)


class EditIn(BaseModel):
    patch: list[dict[str, Any]] = Field(
        description="RFC 6902 JSON Patch on the args the current round approves (`round_args`; the call's args "
        "until someone edits a review that needs several approvals)"
    )
    rationale: str = Field("", max_length=10_000)
    payload: Any = None
    salts: dict[str, str] | None = Field(
        None,
        description='sealed log: the hex 32-byte salt of each changed argument\'s new commitment (`""` for args '
        "sealed whole), as `signoff.audit.decision.prepare_edit` returns them",
    )
    payload_salt: str | None = Field(None, max_length=64, description=PAYLOAD_SALT_DOC)
    round: int | None = Field(
        None,
        description="the round you reviewed (`round` of the review); on a review that needs several approvals, "
        "a decision on a round the review has left (someone edited since) is refused with 409",
    )
    acting_for: str | None = Field(None, max_length=220, description=ACTING_FOR_DOC)
    sig: DecisionSig | None = Field(None, description=SIG_DOC)


class RejectIn(BaseModel):
    reason: str = Field(min_length=1, max_length=10_000)
    acting_for: str | None = Field(None, max_length=220, description=ACTING_FOR_DOC)
    sig: DecisionSig | None = Field(None, description=SIG_DOC)


def sig_of(body: ApproveIn | EditIn | RejectIn) -> dict[str, Any] | None:
    """The ``sig`` dict the review service checks (exactly the fields sent)."""
    return body.sig.model_dump() if body.sig is not None else None


class EntryPublic(BaseModel):
    seq: int
    log: str
    prev: str
    at: str
    actor: str
    kind: str
    body: dict[str, Any]
    sig: dict[str, Any] | None = None
    hash: str

    @classmethod
    def of(cls, e: Any) -> EntryPublic:
        return cls(
            seq=e.seq,
            log=e.log,
            prev=e.prev,
            at=e.at,
            actor=e.actor,
            kind=e.kind,
            body=e.body,
            sig=e.sig,
            hash=e.hash,
        )


class LogPage(BaseModel):
    items: list[EntryPublic]
    size: int
    next_before: int | None = None


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return "sha256:" + v.hex() if len(v) == 32 else base64.b64encode(v).decode()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, datetime):
        return v.isoformat()
    return v


def as_json(obj: Any) -> dict[str, Any]:
    """A JSON object for an audit value (Checkpoint, InclusionProof): prefer its own
    ``to_json``, else its dataclass fields."""
    if obj is None:
        return {}
    if hasattr(obj, "to_json"):
        return _jsonable(obj.to_json())
    import dataclasses

    if dataclasses.is_dataclass(obj):
        return _jsonable(dataclasses.asdict(obj))  # type: ignore[arg-type]
    return _jsonable(dict(obj))


class RulesCheck(BaseModel):
    ok: bool | None = Field(description="None until the first run finishes")
    verified_upto: int | None
    checked_from: int
    checkpoint_size: int | None
    failure: str | None
    running: bool


class Verification(BaseModel):
    """Hash chain and Merkle roots (checked by the desk on every request, incrementally), and
    ``rules``: audit's full verifier run incrementally from the latest signed checkpoint."""

    ok: bool
    verified_upto: int | None = Field(None, description="highest seq verified; None when the log is empty")
    size: int
    checkpoint_size: int | None = None
    error: str | None = None
    rules: RulesCheck | None = None


class KeyPublic(BaseModel):
    """A key enrolled for a reviewer on the log: an Ed25519 key file's, or a passkey."""

    fingerprint: str = Field(description="what a signature's `key` names")
    alg: str = Field(description="Ed25519, or WebAuthn for a passkey")
    algorithm: str = Field(description="Ed25519, or the passkey's COSE algorithm (Ed25519, ES256)")
    credential_id: str | None = Field(None, description="a passkey's credential id (base64url)")
    rp_id: str | None = Field(None, description="the relying party ID a passkey belongs to")
    enrolled_seq: int

    @classmethod
    def of(cls, key: Any) -> KeyPublic:
        passkey = key.passkey
        return cls(
            fingerprint=key.fingerprint,
            alg=key.alg,
            algorithm=passkey.algorithm if passkey is not None else key.alg,
            credential_id=base64.urlsafe_b64encode(passkey.credential_id).rstrip(b"=").decode()
            if passkey is not None
            else None,
            rp_id=passkey.rp_id if passkey is not None else None,
            enrolled_seq=key.seq,
        )


class Me(BaseModel):
    reviewer: str
    roles: list[str]
    tools: list[str]
    enabled: bool
    log: str = Field(description="the log id a decision statement names")
    signed_decisions: bool = Field(description="whether this log refuses unsigned decisions")
    keys: list[KeyPublic] = Field(description="your active keys; once you have one, every decision must be signed")


class Health(BaseModel):
    ok: bool
    log: str
    size: int
