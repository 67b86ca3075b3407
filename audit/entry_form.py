"""An entry's form, checked without the log around it (pure): its fields and the index columns stored beside it.

``audit verify`` checks, for every entry, that it has the record's fields and no others, version 1, a
timestamp in the one fixed format, an actor of a known kind, a known entry kind and an object body, and
that the ``(kind, actor, subject)`` columns stored beside it are the ones it implies. None of that needs
the entries before it, so on all cores the workers check it (:mod:`signoff.audit.verify_parallel`) and
the sequential pass keeps only what needs the order (issue 24). The log id is the exception: it must be
entry 0's, so the pass checks it, between the version and the rest, as it always has.
"""

from __future__ import annotations

from typing import Any

from signoff.audit.entry import ACTOR, KINDS, TIME, subject_of

FIELDS = frozenset({"v", "log", "seq", "prev", "at", "actor", "kind", "body", "sig"})
VERSION = "entry version"
"""The one rule checked before the log id; every other rule of :func:`failure` comes after it."""

Failure = tuple[str, str, str]
"""``(rule, expected, found)``, worded as :class:`~signoff.audit.errors.VerificationFailed` words it."""


def failure(data: dict[str, Any], columns: tuple[Any, ...] | None) -> Failure | None:
    """The first rule ``data`` (an entry's parsed object) breaks, in the verifier's order, or None.
    ``columns``: the ``(kind, actor, subject)`` stored beside it (None: not stored)."""
    if data.get("v") != 1:
        return VERSION, "v 1", repr(data.get("v"))
    at, actor, kind = data.get("at"), data.get("actor"), data.get("kind")
    if not isinstance(at, str) or not TIME.match(at):
        return "timestamp", "YYYY-MM-DDTHH:MM:SS.ffffffZ", repr(at)
    if not isinstance(actor, str) or not ACTOR.match(actor):
        return "actor", "human:|agent:|service:|admin:|log: actor", repr(actor)
    if kind not in KINDS:
        return "entry kind", "a known kind", repr(kind)
    body = data.get("body")
    if not isinstance(body, dict):
        return "entry body", "a JSON object", repr(body)[:60]
    if not FIELDS.issuperset(data):
        return "entry fields", "only the record's fields", str(sorted(set(data) - FIELDS))
    if columns is not None:
        implied = (kind, actor, subject_of(body))
        if tuple(columns) != implied:
            return "stored entry columns (kind, actor, subject)", repr(implied), repr(tuple(columns))
    return None
