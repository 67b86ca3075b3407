"""One convention for every verb of ``audit``, ``desk`` and ``signoff`` (issue 19, items 4, 5 and 8).

Exit codes: 0 done (or intact); 1 a verification or proof failed; 2 unusable input or a refused
request, said in one line ``error: …``, never a traceback. The verbs are enumerated from the argparse
parsers, so a new verb is tried here without anyone adding it: its required arguments get placeholder
values and its store is a file that does not exist. A verb that needs another unusable input says so
in ``UNUSABLE``.

Every ``--help`` has an example and the exit codes, and no reStructuredText (``double backticks``,
``:mod:`` roles) leaks into it.
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from signoff.audit.cli import build_parser as audit_parser
from signoff.audit.cli import main as audit_main
from signoff.audit.cli_common import existing_store_url, store_url
from signoff.bridge.cli import build_parser as signoff_parser
from signoff.bridge.cli import main as signoff_main
from signoff.desk.cli import _parser as desk_parser
from signoff.desk.cli import main as desk_main

Leaf = tuple[str, ...]
MISSING = "nosuch.db"  # relative to the test's working directory, where it does not exist


def leaves(parser: argparse.ArgumentParser, path: Leaf = ()) -> Iterator[tuple[Leaf, argparse.ArgumentParser]]:
    """Every runnable verb under ``parser`` (``policy set``, ``reviewer add``, ``notify add webhook``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, child in subs[0].choices.items():
        yield from leaves(child, (*path, name))


def groups(parser: argparse.ArgumentParser, path: Leaf = ()) -> Iterator[tuple[Leaf, argparse.ArgumentParser]]:
    """Every parser with verbs of its own, the command itself included."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        yield path, parser
        for name, child in subs[0].choices.items():
            yield from groups(child, (*path, name))


COMMANDS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Callable[[list[str]], int]]] = {
    "audit": (audit_parser, audit_main),
    "desk": (desk_parser, desk_main),
    "signoff": (signoff_parser, signoff_main),
}


def placeholders(parser: argparse.ArgumentParser) -> list[str]:
    """Values for a verb's required arguments: enough for argparse, meaningless to the verb."""

    def value(action: argparse.Action) -> str:
        if action.choices:
            return str(next(iter(action.choices)))
        return "1" if action.type in (int, float) else "x"

    argv: list[str] = []
    chosen = set()
    for group in parser._mutually_exclusive_groups:
        if group.required:
            chosen.add(id(group._group_actions[0]))
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not action.option_strings:
            if action.nargs not in ("?", "*"):
                argv.append(value(action))
        elif action.required or id(action) in chosen:
            argv.append(action.option_strings[0])
            if action.nargs != 0:
                argv.append(value(action))
    return argv


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


def unusable(command: str, verb: Leaf, parser: argparse.ArgumentParser, tmp: Path, busy: int) -> list[str]:
    """A command line for ``verb`` with one unusable input (by default: a store that does not exist)."""
    existing = tmp / "exists.pem"
    existing.write_text("taken")
    special: dict[tuple[str, Leaf], list[str]] = {
        ("audit", ("init",)): ["--store", f"{tmp}/", "init"],  # a directory, not a store
        ("audit", ("keygen",)): ["keygen", "-o", str(existing)],  # would overwrite a file
        ("audit", ("witness", "keygen")): ["witness", "keygen", "--name", "bad name", "--out", str(tmp / "w.pem")],
        ("desk", ("demo",)): ["demo", "--port", str(busy)],  # a port in use
    }
    if (command, verb) in special:
        return special[(command, verb)]
    own = placeholders(parser)
    if any(a.dest == "store" for a in parser._actions):
        return [*verb, *own, "--store", MISSING]
    if command == "audit":  # the store is the command's own option
        return ["--store", MISSING, *verb, *own]
    return [*verb, *own]  # a verb with no store: its placeholder values must be unusable themselves


def all_verbs() -> list[tuple[str, Leaf]]:
    return [(command, verb) for command, (make, _main) in COMMANDS.items() for verb, _p in leaves(make())]


def test_the_enumeration_finds_the_verbs_of_all_three_commands() -> None:
    found = set(all_verbs())
    expected = {("audit", ("verify",)), ("audit", ("policy", "set")), ("audit", ("witness", "serve")),
                ("desk", ("serve",)), ("desk", ("reviewer", "token")), ("desk", ("notify", "add", "email")),
                ("desk", ("notify", "serve")), ("desk", ("demo",)), ("signoff", ("resume",))}  # fmt: skip
    assert expected <= found, expected - found
    assert len(found) > 40


@pytest.mark.parametrize(("command", "verb"), all_verbs(), ids=lambda v: v if isinstance(v, str) else "-".join(v))
def test_every_verb_refuses_unusable_input_with_exit_2_and_one_line(
    command: str,
    verb: Leaf,
    tmp_path: Path,
    busy_port: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    make, main = COMMANDS[command]
    parser = dict(leaves(make()))[verb]
    argv = unusable(command, verb, parser, tmp_path, busy_port)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, f"{command} {' '.join(argv)}: exit {code}, stderr {err!r}"
    assert re.fullmatch(r"error: [^\n]+\n", err), f"{command} {' '.join(argv)}: stderr {err!r}"
    assert "Traceback" not in out + err and "unexpected" not in err and "please report" not in err, err
    assert not (tmp_path / MISSING).exists(), "a refused verb created the store"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_help_has_an_example_and_the_exit_codes_and_no_rst(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make, main = COMMANDS[command]
    texts = {path: parser.format_help() for path, parser in [*leaves(make()), *groups(make())]}
    for path, text in texts.items():
        where = f"{command} {' '.join(path)} --help"
        assert "example" in text and "exit codes:" in text, where
        assert "``" not in text and not re.search(r":(mod|func|class|meth|attr|ref):`", text), where
    with pytest.raises(SystemExit) as done:  # what a person sees, through the command itself
        main(["--help"])
    assert done.value.code == 0 and "example" in capsys.readouterr().out


# -- the known cases (issue 19, items 4 and 5), by name -------------------------------------------


def test_a_store_is_read_one_way_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert store_url("signoff.db") == f"sqlite:///{tmp_path / 'signoff.db'}"
    assert store_url("sqlite:///x.db") == "sqlite:///x.db" and store_url("postgresql://u@h/db") == "postgresql://u@h/db"
    with pytest.raises(Exception, match="--store: expected a Signoff store made by `audit init`.*found none at"):
        existing_store_url("signoff.db")
    with pytest.raises(Exception, match="--store: expected a URL"):
        store_url("somewhere/")


def test_desk_signoff_and_notify_take_a_bare_path_and_name_a_missing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """They used to print a SQLAlchemy ArgumentError traceback with exit code 1."""
    monkeypatch.chdir(tmp_path)
    for argv in (["serve", "--store", MISSING, "--quiet"], ["notify", "serve", "--store", MISSING]):
        assert desk_main(argv) == 2
        err = capsys.readouterr().err
        assert "ArgumentError" not in err and f"found none at {tmp_path / MISSING}" in err, err
    from signoff.audit import open_store

    open_store(f"sqlite:///{tmp_path / 'real.db'}").init_log(tmp_path / "log.key")
    # signoff resume reads --store the same way, before it loads the App
    assert signoff_main(["resume", "--app", "bank.agent:app", "--sessions", "sqlite:///s.db", "--store", MISSING]) == 2
    assert (
        f"--store: expected a Signoff store made by `audit init` (a SQLite file, or postgresql://…), "
        f"found none at {tmp_path / MISSING}" in capsys.readouterr().err
    )
    assert desk_main(["reviewer", "list", "--store", "real.db"]) == 0
    assert desk_main(["notify", "list", "--store", "real.db"]) == 0
    assert desk_main(["notify", "deliveries", "--limit", "-1", "--store", "real.db"]) == 2
    assert "--limit: expected 0 or more delivery attempts, found -1" in capsys.readouterr().err
    assert audit_main(["--store", "real.db", "verify"]) == 0
    capsys.readouterr()


def test_signoff_resume_takes_a_bare_store_path_and_names_a_bad_sessions_uri(tmp_path: Path) -> None:
    """``signoff resume --store signoff.db`` used to end in a SQLAlchemy ArgumentError traceback, and a
    ``--sessions`` URI ADK cannot use in a ValueError traceback. (Real processes: the command sets up
    the root logger.)"""
    from signoff.audit import open_store

    open_store(f"sqlite:///{tmp_path / 'signoff.db'}").init_log(tmp_path / "log.key")
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "plain_app.py").write_text(
        "from google.adk.agents import LlmAgent\nfrom google.adk.apps import App\n\n"
        'app = App(name="plain", root_agent=LlmAgent(name="assistant", model="gemini-2.0-flash"))\n'
    )

    def resume(sessions: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "signoff.bridge.cli", "resume", "--agents-dir", "apps", "--app", "plain_app:app",
             "--sessions", sessions, "--store", "signoff.db", "--once"],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = resume(f"sqlite:///{tmp_path / 's.db'}")
    assert done.returncode == 0, done.stderr
    assert f"from sqlite:///{tmp_path / 'signoff.db'}" in done.stderr and "resumed 0 frontier(s)" in done.stderr
    done = resume("bogus://x")
    assert done.returncode == 2 and re.fullmatch(
        r"error: --sessions: expected a session service URI [^\n]+\n", done.stderr
    )


def test_audit_refuses_a_malformed_log_key_as_unusable_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--log-key ed25519:AAAA`` is not a key: exit 2, not 1 "TAMPERED or INVALID"."""
    from signoff.audit import open_store

    monkeypatch.chdir(tmp_path)
    open_store(f"sqlite:///{tmp_path / 'real.db'}").init_log(tmp_path / "log.key")
    assert audit_main(["--store", "real.db", "export", "-o", "log.jsonl"]) == 0
    capsys.readouterr()  # export's own note (where the values went)
    for argv in (["verify"], ["verify", "log.jsonl"]):
        assert audit_main(["--store", "real.db", *argv, "--log-key", "ed25519:AAAA"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --log-key: expected 32 raw Ed25519 public key bytes") and "TAMPERED" not in err


def test_audit_log_names_an_unknown_review_as_show_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``audit log --review rv_nope`` used to exit 0 with no output, while ``audit show rv_nope`` exits 2."""
    from signoff.audit import open_store

    monkeypatch.chdir(tmp_path)
    store = open_store(f"sqlite:///{tmp_path / 'real.db'}")
    store.init_log(tmp_path / "log.key")
    writer = store.entry(0).actor
    for argv, words in (
        (["log", "--review", "rv_nope"], "--review: expected a review, frontier, reviewer or actor"),
        (["log", "--actor", "human:nobody@example.org"], "--actor: expected an actor who wrote"),
        (["log", "--kind", "review.nope"], "--kind: expected one of"),
        (["log", "--limit", "-1"], "--limit: expected 0 or more entries, found -1"),
        (["pending", "--limit", "-1"], "--limit: expected 0 or more reviews, found -1"),
        (["show", "rv_nope"], "no such review"),
    ):
        assert audit_main(["--store", "real.db", *argv]) == 2, argv
        out, err = capsys.readouterr()
        assert out == "" and words in err, (argv, err)
    assert audit_main(["--store", "real.db", "log", "--kind", "review.edited"]) == 0  # none yet: not an error
    assert audit_main(["--store", "real.db", "log", "--actor", writer, "--kind", "review.edited"]) == 0
    capsys.readouterr()


def test_a_usage_error_from_argparse_is_still_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for main in (audit_main, desk_main, signoff_main):
        with pytest.raises(SystemExit) as done:
            main(["--no-such-flag"])
        assert done.value.code == 2
    capsys.readouterr()


def test_the_edge_maps_each_kind_of_error_to_one_line_and_a_code(capsys: pytest.CaptureFixture[str]) -> None:
    import sqlalchemy.exc

    from signoff.audit.cli_common import run_at_edge
    from signoff.audit.errors import NotAllowed, VerificationFailed
    from signoff.audit.merkle import ProofError

    def raising(exc: BaseException) -> Callable[[], int]:
        def run() -> int:
            raise exc

        return run

    cases: list[tuple[BaseException, int, str]] = [
        (VerificationFailed(3, "entry hash", "a", "b"), 1, "TAMPERED or INVALID: seq 3: entry hash"),
        (ProofError("root: expected x, found y"), 1, "TAMPERED or INVALID: root"),
        (NotAllowed("review rv_1: expected a reviewer, found none"), 2, "error: review rv_1"),
        (FileNotFoundError(2, "No such file or directory", "k.pem"), 2, "error: k.pem: No such file or directory"),
        (sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("no route")), 2, "postgresql://u:***@h/db"),
        (RuntimeError("boom"), 2, "error: unexpected RuntimeError: boom (please report this)"),
    ]
    for exc, code, words in cases:
        assert run_at_edge(raising(exc), "postgresql://u:secret@h/db") == code, exc
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1 and "secret" not in err, err
    assert run_at_edge(raising(BrokenPipeError())) == 0  # `audit log | head`
    assert run_at_edge(raising(KeyboardInterrupt())) == 130
