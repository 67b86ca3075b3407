"""Stores made by signoff 0.1.0 (commit e1fe489, the last release): built by that release's own code
in a subprocess, then opened, migrated and verified by this one, on SQLite and PostgreSQL.

Needs the repository's git history (a clone has it); without it the test skips, except under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest
from auditkit import Db

from signoff.audit import ReviewService, open_store
from signoff.audit.cli import main as audit_main
from signoff.audit.schema_version import VERSION_TABLE, head
from signoff.audit.verify import verify_store

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "e1fe489"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "legacy_log.py"


@pytest.fixture(scope="session")
def release_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    done = subprocess.run(["git", "-C", str(ROOT), "archive", RELEASE], capture_output=True, timeout=120)
    if done.returncode != 0:
        reason = f"git archive {RELEASE} failed: {done.stderr.decode(errors='replace').strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}")
        pytest.skip(reason)
    tree = tmp_path_factory.mktemp("release")
    with tarfile.open(fileobj=BytesIO(done.stdout)) as archive:
        archive.extractall(tree, filter="data")
    return tree


def _build_with_release(tree: Path, url: str, key: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(FIXTURE), url, str(key)], capture_output=True, text=True, env=env, cwd=tree, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _entries(url: str) -> list[tuple[int, str, bytes]]:
    with Db(url) as db:
        return db.entries()


def test_a_release_store_opens_migrates_and_verifies(
    release_tree: Path, store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _build_with_release(release_tree, store_url, tmp_path / "log.key")
    entries_before = _entries(store_url)

    # This code refuses the 0.1.0 store until it is migrated, and says how; nothing is written ...
    with pytest.raises(Exception, match="audit --store .* migrate"):
        open_store(store_url, create=False)
    assert audit_main(["--store", store_url, "verify"]) == 2
    assert "migrate" in capsys.readouterr().err
    with Db(store_url) as db:
        assert not db.has_table(VERSION_TABLE)

    # ... `audit migrate` stamps its baseline and upgrades it without touching a single entry ...
    assert audit_main(["--store", store_url, "migrate", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"before": "0001", "after": head()}
    with Db(store_url) as db:
        assert db.has_table(VERSION_TABLE)
        assert "ix_signoff_review_decided" in db.indexes("signoff_review")
        assert "ix_signoff_entry_kind" in db.indexes("signoff_entry")  # revision 0005
        assert "ix_signoff_review_decided_at" in db.indexes("signoff_review")  # revision 0006
    assert _entries(store_url) == entries_before

    # ... and then reads it as it was, under its old rules.
    store = open_store(store_url, create=False)
    assert store.rules.version == 1  # the old rules: the service enrolled, decisions unsigned
    report = verify_store(store)
    assert report.ok, report.to_json()
    svc = ReviewService(store)
    for old in before["reviews"]:  # type: ignore[attr-defined]
        now = svc.get(old["id"])
        assert {
            "id": now.id, "status": now.status, "args": now.call.args, "final_args": now.final_args,
            "patch": now.patch, "decided_by": now.decided_by, "decision_seq": now.decision_seq,
            "rationale": now.rationale, "reason": now.reason, "executed": now.executed, "resumed": now.resumed,
            "frontier": now.frontier, "opened_seq": now.opened_seq,
        } == old  # fmt: skip
    store.close()
    assert audit_main(["--store", store_url, "verify"]) == 0
    assert audit_main(["--store", store_url, "migrate"]) == 0  # again: nothing to do
    assert "already at" in capsys.readouterr().out


def test_a_store_newer_than_this_code_is_refused(store_url: str, tmp_path: Path) -> None:
    store = open_store(store_url)
    store.init_log(tmp_path / "log.key")
    store.close()
    with Db(store_url) as db:
        db.run((f"UPDATE {VERSION_TABLE} SET version_num = ?", ["9999"]))
    with pytest.raises(Exception, match="newer Signoff"):
        open_store(store_url, create=False)
    assert audit_main(["--store", store_url, "log"]) == 2


def test_an_older_store_is_refused_with_the_command_that_upgrades_it(store_url: str, tmp_path: Path) -> None:
    """A store stamped at a revision this code knows but has moved past says how to upgrade it."""
    if head() == "0001":
        pytest.skip("no schema revision after the baseline yet: nothing is older than the head")
    store = open_store(store_url)
    store.init_log(tmp_path / "log.key")
    store.close()
    with Db(store_url) as db:
        db.run((f"UPDATE {VERSION_TABLE} SET version_num = ?", ["0001"]))
    with pytest.raises(Exception, match="audit --store .* migrate"):
        open_store(store_url, create=False)
