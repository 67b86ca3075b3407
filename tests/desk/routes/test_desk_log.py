"""The log page (desk/routes/log.py): badge, checkpoint signing and the downloads that
`audit verify` reads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from deskkit import ROOT, Env, sign_in
from fastapi.testclient import TestClient

from signoff.audit import witnessing
from signoff.audit.c2sp import log_vkey
from signoff.audit.keys import read_private_key
from signoff.audit.publisher import Publisher


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


# -- the witnesses' badge (issue 18) ---------------------------------------------------------------


class _Witness:
    """A real witness process (``python -m signoff.audit.cli_witness serve``) on 127.0.0.1 for this log."""

    def __init__(self, directory: Path, name: str, vkey_of_log: str) -> None:
        key = directory / "witness.pem"
        run = [sys.executable, "-m", "signoff.audit.cli_witness"]
        subprocess.run([*run, "keygen", "--name", name, "--out", str(key)], check=True, capture_output=True, cwd=ROOT)
        self.vkey = Path(f"{key}.vkey").read_text().strip()
        argv = [*run, "serve", "--key", str(key), "--port", "0", "--store", str(directory / "witness.db")]
        self.proc = subprocess.Popen([*argv, "--log", vkey_of_log, "--quiet"], cwd=ROOT, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        found = re.search(r"listening on (http://\S+)", self.proc.stdout.readline().decode())
        assert found, "the witness did not start"
        self.url = found.group(1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _badge(client: TestClient) -> str:
    found = re.search(r'id="witness-badge"[^>]*>([^<]*)<', client.get("/log").text)
    assert found, "no witness badge on the log page"
    return found.group(1).strip()


def test_the_witness_badge_says_how_far_the_logs_witnesses_cosigned(
    env: Env, client: TestClient, tmp_path: Path
) -> None:
    store = env.desk.store
    sign_in(client)
    assert _badge(client) == "not witnessed: no witnesses named on this log"
    witness = _Witness(tmp_path, "witness.example.org/w1", log_vkey(store.rules.origin, store.public_key))
    publisher = Publisher(store, read_private_key(env.key))
    try:
        witnessing.add_witness(store, witness.url, witness.vkey, admin=env.admin)
        witnessing.set_quorum(store, 1, admin=env.admin)
        env.open()
        assert _badge(client) == f"not witnessed ({store.size()} entries not yet cosigned)"
        assert [p.outcome for p in publisher.publish_once().pushed] == ["cosigned"]
        env.open()
        covered = witnessing.coverage(store).covered
        assert covered is not None and covered < store.size()
        behind = store.size() - covered
        assert _badge(client) == f"witnessed up to seq {covered - 1} ({behind} entries not yet cosigned)"
        page = client.get("/log").text
        assert f"witness.example.org/w1</span> cosigned up to seq {covered - 1}" in page
        assert "badge warn" in page.split('id="witness-badge"', 1)[0].rsplit("<span", 1)[1]
    finally:
        publisher.close()
        witness.stop()
