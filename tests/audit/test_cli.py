"""The ``audit`` command, used as an administrator, a reviewer and an auditor would use it.

Exit codes (the module docstring of ``signoff.audit.cli``): 0 done / intact, 1 a verification or
proof failed, 2 unusable input or a refused request. Never a traceback. A few runs go through a
real subprocess (``python -m signoff.audit.cli``), the rest through ``main`` in this process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from auditkit import AGENT, ALICE, Case, Db, call, cli_argv, run_cli_many

from signoff.audit import ReviewService, Signer, merkle, open_store
from signoff.audit.cli import main
from signoff.audit.entry import parse_hash

TOOL_SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer"}, "to": {"type": "string"}, "urgent": {"type": "boolean"}},
    "required": ["amount", "to"],
}


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def admin_setup(store_url: str, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`audit init`, a reviewer's `audit keygen`, and her enrolment by the admin: as the README does it."""
    monkeypatch.chdir(tmp_path)
    log_key, admin_key, alice_key = tmp_path / "log.pem", tmp_path / "admin.pem", tmp_path / "alice.pem"
    code, out, err = run(capsys, "--store", store_url, "--key", str(log_key), "init", "--admin-key", str(admin_key))
    assert code == 0, err
    assert "keep it OFF the agent" in out and "log_key=" in out
    code, out, err = run(capsys, "keygen", "-o", str(alice_key), "--json")
    assert code == 0 and json.loads(out)["public"].startswith("ed25519:"), err
    code, out, err = run(
        capsys, "--store", store_url, "enroll", "alice@example.org", "--role", "teller", "--tools", "trans*",
        "--public-key", f"{alice_key}.pub", "--admin-key", str(admin_key),
    )  # fmt: skip
    assert code == 0 and ALICE in out, err
    return {"url": store_url, "log_key": log_key, "admin_key": admin_key, "alice_key": alice_key}


def _open_three(url: str) -> list[Any]:
    store = open_store(url)
    svc = ReviewService(store)
    calls = [call(f"x{n}", tool_schema=TOOL_SCHEMA) for n in range(3)]
    reviews = list(svc.open_frontier(calls, actor=AGENT).reviews)
    store.close()
    return reviews


def test_decide_from_a_terminal_with_your_own_key(admin_setup: dict[str, Any], capsys: Any) -> None:
    s, me = (
        ["--store", admin_setup["url"]],
        ["--as", "alice@example.org", "--reviewer-key", str(admin_setup["alice_key"])],
    )
    a, b, c = _open_three(admin_setup["url"])
    code, out, _ = run(capsys, *s, "pending", "--json")
    assert code == 0 and [r["review"] for r in json.loads(out)] == [a.id, b.id, c.id]
    code, out, _ = run(capsys, *s, "approve", a.id, *me, "--rationale", "fine", "--json")
    assert code == 0 and json.loads(out)["status"] == "approved" and json.loads(out)["signed"] is True
    # name=value edits, typed by the tool's schema (an integer and a boolean here)
    code, out, _ = run(capsys, *s, "edit", b.id, "amount=3", "urgent=true", *me)
    assert code == 0 and "edited" in out and '"amount": 3' in out
    code, out, _ = run(capsys, *s, "reject", c.id, *me, "--reason", "no")
    assert code == 0 and "rejected" in out
    store = open_store(admin_setup["url"])
    assert ReviewService(store).get(b.id).final_args == {"amount": 3, "to": "bob", "urgent": True}
    assert all(e.sig is not None for e in store.entries() if e.kind.startswith("review.") and e.kind != "review.opened")
    store.close()
    code, out, _ = run(capsys, *s, "verify", "--json")
    assert code == 0 and json.loads(out)["ok"] is True


def test_show_says_a_refused_call_will_not_run(admin_setup: dict[str, Any], capsys: Any) -> None:
    """Issue 34 item 10: after ``run.resume_failed`` (here: the tool ran with other args than the signed
    ones), ``audit show`` listed no such entry and still said "runs with". It shows what the log says."""
    s = ["--store", admin_setup["url"]]
    me = ["--as", "alice@example.org", "--reviewer-key", str(admin_setup["alice_key"])]
    a, b, c = _open_three(admin_setup["url"])
    run(capsys, *s, "edit", a.id, "amount=1", *me)
    for other in (b, c):
        run(capsys, *s, "reject", other.id, *me, "--reason", "not these")
    store = open_store(admin_setup["url"])
    svc = ReviewService(store)
    svc.claim_resume(svc.get(a.id).frontier, actor=AGENT)
    refused = svc.record_execution(a.id, actor=AGENT, args={"amount": 5000, "to": "bob"})  # not what was signed
    store.close()
    assert refused.kind == "run.resume_failed"
    code, out, _ = run(capsys, *s, "show", a.id)
    assert code == 0 and "runs with" not in out, out
    lines = out.splitlines()
    assert lines[2].startswith("refused: tool.executed refused: ") and "expected the tool to run with" in lines[2]
    assert lines[3] == (
        f"(run.resume_failed at seq {refused.seq}: this call is not run, and no resumer, restart or take-over "
        "sends it again)"
    )
    assert lines[4] == 'signed to run with: {"amount": 1, "to": "bob"}'
    assert any(f"{refused.seq}" in line and "run.resume_failed" in line for line in lines[5:]), out
    code, out, _ = run(capsys, *s, "show", a.id, "--json")
    shown = json.loads(out)
    assert "expected the tool to run with" in shown["resume_failed"] and shown["executed"] is False
    kinds = [e["kind"] for e in shown["history"]]
    assert kinds == ["review.opened", "review.edited", "run.resumed", "run.resume_failed"]


def test_show_log_and_export(admin_setup: dict[str, Any], capsys: Any) -> None:
    s = ["--store", admin_setup["url"]]
    me = ["--as", "alice@example.org", "--reviewer-key", str(admin_setup["alice_key"])]
    a, _b, _c = _open_three(admin_setup["url"])
    run(capsys, *s, "edit", a.id, "amount=1", *me)
    code, out, _ = run(capsys, *s, "show", a.id)
    assert code == 0 and "status: edited" in out and "runs with" in out and "signed (Ed25519)" in out
    code, out, _ = run(capsys, *s, "show", a.id, "--json")
    shown = json.loads(out)
    assert shown["final_args"]["amount"] == 1 and [e["kind"] for e in shown["history"]] == [
        "review.opened",
        "review.edited",
    ]
    code, out, _ = run(capsys, *s, "show", "0", "--json")
    assert code == 0 and json.loads(out)["kind"] == "key.enrolled"
    code, out, _ = run(capsys, *s, "log", "--kind", "review.opened")
    assert code == 0 and len(out.splitlines()) == 3
    code, out, _ = run(capsys, *s, "log", "--review", a.id, "--json")
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["review.opened", "review.edited"]
    code, out, _ = run(capsys, *s, "export")
    store = open_store(admin_setup["url"])
    assert code == 0 and [line.encode() for line in out.splitlines()] == [raw for _s, _h, raw in store.iter_raw()]
    code, out, _ = run(capsys, *s, "reviewers", "--json")
    [alice] = json.loads(out)
    assert alice["reviewer"] == ALICE and alice["tools"] == ["trans*"] and alice["keys"][0]["alg"] == "Ed25519"
    store.close()


def test_prove_writes_a_self_contained_proof_that_check_proof_checks(
    admin_setup: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    s = ["--store", admin_setup["url"]]
    _open_three(admin_setup["url"])
    code, _out, err = run(capsys, *s, "prove", "3")
    assert code == 2 and "run `audit checkpoint`" in err  # no checkpoint covers it yet
    kept = tmp_path / "cp.json"
    assert run(capsys, *s, "--key", str(admin_setup["log_key"]), "checkpoint", "--json", "-o", str(kept))[0] == 0
    proof = tmp_path / "proof.json"
    code, out, _ = run(capsys, *s, "prove", "3", "-o", str(proof))
    assert code == 0 and "proof of entry 3" in out
    bundle = json.loads(proof.read_text())
    assert bundle["checkpoint"] == json.loads(kept.read_text())
    assert all(h.startswith("sha256:") for h in [bundle["leaf"], *bundle["path"], bundle["checkpoint"]["root"]])
    # the auditor needs nothing but the file (and, to be sure, the log key they pinned)
    code, out, _ = run(capsys, "check-proof", str(proof), "--log-key", bundle["log_key"])
    assert code == 0 and "entry 3 (review.opened) is in log" in out
    assert run(capsys, "verify", str(proof))[0] == 0  # verify recognises a proof file
    # tampering with any part of it fails (exit 1), naming the part
    for field, change in (
        ("entry", lambda b: b.update(entry=b["entry"].replace("transfer", "transfex"))),
        (
            "path",
            lambda b: b.update(path=[b["path"][0][:-1] + ("0" if b["path"][0][-1] != "0" else "1")] + b["path"][1:]),
        ),
        ("checkpoint", lambda b: b["checkpoint"].update(root="sha256:" + "0" * 64)),
    ):
        forged = json.loads(proof.read_text())
        change(forged)
        bad = tmp_path / f"bad-{field}.json"
        bad.write_text(json.dumps(forged))
        code, _out, err = run(capsys, "check-proof", str(bad))
        assert code == 1 and "TAMPERED" in err, (field, err)
    code, _out, err = run(capsys, "check-proof", str(proof), "--log-key", Signer.generate().public)
    assert code == 1 and "log key" in err
    # consistency, in sha256:hex too
    run(capsys, *s, "log")
    code, out, _ = run(capsys, *s, "consistency", str(kept), "--json")
    result = json.loads(out)
    assert code == 0 and result["old_size"] == bundle["size"]
    merkle.verify_consistency(
        result["old_size"], result["new_size"], parse_hash(result["old_root"]), parse_hash(result["new_root"]),
        [parse_hash(h) for h in result["proof"]],
    )  # fmt: skip


def test_enrolment_is_explicit(admin_setup: dict[str, Any], capsys: Any) -> None:
    s, adm = ["--store", admin_setup["url"]], ["--admin-key", str(admin_setup["admin_key"])]
    code, _out, err = run(capsys, *s, "enroll", "bob@example.org", "--role", "teller", *adm)
    assert code == 2 and "--any-tool" in err
    code, _out, err = run(capsys, *s, "enroll", "alice@example.org", "--role", "teller", "--any-tool", *adm)
    assert code == 2 and "--replace" in err and "trans*" in err
    code, out, _ = run(capsys, *s, "enroll", "alice@example.org", "--role", "teller", "--any-tool", "--replace", *adm)
    assert (
        code == 0
        and "before: roles ['teller'], tools ['trans*']" in out
        and "now:    roles ['teller'], tools ['*']" in out
    )
    code, out, _ = run(
        capsys, *s, "enroll", "bob@example.org", "--role", "ops", "--tools", "x", "--code", *adm, "--json"
    )
    assert code == 0 and len(json.loads(out)["code"]) >= 16
    code, _out, err = run(capsys, *s, "enroll", "carol@example.org", "--role", "ops", "--any-tool")
    assert code == 2 and "--admin-key" in err
    code, _out, err = run(capsys, *s, "enroll", "carol@example.org", "--role", "ops", "--any-tool",
                          "--admin-key", str(admin_setup["log_key"]))  # fmt: skip
    assert code == 2 and "admin" in err  # the log key is not an admin key
    code, out, _ = run(capsys, *s, "disable", "bob@example.org", "--reason", "left", *adm)
    assert code == 0 and "disabled human:bob@example.org" in out


def test_read_only_verbs_create_nothing_and_bare_paths_work(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for verb in (["verify"], ["log"], ["show", "0"], ["export"], ["pending"], ["reviewers"], ["prove", "0"]):
        code, _out, err = run(capsys, "--store", "typo.db", *verb)
        assert code == 2 and "found none" in err, (verb, err)
    assert list(tmp_path.iterdir()) == []
    # a bare path is a SQLite file
    code, _out, err = run(capsys, "--store", "signoff.db", "--key", "log.pem", "init", "--admin-key", "admin.pem")
    assert code == 0, err
    assert run(capsys, "--store", "signoff.db", "verify")[0] == 0
    assert run(capsys, "--store", f"sqlite:///{tmp_path / 'signoff.db'}", "verify")[0] == 0


def test_unusable_input_exits_2_with_a_message(admin_setup: dict[str, Any], tmp_path: Path, capsys: Any) -> None:
    s = ["--store", admin_setup["url"]]
    me = ["--as", "alice@example.org", "--reviewer-key", str(admin_setup["alice_key"])]
    [review, *_] = _open_three(admin_setup["url"])
    deep = "[" * 5000 + "]" * 5000
    not_json = tmp_path / "not.json"
    not_json.write_text("{nope", encoding="utf-8")
    wrong_kind = admin_setup["admin_key"]
    cases: list[tuple[list[str], str]] = [
        ([*s, "show", "999"], "seq 999"),
        ([*s, "show", "rv_nope"], "no such review"),
        ([*s, "prove", "999"], "seq 999"),
        ([*s, "approve", "rv_nope", *me], "no such review"),
        ([*s, "edit", review.id, "amount=lots", *me], "amount: expected an integer, found 'lots'"),
        ([*s, "edit", review.id, "nonsense", *me], "expected name=value"),
        ([*s, "edit", review.id, "--patch", "not json", *me], "expected an RFC 6902 JSON patch"),
        ([*s, "edit", review.id, "--patch", deep, *me], "nesting"),
        ([*s, "edit", review.id, "--patch", '[{"op":"remove","path":"/nope"}]', *me], "expected operations that apply"),
        ([*s, "edit", review.id, "ghost=1", *me], "ghost"),
        (
            [*s, "approve", review.id, "--as", "alice@example.org"],
            "sig: expected",
        ),  # signed decisions: no key, no decision
        (
            [*s, "approve", review.id, "--as", "mallory@example.org", "--reviewer-key", str(admin_setup["alice_key"])],
            "enrolled",
        ),
        ([*s, "approve", review.id, "--as", "agent:bot"], "expected a person"),
        ([*s, "verify", str(wrong_kind)], "another kind of file"),
        ([*s, "verify", str(tmp_path / "absent.jsonl")], "found nothing"),
        ([*s, "verify", "--against", str(not_json)], "expected a checkpoint JSON file"),
        ([*s, "consistency", str(tmp_path / "absent.json")], "expected a checkpoint file"),
        (["--store", "mysql://x@y/z", "verify"], "expected sqlite:/// or postgresql://"),
        (["--store", "sqlite:///:memory:", "verify"], "expected a SQLite file"),
        ([*s, "--key", str(tmp_path / "new.pem"), "init", "--admin-key", str(tmp_path / "a2.pem")], "--new-log"),
        ([*s, "--key", str(admin_setup["admin_key"]), "checkpoint"], "expected the log's key"),
    ]
    store = open_store(admin_setup["url"])
    size = store.size()
    failures = []
    for argv, words in cases:
        code, out, err = run(capsys, *argv)
        if code != 2 or words not in err or "Traceback" in err + out:
            failures.append(f"{argv[2:]}: exit {code}, stderr {err.strip()!r}")
    assert not failures, "\n".join(failures)
    assert store.size() == size, "a refused command wrote to the log"
    assert not (tmp_path / "new.pem").exists() and not (tmp_path / "a2.pem").exists()
    store.close()


def test_verify_exit_codes_through_the_real_cli(case: Case, tmp_path: Path, capsys: Any) -> None:
    """0 intact, 2 unusable (a store with no log), 1 tampered: as a shell script sees them."""
    empty_url = f"sqlite:///{tmp_path / 'empty.db'}"
    open_store(empty_url).close()  # tables, but no log
    intact, empty = run_cli_many(
        [cli_argv(case.url, case.key, "verify"), cli_argv(empty_url, None, "verify")], cwd=tmp_path
    )
    assert (intact.returncode, empty.returncode) == (0, 2), intact.stderr + empty.stderr
    assert "ok: log" in intact.stdout and "Traceback" not in empty.stderr
    with case.db() as db:
        raw = db.raw(9)
        db.run(("UPDATE signoff_entry SET raw = ? WHERE seq = 9", (raw[:-2] + b"!}",)))
    (bad,) = run_cli_many([cli_argv(case.url, case.key, "verify", "--json")], cwd=tmp_path)
    assert bad.returncode == 1
    failure = json.loads(bad.stdout)["failure"]
    assert failure["seq"] == 9 and failure["rule"] == "entry hash"


def test_every_verb_has_help_with_an_example(capsys: Any) -> None:
    from signoff.audit.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    verbs = sorted(sub.choices)  # type: ignore[attr-defined]
    assert {"init", "verify", "check-proof", "prove", "migrate", "keygen", "enroll", "approve", "edit"} <= set(verbs)
    for verb in verbs:
        with pytest.raises(SystemExit) as done:
            main([verb, "--help"])
        out = capsys.readouterr().out
        assert done.value.code == 0 and re.search(r"^examples?:$", out, re.M) and "exit codes:" in out, verb
    printing = {"init", "verify", "check-proof", "show", "consistency", "migrate", "keygen", "enroll", "disable",
                "enroll-key", "revoke-key", "reviewers", "pending", "approve", "edit", "reject"}  # fmt: skip
    for verb in printing:
        assert "--json" in sub.choices[verb].format_help(), verb  # type: ignore[attr-defined]


def test_usage_errors_exit_2(capsys: Any) -> None:
    for argv in (["verify", "--no-such-flag"], []):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
    capsys.readouterr()


def test_unknown_review_leaves_the_database_alone(case: Case, capsys: Any) -> None:
    with case.db() as db:
        before = db.rows("SELECT count(*) FROM signoff_entry")
    code, _out, err = run(capsys, "--store", case.url, "approve", "rv_0000000000000000", "--as", "alice@example.org")
    assert code == 2 and "no such review" in err
    with Db(case.url) as db:
        assert db.rows("SELECT count(*) FROM signoff_entry") == before


def test_policies_and_a_four_eyes_decision_from_terminals(
    admin_setup: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    """The admin sets a four-eyes policy with a rule; alice's approval is one of two; dave's second
    approval decides; a small transfer is let through by the rule; the policy is listed and retired."""
    s, admin = ["--store", admin_setup["url"]], ["--admin-key", str(admin_setup["admin_key"])]
    dave_key = tmp_path / "dave.pem"
    assert run(capsys, "keygen", "-o", str(dave_key))[0] == 0
    code, _out, err = run(
        capsys, *s, "enroll", "dave@example.org", "--role", "teller", "--any-tool", "--public-key", f"{dave_key}.pub",
        *admin,
    )  # fmt: skip
    assert code == 0, err
    code, out, err = run(
        capsys, *s, "policy", "set", "four-eyes", "--tools", "trans*", "--approvals", "2", "--role", "teller",
        "--review-when", "args.amount > vars.limit", "--var", "limit=20", "--escalate-to", "supervisor",
        "--escalate-after", "3600", *admin, "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["body"]["vars"] == {"limit": 20}, err
    code, out, _ = run(capsys, *s, "policy", "list")
    assert code == 0 and "four-eyes" in out and "2 approvals by role teller" in out
    assert "escalates to role supervisor 3600 s after opening" in out
    # A bad rule is refused by name, and writes nothing.
    code, _out, err = run(capsys, *s, "policy", "set", "bad", "--tools", "x", "--review-when", "args.(", *admin)
    assert code == 2 and "policy.review_when" in err
    # Only the admin key sets a policy.
    code, _out, err = run(
        capsys, *s, "policy", "set", "lax", "--tools", "*", "--admin-key", str(admin_setup["alice_key"])
    )
    assert code == 2 and "admin" in err

    [review] = _open_three(admin_setup["url"])[:1]
    alice = ["--as", "alice@example.org", "--reviewer-key", str(admin_setup["alice_key"])]
    dave = ["--as", "dave@example.org", "--reviewer-key", str(dave_key)]
    code, out, _ = run(capsys, *s, "approve", review.id, *alice)
    assert code == 0 and "approval 1 of 2 recorded" in out and "1 more person" in out
    code, out, _ = run(capsys, *s, "pending")
    assert "approvals 1/2" in out
    code, out, err = run(capsys, *s, "approve", review.id, *alice)
    assert code == 2 and "twice" in err
    code, out, _ = run(capsys, *s, "approve", review.id, *dave, "--json")
    assert code == 0 and json.loads(out)["status"] == "approved"

    store = open_store(admin_setup["url"])
    try:
        small, why = ReviewService(store).auto_approve(call("tiny", args={"amount": 5, "to": "bob"}), actor=AGENT)
        assert small is not None and small.status == "auto_approved", why
    finally:
        store.close()
    code, out, _ = run(capsys, *s, "policy", "retire", "four-eyes", *admin)
    assert code == 0 and "retired policy four-eyes" in out
    code, out, _ = run(capsys, *s, "policy", "list", "--json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = run(capsys, *s, "verify")
    assert code == 0, out


def test_verify_warns_about_approved_calls_that_never_ran(admin_setup: dict[str, Any], capsys: Any) -> None:
    """Approved, its run resumed, and no tool.executed: `audit verify --stalled-after S` names it with
    the session and invocation to look at, and still exits 0 (a warning, not a failure)."""
    s = ["--store", admin_setup["url"]]
    review = _open_three(admin_setup["url"])[0]
    me = ["--as", "alice@example.org", "--reviewer-key", str(admin_setup["alice_key"])]
    store = open_store(admin_setup["url"])
    svc = ReviewService(store)
    frontier = svc.frontier(review.frontier)
    store.close()
    for each in frontier.reviews:
        assert run(capsys, *s, "approve", each.id, *me)[0] == 0
    store = open_store(admin_setup["url"])
    ReviewService(store).claim_resume(review.frontier, actor=AGENT)
    store.close()
    code, out, _ = run(capsys, *s, "verify", "--stalled-after", "0", "--json")
    found = json.loads(out)
    assert code == 0 and found["ok"] and {r["review"] for r in found["stalled"]} == {r.id for r in frontier.reviews}
    assert found["stalled"][0]["session"] == "sess-1" and found["stalled"][0]["resumed_by"] == AGENT
    code, out, _ = run(capsys, *s, "verify", "--stalled-after", "0")
    assert code == 0 and "warning:" in out and "its tool has not run" in out
    code, out, _ = run(capsys, *s, "verify", "--stalled-after", "3600", "--json")
    assert code == 0 and "stalled" not in json.loads(out)
    # a resume the log says failed (issue 21): listed with its reason however recent, and never as stalled
    store = open_store(admin_setup["url"])
    ReviewService(store).record_resume_failure(
        review.frontier, actor=AGENT, reviews=[review.id], reason="rewound: the run went back before invocation inv-1"
    )
    store.close()
    code, out, _ = run(capsys, *s, "verify", "--stalled-after", "3600", "--json")
    [failed] = json.loads(out)["stalled"]
    assert code == 0 and failed["review"] == review.id
    assert failed["reason"] == "rewound: the run went back before invocation inv-1"
    code, out, _ = run(capsys, *s, "verify", "--stalled-after", "3600")
    assert code == 0 and f"{review.id} (transfer) approved, but it never runs: run.resume_failed at seq" in out, out


def test_init_writes_the_admin_key_beside_the_log_key_and_says_where(
    store_url: str, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19: `audit --key keys/log.key init` put the admin's private key in the current directory
    (signoff-admin-key.pem), not beside the log key as the README says."""
    work, keys_dir = tmp_path / "cwd", tmp_path / "keys"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("SIGNOFF_ADMIN_KEY", raising=False)
    code, out, err = run(capsys, "--store", store_url, "--key", str(keys_dir / "log.key"), "init")
    assert code == 0, err
    assert list(work.iterdir()) == [] or all(p.suffix in (".db", ".db-wal", ".db-shm") for p in work.iterdir())
    assert (keys_dir / "log.key").is_file() and (keys_dir / "log.admin.key").is_file()
    assert f"private key in {keys_dir / 'log.key'}" in out and f"private key in {keys_dir / 'log.admin.key'}" in out


def test_an_edit_nested_too_deep_names_the_field(admin_setup: dict[str, Any], capsys: Any) -> None:
    """Issue 19: `audit edit RV memo=[[[[…]]]]` (5,000 levels) gave "unexpected RecursionError"."""
    [review, *_] = _open_three(admin_setup["url"])
    deep = "[" * 5000 + "]" * 5000
    code, _out, err = run(
        capsys, "--store", admin_setup["url"], "edit", review.id, f"memo={deep}", "--as", "alice@example.org",
        "--reviewer-key", str(admin_setup["alice_key"]),
    )  # fmt: skip
    assert code == 2 and "RecursionError" not in err, err
    assert "memo: expected a value nested at most 32 levels deep" in err


def test_checkpoints_are_notes_and_receipts_check_offline(
    admin_setup: dict[str, Any], tmp_path: Path, capsys: Any
) -> None:
    """Issue 18 from a terminal: `audit vkey`, `audit checkpoint` (a C2SP note, kept as a file and used with
    --against and consistency), and a review's receipt (`prove REVIEW --tlog-proof`, `check-proof`)."""
    s, key = ["--store", admin_setup["url"]], ["--key", str(admin_setup["log_key"])]
    reviews = _open_three(admin_setup["url"])
    code, vkey, _ = run(capsys, *s, "vkey")
    vkey = vkey.strip()
    assert code == 0 and vkey.startswith("signoff.invalid/log_") and vkey.count("+") >= 2
    code, note, _ = run(capsys, *s, *key, "checkpoint", "-o", str(tmp_path / "checkpoint.txt"))
    assert code == 0 and note.startswith(vkey.split("+")[0] + "\n") and "\n\n\u2014 " in note
    assert (tmp_path / "checkpoint.txt").read_text() == note
    code, _out, err = run(capsys, *s, "verify", "--against", str(tmp_path / "checkpoint.txt"))
    assert code == 0, err
    code, out, _ = run(capsys, *s, "consistency", str(tmp_path / "checkpoint.txt"), "--json")
    assert code == 0 and json.loads(out)["old_size"] == int(note.split("\n")[1])
    code, _out, err = run(capsys, *s, "prove", reviews[0].id, "--tlog-proof")
    assert code == 2 and "expected a decided review" in err
    store = open_store(admin_setup["url"])
    try:
        svc = ReviewService(store)
        decided = svc.reject(reviews[0].id, reviewer=ALICE, reason="no", signer=_alice_key(admin_setup))
        seq = decided.decision_seq
    finally:
        store.close()
    assert run(capsys, *s, *key, "checkpoint")[0] == 0
    receipt = tmp_path / "r.tlog-proof"
    code, out, err = run(capsys, *s, "prove", reviews[0].id, "--tlog-proof", "-o", str(receipt))
    assert code == 0 and f"receipt of entry {seq}" in out, err
    code, out, err = run(capsys, "check-proof", str(receipt), "--log-vkey", vkey)
    assert code == 0 and f"entry {seq} (review.rejected of {reviews[0].id}, by {ALICE})" in out, err
    assert run(capsys, "verify", str(receipt), "--log-vkey", vkey)[0] == 0  # verify takes a receipt too
    code, _out, err = run(capsys, "check-proof", str(receipt))
    assert code == 2 and "--log-vkey" in err
    other = run(capsys, "--store", admin_setup["url"], "vkey")[1].strip().replace("signoff.invalid", "evil.example", 1)
    code, _out, err = run(capsys, "check-proof", str(receipt), "--log-vkey", other)
    assert code == 2 and "expected key ID" in err  # a vkey whose name was changed no longer holds
    lines = receipt.read_bytes().split(b"\n")
    lines[3] = b"A" * 43 + b"="
    (tmp_path / "bad.tlog-proof").write_bytes(b"\n".join(lines))
    code, _out, err = run(capsys, "check-proof", str(tmp_path / "bad.tlog-proof"), "--log-vkey", vkey)
    assert code == 1 and "TAMPERED" in err


def _alice_key(setup: dict[str, Any]) -> Signer:
    from signoff.audit.keys import read_private_key

    return read_private_key(setup["alice_key"])


def test_pending_first_or_last_id_for_scripts(admin_setup: dict[str, Any], capsys: Any) -> None:
    """Issue 19: the README's `REVIEW=$(… pending --json | python -c '…[0]…')` was an IndexError traceback
    when nothing waited. `audit pending --first --id` prints one id, or says nothing waits (exit 2)."""
    s = ["--store", admin_setup["url"]]
    code, out, err = run(capsys, *s, "pending", "--first", "--id")
    assert code == 2 and out == "" and "expected a pending review, found none" in err
    reviews = _open_three(admin_setup["url"])
    assert run(capsys, *s, "pending", "--first", "--id")[1] == reviews[0].id + "\n"
    assert run(capsys, *s, "pending", "--last", "--id")[1] == reviews[-1].id + "\n"
    assert run(capsys, *s, "pending", "--id")[1].split() == [r.id for r in reviews]
    with pytest.raises(SystemExit) as refused:  # one or the other (argparse's usage error: exit 2)
        run(capsys, *s, "pending", "--first", "--last")
    assert refused.value.code == 2
