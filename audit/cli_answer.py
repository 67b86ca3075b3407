"""``audit answer``: answer a question under review (a review of kind ``input``) from a terminal.

``audit answer REVIEW VALUE --as alice@example.org --reviewer-key alice.pem`` answers the agent's question
(ADK's ``adk_request_input``, or another long-running call) as the desk's answer form does: the answer is
typed by the question's ``response_schema`` (an integer takes ``50``, a boolean ``true``), or read as JSON
from ``--json-file FILE`` (``-``: standard input) for an object or a list; it is checked against that schema,
then signed with the person's own key and recorded as their ``review.approved`` with the answer as its
payload, which the gate gives the agent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from signoff.audit.cli_common import add_json, emit, open_existing, verb
from signoff.audit.errors import UnusableInput

EXAMPLE = "audit answer rv_… 'ship it on Monday' --as alice@example.org --reviewer-key alice.pem"


def cmd_answer(args: argparse.Namespace) -> int:
    from signoff.audit.canonical import decode
    from signoff.audit.cli_people import acting_for, check_own_key, human
    from signoff.audit.edits import typed_value
    from signoff.audit.errors import CanonicalFormError
    from signoff.audit.keys import read_private_key
    from signoff.audit.reviews import ReviewService
    from signoff.audit.schema import check_args

    if (args.value is None) == (args.json_file is None):
        raise UnusableInput("audit answer: expected the answer as VALUE or --json-file FILE (one of them), found "
                            + ("both" if args.value is not None else "neither"))  # fmt: skip
    svc = ReviewService(open_existing(args))
    actor = human(args.reviewer)
    signer = read_private_key(args.reviewer_key) if args.reviewer_key else None
    if signer is not None:
        check_own_key(svc, actor, signer, args.reviewer_key)
    review = svc.get(args.review)
    if review.call.kind != "input":
        raise UnusableInput(
            f"{review.id}: expected a question to answer (a review of kind input), found a {review.call.kind} of "
            f"{review.tool}(); decide it with audit approve, edit or reject"
        )
    schema = review.call.args.get("response_schema")
    schema = schema if isinstance(schema, dict) else None
    if args.json_file is not None:
        raw = sys.stdin.buffer.read() if args.json_file == "-" else _read(args.json_file)
        try:
            answer = decode(raw, "--json-file")
        except CanonicalFormError as exc:
            raise UnusableInput(f"--json-file: expected the answer as JSON, found {exc}") from None
    else:
        kind = (schema or {}).get("type")
        kinds = [str(k).lower() for k in ([kind] if isinstance(kind, str) else list(kind or []))]
        answer = typed_value(args.value, kinds or ["string"], "answer")
    check_args(schema, answer)  # the shape the agent asked for, before anything is signed
    for_whom = acting_for(svc, actor, review, args.acting_for)
    done = svc.approve(
        review.id, reviewer=actor, payload=answer, rationale=args.rationale or "", signer=signer, acting_for=for_whom
    )
    by = f"{done.decided_by}, for {for_whom}" if for_whom else done.decided_by
    data: dict[str, Any] = {
        "review": done.id,
        "status": done.status,
        "answer": done.answer_payload,
        "decided_by": done.decided_by,
        "seq": done.decision_seq,
        "signed": signer is not None,
        "acting_for": for_whom,
    }
    text = (
        f"{done.id}: answered by {by} at seq {done.decision_seq}: {json.dumps(done.answer_payload, ensure_ascii=False)}"
    )
    emit(args, data, text)
    return 0


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise UnusableInput(
            f"--json-file: expected a readable file with the answer, found {path}: {exc.strerror}"
        ) from None


def register(sub: Any) -> None:
    answer = verb(sub, "answer", "answer a question under review (kind input), signed with your own key file",
                  EXAMPLE, cmd_answer)  # fmt: skip
    answer.add_argument("review", help="the review id (see `audit pending`)")
    answer.add_argument("value", nargs="?", help="the answer, typed by the question's response_schema")
    answer.add_argument(
        "--json-file", metavar="FILE", help="or the answer as JSON from FILE (-: stdin), for an object or a list"
    )
    answer.add_argument("--as", dest="reviewer", required=True, help="you: an enrolled reviewer's e-mail")
    answer.add_argument(
        "--reviewer-key",
        default=os.environ.get("SIGNOFF_REVIEWER_KEY"),
        help="your key file from `audit keygen` (env SIGNOFF_REVIEWER_KEY)",
    )
    answer.add_argument("--for", dest="acting_for", help="answer for this reviewer, under their delegation to you")
    answer.add_argument("--rationale", help="why (kept on the log)")
    add_json(answer)
