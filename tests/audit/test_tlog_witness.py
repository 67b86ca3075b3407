"""c2sp.org/tlog-witness: the request body, the witness's decision (every status code, one test per
MUST), the client, and the RFC 6962 consistency proofs the project builds, checked by a verifier
written from RFC 6962 §2.1.2 (tests/audit/c2spkit.py), not the project's."""

from __future__ import annotations

import base64
import hashlib

import httpx
import pytest
from c2spkit import (
    LOG_ORIGIN,
    cosigner,
    leaf_hashes,
    log_signer,
    rfc6962_verify_consistency,
    signed_checkpoint,
)

from signoff.audit.c2sp_errors import NoteNotVerified, WitnessError, WitnessRequestError
from signoff.audit.merkle import EMPTY_ROOT, consistency_proof, root_from_leaves
from signoff.audit.signed_note import Signature, Verifier, parse_note, verify_note
from signoff.audit.tlog_checkpoint import Checkpoint, sign_checkpoint
from signoff.audit.tlog_witness import (
    MAX_PROOF_LINES,
    SIZE_CONTENT_TYPE,
    AddCheckpointRequest,
    Conflict,
    Cosigned,
    Stored,
    add_checkpoint,
    add_cosignatures,
    decide,
    format_request,
    parse_request,
)

SPEC_BODY = (
    "old 20852014\n"
    "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\n"
    "jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n"
    "5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n"
    "/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n"
    "\n"
    "example.com/behind-the-sofa\n"
    "20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    "\n"
    "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo"
    "+zyWE+xeMcTOAYQ8=\n"
    "\u2014 example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS"
    "5Rovnzv++qbSzm9Q=\n"
).encode()

LOG = log_signer()
LOGS: dict[str, list[Verifier]] = {LOG_ORIGIN: [LOG.verifier()]}
N = 300


def root(size: int) -> bytes:
    return root_from_leaves(leaf_hashes(N)[:size])


def request(old: int, new: int, proof: list[bytes] | None = None, note: bytes | None = None) -> bytes:
    proof = consistency_proof(list(leaf_hashes(N)), old, new) if proof is None else proof
    return format_request(note or signed_checkpoint(new), old, proof)


# -- the body -------------------------------------------------------------------------------------


def test_spec_example_request_body_parses_and_formats_back() -> None:
    parsed = parse_request(SPEC_BODY)
    assert parsed.old_size == 20852014
    assert [base64.b64encode(h).decode() for h in parsed.proof][0] == "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw="
    assert len(parsed.proof) == 4
    assert parsed.origin == "example.com/behind-the-sofa"
    assert len(parse_note(parsed.note).signatures) == 2  # "MAY include multiple signatures"
    assert parsed.body() == SPEC_BODY


@pytest.mark.parametrize(
    "body",
    [
        b"old 01\n\n",  # leading zero
        b"old -1\n\n",
        b"old 1",  # no newline
        b"new 1\n\n",
        b"old 1\nnot base64!\n\n",
        b"old 1\n" + base64.b64encode(b"x" * 31) + b"\n\n",  # not a 32-byte hash
        b"old 0\n",  # no empty line
        b"old 0\n\nnot a note\n",
    ],
)
def test_malformed_bodies_are_refused(body: bytes) -> None:
    full = body if b"note" in body else body + signed_checkpoint(1)
    with pytest.raises(WitnessRequestError):
        parse_request(full)
    assert decide(full, LOGS, None).status == 400


def test_client_must_not_send_more_than_63_proof_lines() -> None:
    proof = [b"\x00" * 32] * (MAX_PROOF_LINES + 1)
    with pytest.raises(WitnessRequestError, match="63"):
        format_request(signed_checkpoint(1), 0, proof)
    body = b"old 1\n" + b"".join(base64.b64encode(h) + b"\n" for h in proof) + b"\n" + signed_checkpoint(1)
    assert decide(body, LOGS, Stored(1, root(1))).status == 400
    assert len(parse_request(request(0, 0, [b"\x00" * 32] * 63)).proof) == 63


# -- the decision ---------------------------------------------------------------------------------


def test_200_first_checkpoint_from_size_zero_and_the_records_to_store() -> None:
    decision = decide(request(0, 10), LOGS, None)
    assert decision.status == 200
    assert decision.checkpoint == Checkpoint(LOG_ORIGIN, 10, root(10))
    assert decision.text == decision.checkpoint.text()
    assert [s.name for s in decision.log_signatures] == [LOG_ORIGIN]


def test_200_consistent_extension() -> None:
    assert decide(request(10, 200), LOGS, Stored(10, root(10))).status == 200


def test_200_same_size_same_root_is_cosigned_again() -> None:
    assert decide(request(10, 10), LOGS, Stored(10, root(10))).status == 200


def test_404_unknown_origin() -> None:
    other = log_signer("example.com/other")
    note = sign_checkpoint(Checkpoint("example.com/other", 1, root(1)), [other])
    decision = decide(format_request(note, 0, []), LOGS, None)
    assert decision.status == 404


def test_403_no_signature_from_a_trusted_key_unknown_keys_ignored() -> None:
    impostor = log_signer(LOG_ORIGIN, seed="impostor")  # same name, another key: another key ID
    decision = decide(request(0, 5, note=signed_checkpoint(5, impostor)), LOGS, None)
    assert decision.status == 403
    both = sign_checkpoint(Checkpoint(LOG_ORIGIN, 5, root(5)), [impostor, LOG])
    assert decide(request(0, 5, note=both), LOGS, None).status == 200  # the unknown one is ignored


def test_403_a_trusted_keys_signature_fails() -> None:
    note = signed_checkpoint(5)
    parsed = parse_note(note)
    bad = Signature(LOG.name, LOG.key_id, b"\x00" * 64)
    forged = note + bad.line().encode() + b"\n"
    assert decide(request(0, 5, note=forged), LOGS, None).status == 403
    tampered = note.replace(b"\n5\n", b"\n6\n")
    assert decide(request(0, 6, [], note=tampered), LOGS, None).status == 403
    assert parsed.signatures[0].name == LOG.name


def test_400_old_size_greater_than_checkpoint_size() -> None:
    decision = decide(request(20, 10, []), LOGS, Stored(20, root(20)))
    assert decision.status == 400 and "at most the checkpoint size 10" in decision.reason


def test_409_old_size_differs_from_the_stored_size_with_its_body_and_content_type() -> None:
    decision = decide(request(5, 10), LOGS, Stored(7, root(7)))
    assert (decision.status, decision.body, decision.content_type) == (409, b"7\n", SIZE_CONTENT_TYPE)


def test_409_never_cosigned_counts_as_size_zero() -> None:
    decision = decide(request(5, 10), LOGS, None)
    assert (decision.status, decision.body) == (409, b"0\n")


def test_422_size_zero_checkpoint_needs_the_empty_tree_root() -> None:
    bad = sign_checkpoint(Checkpoint(LOG_ORIGIN, 0, hashlib.sha256(b"x").digest()), [LOG])
    assert decide(format_request(bad, 0, []), LOGS, None).status == 422
    good = sign_checkpoint(Checkpoint(LOG_ORIGIN, 0, EMPTY_ROOT), [LOG])
    assert decide(format_request(good, 0, []), LOGS, None).status == 200


def test_422_non_empty_proof_with_old_size_zero() -> None:
    assert decide(request(0, 10, [root(1)]), LOGS, None).status == 422


def test_422_consistency_proof_fails() -> None:
    proof = consistency_proof(list(leaf_hashes(N)), 10, 200)
    tampered = [proof[0][:-1] + bytes([proof[0][-1] ^ 1]), *proof[1:]]
    assert decide(request(10, 200, tampered), LOGS, Stored(10, root(10))).status == 422
    assert decide(request(10, 200, proof[:-1]), LOGS, Stored(10, root(10))).status == 422
    # The right proof, but the witness remembers another root at size 10: a fork.
    assert decide(request(10, 200), LOGS, Stored(10, hashlib.sha256(b"fork").digest())).status == 422


def test_422_same_size_with_another_root() -> None:
    decision = decide(request(10, 10), LOGS, Stored(10, hashlib.sha256(b"fork").digest()))
    assert decision.status == 422 and "root" in decision.reason


def test_the_checks_run_in_the_specs_order() -> None:
    """An unknown origin is 404 before anything else; a bad signature 403 before the size checks."""
    impostor = log_signer(LOG_ORIGIN, seed="impostor")
    assert decide(request(50, 10, [], note=signed_checkpoint(10, impostor)), LOGS, None).status == 403
    assert decide(request(5, 10, [root(1)]), LOGS, Stored(7, root(7))).status == 409


# -- RFC 6962 §2.1.2 proofs, checked by the reference verifier --------------------------------------


def test_project_consistency_proofs_check_against_rfc6962_reference_verifier() -> None:
    leaves = list(leaf_hashes(70))
    for new in range(1, 71):
        for old in range(1, new + 1):
            proof = consistency_proof(leaves, old, new)
            assert rfc6962_verify_consistency(old, new, root_from_leaves(leaves[:old]), root_from_leaves(leaves[:new]),
                                              proof), (old, new)  # fmt: skip
            assert decide(request(old, new, proof), LOGS, Stored(old, root(old))).status == 200
    proof = consistency_proof(leaves, 13, 70)
    assert not rfc6962_verify_consistency(13, 70, root(13), root(70), proof[:-1])
    assert not rfc6962_verify_consistency(13, 70, root(12), root(70), proof)


# -- the client -----------------------------------------------------------------------------------


def mock(handler: object) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))  # type: ignore[arg-type]


def test_client_posts_the_body_and_returns_the_cosignature_lines() -> None:
    w = cosigner()
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        parsed = parse_request(req.content)
        line = w.cosign(parse_note(parsed.note).text).line()
        return httpx.Response(200, content=(line + "\n").encode())

    with mock(handler) as client:
        result = add_checkpoint("http://witness.test/prefix/", signed_checkpoint(5), 0, [], client=client)
    assert seen[0].method == "POST" and str(seen[0].url) == "http://witness.test/prefix/add-checkpoint"
    assert isinstance(result, Cosigned) and result.signatures[0].name == w.name
    cosigned = add_cosignatures(signed_checkpoint(5), result.signatures, [w.verifier()])
    assert len(verify_note(cosigned, [LOG.verifier(), w.verifier()]).verifiers) == 2


def test_client_returns_the_witness_size_on_409() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(409, content=b"42\n", headers={"Content-Type": SIZE_CONTENT_TYPE})

    with mock(handler) as client:
        assert add_checkpoint("http://w", signed_checkpoint(5), 0, [], client=client) == Conflict(42)


@pytest.mark.parametrize(
    ("status", "body", "headers"),
    [
        (409, b"42\n", {"Content-Type": "text/plain"}),
        (409, b"42", {"Content-Type": SIZE_CONTENT_TYPE}),
        (409, b"042\n", {"Content-Type": SIZE_CONTENT_TYPE}),
        (403, b"no\n", {}),
        (404, b"", {}),
        (422, b"bad proof\n", {}),
        (500, b"", {}),
        (200, b"not a signature line\n", {}),
        (200, b"", {}),
    ],
)
def test_client_raises_a_clear_error_for_anything_else(status: int, body: bytes, headers: dict[str, str]) -> None:
    client = mock(lambda req: httpx.Response(status, content=body, headers=headers))
    with client, pytest.raises(WitnessError) as info:
        add_checkpoint("http://w", signed_checkpoint(5), 0, [], client=client)
    assert info.value.status == status and "expected" in str(info.value)


def test_client_raises_when_the_witness_is_unreachable() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=req)

    with mock(handler) as client, pytest.raises(WitnessError, match="ConnectError"):
        add_checkpoint("http://w", signed_checkpoint(5), 0, [], client=client)


def test_client_ignores_cosignatures_from_unknown_keys() -> None:
    w, stranger = cosigner(), cosigner("witness.example.org/stranger")
    text = parse_note(signed_checkpoint(5)).text
    sigs = (w.cosign(text), stranger.cosign(text))
    merged = add_cosignatures(signed_checkpoint(5), sigs, [w.verifier()])
    assert [s.name for s in parse_note(merged).signatures] == [LOG_ORIGIN, w.name]
    with pytest.raises(NoteNotVerified):
        add_cosignatures(signed_checkpoint(5), (stranger.cosign(text),), [w.verifier()])


def test_request_dataclass_round_trip() -> None:
    req = AddCheckpointRequest(3, (root(1),), signed_checkpoint(5))
    assert parse_request(req.body()) == req
