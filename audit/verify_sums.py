"""The order-free part of ``audit verify``'s last look, summed in a worker while the sequential pass runs.

After the entries, verify compares the review and frontier projections with what the log implies, as
multiset sums of their rows' hashes (:mod:`signoff.audit.verify_projection`), and checks each value
beside a sealed log against its commitment, summing them the same way (:mod:`signoff.audit.value_ledger`).
Neither needs the log's order. On a single core they come after the pass (about 30% of a verify of a
sealed log); with ``jobs`` > 1 one worker reads and sums them in one snapshot of the store at the same
time as the pass (issue 24: all cores at least 1.6× one core).

The main process uses the sums only where they settle the question: the worker's snapshot held exactly
the entries the pass checked, and the sums are equal. Anything else (a write that landed meanwhile, a
row changed behind the log's back, a value that does not match) goes the single-core way, which reads
again in one snapshot and names the row. So a sum can make verify faster, never say "intact" where the
single-core way would not.
"""

from __future__ import annotations

from dataclasses import dataclass

from signoff.audit.errors import VerificationFailed

_VALUES = "SELECT owner, commitment, salt, value FROM signoff_value WHERE log = :log"


@dataclass(frozen=True)
class Sums:
    """What one snapshot of the store holds, summed."""

    size: int  # the log's entries in the snapshot
    reviews: int  # the review rows' multiset sum (verify_projection.row_tuple)
    frontiers: int  # the frontier rows' multiset sum
    values: int | None  # the value rows' multiset sum; None: one did not match its commitment
    value_rows: int


def read(url: str, log: str, sealed: bool) -> Sums:
    """In a worker process: open the store at ``url`` and sum ``log``'s projection (and, ``sealed``, its
    values) in one read transaction."""
    from sqlalchemy import text  # (here: verifying an export file imports no database code)

    from signoff.audit import value_ledger, verify_projection
    from signoff.audit.sealing import value_from_json
    from signoff.audit.store import open_store

    store = open_store(url, create=False, log=log)
    try:
        with store.snapshot() as conn:
            size = verify_projection.entries_in(conn, log)
            reviews, frontiers = verify_projection.found_sums(conn, log)
            values: int | None = 0
            count = 0
            if sealed:
                rows = conn.execution_options(yield_per=2000).execute(text(_VALUES), {"log": log})
                try:
                    values, count = value_ledger.row_sum(
                        (str(r.owner), str(r.commitment), str(r.salt), value_from_json(r.value)) for r in rows
                    )
                except (VerificationFailed, ValueError):  # named by the single-core way
                    values = None
        return Sums(size, reviews, frontiers, values, count)
    finally:
        store.close()
