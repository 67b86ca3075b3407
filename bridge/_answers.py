"""Questions to a person (reviews of kind ``input``): the answer the agent reads is the one signed.

Internal module, not public API; import from ``bridge``.

A question (``adk_request_input``, or another ``LongRunningFunctionTool``) pauses like a gated call and
opens a review of kind ``input`` (:mod:`signoff.bridge._calls`). The person answers it as they approve:
the answer is the decision's ``payload``, signed with the rest of the statement. The resumer (or the
guard, for a client) sends it back as the call's ``FunctionResponse``
(:func:`signoff.bridge._mapping.answer_for`). Before the model reads it, the plugin's
``before_model_callback`` checks each answer in the newest user content against the log
(:func:`check_answers`): a review still pending, or an answer other than the signed one, stops the run
(:class:`AnswerRefused`); a signed answer that reached the agent is recorded once as ``tool.executed``
(its args the question as asked, its result preview the answer).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from google.genai import types

from signoff.audit import ReviewService
from signoff.audit.errors import AuditError
from signoff.bridge._calls import KIND_INPUT, agent_actor, canonical_bytes, response_of
from signoff.bridge._mapping import RUNS, answer_for

log = logging.getLogger("signoff.bridge")


class AnswerRefused(AuditError):
    """The answer to a question under review is not the one a person signed: the model does not read it."""


class AnswerHost(Protocol):
    reviews: ReviewService

    def lookup_review_id(self, session: str, value: str, *, by: str = "confirmation_id") -> str | None: ...


def check_answers(host: AnswerHost, session: str, responses: Sequence[types.FunctionResponse]) -> list[str]:
    """Check the answers to questions under review in ``responses`` against the log (see the module
    docstring); the ids of the reviews whose answer was recorded as delivered now. Blocking: run it in a
    thread."""
    recorded = []
    for response in responses:
        review_id = host.lookup_review_id(session, str(response.id)) if response.id else None
        if review_id is None:
            continue
        review = host.reviews.get(review_id)
        if review.call.kind != KIND_INPUT:
            continue
        if not review.final:
            raise AnswerRefused(
                f"review {review.id} of {review.call.tool}() is still pending: this answer did not come from a "
                "person, so the agent does not read it"
            )
        if canonical_bytes(response.response or {}) != canonical_bytes(response_of(answer_for(review))):
            raise AnswerRefused(
                f"review {review.id} of {review.call.tool}(): the answer in the session is not the one "
                f"{review.decided_by or 'the reviewer'} signed, so the agent does not read it"
            )
        if review.status in RUNS and not review.executed and not review.resume_failed:
            try:
                host.reviews.record_execution(
                    review.id,
                    actor=agent_actor(review.call.agent),
                    args=dict(review.final_args if review.final_args is not None else review.call.args),
                    result=review.answer_payload,
                )
                recorded.append(review.id)
            except AuditError as exc:  # recorded meanwhile (a re-drive): the answer was delivered once
                log.info("review %s: answer delivered; not recorded again: %s", review.id, exc)
    return recorded
