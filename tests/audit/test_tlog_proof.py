"""c2sp.org/tlog-proof@v1: the spec's example layout, format and parse, the four verification steps,
and the RFC 6962 inclusion proofs the project builds, checked by a verifier written from RFC 6962
§2.1.1 (tests/audit/c2spkit.py), not the project's."""

from __future__ import annotations

import base64
import hashlib

import pytest
from c2spkit import LOG_ORIGIN, cosigner, entry, leaf_hashes, log_signer, rfc6962_verify_inclusion, signed_checkpoint

from signoff.audit.c2sp_errors import (
    CheckpointFormatError,
    InclusionFailed,
    NoteNotVerified,
    ProofFormatError,
    QuorumNotMet,
)
from signoff.audit.merkle import inclusion_proof, leaf_hash, root_from_leaves
from signoff.audit.signed_note import Verifier, format_note, parse_note, sign_note
from signoff.audit.tlog_cosignature import Cosigner
from signoff.audit.tlog_proof import HEADER, LeafHash, TlogProof, VerifiedProof, parse, verify

LOG = log_signer()
SIZE = 109
WITNESSES = [cosigner(f"witness{i}.example", seed=f"w{i}") for i in range(3)]

# The spec's example, with its elided signature lines replaced by a real one (its checkpoint text kept).
SPEC_HEAD = (
    b"c2sp.org/tlog-proof@v1\n"
    b"extra YWdlLXYxLjIuMS1kYXJ3aW4tYXJtNjQudGFyLmd6kYXJ3aW4tYXJ\n"
    b"index 73894\n"
    b"gSKyXoYZUgZ6jduWYrkDOARinOMGJveXjgMkBTcdPlQ=\n"
    b"B95lDa8R83lS8n0eG+o0buTxRKQTYFi//1U8anccXmA=\n"
    b"EKNzoDWG8LGC0Yp9o+sv3qllpMP9uHQ9B20KNL+Q1zs=\n"
    b"RoopEkOdqkYqMB4MJXrbt/hMjOxsVn0IrWjpz1ZMMes=\n"
    b"AHCioX9nLjsrse6YhjRRmk1WUEirVOLLRoOQ6vfO5vk=\n"
    b"\n"
)
SPEC_CHECKPOINT_TEXT = b"example.com/fancylog\n109482\nsFodV/vSp5O8n9a8QpW6PRY97tfOSW5bsc2Xl/EQi08=\n"


def cosigned(size: int = SIZE, witnesses: list[Cosigner] = WITNESSES) -> bytes:
    note = parse_note(signed_checkpoint(size))
    return format_note(note.text, (*note.signatures, *(w.cosign(note.text) for w in witnesses)))


def proof_for(index: int, size: int = SIZE, witnesses: list[Cosigner] = WITNESSES, extra: bytes | None = None) -> bytes:
    path = inclusion_proof(list(leaf_hashes(size)), index, size)
    return TlogProof(index, tuple(path), cosigned(size, witnesses), extra).format()


def check(
    data: bytes,
    quorum: int = 2,
    *,
    leaf: LeafHash | None = None,
    origin: str = LOG_ORIGIN,
    log: list[Verifier] | None = None,
) -> VerifiedProof:
    return verify(
        data,
        leaf=leaf_hash(entry(7)) if leaf is None else leaf,
        origin=origin,
        log=[LOG.verifier()] if log is None else log,
        witnesses=[w.verifier() for w in WITNESSES],
        quorum=quorum,
    )


def test_spec_example_layout_parses() -> None:
    note = sign_note(SPEC_CHECKPOINT_TEXT, [log_signer("example.com/fancylog")])
    data = SPEC_HEAD + note
    proof = parse(data)
    assert proof.index == 73894 and len(proof.proof) == 5
    assert proof.extra is not None and proof.extra.startswith(b"age-v1.2.1-darwin-arm64.tar.gz")
    assert proof.checkpoint == note  # "included verbatim"
    assert proof.format() == data


def test_format_and_parse_round_trip_with_and_without_extra() -> None:
    for extra in (None, b"", b"\x00extra data"):
        data = proof_for(7, extra=extra)
        parsed = parse(data)
        assert parsed.extra == extra and parsed.index == 7 and parsed.format() == data
    assert proof_for(7).startswith(b"c2sp.org/tlog-proof@v1\nindex 7\n")


@pytest.mark.parametrize(
    "head",
    [
        b"c2sp.org/tlog-proof@v2\nindex 1\n\n",  # "The first line MUST be the string c2sp.org/tlog-proof@v1"
        b"c2sp.org/tlog-proof@v1\n\n",  # no index line
        b"c2sp.org/tlog-proof@v1\nindex 01\n\n",  # leading zero
        b"c2sp.org/tlog-proof@v1\nindex -1\n\n",
        b"c2sp.org/tlog-proof@v1\nextra !!\nindex 1\n\n",
        b"c2sp.org/tlog-proof@v1\nindex 1\nextra AAAA\n\n",  # extra after index
        b"c2sp.org/tlog-proof@v1\nindex 1\n" + base64.b64encode(b"x" * 31) + b"\n\n",
    ],
)
def test_malformed_proofs_are_refused(head: bytes) -> None:
    with pytest.raises(ProofFormatError):
        parse(head + cosigned())


def test_the_checkpoint_must_be_a_note() -> None:
    with pytest.raises(ProofFormatError):
        parse(b"c2sp.org/tlog-proof@v1\nindex 1\n\nnot a note\n")
    assert HEADER == "c2sp.org/tlog-proof@v1"


def test_verify_all_four_steps() -> None:
    result = check(proof_for(7))
    assert result.index == 7 and result.checkpoint.size == SIZE
    assert result.witnesses == tuple(sorted(w.name for w in WITNESSES))


def test_step_1_leaf_hash_from_the_extra_data_with_the_applications_function() -> None:
    data = proof_for(7, extra=b"7")
    assert check(data, leaf=lambda extra: leaf_hash(entry(int(extra or b"0"))))
    with pytest.raises(InclusionFailed):
        check(data, leaf=lambda extra: leaf_hash(b"other"))


def test_step_2_origin_must_be_acceptable_and_signed_by_the_log() -> None:
    with pytest.raises(CheckpointFormatError, match="origin"):
        check(proof_for(7), origin="example.com/other")
    with pytest.raises(NoteNotVerified):
        check(proof_for(7), log=[log_signer(seed="stranger").verifier()])
    # Cosigned only by the witnesses, not by the log: refused even though the note verifies.
    note = parse_note(cosigned())
    only_witnesses = format_note(note.text, note.signatures[1:])
    path = inclusion_proof(list(leaf_hashes(SIZE)), 7, SIZE)
    with pytest.raises(NoteNotVerified, match="log's key"):
        check(TlogProof(7, tuple(path), only_witnesses).format())


def test_step_3_quorum_of_distinct_witnesses() -> None:
    assert check(proof_for(7), quorum=3)
    with pytest.raises(QuorumNotMet, match="at least 3"):
        check(proof_for(7, witnesses=WITNESSES[:2]), quorum=3)
    with pytest.raises(QuorumNotMet):
        check(proof_for(7, witnesses=[]), quorum=1)
    assert check(proof_for(7, witnesses=[]), quorum=0)
    with pytest.raises(ValueError, match="quorum"):
        check(proof_for(7), quorum=4)  # more than the witnesses known


def test_step_3_unknown_witnesses_are_ignored_and_a_bad_known_cosignature_rejects() -> None:
    stranger = cosigner("stranger.example", seed="s")
    assert check(proof_for(7, witnesses=[*WITNESSES[:2], stranger]), quorum=2)
    note = parse_note(cosigned())
    forged = WITNESSES[2].cosign(parse_note(signed_checkpoint(SIZE + 1)).text)  # over another checkpoint
    bad = format_note(note.text, (*note.signatures[:3], forged))
    path = inclusion_proof(list(leaf_hashes(SIZE)), 7, SIZE)
    with pytest.raises(NoteNotVerified):
        check(TlogProof(7, tuple(path), bad).format(), quorum=1)


def test_step_4_inclusion_proof_binds_the_leaf_to_the_root() -> None:
    parsed = parse(proof_for(7))
    with pytest.raises(InclusionFailed):
        check(TlogProof(8, parsed.proof, parsed.checkpoint).format())
    with pytest.raises(InclusionFailed):
        check(TlogProof(7, parsed.proof[:-1], parsed.checkpoint).format())
    tampered = (hashlib.sha256(b"x").digest(), *parsed.proof[1:])
    with pytest.raises(InclusionFailed):
        check(TlogProof(7, tampered, parsed.checkpoint).format())
    with pytest.raises(InclusionFailed):
        check(proof_for(7), leaf=leaf_hash(entry(8)))


def test_project_inclusion_proofs_check_against_rfc6962_reference_verifier() -> None:
    leaves = list(leaf_hashes(80))
    for size in range(1, 81):
        root = root_from_leaves(leaves[:size])
        for index in range(size):
            path = inclusion_proof(leaves, index, size)
            assert rfc6962_verify_inclusion(leaves[index], index, size, path, root), (index, size)
            if path:
                assert not rfc6962_verify_inclusion(leaves[index], index, size, path[:-1], root)
    for index in (0, 1, 50, 108):
        assert check(proof_for(index), leaf=leaf_hash(entry(index)))
