"""A sealed review's values revealed from beside the log, each checked (SPEC.md §10, pure).

:func:`reveal_review` takes a review as its entries hold it (commitments in place of its values,
:func:`signoff.audit.decided.review_from_sealed`) and a :data:`~signoff.audit.sealing.Lookup` of the
values beside the log, and returns it with the values in place. A value that is missing (and no
``data.erased`` among the review's entries names it) or does not match its commitment is left as its
commitment and becomes the review's ``problem``: nothing of it runs, and readers show none of it.
An erased value stays its commitment, and ``erasures`` says when, by whom and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from signoff.audit import sealing, trust
from signoff.audit.entry import Entry
from signoff.audit.review_types import CallSpec, Review
from signoff.audit.sealing import Lookup, ValueProblem
from signoff.audit.value_ledger import erased_by


class _Revealer:
    """Reveals one review's values, noting erased ones (kept as their commitments) and problems."""

    def __init__(self, review_id: str, lookup: Lookup, erased: frozenset[str]) -> None:
        self.review_id, self.lookup, self.erased = review_id, lookup, erased
        self.problems: list[str] = []
        self._seen: dict[str, Any] = {}  # commitment -> its value, checked once (the round's args repeat the call's)

    def value(self, value: Any, where: str) -> Any:
        if not sealing.is_commitment(value):
            return value
        if value in self._seen:
            return self._seen[value]
        if value in self.erased and self.lookup(value) is None:
            return value
        try:
            found = sealing.reveal(value, self.lookup, f"review {self.review_id}: {where}")
        except ValueProblem as exc:
            self.problems.append(str(exc))
            return value
        self._seen[value] = found
        return found

    def args(self, args: Any, where: str) -> Any:
        if not isinstance(args, dict):
            return args
        if sealing.sealed_whole(args):
            whole = self.value(args[sealing.WHOLE], where)
            return whole if isinstance(whole, dict) else args
        return {name: self.value(v, f"{where}.{name}") for name, v in args.items()}

    def patch(self, patch: Any, where: str) -> Any:
        if not isinstance(patch, list):
            return patch
        out = []
        for index, op in enumerate(patch):
            if isinstance(op, dict) and "value" in op:
                if op.get("path") == "":  # sealed-whole args replaced whole
                    op = {**op, "value": self.args(op["value"], f"{where}[{index}].value")}
                else:
                    op = {**op, "value": self.value(op["value"], f"{where}[{index}].value")}
            out.append(op)
        return out


def reveal_review(review: Review, own: Sequence[Entry], lookup: Lookup) -> Review:
    """``review`` (as :func:`review_from_sealed` read it) with its values revealed and checked."""
    erasures = tuple((e.at, e.actor, str(e.body.get("reason") or "")) for e in own if e.kind == trust.ERASED)
    erased = frozenset(c for e in own if e.kind == trust.ERASED for _owner, c in erased_by(e.body))
    show = _Revealer(review.id, lookup, erased)
    call = review.call
    revealed_call = CallSpec.from_json(
        {
            **{name: getattr(call, name) for name in call.__dataclass_fields__},
            "args": show.args(call.args, "call.args"),
            "payload": show.value(call.payload, "call.payload"),
            "hint": show.value(call.hint, "call.hint"),
            "context": {k: show.value(v, f"call.context.{k}") for k, v in call.context.items()},
        }
    )
    final_args = show.args(review.final_args, "final args") if review.final_args is not None else None
    round_args = show.args(review.round_args, "round args") if review.round_args is not None else None
    salt = None
    if sealing.is_commitment(review.round_payload):
        found = lookup(review.round_payload)
        salt = found[0].hex() if found is not None else None
    problem = review.problem
    runs_erased = final_args is not None and sealing.commitments_in(final_args) and not review.executed
    if not problem and (show.problems or runs_erased):
        problem = show.problems[0] if show.problems else f"review {review.id}: its args were erased before it ran"
    return replace(
        review,
        call=revealed_call,
        final_args=final_args,
        round_args=round_args,
        patch=show.patch(review.patch, "patch"),
        answer_payload=show.value(review.answer_payload, "payload"),
        round_payload=show.value(review.round_payload, "payload"),
        round_payload_salt=salt,
        problem=problem,
        erasures=erasures,
        erased=erased,
    )
