"""``audit verify``'s look at the values beside a sealed log (I/O; the checks are :mod:`.value_ledger`'s).

A store is checked against its ``signoff_value`` table; an exported file against the values file
written beside it (``FILE.values.jsonl``, one ``{"owner","commitment","salt","value"}`` per line), or
against none when it was exported ``--without-values`` (every value then counts as not at hand: the
commitments still bind the entries, and the rules that need values were checked when written).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from signoff.audit import trust, value_ledger
from signoff.audit.canonical import canonical
from signoff.audit.errors import UnusableInput, VerificationFailed
from signoff.audit.reader import LogReader, parse_entry
from signoff.audit.sealing import Lookup, value_from_json
from signoff.audit.verifier import Verifier

_ALL = "SELECT owner, commitment, salt, value FROM signoff_value WHERE log = :log ORDER BY commitment"
ValueRow = tuple[str, str, str, Any]


class store_rows:  # noqa: N801 - used as the function it replaced
    """A store's value rows, ``(owner, commitment, salt hex, value)``, streamed: each iteration reads them
    again, in chunks, so checking a million values holds a chunk at a time (issue 24: < 150 MB at 1M)."""

    def __init__(self, store: LogReader) -> None:
        self.store = store

    def __iter__(self) -> Iterator[ValueRow]:
        from sqlalchemy import text

        with self.store.read_engine.connect() as conn:
            found = conn.execution_options(yield_per=2000).execute(text(_ALL), {"log": self.store.log_id})
            for r in found:
                yield (str(r.owner), str(r.commitment), str(r.salt), value_from_json(r.value))


def file_rows(path: Path) -> list[tuple[str, str, str, Any]]:
    """The rows of a values file; ``UnusableInput`` names a line that cannot be read."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): values may hold U+2028
    except OSError as exc:
        raise UnusableInput(f"values file {path}: cannot be read ({exc.strerror})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = value_from_json(line)
            out.append((str(row["owner"]), str(row["commitment"]), str(row["salt"]), row["value"]))
        except (ValueError, KeyError, TypeError):
            raise UnusableInput(
                f"values file {path}, line {number}: expected {{owner, commitment, salt, value}}"
            ) from None
    return out


def write_file(path: Path, rows: Iterable[tuple[str, str, str, Any]]) -> int:
    """Write a values file (mode 0600: it holds personal data); returns the rows written."""
    count = 0
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    with path.open("w", encoding="utf-8") as out:
        for owner, commitment, salt, value in rows:
            line = canonical({"owner": owner, "commitment": commitment, "salt": salt, "value": value})
            out.write(line.decode("utf-8") + "\n")
            count += 1
    return count


def lookup_from(rows: Iterable[tuple[str, str, str, Any]]) -> Lookup:
    table = {}
    for _owner, commitment, salt, value in rows:
        try:
            table[commitment] = (bytes.fromhex(salt), value)
        except ValueError:
            table[commitment] = (b"", value)
    return table.get


def check(v: Verifier, rows: Iterable[ValueRow], raws: Iterable[bytes]) -> list[str]:
    """Check the values against what the verifier's ledger holds; return the report's notes. ``rows`` is
    read twice where they differ (a list, or :class:`store_rows`); ``raws``: the entries again (only read
    to name what differs)."""
    if not v.ring.rules.sealed_values:
        return []
    try:
        count = v.ledger.check_rows(rows)
    except value_ledger.ValueMismatch:
        raise _explain(rows, raws) from None
    return notes(v, count)


def notes(v: Verifier, count: int) -> list[str]:
    erased = len(v.ledger.erased_reviews)
    out = [f"{count} value(s) beside the log checked against their commitments"]
    if erased:
        out.append(f"{erased} review(s) with erased values: rules that need them were checked at write time")
    return out


def _explain(rows: Iterable[ValueRow], raws: Iterable[bytes]) -> VerificationFailed:
    held: list[tuple[str, str]] = []
    erased: list[tuple[str, str]] = []
    for raw in raws:
        item = parse_entry(raw)
        if item.kind == trust.ERASED:
            erased += value_ledger.erased_by(item.body)
        else:
            owner, found = value_ledger.held(item.kind, item.body)
            held += [(owner, c) for c in found]
    return value_ledger.first_difference(held, erased, [(o, c) for o, c, _s, _v in rows])


def entries_of(store: LogReader) -> Iterator[bytes]:
    for _seq, _hash, raw, _nodes, _cols in store.iter_rows(0, None):
        yield bytes(raw)
