"""Every code block in README.md runs as written, and every block of output is what the program prints.

The ```sh and ```python blocks run in order, as a reader following the README would run them, in
one fresh directory with the package installed (this environment's ``bin`` first on ``PATH``): shell
blocks with ``bash -euo pipefail``, Python blocks each in a fresh interpreter. ```json and ```http
blocks are formats, not commands.

Each ```text block says on the line before it what it is:

* ``<!-- readme-test: output -->``: what the runnable blocks since the previous output block printed
  (their stdout). Its lines must appear in that output, in order (a block may leave lines out, and a
  line ``…`` says so); the parts that differ from run to run are compared by their shape only
  (:data:`VARIABLE`: ids, hashes, keys, times, temporary paths, a port);
* ``<!-- readme-test: output of: COMMAND -->``: what COMMAND prints first (a server that keeps running,
  such as ``desk demo``): it is started in a fresh directory and stopped once every line was seen;
* ``<!-- readme-test: not output: <what it is> -->``: a drawing, not output.

One runnable block may say why it cannot run here, with ``<!-- readme-test: skip: <reason> -->`` on the
line before it: the set-up block, whose ``make test`` is this very suite. The test counts such blocks,
so another one cannot slip in unnoticed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
MARK = re.compile(r"<!-- readme-test: (skip|output of|output|not output)(?:: (.+?))? -->\s*$")
ALLOWED_SKIPS = 1
ALLOWED_NOT_OUTPUT = 1  # the drawing of the rooms
RUNNABLE = {"sh", "python"}
ELIDED = "…"
SHOWN_DIR = "/tmp/readme"  # where the README's output says its commands ran

VARIABLE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"), "<time>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\+[0-9a-f]{8}\+[A-Za-z0-9+/]{40,}={0,2}"), "+<keyid>+<key>"),  # a vkey's id and key
    (re.compile(r"\b(ed25519|webauthn):[A-Za-z0-9+/_=-]{16,}"), r"\1:<key>"),
    (re.compile(r"(Account page\): )[A-Za-z0-9_-]{16}"), r"\1<code>"),  # an enrolment code: token_urlsafe(12)
    (re.compile(r"signoff-demo-[A-Za-z0-9_]+"), "signoff-demo-<tmp>"),
    (re.compile(r"localhost:\d+"), "localhost:<port>"),
    (re.compile(r"\b(sha256|sealed):[0-9a-f]+"), r"\1:<hex>"),  # a digest, whole or cut short
    (re.compile(r"[0-9a-f]{8,}"), "<hex>"),  # review, frontier, log ids; hashes; trace ids; demo passwords
    (re.compile(r"(\.wait = )\d+(?:\.\d+)?"), r"\1<seconds>"),  # a measured wait (1.5, or 1.522739)
    (re.compile(r"\s+"), " "),
]


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int
    mark: str | None  # skip, output, output of, not output
    say: str | None  # the mark's text: the reason, or the command


def blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        line = text.count("\n", 0, match.start()) + 1
        found.append(
            Block(
                match.group(1), match.group(2), line, mark.group(1) if mark else None, mark.group(2) if mark else None
            )
        )
    return found


def shape(line: str) -> str:
    """A line of output with what differs from run to run replaced by its kind."""
    for pattern, kind in VARIABLE:
        line = pattern.sub(kind, line)
    return line.strip()


def missing(shown: str, printed: str) -> str | None:
    """The first line of ``shown`` (a README output block) not found in ``printed`` after the lines
    before it; None when every line is there, in order."""
    lines = [shape(line) for line in printed.splitlines()]
    at = 0
    for line in shown.splitlines():
        if line.strip() in ("", ELIDED):
            continue
        want = shape(line)
        while at < len(lines) and lines[at] != want:
            at += 1
        if at == len(lines):
            return line
        at += 1
    return None


def test_readme_blocks_are_tagged() -> None:
    """Every block says what it is; only known kinds; the skip lists stay as short as promised."""
    found = blocks()
    assert found, "README.md has no code blocks"
    unknown = [(b.line, b.lang) for b in found if b.lang not in RUNNABLE | {"text", "json", "http"}]
    assert not unknown, f"untagged or unknown code blocks (line, lang): {unknown}"
    skipped = [(b.line, b.say) for b in found if b.mark == "skip"]
    assert len(skipped) <= ALLOWED_SKIPS, f"more skipped blocks than the set-up block: {skipped}"
    untold = [b.line for b in found if b.lang == "text" and b.mark not in ("output", "output of", "not output")]
    assert not untold, f"text blocks that say neither whose output they are nor why they are none: lines {untold}"
    drawings = [(b.line, b.say) for b in found if b.mark == "not output"]
    assert len(drawings) <= ALLOWED_NOT_OUTPUT, f"more text blocks left unchecked than the drawing: {drawings}"


def test_shapes_compare_what_varies_and_nothing_else() -> None:
    run = 'rv_0123456789abcdef: approved by human:alice@example.org at seq 9; runs with {"amount": 100}\n'
    same = 'rv_fedcba9876543210: approved by human:alice@example.org at seq 9; runs with {"amount": 100}'
    assert missing(same, run) is None  # another review id: the same shape
    assert missing(same.replace("seq 9", "seq 8"), run)
    assert missing(same.replace("alice", "bob"), run)
    assert missing(same.replace("100", "5000"), run)
    assert missing("b\na", "a\nb") == "a"  # in order
    assert missing("a\n…\nc", "a\nb\nc") is None  # lines left out


def _environment(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_") or k == "SIGNOFF_PG_URL"}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(work),
        PYTHONWARNINGS="ignore",
        SIGNOFF_README_TEST="1",
    )
    return env


def _first_output_of(command: str, shown: str, work: Path, env: dict[str, str], timeout: float = 90.0) -> str:
    """What ``command`` prints until every line of ``shown`` was seen (or ``timeout``); then it is stopped."""
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    printed: list[str] = []
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            printed.append(line)
            if missing(shown, "".join(printed)) is None:
                break
    finally:
        timer.cancel()
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a person stops it
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return "".join(printed)


@pytest.mark.slow
def test_every_readme_block_runs(tmp_path: Path) -> None:
    work = tmp_path / "readme"
    work.mkdir()
    env = _environment(work)
    ran, checked = 0, 0
    printed = ""  # the stdout of the runnable blocks since the last output block
    for index, block in enumerate(blocks()):
        if block.lang == "text" and block.mark == "output":
            gone = missing(block.code, printed)
            assert gone is None, (
                f"README.md line {block.line}: the output shown is not what the blocks before it print: "
                f"expected the line\n  {gone}\n--- printed ---\n{printed[-6000:]}"
            )
            printed, checked = "", checked + 1
            continue
        if block.lang == "text" and block.mark == "output of":
            assert block.say, f"README.md line {block.line}: expected the command whose output it shows"
            started = time.monotonic()
            fresh = tmp_path / f"output-of-{index}"
            fresh.mkdir()
            out = _first_output_of(block.say, block.code, fresh, env)
            gone = missing(block.code, out)
            assert gone is None, (
                f"README.md line {block.line}: `{block.say}` did not print (within "
                f"{time.monotonic() - started:.0f} s) the line\n  {gone}\n--- printed ---\n{out[-6000:]}"
            )
            checked += 1
            continue
        if block.lang not in RUNNABLE or block.mark == "skip":
            continue
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
        printed += done.stdout.replace(str(work), SHOWN_DIR)  # the reader's directory, as the README shows it
        ran += 1
    assert ran >= 8, f"expected the README's walkthrough to run, found only {ran} runnable blocks"
    assert checked >= 10, f"expected the README's output blocks to be checked, found only {checked}"
