"""Two desks and two resumers on one PostgreSQL, one of each killed with SIGKILL mid-run and restarted
(``tests/benchmarks/scale_bench.py``, at a size CI can afford): nothing lost, and nothing run twice except
across a kill, where the tool's idempotency key books it once.

Every frontier is resumed exactly once, every review has one ``tool.executed``, every transfer is booked
once, a tool runs again only where a killed process ran it without reaching ``tool.executed`` (the bank's
idempotency key absorbs that), every decision a desk answered 2xx is on the log, ``audit verify`` exits 0,
and the surviving desk's live queue (SSE) carried the decisions made through the other desk.
"""

from __future__ import annotations

import json
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
    print(json.dumps(found, indent=1), file=sys.stderr)  # shown in full when an assertion below fails
    assert found["failover_at_s"] is not None, "the failover never happened"
    assert found["opened"] == found["frontiers"] == REVIEWS
    assert found["frontiers_resumed_exactly_once"] == REVIEWS, found
    assert found["frontiers_resumed_more_than_once"] == 0, found
    assert found["reviews_with_one_tool_executed"] == REVIEWS, found
    assert found["transfers_booked_once"] == REVIEWS, found
    assert found["tools_never_ran"] == 0, found
    # kill -9 between a transfer and its tool.executed: the call runs again, and the bank's idempotency
    # key (bridge.idempotency_key) books it once. Nothing else may ever run a call twice: not a live
    # process, and not a call whose tool.executed the killed process had written.
    assert found["tools_run_again_otherwise"] == 0, found
    assert found["tools_ran_exactly_once"] + found["tools_run_again_after_a_kill"] == REVIEWS, found
    assert found["acknowledged_decisions_missing_from_log"] == 0, found
    assert found["audit_verify_exit"] == 0, found
    assert found["desk1_decisions"] > 0
    assert found["desk1_decisions_seen_live_on_desk0"] == found["desk1_decisions"], found
