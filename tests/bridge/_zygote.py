"""A "zygote" subprocess that forks one real resumer process per request (see ``_proc.py zygote``).

The zygote has imported everything and started no thread, so a child costs milliseconds, not seconds
of imports; each child may kill itself with SIGKILL at one step of a resume.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PROC = Path(__file__).resolve().parent / "_proc.py"


class Zygote:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{PROC.parent}"}
        self.proc = subprocess.Popen(
            [sys.executable, str(PROC), "zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def run(self, *args: object) -> dict[str, int]:
        """One child, ``_proc.crash_resume(*args)``; how it ended: ``{"exit": code, "signal": number}``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(list(args)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the zygote died"
        return dict(json.loads(line))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
