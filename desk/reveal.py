"""Reviews of a sealed log as the desk shows them (SPEC.md "Values beside the log").

On a log with sealed values (``audit init`` without ``--values-in-entries``) the entries and the
review projection hold salted commitments in place of a review's values; the values live beside
the log, in ``signoff_value`` (:mod:`signoff.audit.values`). The desk reveals them here, each
checked against its commitment (:func:`signoff.audit.decided.reveal_review`), with one read of the
values per page.

* A review whose value is missing (and no ``data.erased`` names it) or does not match its commitment
  has a ``problem``: the desk then shows none of its values (:func:`withheld`, :func:`shown`), the way it
  shows a record that differs from what was signed, and records no approval or edit of it.
* An erased value stays its commitment in the revealed review; the pages say that it was erased, when,
  by whom and why (``Review.erasures``), in its place.
* The texts that follow a decision (a tool's result preview, the agent's reply) are revealed the same way
  (:func:`text`).

Pages cache what they read per log size (desk/cache.py); a value changed beside the log changes no entry,
so the review page keys its cache on the review's values too (:func:`version`), and every approval or edit
reads the review again (desk/routes/decide.py). A list may show values checked when the log last grew.

On a log that keeps its values in its entries, every function here returns what it was given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import select
from sqlmodel import col

from signoff.audit import sealing, values
from signoff.audit.entry import Entry
from signoff.audit.reader import parse_entry
from signoff.audit.revealing import reveal_review
from signoff.audit.review_types import Review
from signoff.audit.sealing import Lookup, member_order
from signoff.audit.tables import EntryRow

ERASED = "erased"
"""What :func:`text` says of a value a ``data.erased`` entry names."""
MISSING = "missing"
"""What :func:`text` says of a value that is gone from beside the log with no ``data.erased`` naming it."""
TAMPERED = "tampered"
"""What :func:`text` says of a value beside the log that does not match its commitment."""


def own_entries(store: Any, ids: Sequence[str]) -> dict[str, list[Entry]]:
    """Each review's own entries (oldest first), in one read of the subject index, each bound to its
    review by its own body (as :func:`signoff.audit.decided.read_review` binds them)."""
    wanted = set(ids)
    if not wanted:
        return {}
    # ``log || ''`` and no ORDER BY (sorted here): the planner seeks the subject index for each id, rather than
    # walking the (log, seq) key through the whole log.
    query = select(col(EntryRow.raw)).where(
        col(EntryRow.subject).in_(sorted(wanted)), col(EntryRow.log).concat("") == store.log_id
    )
    own: dict[str, list[Entry]] = {}
    with store.read_engine.connect() as conn:
        for (raw,) in conn.execute(query):
            entry = parse_entry(bytes(raw))
            found = entry.body.get("review")
            if isinstance(found, str) and found in wanted:
                own.setdefault(found, []).append(entry)
    for entries in own.values():
        entries.sort(key=lambda e: e.seq)
    return own


def version(store: Any, review_id: str) -> str:
    """A fingerprint of the review's values beside a sealed log ("" on a log that keeps values in its
    entries): part of the key under which a page caches the review (desk/cache.py keys on the log's size,
    and a value changed behind the service's back changes no entry), so that the page checks it again."""
    if not store.rules.sealed_values:
        return ""
    rows = store.read_rows(_VALUES, store.log_id, review_id)
    found = sorted((str(r.commitment), str(r.salt), str(r.value)) for r in rows)
    return hashlib.sha256(json.dumps(found).encode("utf-8")).hexdigest()


_VALUES = "SELECT commitment, salt, value FROM signoff_value WHERE log = ? AND owner = ?"


def lookup(store: Any, owners: Iterable[str]) -> Lookup:
    """The values beside the log of ``owners`` (reviews, and frontiers for the agent's replies), read once."""
    return values.lookup_for(store.read_rows, store.log_id, [o for o in owners if o])


def revealed(store: Any, found: Sequence[Review], own: Mapping[str, Sequence[Entry]] | None = None) -> list[Review]:
    """``found`` (reviews as the projection rows or a frontier's entries hold them, sealed) with their values
    revealed and checked: the sealed ones' own entries (for their erasures; ``own`` when read already) and
    values in one read each."""
    sealed = [r.id for r in found if r.sealed]
    if not sealed:
        return list(found)
    own = own if own is not None else own_entries(store, sealed)
    look = lookup(store, [*sealed, *(r.frontier for r in found if r.sealed)])
    return [reveal_review(r, own.get(r.id, ()), look) if r.sealed else r for r in found]


def withheld(review: Review) -> bool:
    """Whether the desk shows none of the review's values: on a sealed log, what is wrong with its record
    (a value missing or not matching its commitment, or a decision that does not fit) says they cannot be
    trusted to be the ones the log committed to."""
    return bool(review.sealed and review.problem)


def shown(review: Review) -> Review:
    """The review as a page or the API may show it: without any of its values when :func:`withheld`."""
    if not withheld(review):
        return review
    call = replace(review.call, args={}, payload=None, hint="", context={})
    return replace(
        review,
        call=call,
        final_args=None,
        round_args=None,
        sealed_round_args=None,
        patch=None,
        answer_payload=None,
        round_payload=None,
        round_payload_salt=None,
    )


def erased_all(review: Review, args: Mapping[str, Any] | None = None) -> bool:
    """Whether every argument of the review's call (or of ``args``, such as its final ones) was erased: the
    page then says so in their place."""
    args = review.call.args if args is None else args
    return bool(review.erased) and bool(args) and all(_gone(v, review.erased) for v in args.values())


def _gone(value: Any, erased: frozenset[str]) -> bool:
    return isinstance(value, str) and value in erased


def text(value: Any, look: Lookup | None, erased: frozenset[str] = frozenset()) -> tuple[str | None, str]:
    """A text that follows a decision (``tool.executed``'s result preview, ``run.replied``'s text) as a page
    shows it, and what is wrong with it: ``(text, "")``, or ``(None, ERASED | MISSING | TAMPERED)``."""
    if value is None:
        return None, ""
    if not sealing.is_commitment(value) or look is None:
        return str(value), ""
    found = look(value)
    if found is None:
        return None, ERASED if value in erased else MISSING
    try:
        return str(sealing.reveal(value, look, "value")), ""
    except sealing.ValueProblem:
        return None, TAMPERED


def edit_order(review: Review) -> list[str]:
    """The round's members in the order a sealed edit's patch walks them
    (:func:`signoff.audit.sealing.member_order`, RFC 8785's: by UTF-16 code units)."""
    return sorted(review.sealed_round_args or {}, key=member_order)


def signing(store: Any, review: Review) -> dict[str, Any]:
    """What the review page needs to sign a decision on a sealed review as the service will record it
    (desk/static/desk.js ``sealedBody``; :func:`signoff.audit.decision.prepare_approve` and
    :func:`~signoff.audit.decision.prepare_edit` build the same bodies): the round's args as the entries
    hold them, the salt of each commitment among them (to check the values shown before signing), the
    policy's ``private`` members, the round's answer salt and :mod:`signoff.audit.sealing`'s thresholds."""
    if not review.sealed or review.status != "pending" or review.sealed_round_args is None:
        return {"sealed": False}
    sealed = dict(review.sealed_round_args)
    look = lookup(store, [review.id])
    salts: dict[str, str] = {}
    for name, value in sealed.items():
        found = look(value) if sealing.is_commitment(value) else None
        if found is not None:
            salts[name] = found[0].hex()
    private = review.policy.private
    return {
        "sealed": True,
        "sealed_args": sealed,
        "order": edit_order(review),
        "private": list(private) if private is not None else None,
        "round_salts": salts,
        "round_payload_salt": review.round_payload_salt,
        "limits": {
            "MAX_MEMBERS": sealing.MAX_MEMBERS,
            "MAX_SEALED_ARGS": sealing.MAX_SEALED_ARGS,
            "MAX_CLEAR": sealing.MAX_CLEAR,
        },
    }


__all__ = [
    "ERASED",
    "MISSING",
    "TAMPERED",
    "edit_order",
    "version",
    "erased_all",
    "lookup",
    "own_entries",
    "revealed",
    "shown",
    "signing",
    "text",
    "withheld",
]
