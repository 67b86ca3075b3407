"""The ``audit`` command. Exit codes through a real subprocess (``python -m signoff.audit.cli``):
0 intact, 1 tampered or refused, 2 unusable input. The rest through ``signoff.audit.cli.main`` in this
process (the same code, without an interpreter start-up per call); every error message says
what was expected and what was found."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from auditkit import AGENT, ALICE, Case, Db, call, cli_argv, run_cli_many

from signoff.audit import ReviewService, Signer, merkle, open_store
from signoff.audit.cli import main


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_verify_exit_codes_through_the_real_cli(case: Case, tmp_path: Path, capsys: Any) -> None:
    """0 intact, 2 unusable (a store with no log), 1 tampered: as a shell script would see them.
    (On PostgreSQL the same exit codes in-process; tests/audit/test_tamper.py runs `audit verify
    --against` on PostgreSQL as a subprocess.)"""
    if case.backend == "sqlite":
        empty_url = f"sqlite:///{tmp_path / 'empty.db'}"
        open_store(empty_url).close()  # tables, but no log
        intact, empty = run_cli_many(
            [cli_argv(case.url, case.key, "verify"), cli_argv(empty_url, None, "verify")], cwd=tmp_path
        )
        assert (intact.returncode, empty.returncode) == (0, 2), intact.stderr + empty.stderr
        assert "ok: log" in intact.stdout and "24 entries" in intact.stdout
        assert "expected a log, found none" in empty.stderr
    else:
        code, out, _err = run(capsys, "--store", case.url, "verify")
        assert code == 0 and "24 entries" in out
    with case.db() as db:
        raw = db.raw(9)
        db.run(("UPDATE signoff_entry SET raw = ? WHERE seq = 9", (raw[:-2] + b"!}",)))
    if case.backend == "sqlite":
        (bad,) = run_cli_many([cli_argv(case.url, case.key, "verify", "--json")], cwd=tmp_path)
        code, out = bad.returncode, bad.stdout
    else:
        code, out, _err = run(capsys, "--store", case.url, "verify", "--json")
    assert code == 1
    failure = json.loads(out)["failure"]
    assert failure["seq"] == 9 and failure["rule"] == "entry hash"


def test_verify_on_an_empty_postgres_store_is_unusable_input(pg_url: str, capsys: Any) -> None:
    open_store(pg_url).close()
    code, _out, err = run(capsys, "--store", pg_url, "verify")
    assert code == 2 and "expected a log, found none" in err


def test_verify_of_a_missing_sqlite_file_creates_nothing(tmp_path: Path, capsys: Any) -> None:
    target = tmp_path / "typo.db"
    code, _out, err = run(capsys, "--store", f"sqlite:///{target}", "verify")
    assert code == 2 and "expected" in err
    assert not target.exists()


def test_init_log_show_export(store_url: str, tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "log.pem"
    code, out, _err = run(capsys, "--store", store_url, "--key", str(key), "init")
    assert code == 0 and "created log log_" in out and key.exists()
    store = open_store(store_url)
    svc = ReviewService(store)
    svc.enroll_reviewer(ALICE, roles=["teller"])
    front = svc.open_frontier([call("c1", args={"amount": 5, "to": "zoë"}), call("c2")], actor=AGENT)
    first, second = front.reviews
    svc.approve(first.id, reviewer=ALICE)
    svc.edit(second.id, reviewer=ALICE, patch=[{"op": "replace", "path": "/amount", "value": 1}])
    svc.claim_resume(front.id, actor=AGENT)

    code, out, _ = run(capsys, "--store", store_url, "log")
    assert code == 0 and len(out.splitlines()) == store.size()
    code, out, _ = run(capsys, "--store", store_url, "log", "--kind", "review.opened")
    assert len(out.splitlines()) == 2 and "transfer" in out and "zoë" in out
    code, out, _ = run(capsys, "--store", store_url, "log", "--review", second.id, "--json")
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["review.opened", "review.edited"]
    code, out, _ = run(capsys, "--store", store_url, "log", "--actor", ALICE, "--newest", "--limit", "1")
    assert len(out.splitlines()) == 1 and "review.edited" in out
    code, out, _ = run(capsys, "--store", store_url, "log", "--json")
    assert [line.encode() for line in out.splitlines()] == [raw for _s, _h, raw in store.iter_raw()]

    code, out, _ = run(capsys, "--store", store_url, "show", "0")
    assert code == 0 and json.loads(out)["kind"] == "key.enrolled"
    code, out, _ = run(capsys, "--store", store_url, "show", second.id)
    assert code == 0 and "edited" in out and "ran with" in out and "run.resumed" in out

    code, out, _ = run(capsys, "--store", store_url, "export")
    assert code == 0
    assert [line.encode() for line in out.splitlines()] == [raw for _s, _h, raw in store.iter_raw()]
    store.close()


def test_checkpoint_prove_and_consistency(store_url: str, tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "log.pem"
    store = open_store(store_url)
    store.init_log(key)
    for n in range(6):
        store.append(
            "service:t", "key.enrolled", {"actor": f"agent:a{n}", "key": Signer.generate().public, "alg": "Ed25519"}
        )
    kept = tmp_path / "kept.json"
    code, out, _ = run(capsys, "--store", store_url, "--key", str(key), "checkpoint", "-o", str(kept))
    assert code == 0 and json.loads(out) == json.loads(kept.read_text())
    old = json.loads(kept.read_text())
    assert old["size"] == 7 and old["root"] == "sha256:" + store.root().hex()
    for n in range(5):
        store.append(
            "service:t", "key.enrolled", {"actor": f"agent:b{n}", "key": Signer.generate().public, "alg": "Ed25519"}
        )

    code, out, _ = run(capsys, "--store", store_url, "prove", "3")
    bundle = json.loads(out)
    assert code == 0 and bundle["seq"] == 3 and bundle["size"] == 12
    leaf = merkle.leaf_hash(bundle["entry"].encode())
    assert "sha256:" + leaf.hex() == bundle["leaf"]
    merkle.verify_inclusion(
        leaf, 3, 12, [base64.b64decode(p) for p in bundle["proof"]], bytes.fromhex(bundle["root"][7:])
    )
    code, out, _ = run(capsys, "--store", store_url, "prove", "3", "--size", "7")
    assert json.loads(out)["root"] == old["root"]

    code, out, _ = run(capsys, "--store", store_url, "consistency", str(kept))
    proof = json.loads(out)
    assert code == 0 and (proof["old_size"], proof["new_size"]) == (7, 12)
    merkle.verify_consistency(
        7,
        12,
        bytes.fromhex(old["root"][7:]),
        bytes.fromhex(proof["new_root"][7:]),
        [base64.b64decode(p) for p in proof["proof"]],
    )
    code, out, _ = run(capsys, "--store", store_url, "verify", "--against", str(kept))
    assert code == 0 and "ok: log" in out
    store.close()


def test_review_commands(store_url: str, tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "log.pem"
    store = open_store(store_url)
    store.init_log(key)
    code, out, _ = run(
        capsys, "--store", store_url, "enroll", "alice@example.org", "--role", "teller", "--tools", "trans*"
    )
    assert code == 0 and ALICE in out
    svc = ReviewService(store)
    a, b, c = svc.open_frontier([call("x1"), call("x2"), call("x3")], actor=AGENT).reviews
    code, out, _ = run(capsys, "--store", store_url, "pending")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == [a.id, b.id, c.id]
    code, out, _ = run(
        capsys, "--store", store_url, "approve", a.id, "--as", "alice@example.org", "--rationale", "fine"
    )
    assert code == 0 and "approved" in out
    patch = json.dumps([{"op": "replace", "path": "/amount", "value": 3}])
    code, out, _ = run(capsys, "--store", store_url, "edit", b.id, "--as", "alice@example.org", "--patch", patch)
    assert code == 0 and "edited" in out and svc.get(b.id).final_args == {"amount": 3, "to": "bob"}
    code, out, _ = run(capsys, "--store", store_url, "reject", c.id, "--as", "alice@example.org", "--reason", "no")
    assert code == 0 and "rejected" in out
    code, out, _ = run(capsys, "--store", store_url, "verify")
    assert code == 0
    store.close()


# -- bad input: a clear message, the right exit code, nothing written --------------------


def test_bad_input_messages(store_url: str, tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "log.pem"
    store = open_store(store_url)
    store.init_log(key)
    svc = ReviewService(store)
    svc.enroll_reviewer(ALICE, roles=["teller"])
    review = svc.open_frontier([call("bad")], actor=AGENT).reviews[0]
    store.checkpoint(key)
    not_json = tmp_path / "not.json"
    not_json.write_text("{nope", encoding="utf-8")
    other_log = tmp_path / "other"
    other_store = open_store(f"sqlite:///{other_log}.db")
    other_store.init_log(tmp_path / "other.pem")
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps(other_store.checkpoint(tmp_path / "other.pem").to_json()), encoding="utf-8")
    other_store.close()
    wrong_key = tmp_path / "wrong.pem"
    from signoff.audit.keys import write_private_key

    write_private_key(Signer.generate(), wrong_key)
    s = ["--store", store_url]
    cases: list[tuple[list[str], int, list[str]]] = [
        ([*s, "show", "999"], 2, ["seq 999: expected an entry, found none"]),
        ([*s, "show", "rv_nope"], 1, ["expected an open review, found no such review"]),
        ([*s, "prove", "999"], 2, ["seq 999", "expected"]),
        ([*s, "consistency", str(not_json)], 2, ["expected a checkpoint JSON file"]),
        ([*s, "consistency", str(tmp_path / "absent.json")], 2, ["expected a checkpoint JSON file"]),
        ([*s, "consistency", str(foreign)], 2, ["expected a checkpoint of log"]),
        ([*s, "verify", "--against", str(not_json)], 2, ["expected a checkpoint JSON file"]),
        ([*s, "verify", "--against", str(foreign)], 1, ["TAMPERED", "expected"]),
        ([*s, "verify", "--log-key", Signer.generate().public], 1, ["log key", "expected"]),
        ([*s, "verify", str(tmp_path / "absent.jsonl")], 2, ["expected an exported JSONL file, found nothing"]),
        (
            [*s, "edit", review.id, "--as", "alice@example.org", "--patch", "not json"],
            2,
            ["expected an RFC 6902 JSON patch, found invalid JSON"],
        ),
        (
            [*s, "edit", review.id, "--as", "alice@example.org", "--patch", '[{"op":"remove","path":"/nope"}]'],
            1,
            ["refused", "expected operations that apply"],
        ),
        (
            [*s, "reject", review.id, "--as", "alice@example.org", "--reason", " "],
            1,
            ["refused", "expected a non-empty reason"],
        ),
        ([*s, "approve", review.id, "--as", "mallory@example.org"], 1, ["refused", "expected an enrolled reviewer"]),
        ([*s, "approve", review.id, "--as", "agent:bot"], 1, ["refused", "expected a human: actor"]),
        ([*s, "approve", "rv_nope", "--as", "alice@example.org"], 1, ["refused", "found no such review"]),
        ([*s, "--key", str(wrong_key), "checkpoint"], 2, ["expected the log's key"]),
        ([*s, "--key", str(tmp_path / "absent.pem"), "checkpoint"], 2, ["expected a readable PEM key file"]),
        ([*s, "--key", str(tmp_path / "new.pem"), "init"], 2, ["expected an empty store, found a log already"]),
        (["--store", "mysql://x@y/z", "verify"], 2, ["expected sqlite:/// or postgresql://"]),
        (["--store", "sqlite:///:memory:", "verify"], 2, ["expected a SQLite file"]),
    ]
    size = store.size()
    failures = []
    for argv, expected_code, words in cases:
        code, _out, err = run(capsys, *argv)
        if code != expected_code or not all(w in err for w in words) or "expected" not in err or "found" not in err:
            failures.append(f"{argv[2:]}: exit {code} (expected {expected_code}), stderr {err.strip()!r}")
    assert not failures, "\n".join(failures)
    assert store.size() == size, "a refused command wrote to the log"
    assert not (tmp_path / "new.pem").exists()
    store.close()


def test_init_refuses_an_existing_key_file(tmp_path: Path, capsys: Any) -> None:
    key = tmp_path / "log.pem"
    key.write_text("keep me", encoding="utf-8")
    code, _out, err = run(capsys, "--store", f"sqlite:///{tmp_path / 'x.db'}", "--key", str(key), "init")
    assert code == 2 and "refusing to overwrite" in err and "expected no key file, found one" in err
    assert key.read_text(encoding="utf-8") == "keep me"


def test_usage_errors_exit_2(capsys: Any) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["verify", "--no-such-flag"])
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2
    capsys.readouterr()


def test_unknown_review_through_the_cli_leaves_the_database_alone(case: Case, capsys: Any) -> None:
    with case.db() as db:
        before = db.rows("SELECT count(*) FROM signoff_entry")
    code, _out, err = run(capsys, "--store", case.url, "approve", "rv_0000000000000000", "--as", "alice@example.org")
    assert code == 1 and "found no such review" in err
    with Db(case.url) as db:
        assert db.rows("SELECT count(*) FROM signoff_entry") == before


def test_enrolling_an_agent_as_a_reviewer_is_refused(store_url: str, tmp_path: Path, capsys: Any) -> None:
    store = open_store(store_url)
    store.init_log(tmp_path / "log.pem")
    size = store.size()
    code, _out, err = run(capsys, "--store", store_url, "enroll", "agent:bot", "--role", "teller")
    assert code == 1 and "expected" in err
    assert store.size() == size
    store.close()
