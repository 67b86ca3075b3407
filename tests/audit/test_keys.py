"""Keys and signatures: the log key and the admin key from ``audit init``, signed checkpoints,
keys the admin enrolls and signed decisions. No private key may ever reach the database."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from auditkit import (
    ADMIN,
    AGENT,
    ALICE,
    BOB,
    MALLORY,
    SERVICE,
    Db,
    Keys,
    admin_draft,
    backend_of,
    call,
    cli_argv,
    key_body,
    legacy_checkpoint,
    python_env,
    snapshot,
    sqlite_path,
)
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.audit import NotAllowed, ReviewService, Signer, Store, StoreError, canonical, merkle, open_store
from signoff.audit.entry import statement as v1_statement
from signoff.audit.errors import InvalidEntry, KeyFileError
from signoff.audit.keys import fingerprint, read_private_key, verify_signature
from signoff.audit.store import Checkpoint
from signoff.audit.trust import LogRules
from signoff.audit.trust import statement as trust_statement
from signoff.audit.verify import verify_store


def _private_forms(key_file: Path) -> list[bytes]:
    """Every way the private key could leak: PEM text, its base64 body, DER, raw seed, hex, base64."""
    pem = key_file.read_bytes()
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, Ed25519PrivateKey)
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    body = b"".join(line for line in pem.splitlines() if not line.startswith(b"-----"))
    return [pem, body, der, raw, raw.hex().encode(), base64.b64encode(raw), base64.b64encode(raw).rstrip(b"=")]


def _database_bytes(url: str) -> bytes:
    """Everything the database holds, as bytes: the SQLite files, or every row of every table."""
    if backend_of(url) == "sqlite":
        base = Path(sqlite_path(url))
        return b"".join(p.read_bytes() for p in (base, Path(f"{base}-wal"), Path(f"{base}-shm")) if p.exists())
    chunks: list[bytes] = []
    with Db(url) as db:
        for table in db.tables():
            for row in db.rows(f"SELECT * FROM {table}"):
                for value in row:
                    chunks.append(value if isinstance(value, bytes) else str(value).encode())
    return b"\x00".join(chunks)


def test_audit_init_writes_a_0600_pem_ed25519_key_that_never_enters_the_database(
    store_url: str, tmp_path: Path
) -> None:
    """The log key and the admin key: separate 0600 PEM files; neither (nor a reviewer's key) leaks."""
    key_file = tmp_path / "keys" / "log.pem"
    admin_file = tmp_path / "offline" / "admin.pem"
    done = subprocess.run(
        cli_argv(store_url, key_file, "init", "--admin-key", str(admin_file)),
        capture_output=True,
        text=True,
        env=python_env(),
        cwd=tmp_path,
        preexec_fn=lambda: os.umask(0),  # the mode must not depend on the caller's umask
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for path in (key_file, admin_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        pem = path.read_bytes()
        assert pem.startswith(b"-----BEGIN PRIVATE KEY-----\n") and pem.rstrip().endswith(b"-----END PRIVATE KEY-----")
    signer, admin = read_private_key(key_file), read_private_key(admin_file)
    assert signer.public != admin.public
    alice = Signer.generate()
    alice_file = tmp_path / "alice.pem"
    from signoff.audit.keys import write_private_key

    write_private_key(alice, alice_file)
    store = open_store(store_url)
    try:
        assert signer.public == store.public_key
        assert store.entry(1).body["admin"]["key"] == admin.public
        assert signer.public in done.stdout and str(key_file) in done.stdout
        # use the store a little, so any key material would have had its chance to leak: the log key
        # also serves as the service's key, the admin enrolls, alice signs a decision
        ReviewService(store).enroll_key(SERVICE, signer.public, admin=admin)
        svc = ReviewService(store, signer=signer)
        svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=alice.public, admin=admin)
        review = svc.open_frontier([call("leak")], actor=SERVICE).reviews[0]
        svc.approve(review.id, reviewer=ALICE, signer=alice)
        store.checkpoint(key_file)
        assert verify_store(store).ok
    finally:
        store.close()
    haystack = _database_bytes(store_url)
    for public in (signer.public, admin.public, alice.public):
        assert public.encode() in haystack  # the search itself works
    for path in (key_file, admin_file, alice_file):
        for form in _private_forms(path):
            assert form not in haystack, path


def test_init_refuses_to_overwrite_a_key_file(store_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "log.pem"
    key_file.write_bytes(b"precious\n")
    store = open_store(store_url)
    try:
        with pytest.raises(KeyFileError) as caught:
            store.init_log(key_file)
        assert "overwrite" in str(caught.value) and "expected" in str(caught.value) and "found" in str(caught.value)
        assert key_file.read_bytes() == b"precious\n"
        with pytest.raises(StoreError):
            store.info()  # no log was created
    finally:
        store.close()


def test_init_refuses_a_second_log_and_writes_no_key(store: Store, tmp_path: Path) -> None:
    other = tmp_path / "second.pem"
    from signoff.audit import LogExists

    with pytest.raises(LogExists) as caught:
        store.init_log(other)
    assert "expected an empty store" in str(caught.value)
    assert not other.exists()


def test_read_private_key_refusals(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(KeyFileError, match="expected a readable PEM key file, found"):
        read_private_key(missing)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    with pytest.raises(KeyFileError, match="expected an unencrypted PEM private key"):
        read_private_key(junk)
    ecdsa = tmp_path / "ec.pem"
    ecdsa.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(KeyFileError, match="expected an Ed25519 key, found"):
        read_private_key(ecdsa)


def test_fingerprint_is_sha256_of_the_raw_public_key() -> None:
    signer = Signer.generate()
    raw = signer.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert signer.public == "ed25519:" + base64.b64encode(raw).decode()
    assert signer.fingerprint == fingerprint(signer.public) == "ed25519:" + hashlib.sha256(raw).hexdigest()
    sig = signer.sign(b"message")
    assert sig["key"] == signer.fingerprint and sig["alg"] == "Ed25519"
    assert verify_signature(signer.public, sig, b"message")
    assert not verify_signature(signer.public, sig, b"messagf")
    assert not verify_signature(Signer.generate().public, sig, b"message")


# -- checkpoints ------------------------------------------------------------------------


def test_signed_checkpoint_verifies_and_commits_to_the_tree(store: Store, key_path: Path, keys: Keys) -> None:
    """A checkpoint is a C2SP signed note (c2sp.org/tlog-checkpoint): origin, size, base64 root, signed
    by the log key as an Ed25519 note signature under the origin's key name."""
    for n in range(6):
        store.append(*admin_draft(store, keys.admin, key_body(n)))
    point = store.checkpoint(key_path)
    leaves = [bytes.fromhex(h[7:]) for _s, h, _r in store.iter_raw()]
    assert point.size == 8 and store.size() == 9  # the log records the checkpoint right after what it covers
    assert point.log == store.log_id and point.sig == {}
    root = "sha256:" + store.root(point.size).hex()
    assert point.root == "sha256:" + merkle.root_from_leaves(leaves[: point.size]).hex() == root
    origin = f"signoff.invalid/{store.log_id}"
    text, _blank, signature = point.note.partition("\n\n")
    assert text == f"{origin}\n8\n{base64.b64encode(store.root(8)).decode()}"
    assert signature.startswith(f"\u2014 {origin} ") and signature.endswith("\n")
    assert point.verify(store.public_key)
    assert store.latest_checkpoint() == point
    recorded = store.entry(point.size)
    assert (recorded.kind, recorded.actor) == ("log.checkpoint", f"log:{store.log_id}")
    assert recorded.body == {"size": point.size, "root": point.root, "at": point.at, "note": point.note}
    assert recorded.sig is not None and verify_signature(
        store.public_key, recorded.sig, trust_statement(store.rules, recorded.kind, recorded.actor, recorded.body)
    )
    assert verify_store(store).ok
    assert Checkpoint.from_json(json.loads(json.dumps(point.to_json()))) == point
    for field, value in (("size", 6), ("root", "sha256:" + "0" * 64)):  # what the note signs
        forged = Checkpoint.from_json({**point.to_json(), field: value})
        assert not forged.verify(store.public_key), field
    other_root = point.note.replace(text.split("\n")[2], base64.b64encode(b"\0" * 32).decode())
    assert not Checkpoint.from_json({**point.to_json(), "note": other_root}).verify(store.public_key)
    assert not point.verify(Signer.generate().public)


def test_checkpoints_recorded_before_notes_keep_verifying(store: Store, key_path: Path, keys: Keys) -> None:
    """A log from before C2SP checkpoints holds JSON checkpoints signed by the log key; they keep verifying
    (and any forgery of them fails), and the log's new checkpoints are notes beside them."""
    for n in range(3):
        store.append(*admin_draft(store, keys.admin, key_body(n)))
    old = legacy_checkpoint(store, keys.log)
    assert old.note == "" and old.verify(store.public_key)
    for field, value in (
        ("size", 2),
        ("root", "sha256:" + "0" * 64),
        ("at", "2030-01-01T00:00:00.000000Z"),
        ("log", "log_other"),
    ):
        forged = Checkpoint.from_json({**old.to_json(), field: value})
        assert not forged.verify(store.public_key), field
    store.append(*admin_draft(store, keys.admin, key_body(9)))
    new = store.checkpoint(key_path)
    assert new.note and [c.size for c in store.checkpoints()] == [old.size, new.size]
    assert verify_store(store).ok


def test_checkpoint_refuses_a_key_that_is_not_the_logs(store: Store, keys: Keys) -> None:
    for other in (Signer.generate(), keys.admin):
        with pytest.raises(StoreError) as caught:
            store.checkpoint(other)
        assert "expected the log's key" in str(caught.value)
    assert store.checkpoints() == [] and store.size() == 2


# -- enrolled keys and signed decisions --------------------------------------------------


def _opened(svc: ReviewService, cid: str = "k1") -> Any:
    return svc.open_frontier([call(cid)], actor=AGENT).reviews[0]


def _approval(review: Any, reviewer: str = ALICE, rationale: str = "") -> tuple[str, str, dict[str, Any]]:
    return "review.approved", reviewer, {"review": review.id, "args_digest": review.args_digest, "rationale": rationale}


@pytest.mark.parametrize("how", ["enroll_key", "enroll_reviewer"])
def test_signed_decision_by_an_enrolled_key_verifies(store: Store, keys: Keys, how: str) -> None:
    """A decision signed elsewhere (a script holding alice's key file), over the statement that
    names the log; her key enrolled by the admin with her, or on its own."""
    svc = ReviewService(store)
    alice = Signer.generate()
    if how == "enroll_key":
        svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], admin=keys.admin)
        svc.enroll_key(ALICE, alice.public, admin=keys.admin)
    else:
        svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=alice.public, admin=keys.admin)
    assert [k.fingerprint for k in svc.keys(ALICE)] == [alice.fingerprint]

    def sign(kind: str, actor: str, body: dict[str, Any]) -> dict[str, str]:
        return alice.sign(trust_statement(store.rules, kind, actor, body))

    review = _opened(svc)
    done = svc.approve(
        review.id, reviewer=ALICE, rationale="checked", sig=sign(*_approval(review, rationale="checked"))
    )
    assert done.status == "approved"
    assert done.decision_seq is not None
    entry = store.entry(done.decision_seq)
    assert entry.sig is not None and entry.sig["key"] == alice.fingerprint
    signed = trust_statement(store.rules, entry.kind, entry.actor, entry.body)
    assert signed == canonical({"log": store.log_id, "kind": entry.kind, "actor": entry.actor, "body": entry.body})
    assert verify_signature(alice.public, entry.sig, signed)
    rejected = _opened(svc, "k2")
    body = {"review": rejected.id, "reason": "no"}
    svc.reject(rejected.id, reviewer=ALICE, reason="no", sig=sign("review.rejected", ALICE, body))
    edited = _opened(svc, "k3")
    patch = [{"op": "replace", "path": "/amount", "value": 1}]
    from signoff.audit import decision

    prepared = decision.prepare_edit(svc.get(edited.id), patch)  # the body the service will record
    svc.edit(
        edited.id, reviewer=ALICE, patch=patch, sig=sign("review.edited", ALICE, prepared.body), salts=prepared.salts
    )
    # and signed in the transaction by the service, with her key handed to it for this one call
    in_tx = svc.approve(_opened(svc, "k4").id, reviewer=ALICE, signer=alice)
    assert in_tx.decision_seq is not None
    assert store.entry(in_tx.decision_seq).sig["key"] == alice.fingerprint  # type: ignore[index]
    report = verify_store(store)
    assert report.ok, report.failure


def _bad_signatures(
    store: Store, review: Any, alice: Signer, bob: Signer, stranger: Signer
) -> dict[str, dict[str, str]]:
    def statement(kind: str, actor: str, body: dict[str, Any]) -> bytes:
        return trust_statement(store.rules, kind, actor, body)

    good = alice.sign(statement(*_approval(review)))
    return {
        "other-body": alice.sign(statement(*_approval(review, rationale="something else"))),
        "other-kind": alice.sign(statement("review.rejected", ALICE, {"review": review.id, "reason": "x"})),
        "other-actor": alice.sign(statement(*_approval(review, reviewer=BOB))),
        "other-log": alice.sign(trust_statement(LogRules("log_other", 2, True), *_approval(review))),
        "no-log-id (rules 1 form)": alice.sign(v1_statement(*_approval(review))),
        "key-of-another-actor": bob.sign(statement(*_approval(review))),
        "unenrolled-key": stranger.sign(statement(*_approval(review))),
        "garbage-value": {**good, "value": base64.b64encode(b"\x00" * 64).decode()},
        "not-base64": {**good, "value": "!!!"},
        "wrong-alg": {**good, "alg": "Ed448"},
        "no-key": {"alg": "Ed25519", "value": good["value"]},
    }


def test_bad_signature_is_refused_and_writes_nothing(store: Store, store_url: str, keys: Keys) -> None:
    svc = ReviewService(store)
    alice, bob = Signer.generate(), Signer.generate()
    svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key=alice.public, admin=keys.admin)
    svc.enroll_reviewer(BOB, roles=["teller"], tools=["*"], key=bob.public, admin=keys.admin)
    review = _opened(svc)
    for name, sig in _bad_signatures(store, review, alice, bob, Signer.generate()).items():
        size, before = store.size(), snapshot(store_url)
        with pytest.raises(NotAllowed) as caught:
            svc.approve(review.id, reviewer=ALICE, sig=sig)
        assert "expected" in str(caught.value) and "found" in str(caught.value), name
        assert store.size() == size and snapshot(store_url) == before, name
    assert svc.get(review.id).status == "pending"
    assert verify_store(store).ok


def test_enrolling_a_key_twice_or_for_someone_else_is_refused(store: Store, store_url: str, keys: Keys) -> None:
    svc = ReviewService(store)
    alice = Signer.generate()
    svc.enroll_key(ALICE, alice.public, admin=keys.admin)
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(InvalidEntry, match="not yet enrolled"):
        svc.enroll_key(ALICE, alice.public, admin=keys.admin)
    # nobody but an admin with the admin key enrolls a key: not the person, not another person,
    # not the service; and an admin: actor signs with their key
    for actor, signer in ((ALICE, alice), (MALLORY, None), (None, None), (SERVICE, None)):
        with pytest.raises(NotAllowed, match="expected an admin: actor signing with an enrolled admin key"):
            svc.enroll_key(ALICE, Signer.generate().public, actor=actor, admin=signer)
    with pytest.raises(NotAllowed, match="expected a signature by one of admin:root's enrolled keys, found none"):
        svc.enroll_key(ALICE, Signer.generate().public, actor=ADMIN)
    with pytest.raises(ValueError):
        svc.enroll_key(BOB, "ed25519:not-base64!", admin=keys.admin)
    assert store.size() == size and snapshot(store_url) == before


def test_a_persons_key_enrolled_for_another_actor_is_refused(store: Store, keys: Keys) -> None:
    """A person's key is theirs alone (two approvals are two people): the service refuses alice's key
    for bob, and the verifier names such an enrolment (tests/audit/test_policies.py); agents and
    services of one host may share a key."""
    from signoff.audit.errors import NotAllowed

    svc = ReviewService(store)
    key = Signer.generate().public
    svc.enroll_key(ALICE, key, admin=keys.admin)
    size = store.size()
    with pytest.raises(NotAllowed, match="alice"):
        svc.enroll_key(BOB, key, admin=keys.admin)
    assert store.size() == size
    shared = Signer.generate().public
    svc.enroll_key("agent:teller", shared, admin=keys.admin)
    svc.enroll_key("service:signoff", shared, admin=keys.admin)
    report = verify_store(store)
    assert report.ok, report.failure


def test_service_entries_signed_with_an_enrolled_service_key_verify(
    store: Store, store_url: str, keys: Keys, clock: Any
) -> None:
    from signoff.audit import Policy

    # entries 0 and 1 set the rules up: signed by the log key, over statements without the log id
    for entry in (store.entry(0), store.entry(1)):
        assert entry.sig is not None and entry.actor == f"log:{store.log_id}"
        assert verify_signature(store.public_key, entry.sig, v1_statement(entry.kind, entry.actor, entry.body))
    assert store.entry(0).body["key"] == store.public_key
    service_key = Signer.generate()
    first = ReviewService(store).enroll_key(SERVICE, service_key.public, admin=keys.admin).seq
    svc = ReviewService(store, signer=service_key)
    front = svc.open_frontier([call("s1"), call("s2")], actor=SERVICE, policies=Policy(deadline_seconds=60))
    svc.withdraw(front.reviews[0].id, actor=SERVICE, reason="cancelled")
    clock.advance(61)
    assert len(svc.expire_due()) == 1
    svc.claim_resume(front.id, actor=SERVICE)
    written = list(store.entries(first + 1))
    assert [e.kind for e in written] == [
        "review.opened", "review.opened", "review.withdrawn", "review.expired", "run.resumed"
    ]  # fmt: skip
    for item in written:
        assert item.sig is not None and item.sig["key"] == service_key.fingerprint
        assert verify_signature(
            service_key.public, item.sig, trust_statement(store.rules, item.kind, item.actor, item.body)
        )
    assert verify_store(store).ok
    # once an actor has a key, every later entry of theirs is signed: an unsigned one is refused
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(NotAllowed, match="expected a signature by one of service:signoff's enrolled keys, found none"):
        ReviewService(store).open_frontier([call("s3")], actor=SERVICE)
    assert store.size() == size and snapshot(store_url) == before


@pytest.mark.parametrize("which", ["log-key", "admin-key", "fresh-key"])
def test_a_signer_given_to_the_service_is_refused_unless_enrolled_for_a_service(
    store: Store, key_path: Path, keys: Keys, which: str
) -> None:
    """A service key must be enrolled (by the admin) for a service: or agent: actor; the log key and
    the admin key are not, and a service holding one could otherwise write as the log or the admin."""
    signer = {"log-key": read_private_key(key_path), "admin-key": keys.admin, "fresh-key": Signer.generate()}[which]
    with pytest.raises(NotAllowed, match="expected a key enrolled on the log for a service: or agent: actor"):
        ReviewService(store, signer=signer)


def test_enrolling_something_that_is_not_an_ed25519_public_key_is_refused(
    store: Store, store_url: str, keys: Keys
) -> None:
    svc = ReviewService(store)
    size, before = store.size(), snapshot(store_url)
    with pytest.raises(ValueError):
        svc.enroll_key(AGENT, "ed25519:AAAA", admin=keys.admin)
    with pytest.raises(ValueError):
        svc.enroll_reviewer(ALICE, roles=["teller"], tools=["*"], key="ed25519:AAAA", admin=keys.admin)
    assert store.size() == size and snapshot(store_url) == before
