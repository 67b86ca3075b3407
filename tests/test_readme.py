"""Every code block in README.md runs as written.

The ```sh and ```python blocks run in order, as a reader following the README would run them, in
one fresh directory with the package installed (this environment's ``bin`` first on ``PATH``): shell
blocks with ``bash -euo pipefail``, Python blocks each in a fresh interpreter. ```text and ```json
blocks are output and formats, not commands.

One block may say why it cannot run here, with ``<!-- readme-test: skip: <reason> -->`` on the line
before it: the set-up block, whose ``make test`` is this very suite. The test counts such blocks, so
another one cannot slip in unnoticed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
SKIP = re.compile(r"<!-- readme-test: skip: (.+?) -->\s*$")
ALLOWED_SKIPS = 1
RUNNABLE = {"sh", "python"}


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int
    skip: str | None


def blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(match.group(1), match.group(2), line, skip.group(1) if skip else None))
    return found


def test_readme_blocks_are_tagged() -> None:
    """Every block says what it is; only known kinds; the skip list stays as short as promised."""
    found = blocks()
    assert found, "README.md has no code blocks"
    unknown = [(b.line, b.lang) for b in found if b.lang not in RUNNABLE | {"text", "json", "http"}]
    assert not unknown, f"untagged or unknown code blocks (line, lang): {unknown}"
    skipped = [(b.line, b.skip) for b in found if b.skip]
    assert len(skipped) <= ALLOWED_SKIPS, f"more skipped blocks than the set-up block: {skipped}"


@pytest.mark.slow
def test_every_readme_block_runs(tmp_path: Path) -> None:
    work = tmp_path / "readme"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_") or k == "SIGNOFF_PG_URL"}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(work),
        PYTHONWARNINGS="ignore",
        SIGNOFF_README_TEST="1",
    )
    ran = 0
    for index, block in enumerate(b for b in blocks() if b.lang in RUNNABLE and not b.skip):
        if block.lang == "sh":
            argv = ["bash", "-euo", "pipefail", "-c", block.code]
        else:
            script = work / f"readme_block_{index}.py"
            script.write_text(block.code, encoding="utf-8")
            argv = [sys.executable, str(script)]
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"README.md line {block.line} ({block.lang}) exited {done.returncode}\n"
            f"--- block ---\n{block.code}\n--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
        )
        ran += 1
    assert ran >= 8, f"expected the README's walkthrough to run, found only {ran} runnable blocks"
