"""c2sp.org/tlog-cosignature, Ed25519 cosignature/v1: the spec's example, a vector from
transparency-dev/formats, and the signed message built by hand from the spec's layout."""

from __future__ import annotations

import base64
import struct

import pytest
from c2spkit import cosigner, log_signer, private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from signoff.audit.c2sp_errors import C2SPFormatError, KeyFormatError, NoteNotVerified
from signoff.audit.signed_note import SIG_COSIGNATURE_V1, format_note, key_id, parse_note, verify_note
from signoff.audit.tlog_checkpoint import Checkpoint, sign_checkpoint
from signoff.audit.tlog_cosignature import (
    MAX_TIMESTAMP,
    CosignatureVerifier,
    Cosigner,
    cosignature_key_id,
    signed_message,
    timestamp_of,
    timestamped_signature,
)

SPEC_CHECKPOINT = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
SPEC_COSIGNATURE = (
    "jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA=="
)
# transparency-dev/formats note/note_cosigv1_test.go TestCosignatureTimestamp
FORMATS_COSIGNATURE = (
    "ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOworDcFiEBYJXORmnFBOBA=="
)
ROOT = bytes(range(32))


def test_spec_example_signed_message_layout() -> None:
    assert signed_message(SPEC_CHECKPOINT, 1679315147) == (
        b"cosignature/v1\ntime 1679315147\n"
        b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    )


def test_spec_example_cosignature_is_a_timestamped_signature_of_the_spec_time() -> None:
    raw = base64.b64decode(SPEC_COSIGNATURE)
    assert len(raw) == 4 + 8 + 64
    assert timestamp_of(raw[4:]) == 1679315147  # the spec's "time 1679315147"


def test_transparency_dev_formats_timestamp_vector() -> None:
    assert timestamp_of(base64.b64decode(FORMATS_COSIGNATURE)[4:]) == 1727964367


def test_key_id_is_sha256_of_name_newline_0x04_and_key() -> None:
    import hashlib

    w = cosigner()
    expected = hashlib.sha256(w.name.encode() + b"\n" + b"\x04" + w.public).digest()[:4]
    assert cosignature_key_id(w.name, w.public) == expected == w.key_id
    assert key_id(w.name, SIG_COSIGNATURE_V1, w.public) == expected
    assert CosignatureVerifier.from_vkey(w.vkey()) == w.verifier()


def test_cosignature_verifies_against_the_message_built_by_hand() -> None:
    w = cosigner()
    text = Checkpoint("example.com/log", 7, ROOT, ("ext",)).text()
    raw = w.sign_at(text, 1_700_000_123)
    assert struct.unpack(">Q", raw[:8])[0] == 1_700_000_123  # u64 timestamp, big-endian
    message = b"cosignature/v1\n" + b"time 1700000123\n" + text  # extension lines included
    Ed25519PublicKey.from_public_bytes(w.public).verify(raw[8:], message)
    assert w.verifier().check(text, raw) == 1_700_000_123


def test_cosignature_plugs_into_verify_note_and_exposes_its_timestamp() -> None:
    log, w = log_signer("example.com/log"), cosigner()
    note = sign_checkpoint(Checkpoint("example.com/log", 3, ROOT), [log])
    line = w.cosign(parse_note(note).text, 1_690_000_000)
    cosigned = note + line.line().encode() + b"\n"
    verified = verify_note(cosigned, [log.verifier(), w.verifier()])
    assert len(verified.verifiers) == 2
    sig = verified.verified_by(verified.verifiers[1])
    assert sig is not None and timestamp_of(sig.signature) == 1_690_000_000


def test_cosignature_covers_extension_lines_and_every_line() -> None:
    w = cosigner()
    text = Checkpoint("example.com/log", 7, ROOT, ("ext",)).text()
    raw = w.sign_at(text, 5)
    assert not w.verifier().verify(text.replace(b"ext", b"exu"), raw)
    assert not w.verifier().verify(Checkpoint("example.com/log", 8, ROOT, ("ext",)).text(), raw)


def test_timestamp_is_part_of_the_signed_message() -> None:
    w = cosigner()
    text = Checkpoint("example.com/log", 7, ROOT).text()
    raw = w.sign_at(text, 5)
    assert not w.verifier().verify(text, struct.pack(">Q", 6) + raw[8:])


def test_timestamp_must_not_exceed_2_63_minus_1() -> None:
    w = cosigner()
    text = Checkpoint("example.com/log", 7, ROOT).text()
    w.sign_at(text, MAX_TIMESTAMP)
    with pytest.raises(C2SPFormatError):
        w.sign_at(text, MAX_TIMESTAMP + 1)
    with pytest.raises(C2SPFormatError):
        timestamped_signature(MAX_TIMESTAMP + 1, b"\x00" * 64)
    # A verifier refuses a timestamp above 2^63-1 even before checking the signature.
    assert w.verifier().check(text, struct.pack(">Q", MAX_TIMESTAMP + 1) + b"\x00" * 64) is None


def test_cosigner_never_omits_the_timestamp() -> None:
    """tlog-witness: 'the timestamp MUST NOT be zero'."""
    with pytest.raises(C2SPFormatError, match="1..2"):
        cosigner().sign_at(Checkpoint("o", 1, ROOT).text(), 0)
    clocked = Cosigner("witness.example.org/w1", private_key("clock"), clock=lambda: 1234.9)
    assert timestamp_of(clocked.sign(Checkpoint("o", 1, ROOT).text())) == 1234


def test_cosigner_signs_only_checkpoints() -> None:
    with pytest.raises(C2SPFormatError):
        cosigner().sign_at(b"not a checkpoint\n", 5)
    assert not cosigner().verifier().verify(b"not a checkpoint\n", b"\x00" * 72)


def test_distinct_cosigners_need_distinct_keys_the_message_does_not_name_the_cosigner() -> None:
    """The Ed25519 message doesn't commit to the cosigner name, hence the spec's MUST on distinct keys."""
    one = cosigner("witness.example.org/one", seed="same")
    two = Cosigner("witness.example.org/two", one.private)
    text = Checkpoint("o", 1, ROOT).text()
    raw = one.sign_at(text, 5)
    assert two.verifier().verify(text, raw)  # same key, other name: the signature carries over
    assert one.key_id != two.key_id


def test_a_failing_cosignature_from_a_known_witness_rejects_the_note() -> None:
    log, w = log_signer("example.com/log"), cosigner()
    note = sign_checkpoint(Checkpoint("example.com/log", 3, ROOT), [log])
    parsed = parse_note(note)
    bad = w.cosign(Checkpoint("example.com/log", 4, ROOT).text(), 5)  # over another checkpoint
    with pytest.raises(NoteNotVerified):
        verify_note(format_note(parsed.text, (*parsed.signatures, bad)), [log.verifier(), w.verifier()])


def test_cosignature_vkey_must_have_type_0x04() -> None:
    with pytest.raises(KeyFormatError, match="0x04"):
        CosignatureVerifier.from_vkey(log_signer().vkey())
