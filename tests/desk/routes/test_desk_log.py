"""The log page (desk/routes/log.py): badge, checkpoint signing and the downloads that
`audit verify` reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from deskkit import Env, sign_in
from fastapi.testclient import TestClient


@pytest.fixture
def env(sqlite_env: Env) -> Env:
    return sqlite_env


@pytest.fixture
def client(sclient: TestClient) -> TestClient:
    return sclient


def test_log_page_badge_checkpoint_and_downloads(env: Env, client: TestClient, tmp_path: Path) -> None:
    rev = env.open()[0]
    csrf = sign_in(client)
    html = client.get("/log").text
    assert "verified up to seq" in html and "No signed checkpoint yet" in html
    assert client.get("/log/checkpoint.json").status_code == 404
    size = env.desk.store.size()
    assert client.post("/log/checkpoint", data={"csrf": csrf}).status_code == 200
    cp = client.get("/log/checkpoint.json")
    assert cp.headers["content-disposition"].startswith("attachment") and cp.json()["size"] == size
    assert env.desk.store.size() == size + 1  # the log records its checkpoint (log.checkpoint)
    proof = client.get("/log/proof/0.json").json()
    assert proof["checkpoint"]["root"] == proof["root"] == cp.json()["root"]
    # The downloads are what the audit CLI reads: prove the live log extends the checkpoint.
    from signoff.audit.cli import main as audit_main

    kept = tmp_path / "checkpoint.json"
    kept.write_bytes(cp.content)
    env.open()
    assert audit_main(["--store", env.url, "verify", "--against", str(kept)]) == 0
    assert audit_main(["--store", env.url, "verify", "--against", str(kept), "--incremental"]) == 0
    assert audit_main(["--store", env.url, "consistency", str(kept)]) == 0
    assert client.get("/log/proof/999.json").status_code == 404
    html = client.get(f"/log?review={rev.id}").text
    assert "review.opened" in html and f"/reviews/{rev.id}" in html
    html = client.get("/log?kind=reviewer.enrolled").text
    assert "review.opened</span>" not in html and "reviewer.enrolled" in html
