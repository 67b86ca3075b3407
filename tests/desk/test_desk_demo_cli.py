"""``desk demo`` and ``make demo`` (issue 19, items 7 and 8): the port is checked before the banner (a
busy default moves to the next free port and says so; a busy ``--port`` is refused), ``make demo PORT=…``
passes the port on, and a clean stop removes the temp dir the demo made (``--dir`` keeps its own)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from browserkit import free_port, wait_until

import signoff.desk.demo as demo
from signoff.desk.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


def test_a_busy_port_is_refused_before_the_banner(busy_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--port", str(busy_port)]) == 2
    out, err = capsys.readouterr()
    assert "Signoff demo" not in out and out == ""
    assert err.startswith(f"error: --port: expected a free port on 127.0.0.1, found {busy_port} in use") and (
        err.count("\n") == 1
    ), err


def test_a_busy_default_port_moves_to_the_next_free_one(busy_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "DEFAULT_PORT", busy_port)
    port, note = demo.choose_port("127.0.0.1", None)
    assert port > busy_port and note == (
        f"port {busy_port} is in use on 127.0.0.1: serving on {port} instead (--port picks one)"
    )
    assert demo.choose_port("127.0.0.1", port) == (port, None)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_passes_port_on() -> None:
    # under `make test` this make is a sub-make: without MAKELEVEL/MAKEFLAGS it prints no
    # "Leaving directory" line after the command, and inherits no flags from the outer make
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}

    def command(*extra: str) -> str:
        done = subprocess.run(
            ["make", "--no-print-directory", "-n", "demo", *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    assert command("PORT=8099").endswith("desk demo --port 8099")
    assert command().endswith("desk demo")


def _run_in_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, serve: Any, directory: Path | None = None, default: int = 0
) -> tuple[list[tuple[str, int]], Any]:
    """``run_demo`` with uvicorn replaced by ``serve`` (which returns, as after Ctrl-C, or raises)."""
    import uvicorn

    served: list[tuple[str, int]] = []

    def fake_run(app: Any, *, host: str, port: int, **_: Any) -> None:
        served.append((host, port))
        serve()

    monkeypatch.setattr(uvicorn, "run", fake_run)
    monkeypatch.setattr(demo.tempfile, "tempdir", str(tmp_path))
    if default:
        monkeypatch.setattr(demo, "DEFAULT_PORT", default)
    try:
        result: Any = demo.run_demo(directory, host="127.0.0.1", port=None, interval=0, max_open=1, quiet=True,
                                    sessions="memory")  # fmt: skip
    except BaseException as exc:  # noqa: BLE001 - what the demo let through is what the test checks
        result = exc
    return served, result


def test_a_clean_stop_removes_the_temp_dir_and_says_which_port(
    tmp_path: Path, busy_port: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served, result = _run_in_process(monkeypatch, tmp_path, lambda: None, default=busy_port)
    out = capsys.readouterr().out
    assert result == 0 and served and served[0][1] > busy_port
    banner = out.splitlines()
    assert banner[0] == "Signoff demo" and banner[1] == (
        f"  note      port {busy_port} is in use on 127.0.0.1: serving on {served[0][1]} instead (--port picks one)"
    )
    assert f"http://localhost:{served[0][1]}/" in banner[2]
    assert "removed when the demo stops" in out and "removed the demo's temp dir" in out
    assert not list(tmp_path.glob("signoff-demo-*")), "the temp dir was left behind"


def test_ctrl_c_removes_the_temp_dir_a_crash_and_dir_keep_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt  # uvicorn, after a graceful shutdown on SIGINT, raises it again

    def crashed() -> None:
        raise RuntimeError("boom")

    _served, result = _run_in_process(monkeypatch, tmp_path, interrupted)
    assert isinstance(result, KeyboardInterrupt) and not list(tmp_path.glob("signoff-demo-*"))
    _served, result = _run_in_process(monkeypatch, tmp_path, crashed)
    assert isinstance(result, RuntimeError) and len(list(tmp_path.glob("signoff-demo-*"))) == 1  # kept, to look at
    kept = tmp_path / "mine"
    _served, result = _run_in_process(monkeypatch, tmp_path, lambda: None, directory=kept)
    assert result == 0 and (kept / "signoff.db").exists()
    assert "removed" not in capsys.readouterr().out.split("Signoff demo")[-1]


def test_sigterm_stops_the_real_demo_and_removes_its_temp_dir(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "desk", "demo", "--port", str(port), "--interval", "0", "--sessions", "memory"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    def up() -> bool:
        assert proc.poll() is None, proc.stdout.read().decode()  # type: ignore[union-attr]
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, 60, "desk demo to start")
        assert len(list(tmp_path.glob("signoff-demo-*"))) == 1
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert b"removed the demo's temp dir" in out, out.decode()
    assert not list(tmp_path.glob("signoff-demo-*")), out.decode()
