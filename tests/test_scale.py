"""Two desks and two resumers on one PostgreSQL, one of each killed with SIGKILL mid-run and restarted
(``tests/benchmarks/scale_bench.py``, at a size CI can afford): nothing lost, nothing run twice.

Every frontier is resumed exactly once, every tool runs exactly once, every decision a desk answered
2xx is on the log, ``audit verify`` exits 0, and the surviving desk's live queue (SSE) carried the
decisions made through the other desk.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))

from scale_bench import Phase  # noqa: E402

REVIEWS = 60


@pytest.mark.slow
@pytest.mark.postgres
def test_two_desks_two_resumers_with_failover(pg_server: str, tmp_path: Path) -> None:
    phase = Phase(pg_server, tmp_path, REVIEWS, failover=True)
    try:
        found = phase.run()
    finally:
        phase.close()
    assert found["failover_at_s"] is not None, "the failover never happened"
    assert found["opened"] == found["frontiers"] == REVIEWS
    assert found["frontiers_resumed_exactly_once"] == REVIEWS, found
    assert found["frontiers_resumed_more_than_once"] == 0, found
    assert found["tool_runs"] == found["tools_ran_exactly_once"] == REVIEWS, found
    assert found["acknowledged_decisions_missing_from_log"] == 0, found
    assert found["audit_verify_exit"] == 0, found
    assert found["desk1_decisions"] > 0
    assert found["desk1_decisions_seen_live_on_desk0"] == found["desk1_decisions"], found
