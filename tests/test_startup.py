"""Start-up (issue 19, item 17): ``audit --help`` and ``desk --help`` load no database, web or passkey
library. Each check runs in a fresh interpreter and reads ``sys.modules``; the times themselves are
measured by tests/benchmarks/cli_bench.py, not here (a shared CI machine makes them noisy).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AUDIT_HEAVY = ("sqlalchemy", "sqlmodel", "alembic", "fido2", "httpx", "celpy")
DESK_HEAVY = (*AUDIT_HEAVY, "fastapi", "starlette", "uvicorn", "jinja2", "google")

PROBE = """
import json, sys
{code}
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""


def loaded(code: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=code)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def help_of(module: str, *argv: str) -> str:
    return (
        f"import contextlib, io\nfrom {module} import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    main({list(argv)!r})"
    )


@pytest.mark.parametrize(
    "code",
    [
        "import signoff.audit.cli",
        "import signoff.audit",
        help_of("signoff.audit.cli", "--help"),
        help_of("signoff.audit.cli", "verify", "--help"),
        help_of("signoff.audit.cli", "policy", "set", "--help"),
    ],
    ids=["import cli", "import signoff.audit", "audit --help", "audit verify --help", "audit policy set --help"],
)
def test_audit_starts_without_a_database_or_passkey_library(code: str) -> None:
    assert not loaded(code) & set(AUDIT_HEAVY)


def test_audit_help_loads_no_crypto_or_http_server() -> None:
    """``audit --help`` names every verb, ``witness serve`` too, and loads none of their libraries:
    no cryptography or PyNaCl (keys, notes), no http.server (the witness)."""
    assert not loaded(help_of("signoff.audit.cli", "--help")) & {"cryptography", "nacl", "http"}


@pytest.mark.parametrize(
    "code",
    [
        "import signoff.desk.cli",
        "import signoff.desk",
        help_of("signoff.desk.cli", "--help"),
        help_of("signoff.desk.cli", "reviewer", "add", "--help"),
        help_of("signoff.desk.cli", "demo", "--help"),
    ],
    ids=["import cli", "import signoff.desk", "desk --help", "desk reviewer add --help", "desk demo --help"],
)
def test_desk_starts_without_fastapi_uvicorn_or_sqlalchemy(code: str) -> None:
    assert not loaded(code) & set(DESK_HEAVY)


def test_audit_verify_of_an_export_loads_no_database_or_passkey_library(tmp_path: Path) -> None:
    """``audit verify FILE`` checks an export offline: it needs canonical JSON, hashes, the tree, keys and
    the rules, and none of the store's libraries (nor fido2, when no passkey signed in it). The verb
    still verifies: it prints ``ok`` for the export and exits 0."""
    sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
    try:
        from cli_bench import make_store
    finally:
        sys.path.pop(0)
    _url, export = make_store(tmp_path)
    code = (
        "import contextlib, io\nfrom signoff.audit.cli import main\nout = io.StringIO()\n"
        f"with contextlib.redirect_stdout(out):\n    rc = main(['verify', {str(export)!r}])\n"
        "assert rc == 0 and out.getvalue().startswith('ok: log '), (rc, out.getvalue())"
    )
    assert not loaded(code) & set(AUDIT_HEAVY)


def test_audit_witness_needs_no_http_client_and_desk_notify_loads_when_named() -> None:
    """``audit witness`` imports httpx only where it talks to a witness; ``desk notify`` is wired into the
    parser only when the command line names it, and is then complete."""
    assert "httpx" not in loaded(help_of("signoff.audit.cli", "witness", "serve", "--help"))
    probe = (
        "from signoff.audit.cli import build_parser\nfrom signoff.desk.cli import _parser\n"
        "assert build_parser().parse_args(['witness', 'keygen', '--name', 'w', '--out', 'k']).run\n"
        "assert _parser(['notify']).parse_args(['notify', 'list']).run\n"
        "assert _parser(['serve']).parse_args(['serve', '--notify']).notify"
    )
    loaded(probe)


def test_every_public_name_of_signoff_audit_still_imports() -> None:
    """``signoff.audit`` loads its names on first use (PEP 562); each one in ``__all__`` still resolves,
    and ``canonical`` stays the function (it is also the name of a submodule)."""
    probe = (
        "import signoff.audit as audit, signoff.audit.canonical\n"
        "names = {name: getattr(audit, name) for name in audit.__all__}\n"
        "from signoff.audit import canonical, digest, ReviewService, Store, open_store, Entry, Signer\n"
        "assert callable(canonical) and canonical({'b': 1, 'a': 2}) == b'{\"a\":2,\"b\":1}', canonical\n"
        "assert ReviewService.__module__ == 'signoff.audit.reviews' and Store.__name__ == 'Store'\n"
        "assert set(audit.__all__) <= set(dir(audit))\n"
        "try:\n    audit.nonexistent\nexcept AttributeError as exc:\n    assert 'nonexistent' in str(exc)\n"
        "else:\n    raise AssertionError('no AttributeError')\n"
        "from signoff.desk import create_app, main\nassert callable(create_app) and callable(main)"
    )
    assert {"sqlalchemy", "fastapi"} <= loaded(probe)


def test_the_placeholders_in_help_say_what_the_real_verbs_say() -> None:
    """``desk notify`` stands in ``--help`` as a placeholder (its module loads httpx); it must carry the
    line its real parser has."""
    from signoff.desk.cli import _parser

    def lines(parser: argparse.ArgumentParser) -> dict[str, str | None]:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return {choice.dest: choice.help for choice in sub._choices_actions}

    assert lines(_parser(["--help"])) == lines(_parser())
