"""Reading and writing ``signoff_value``, the values beside the log (:mod:`signoff.audit.sealing`).

Writes happen in the transaction of the entry that holds the commitments (``keep``). Reads give a
:data:`~signoff.audit.sealing.Lookup` that every reader (the gate, ``ReviewService.get``, the desk,
``audit show``, the notifications) passes to :func:`~signoff.audit.sealing.reveal`, which checks each
value against its commitment: a row changed, moved or with another salt is refused, never shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from signoff.audit.sealing import Kept, Lookup, value_from_json, value_json

_INSERT = "INSERT INTO signoff_value (log, commitment, owner, salt, value) VALUES (?, ?, ?, ?, ?)"
_BY_OWNERS = "SELECT commitment, salt, value FROM signoff_value WHERE log = ? AND owner IN ({})"
_BY_COMMITMENT = "SELECT commitment, salt, value FROM signoff_value WHERE log = ? AND commitment = ?"
_DELETE = "DELETE FROM signoff_value WHERE log = ? AND commitment = ?"
_OWNED = "SELECT commitment FROM signoff_value WHERE log = ? AND owner = ?"

Rows = Callable[..., list[Any]]
"""``Tx.rows`` or ``LogReader.read_rows``: driver-level SQL with ``?`` placeholders."""


def keep(rows: Rows, log: str, owner: str, kept: Iterable[Kept]) -> None:
    """Write each value beside the log, in the caller's transaction."""
    for item in kept:
        rows(_INSERT, log, item.commitment, owner, item.salt.hex(), value_json(item.value))


def _parse(found: Iterable[Any]) -> dict[str, tuple[bytes, Any]]:
    out: dict[str, tuple[bytes, Any]] = {}
    for row in found:
        try:
            out[str(row.commitment)] = (bytes.fromhex(str(row.salt)), value_from_json(row.value))
        except (ValueError, TypeError):
            out[str(row.commitment)] = (b"", None)  # unreadable: reveal() refuses it as not matching
    return out


def lookup_for(rows: Rows, log: str, owners: Sequence[str]) -> Lookup:
    """A lookup over the values of ``owners`` (read once), falling back to one query per commitment
    (a value kept under another owner: refused by the caller's check if it does not match)."""
    owners = [o for o in dict.fromkeys(owners) if o]
    cache = _parse(rows(_BY_OWNERS.format(", ".join("?" * len(owners))), log, *owners)) if owners else {}

    def lookup(commitment: str) -> tuple[bytes, Any] | None:
        if commitment not in cache:
            cache.update(_parse(rows(_BY_COMMITMENT, log, commitment)))
        return cache.get(commitment)

    return lookup


def delete(rows: Rows, log: str, commitments: Iterable[str]) -> None:
    for commitment in commitments:
        rows(_DELETE, log, commitment)


def owned(rows: Rows, log: str, owner: str) -> list[str]:
    return [str(r.commitment) for r in rows(_OWNED, log, owner)]


def none(_commitment: str) -> tuple[bytes, Any] | None:
    """The lookup of a reader with no values (an export made ``--without-values``)."""
    return None
