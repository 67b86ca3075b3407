"""The ``desk`` command (desk/cli.py): reviewers on the log, API tokens, and ``serve``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from signoff.audit import ReviewService, open_store
from signoff.desk.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'signoff.db'}"
    s = open_store(url)
    s.init_log(tmp_path / "log.key")
    s.close()
    return url


def test_reviewer_add_list_token_disable(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "reviewer",
                "add",
                "Dana@Example.org",
                "--role",
                "finance",
                "--tools",
                "transfer_*",
                "refund",
                "--store",
                store,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "enrolled human:dana@example.org" in out
    password = re.search(r"initial password.*: (\S+)", out).group(1)  # type: ignore[union-attr]
    assert len(password) >= 12

    s = open_store(store)
    info = ReviewService(s).reviewer("human:dana@example.org")
    assert info is not None and info.roles == ("finance",) and info.tools == ("transfer_*", "refund")
    entry = next(s.entries(kind="reviewer.enrolled"))
    assert entry.body["reviewer"] == "human:dana@example.org" and "password" not in entry.raw.decode()
    s.close()

    assert main(["reviewer", "list", "--store", store]) == 0
    assert "human:dana@example.org\tenabled\troles=finance\ttools=transfer_*,refund" in capsys.readouterr().out

    assert main(["reviewer", "token", "dana@example.org", "--store", store]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("sot_")

    assert main(["reviewer", "disable", "dana@example.org", "--reason", "left", "--store", store]) == 0
    assert "disabled human:dana@example.org" in capsys.readouterr().out
    assert main(["reviewer", "list", "--store", store]) == 0
    assert "disabled" in capsys.readouterr().out

    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine

    s = open_store(store)
    assert Accounts(make_engine(store), s.log_id).token(token) is None  # revoked with the reviewer
    s.close()


def test_reviewer_add_refuses_without_role(store: str) -> None:
    with pytest.raises(SystemExit):
        main(["reviewer", "add", "x@example.org", "--store", store])


def test_unknown_reviewer_token_fails(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reviewer", "token", "ghost@example.org", "--store", store]) == 1
    assert "not enrolled" in capsys.readouterr().err


def test_serve_on_a_store_without_a_log_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--store", f"sqlite:///{tmp_path / 'empty.db'}", "--quiet"]) == 1
    assert "desk:" in capsys.readouterr().err


def test_serve_starts_fast_and_binds_localhost(store: str) -> None:
    with socket_port() as port:
        pass
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "desk", "serve", "--store", store, "--port", str(port), "--quiet"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.2).status_code == 200:
                    break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
                assert time.monotonic() - start < 15
                time.sleep(0.02)
        took = time.monotonic() - start
        # The < 2 s start-up target is measured by tests/benchmarks/desk_bench.py, not here.
        print(f"desk serve answered /healthz after {took:.2f}s (load average {os.getloadavg()[0]:.1f})")
        listening = {
            line.split()[1]
            for name in ("/proc/net/tcp", "/proc/net/tcp6")
            for line in Path(name).read_text().splitlines()[1:]
            if line.split()[3] == "0A"  # LISTEN
        }
        ours = {addr for addr in listening if addr.endswith(f":{port:04X}")}
        assert ours == {f"0100007F:{port:04X}"}, f"expected to listen on 127.0.0.1 only, found {ours}"
    finally:
        proc.terminate()
        proc.wait(10)


class socket_port:
    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None
