"""The examples run as a user runs them: a real interpreter, an empty directory, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_edit_runs_with_what_the_person_signed(tmp_path: Path) -> None:
    """CHAP's quick start with Signoff: transfer(amount=100, to="Alice") is edited to 50 by a person,
    the tool runs once with 50, and `audit verify` exits 0 (the script stops on any failing step)."""
    env = {**os.environ, "QUICKSTART_DIR": str(tmp_path / "qs")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("paused: transfer({'amount': 100, 'to': 'Alice'})") for line in lines)
    assert [line.strip() for line in lines if "TRANSFER RUNNING" in line] == [">>> TRANSFER RUNNING: 50 to Alice"]
    verdict = next(line for line in lines if line.startswith("ok: log log_"))  # then verify's notes
    assert "intact" in verdict and lines.index(verdict) >= len(lines) - 3
    # Run again in the same directory: a new run pauses on the existing log; nothing is run twice.
    again = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert [line.strip() for line in again.stdout.splitlines() if "TRANSFER RUNNING" in line] == [
        ">>> TRANSFER RUNNING: 50 to Alice"
    ]
