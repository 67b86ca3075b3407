"""How long the commands take to start, against ``python -c pass`` in the same run; prints JSON.

    .venv/bin/python tests/benchmarks/cli_bench.py [--runs 15]

Each command runs ``--runs`` times, interleaved with the others (so a busy moment hits them all
alike), as a person runs it: the console scripts in the virtualenv's ``bin``. The figure is the
median wall time of each, and the median minus the baseline's (``above_baseline_s``).

Targets (issue 19, item 17), above the baseline: ``audit --help`` <= 0.15 s; ``audit verify`` of a
10-entry file (an export, checked offline) <= 0.3 s; ``desk --help`` <= 0.15 s. ``audit verify`` of
the same 10-entry store and ``signoff --help`` are reported (one opens a database, the other imports
the ADK bridge). ``import`` rows time the heavy libraries a verb that opens a store loads, each alone, to
show what a target could not undercut.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}

TARGETS = {"audit --help": 0.15, "audit verify FILE (10-entry export)": 0.3, "desk --help": 0.15}


def script(name: str) -> list[str]:
    """The console script ``name`` beside this interpreter (as installed), else the module behind it."""
    found = BIN / name
    if found.exists():
        return [str(found)]
    module = {"audit": "signoff.audit.cli", "desk": "signoff.desk.cli", "signoff": "signoff.bridge.cli"}[name]
    return [sys.executable, "-m", module]


def make_store(directory: Path) -> tuple[str, Path]:
    """A log of exactly 10 entries, as `audit init` makes it, and its export (JSONL)."""
    from signoff.audit import CallSpec, ReviewService, Signer, open_store
    from signoff.audit.keys import read_private_key
    from signoff.audit.store import default_admin_key

    url = f"sqlite:///{directory / 'bench.db'}"
    store = open_store(url)
    store.init_log(directory / "log.key")
    svc = ReviewService(store)
    admin = read_private_key(default_admin_key(directory / "log.key"))
    svc.enroll_reviewer("human:alice@example.org", roles=["r"], tools=["*"], key=Signer.generate().public, admin=admin)
    n = 0
    while store.size() < 10:
        n += 1
        call = CallSpec(
            app="bench", user="u", session=f"s{n}", invocation=f"i{n}", confirmation_id=f"c{n}",
            call_id=f"call-{n}", tool="transfer", args={"amount": n},
        )  # fmt: skip
        svc.open_frontier([call], actor="agent:teller")
    assert store.size() == 10, store.size()
    export = directory / "bench.jsonl"
    with export.open("wb") as out:
        for _seq, _hash, raw in store.iter_raw():
            out.write(raw + b"\n")
    store.close()
    return url, export


def run_once(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr.decode()[-400:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli-bench-") as tmp:
        here = Path(tmp)
        url, export = make_store(here)
        commands: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "audit --help": [*script("audit"), "--help"],
            "audit verify (10-entry store)": [*script("audit"), "--store", url, "verify"],
            "audit verify FILE (10-entry export)": [*script("audit"), "verify", str(export)],
            "desk --help": [*script("desk"), "--help"],
            "signoff --help": [*script("signoff"), "--help"],
            "import sqlalchemy": [sys.executable, "-c", "import sqlalchemy.orm"],
            "import sqlmodel + alembic": [sys.executable, "-c", "import sqlmodel, alembic.command"],
            "import fido2": [sys.executable, "-c", "import fido2.cose, fido2.webauthn"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for argv in commands.values():  # one warm-up each: the file cache, .pyc files
            run_once(argv, here)
        for _ in range(opts.runs):
            for name, argv in commands.items():
                times[name].append(run_once(argv, here))
    base = statistics.median(times["python -c pass"])
    rows = {}
    for name, values in times.items():
        median = statistics.median(values)
        row: dict[str, object] = {
            "median_s": round(median, 4),
            "min_s": round(min(values), 4),
            "above_baseline_s": round(median - base, 4),
        }
        if name in TARGETS:
            row["target_above_baseline_s"] = TARGETS[name]
            row["met"] = median - base <= TARGETS[name]
        rows[name] = row
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(json.dumps({"runs": opts.runs, "baseline_s": round(base, 4), "load_average": load, "commands": rows},
                     indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
