"""``audit approve|edit|reject --reviewer-key`` with a key that is not the reviewer's (issue 19, item 6).

The log refuses such a decision whatever the command line says (trust.check_signature). The command
says, before it sends anything, whose key the file holds and what to pass instead: never "found none"
when a key was given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from auditkit import AGENT, ALICE, Keys, call

from signoff.audit import ReviewService, Signer
from signoff.audit.cli import main

DAVE = "human:dave@example.org"


def _decide(capsys: Any, url: str, verb: str, review: str, person: str, key: Path, *extra: str) -> tuple[int, str]:
    code = main(["--store", url, verb, review, *extra, "--as", person, "--reviewer-key", str(key)])
    return code, capsys.readouterr().err


def test_someone_elses_key_is_named_with_its_owner_and_what_to_pass(
    svc: ReviewService, keys: Keys, store_url: str, tmp_path: Path, capsys: Any
) -> None:
    dave = Signer.generate()
    svc.enroll_reviewer(DAVE, roles=["teller"], tools=["*"], key=dave.public, admin=keys.admin)
    review = svc.open_frontier([call("c1")], actor=AGENT).reviews[0]
    alice_pem = keys.write(ALICE, tmp_path / "alice.pem")
    size = svc.store.size()
    for verb, extra in (("approve", ()), ("edit", ("amount=5",)), ("reject", ("--reason", "no"))):
        code, err = _decide(capsys, store_url, verb, review.id, "dave@example.org", alice_pem, *extra)
        assert code == 2, err
        assert err.startswith("error: --reviewer-key: expected a key enrolled for human:dave@example.org") and (
            err.count("\n") == 1
        ), err
        assert f"found {alice_pem} with key {keys.alice.fingerprint}, which is enrolled for {ALICE}" in err, err
        assert "pass --as alice@example.org if you are them" in err and dave.fingerprint in err, err
        assert "found none" not in err, err
    assert svc.store.size() == size and svc.get(review.id).status == "pending"


def test_a_key_enrolled_for_nobody_and_a_reviewer_without_a_key_file(
    svc: ReviewService, keys: Keys, store_url: str, tmp_path: Path, capsys: Any
) -> None:
    svc.enroll_reviewer(DAVE, roles=["teller"], tools=["*"], code="dave-code-123456", admin=keys.admin)
    review = svc.open_frontier([call("c1")], actor=AGENT).reviews[0]
    stranger = Signer.generate()
    from signoff.audit.keys import write_private_key

    stranger_pem = write_private_key(stranger, tmp_path / "stranger.pem")
    code, err = _decide(capsys, store_url, "approve", review.id, "alice@example.org", stranger_pem)
    assert code == 2 and "which is enrolled for nobody on this log" in err and keys.alice.fingerprint in err, err
    code, err = _decide(capsys, store_url, "approve", review.id, "dave@example.org", stranger_pem)
    assert code == 2 and f"{DAVE} has no key file enrolled" in err and f"audit enroll-key {DAVE}" in err, err
    # her own key still decides
    code, err = _decide(capsys, store_url, "approve", review.id, "alice@example.org", keys.write(ALICE, tmp_path / "a"))
    assert code == 0, err
