"""OpenTelemetry (issue 23 §2): each outcome on ADK's execute_tool span, a span per review in the agent's
trace, the metrics, and one export over OTLP/HTTP to a receiver on 127.0.0.1.

The runs happen in ``_otel_run.py``, a process of its own with the SDK recording (real google-adk, a
scripted model, a SQLite log); this file checks what it recorded against the log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from _support import Harness, single_agent, transfer_script

from signoff import bridge
from signoff.audit import Review, open_store

RUN = Path(__file__).with_name("_otel_run.py")
SCENARIOS = ["approve", "edit", "reject", "expire", "withdraw", "auto", "delegate", "cancel", "tamper", "pending"]
OUTCOME = {
    "approve": "approved",
    "edit": "edited",
    "reject": "rejected",
    "expire": "expired",
    "withdraw": "withdrawn",
    "delegate": "approved",
    "cancel": "withdrawn",
}
RESOLUTION = {"approved": "approved", "edited": "approved", "rejected": "refused", "expired": "expired"}
RESOLUTION["withdrawn"] = "cancelled"


def _run(workdir: Path, mode: str, *scenarios: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(RUN), str(workdir), mode, *scenarios], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Review], int]:
    workdir = tmp_path_factory.mktemp("otel")
    out = _run(workdir, "memory", *SCENARIOS)
    store = open_store(f"sqlite:///{workdir / 'signoff.db'}", create=False)
    try:
        from signoff.audit import ReviewService

        reviews = ReviewService(store)
        on_log = {name: reviews.get(review_id) for name, review_id in out["reviews"].items()}
        return out, on_log, store.size()
    finally:
        store.close()


def _ns(review: Review, field: str) -> int:
    when = getattr(review, field)
    return int(when.timestamp() * 1_000_000_000)


def _waited(review: Review) -> float:
    assert review.decided_at is not None
    return (review.decided_at - review.opened_at).total_seconds()


def _tool_span(out: dict[str, Any], review_id: str) -> list[dict[str, Any]]:
    return [
        s
        for s in out["spans"]
        if s["name"] == "execute_tool transfer" and s["attributes"].get("signoff.review.id") == review_id
    ]


def _review_span(out: dict[str, Any], review_id: str) -> list[dict[str, Any]]:
    return [
        s for s in out["spans"] if s["name"] == "review transfer" and s["attributes"]["signoff.review.id"] == review_id
    ]


@pytest.mark.parametrize("name", ["approve", "edit", "reject", "expire", "withdraw", "delegate"])
def test_each_outcome_is_on_adks_execute_tool_span(
    recorded: tuple[dict[str, Any], dict[str, Review], int], name: str
) -> None:
    out, on_log, _size = recorded
    review = on_log[name]
    [span] = _tool_span(out, review.id)  # the call that ran, or was stopped: ADK's own span says which review
    attrs = span["attributes"]
    assert attrs["signoff.review.outcome"] == OUTCOME[name] == review.status
    assert attrs["signoff.review.decided_by"] == review.decided_by
    assert attrs["signoff.review.decision_seq"] == review.decision_seq
    assert attrs["signoff.review.args_edited"] is (name == "edit")
    assert attrs["signoff.review.wait"] == _waited(review)
    assert attrs["signoff.review.wait"] >= 0.05  # the scenario waited 50 ms before deciding
    assert attrs["signoff.log.id"].startswith("log_")
    assert attrs.get("signoff.review.acting_for") == ("human:alice@example.org" if name == "delegate" else None)
    assert attrs["gen_ai.tool.name"] == "transfer"  # ADK's own attributes stay
    [resumed] = span["events"]
    assert resumed["name"] == "gen_ai.agent.resumed"
    assert resumed["attributes"] == {
        "gen_ai.agent.resumed_from.type": "pause",
        "gen_ai.agent.resumed_from.id": review.call.confirmation_id,
    }


def test_who_decided_is_the_delegate_acting_for_the_person(
    recorded: tuple[dict[str, Any], dict[str, Review], int],
) -> None:
    out, on_log, _size = recorded
    [span] = _tool_span(out, on_log["delegate"].id)
    assert span["attributes"]["signoff.review.decided_by"] == "human:bob@example.org"
    assert span["attributes"]["signoff.review.acting_for"] == "human:alice@example.org"


@pytest.mark.parametrize("name", ["approve", "edit", "reject", "expire", "withdraw", "delegate", "cancel"])
def test_a_span_covers_each_review_in_the_agents_trace(
    recorded: tuple[dict[str, Any], dict[str, Review], int], name: str
) -> None:
    out, on_log, _size = recorded
    review = on_log[name]
    [span] = _review_span(out, review.id)
    # From the opening to the decision, as the log's own times say.
    assert span["start"] == pytest.approx(_ns(review, "opened_at"), abs=1_000)
    assert span["end"] == pytest.approx(_ns(review, "decided_at"), abs=1_000)
    # In the trace of the run that paused: its parent is a span of that run, whose execute_tool paused.
    by_id = {s["id"]: s for s in out["spans"]}
    parent = by_id[span["parent"]]
    assert parent["trace"] == span["trace"]
    pausing = [s for s in out["spans"] if s["trace"] == span["trace"] and s["name"] == "execute_tool transfer"]
    assert len(pausing) == 1 and "signoff.review.id" not in pausing[0]["attributes"]
    attrs = span["attributes"]
    assert attrs["gen_ai.agent.pause.id"] == review.call.confirmation_id
    assert attrs["gen_ai.agent.pause.reason"] == "human_input"
    assert attrs["gen_ai.agent.pause.resolution"] == RESOLUTION[review.status]
    assert attrs["gen_ai.agent.execution.id"] == review.call.invocation
    assert attrs["gen_ai.conversation.id"] == review.call.session
    assert attrs["gen_ai.tool.call.id"] == review.call.call_id == "call-transfer"
    assert attrs["signoff.review.outcome"] == review.status
    paused, resolved = span["events"]
    assert (paused["name"], paused["at"]) == ("gen_ai.agent.paused", span["start"])
    assert (resolved["name"], resolved["at"]) == ("gen_ai.agent.pause.resolved", span["end"])
    assert resolved["attributes"]["gen_ai.agent.pause.resolution"] == RESOLUTION[review.status]
    if name == "cancel":  # the run is gone: no call is resumed, so the span links to none
        assert span["links"] == [] and _tool_span(out, review.id) == []
        assert review.reason == "cancelled: the run's task was cancelled while it paused"
    else:  # linked to the execute_tool span where the outcome reached the call (the resumed run's trace)
        [tool_span] = _tool_span(out, review.id)
        assert span["links"] == [tool_span["id"]] and tool_span["trace"] != span["trace"]


def test_a_call_a_policy_let_through_says_which_policy(
    recorded: tuple[dict[str, Any], dict[str, Review], int],
) -> None:
    out, on_log, _size = recorded
    review = on_log["auto"]
    [span] = _tool_span(out, review.id)
    attrs = span["attributes"]
    assert attrs["signoff.review.outcome"] == "auto_approved"
    assert attrs["signoff.review.decided_by"] == "policy:small"
    assert attrs["signoff.policy.seq"] == review.policy.seq
    assert attrs["signoff.review.decision_seq"] == review.decision_seq
    assert attrs["signoff.review.wait"] == 0.0 and span["events"] == []  # it never paused
    assert _review_span(out, review.id) == []


def test_a_decision_changed_behind_the_services_back_runs_nothing_and_the_span_says_why(
    recorded: tuple[dict[str, Any], dict[str, Review], int],
) -> None:
    out, on_log, _size = recorded
    review = on_log["tamper"]
    [span] = _tool_span(out, review.id)
    attrs = span["attributes"]
    assert attrs["signoff.review.not_run"] == "not_proven"
    assert f"seq {review.decision_seq}: expected its stored hash" in attrs["signoff.review.problem"]
    assert "signoff.review.outcome" not in attrs  # nothing the log proves: no outcome is claimed
    assert not review.executed and _review_span(out, review.id) == []


def test_the_metrics(recorded: tuple[dict[str, Any], dict[str, Review], int]) -> None:
    out, on_log, size = recorded
    got = out["metrics"]
    decisions = {p["attributes"]["signoff.review.outcome"]: p["value"] for p in got["signoff.review.decisions"]}
    assert decisions == {"approved": 2, "edited": 1, "rejected": 1, "expired": 1, "withdrawn": 2, "auto_approved": 1}
    durations = {p["attributes"]["signoff.review.outcome"]: p for p in got["signoff.review.duration"]}
    assert {k: p["count"] for k, p in durations.items()} == {
        "approved": 2,
        "edited": 1,
        "rejected": 1,
        "expired": 1,
        "withdrawn": 2,
    }
    waits: dict[str, float] = {}
    for name, review in on_log.items():
        if name in OUTCOME:  # the tampered approval never reached its call as a decision: not counted
            waits[review.status] = (
                waits.get(review.status, 0.0) + (review.decided_at - review.opened_at).total_seconds()
            )
    assert {k: p["sum"] for k, p in durations.items()} == pytest.approx(waits)
    assert durations["expired"]["sum"] >= 0.3  # its deadline was 0.3 s
    [pending] = got["signoff.review.pending"]
    assert pending["value"] == 1 and pending["attributes"]["gen_ai.tool.name"] == "transfer"
    assert on_log["pending"].status == "rejected"  # decided between the two collections
    [after] = out["metrics_after"]["signoff.review.pending"]  # collected again once it was decided
    assert (after["value"], after["attributes"]) == (0, pending["attributes"])
    [before] = got["signoff.log.unwitnessed"]
    [unwitnessed] = out["metrics_after"]["signoff.log.unwitnessed"]
    assert before["value"] == size - 1  # the rejection in between is one more entry
    assert unwitnessed["value"] == size  # no witness is named on this log: no entry is vouched for


@pytest.mark.asyncio
async def test_without_an_sdk_nothing_is_stamped(sqlite_url: str, tmp_path: Path) -> None:
    """This process has no SDK (the API alone): a pause carries no traceparent, and the run is as before."""
    from opentelemetry import trace

    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    signoff = bridge.Signoff(sqlite_url)
    try:
        h = Harness(signoff, single_agent(transfer_script()), tmp_path)
        await h.start()
        stamped = [(e.custom_metadata or {}).get("signoff") for e in await h.session_events()]
        [meta] = [m for m in stamped if m]
        assert set(meta) == {"frontier", "reviews", "state"}
    finally:
        signoff.close()


# -- OTLP/HTTP ---------------------------------------------------------------------------------------


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).got.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    _Receiver.got = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.got
    finally:
        server.shutdown()


def test_one_export_over_otlp_http(receiver: tuple[str, list[tuple[str, bytes]]], tmp_path: Path) -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    url, got = receiver
    out = _run(tmp_path, f"otlp:{url}", "reject")
    review_id = out["reviews"]["reject"]
    spans = []
    for path, body in got:
        if path == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            spans += [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    attrs = {s.name: {a.key: a.value for a in s.attributes} for s in spans if s.name == "review transfer"}
    review = attrs["review transfer"]
    assert review["signoff.review.id"].string_value == review_id
    assert review["gen_ai.agent.pause.resolution"].string_value == "refused"
    stopped = [
        {a.key: a.value for a in s.attributes}
        for s in spans
        if s.name == "execute_tool transfer" and any(a.key == "signoff.review.id" for a in s.attributes)
    ]
    assert [a["signoff.review.outcome"].string_value for a in stopped] == ["rejected"]
    names = set()
    for path, body in got:
        if path == "/v1/metrics":
            request = ExportMetricsServiceRequest.FromString(body)
            names |= {m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"signoff.review.decisions", "signoff.review.duration", "signoff.log.unwitnessed"} <= names
