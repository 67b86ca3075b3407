"""Operations routes (desk/routes/ops.py) and the structured request log (desk/reqlog.py)."""

from __future__ import annotations

import json
import logging

import pytest
from deskkit import Env
from fastapi.testclient import TestClient


@pytest.fixture
def env(sqlite_env: Env) -> Env:
    return sqlite_env


@pytest.fixture
def client(sclient: TestClient) -> TestClient:
    return sclient


def test_healthz(env: Env, client: TestClient) -> None:
    r = client.get("/healthz").json()
    assert r == {"ok": True, "log": env.desk.store.log_id, "size": env.desk.store.size()}


def test_metrics_count_pending_decisions_and_latency(env: Env, client: TestClient) -> None:
    a, b, c = (env.open()[0] for _ in range(3))
    env.open()
    client.post(f"/api/reviews/{a.id}/approve", json=env.approve_json(a), headers=env.bearer())
    patch = [{"op": "replace", "path": "/amount", "value": 1}]
    client.post(f"/api/reviews/{b.id}/edit", json=env.edit_json(b, patch), headers=env.bearer())
    client.post(f"/api/reviews/{c.id}/reject", json=env.reject_json(c, "no"), headers=env.bearer())
    r = client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = r.text.splitlines()
    samples = {name: float(value) for name, _, value in (x.rpartition(" ") for x in lines if not x.startswith("#"))}
    assert samples["signoff_pending_reviews"] == 1
    for kind in ("approved", "edited", "rejected"):
        assert samples[f'signoff_decisions_total{{kind="{kind}"}}'] == 1
    assert "# TYPE signoff_decision_latency_seconds histogram" in lines
    assert samples["signoff_decision_latency_seconds_count"] == 3
    assert samples['signoff_decision_latency_seconds_bucket{le="+Inf"}'] == 3
    assert samples["desk_http_request_duration_seconds_count"] >= 1


def test_request_log_is_one_json_object_per_line(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    from signoff.desk.app import create_app

    app = create_app(env.url, env.key, access_log=True)
    with caplog.at_level(logging.INFO, logger="desk.access"), TestClient(app) as c:
        c.get("/healthz")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "desk.access"]
    assert lines and lines[-1]["path"] == "/healthz" and lines[-1]["status"] == 200
    assert set(lines[-1]) >= {"ts", "method", "path", "status", "ms"}
    app.state.desk.store.close()
