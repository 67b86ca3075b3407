"""Crashes: a writer is killed with SIGKILL at a random moment, again and again (52 runs in
all: SQLite and PostgreSQL, single appends, group commits and review operations). After every
kill the log verifies and every write the writer had acknowledged is there, unchanged, and no
group commit is there in part.

Each run forks a fresh writer from a server process that has already imported ``audit``
(tests/audit/fixtures/crash_writer.py), so a run costs its ~0.1-0.4 s of writing rather than
an interpreter start-up. The writer prints each acknowledged write to its stdout (a FIFO
here) with a flush, after the call that made it returned.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from auditkit import ADMIN, ALICE, FIXTURES, Db, Keys, python_env

from signoff.audit import ReviewService, Store
from signoff.audit.verify import verify_store

RUNS = {"sqlite": 9, "postgresql": 4}  # per mode; 4 modes -> 36 + 16 = 52 runs
MODES = ["single", "batch", "service", "mixed"]


class Zygote:
    def __init__(self, tmp: Path) -> None:
        self.errors = tmp / "crash-writer.stderr"
        self.proc = subprocess.Popen(
            [sys.executable, str(FIXTURES / "crash_writer.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors.open("w"),
            text=True,
            env=python_env(),
        )
        assert self._read() == "ready"

    def _read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"crash writer died: {self.errors.read_text()}")
        return line.strip()

    def run(
        self,
        url: str,
        fifo: Path,
        mode: str,
        seed: int,
        delay: float,
        keys: dict[str, str],
        *,
        after_first: bool = False,
    ) -> tuple[list[str], dict[str, Any]]:
        """Fork a writer, let it write for ``delay`` seconds after it is ready (``after_first``: after
        its first acknowledged write, so that a slow first write on a loaded machine still leaves
        the run something to check), SIGKILL it. ``keys``: the paths of the admin's and the
        reviewer's key files (``admin_key``, ``reviewer_key``)."""
        os.mkfifo(fifo)
        assert self.proc.stdin is not None
        command = {"url": url, "fifo": str(fifo), "mode": mode, "seed": seed, **keys}
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self._read())["pid"]
        lines: list[str] = []
        ready = threading.Event()
        first = threading.Event()

        def read() -> None:
            with open(fifo, "rb") as stream:  # noqa: PTH123
                for raw in stream:
                    text = raw.decode().strip()
                    if text == "ready":
                        ready.set()
                    else:
                        lines.append(text)
                        first.set()
            ready.set()
            first.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert ready.wait(30), "the writer never got ready"
        if after_first:
            assert first.wait(30), "the writer acknowledged nothing in 30 s"
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        status = json.loads(self._read())
        reader.join(10)
        assert not reader.is_alive()
        return list(lines), status

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    server = Zygote(tmp_path_factory.mktemp("zygote"))
    yield server
    server.close()


def _check_acknowledged(store_url: str, lines: list[str]) -> int:
    with Db(store_url) as db:
        stored = {seq: (digest, raw) for seq, digest, raw in db.entries()}
    batches: dict[str, int] = {}
    for line in lines:
        kind, *rest = line.split()
        if kind == "A":
            seq, digest = int(rest[0]), rest[1]
            assert seq in stored, f"acknowledged seq {seq} is missing"
            assert stored[seq][0] == digest, f"acknowledged seq {seq} changed"
        elif kind == "R":
            seq, entry_kind, review = int(rest[0]), rest[1], rest[2]
            assert seq in stored, f"acknowledged {entry_kind} at seq {seq} is missing"
            data = json.loads(stored[seq][1])
            assert (data["kind"], data["body"]["review"]) == (entry_kind, review), seq
        elif kind == "B":
            batches[rest[0]] = int(rest[1])
        else:
            raise AssertionError(f"unexpected line from the writer: {line!r}")
    # group commits are all or nothing, acknowledged or not
    seen: dict[str, list[int]] = {}
    for _seq, (_digest, raw) in stored.items():
        body = json.loads(raw)["body"]
        if "batch" in body:
            seen.setdefault(body["batch"], []).append(body["of"])
    for batch, sizes in seen.items():
        assert len(sizes) == sizes[0], f"group commit {batch} is there in part: {len(sizes)} of {sizes[0]}"
    for batch, size in batches.items():
        assert len(seen.get(batch, [])) == size
    return len(lines)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_sigkill_at_random_moments(
    zygote: Zygote, store: Store, store_url: str, keys: Keys, tmp_path: Path, mode: str
) -> None:
    ReviewService(store).enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=keys.alice.public, admin=keys.admin)
    key_files = {
        "admin_key": str(keys.write(ADMIN, tmp_path / "admin.pem")),
        "reviewer_key": str(keys.write(ALICE, tmp_path / "alice.pem")),
    }
    backend = "sqlite" if store_url.startswith("sqlite") else "postgresql"
    rng = random.Random(f"{backend}-{mode}")
    acknowledged = 0
    for run in range(RUNS[backend]):
        delay = rng.uniform(0.0, 0.35)
        # odd runs count the delay from the first acknowledged write: even on a loaded machine,
        # where a first write can take longer than the longest delay, half the runs check writes
        after_first = run % 2 == 1
        lines, status = zygote.run(
            store_url,
            tmp_path / f"run-{run}.fifo",
            mode,
            rng.randrange(2**32),
            delay,
            key_files,
            after_first=after_first,
        )
        assert status["signal"] == signal.SIGKILL, (
            f"run {run}: the writer was not killed but ended: {status}, {zygote.errors.read_text()[-2000:]}"
        )
        checked = _check_acknowledged(store_url, lines)
        assert checked or not after_first, f"run {run}: nothing acknowledged after the first write"
        acknowledged += checked
        report = verify_store(store)
        assert report.ok, f"run {run} (killed after {delay:.3f}s): {report.failure}"
    assert acknowledged >= RUNS[backend] // 2, "the writers hardly wrote anything before being killed"
