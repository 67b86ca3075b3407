"""The log a real Chromium made (tests/audit/fixtures/webauthn_log.jsonl, exported by
test_desk_passkeys_browser.py): passkey enrolments with an EdDSA and an ES256 credential, and
approve, edit and reject decisions each signed by a WebAuthn assertion. ``audit verify`` checks it
offline, and a copy tampered after the fact fails at the tampered entry's seq, on its signature.

Regenerate with ``SIGNOFF_REFRESH_FIXTURES=1 pytest tests/desk/test_desk_passkeys_browser.py``.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from signoff.audit.canonical import canonical, digest
from signoff.audit.merkle import leaf_hash
from signoff.audit.verify import verify_file
from signoff.audit.webauthn import Passkey

FIXTURE = Path(__file__).resolve().parents[1] / "audit" / "fixtures" / "webauthn_log.jsonl"


@pytest.fixture(scope="module")
def entries() -> list[dict[str, Any]]:
    assert FIXTURE.exists(), f"{FIXTURE} is missing: run tests/desk/test_desk_passkeys_browser.py to make it"
    return [json.loads(line) for line in FIXTURE.read_bytes().split(b"\n") if line]


def _write(path: Path, entries: list[dict[str, Any]]) -> Path:
    """The entries as an export, each re-linked to the one before (so only the tampered entry is wrong)."""
    out, prev = [], None
    for entry in entries:
        if prev is not None:
            entry["prev"] = prev
        raw = canonical(entry)
        out.append(raw)
        prev = "sha256:" + leaf_hash(raw).hex()
    path.write_bytes(b"\n".join(out) + b"\n")
    return path


def _signed(entries: list[dict[str, Any]], kind: str) -> int:
    return next(i for i, e in enumerate(entries) if e["kind"] == kind and (e.get("sig") or {}).get("alg") == "WebAuthn")


def test_the_browser_made_log_verifies_offline(entries: list[dict[str, Any]]) -> None:
    report = verify_file(FIXTURE)
    assert report.ok, report.failure
    assert report.size == len(entries)
    passkeys = [
        Passkey.from_body(e["body"]) for e in entries if e["kind"] == "key.enrolled" and e["body"]["alg"] == "WebAuthn"
    ]
    assert sorted(p.algorithm for p in passkeys) == ["ES256", "Ed25519"]
    assert all(p.rp_id == "localhost" for p in passkeys)
    for kind in ("review.approved", "review.edited", "review.rejected"):
        entry = entries[_signed(entries, kind)]
        client = json.loads(base64.b64decode(entry["sig"]["client_data"]))
        assert client["type"] == "webauthn.get" and client["origin"].startswith("http://localhost:")


@pytest.mark.parametrize("kind", ["review.approved", "review.edited", "review.rejected"])
def test_a_changed_decision_fails_on_its_signature(entries: list[dict[str, Any]], kind: str, tmp_path: Path) -> None:
    tampered = copy.deepcopy(entries)
    seq = _signed(tampered, kind)
    body = tampered[seq]["body"]
    if kind == "review.rejected":
        body["reason"] = body["reason"] + " (or not)"
    else:
        body["rationale"] = "changed after signing"
    report = verify_file(_write(tmp_path / "tampered.jsonl", tampered))
    assert not report.ok and report.failure is not None
    failure = report.failure
    assert failure.seq == seq and failure.rule == "signature" and str(failure).startswith(f"seq {seq}: signature")
    assert "challenge" in str(failure)  # the assertion signed another statement


def test_a_forged_es256_signature_fails(entries: list[dict[str, Any]], tmp_path: Path) -> None:
    tampered = copy.deepcopy(entries)
    keys = {
        Passkey.from_body(e["body"]).fingerprint: Passkey.from_body(e["body"]).algorithm
        for e in entries
        if e["kind"] == "key.enrolled" and e["body"]["alg"] == "WebAuthn"
    }
    seq = next(i for i, e in enumerate(tampered) if e.get("sig") and keys.get(e["sig"]["key"]) == "ES256")
    value = bytearray(base64.b64decode(tampered[seq]["sig"]["value"]))
    value[-1] ^= 0x01
    tampered[seq]["sig"]["value"] = base64.b64encode(bytes(value)).decode()
    report = verify_file(_write(tmp_path / "forged.jsonl", tampered))
    assert not report.ok and report.failure is not None
    failure = report.failure
    assert failure.seq == seq and str(failure).startswith(f"seq {seq}: signature") and "ES256" in str(failure)


def test_args_changed_under_a_signed_approval_fail(entries: list[dict[str, Any]], tmp_path: Path) -> None:
    tampered = copy.deepcopy(entries)
    seq = _signed(tampered, "review.approved")
    review = tampered[seq]["body"]["review"]
    opened = next(e for e in tampered if e["kind"] == "review.opened" and e["body"]["review"] == review)
    call = opened["body"]["call"]
    call["args"] = {**call["args"], "to_account": "ATTACKER"}
    call["args_digest"] = digest(call["args"])
    report = verify_file(_write(tmp_path / "args.jsonl", tampered))
    assert not report.ok and report.failure is not None and report.failure.seq == seq, report.failure
