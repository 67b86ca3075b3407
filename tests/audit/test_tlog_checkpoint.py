"""c2sp.org/tlog-checkpoint: the spec's example, then one test per MUST of "Note text" and "Signatures"."""

from __future__ import annotations

import base64
import hashlib

import pytest
from c2spkit import log_signer

from signoff.audit.c2sp_errors import CheckpointFormatError, NoteNotVerified
from signoff.audit.errors import UnusableInput
from signoff.audit.signed_note import parse_note, sign_note
from signoff.audit.tlog_checkpoint import (
    MAX_SIZE,
    Checkpoint,
    check_origin,
    parse,
    sign_checkpoint,
    verify_checkpoint,
)

SPEC_TEXT = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
ROOT = hashlib.sha256(b"root").digest()
ROOT64 = base64.b64encode(ROOT).decode()


def test_spec_example_parses_and_formats_back() -> None:
    checkpoint = parse(SPEC_TEXT)
    assert checkpoint.origin == "example.com/behind-the-sofa"
    assert checkpoint.size == 20852163
    assert checkpoint.root == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert checkpoint.extensions == ()
    assert checkpoint.text() == SPEC_TEXT


def test_text_is_at_least_three_lines() -> None:
    with pytest.raises(CheckpointFormatError, match="at least 3 lines"):
        parse(b"example.com/log\n1\n")


def test_origin_must_be_non_empty() -> None:
    with pytest.raises(CheckpointFormatError, match="origin"):
        parse(f"\n1\n{ROOT64}\n".encode())
    with pytest.raises(CheckpointFormatError, match="origin"):
        Checkpoint("", 1, ROOT)


def test_clients_do_not_assume_the_origin_is_a_url() -> None:
    """'clients MUST NOT assume that the origin is following this format'."""
    assert parse(f"not a URL + spaces\n1\n{ROOT64}\n".encode()).origin == "not a URL + spaces"


@pytest.mark.parametrize("size", ["00", "01", "+1", "-1", " 1", "1 ", "1.0", "0x1", "\u0661", "", "1e3"])
def test_tree_size_is_ascii_decimal_without_leading_zeroes(size: str) -> None:
    with pytest.raises(CheckpointFormatError, match="tree size"):
        parse(f"example.com/log\n{size}\n{ROOT64}\n".encode())


def test_tree_size_zero_and_uint64_range() -> None:
    assert parse(f"o\n0\n{ROOT64}\n".encode()).size == 0
    assert parse(f"o\n{MAX_SIZE}\n{ROOT64}\n".encode()).size == MAX_SIZE
    with pytest.raises(CheckpointFormatError):
        parse(f"o\n{MAX_SIZE + 1}\n{ROOT64}\n".encode())


@pytest.mark.parametrize(
    "root",
    [base64.b64encode(b"\x00" * 31).decode(), base64.b64encode(b"\x00" * 33).decode(), ROOT64.rstrip("="), "!" * 44],
)
def test_root_hash_is_base64_of_32_bytes(root: str) -> None:
    with pytest.raises(CheckpointFormatError, match="root hash"):
        parse(f"o\n1\n{root}\n".encode())


def test_extension_lines_must_be_non_empty() -> None:
    checkpoint = parse(f"o\n1\n{ROOT64}\next one\next two\n".encode())
    assert checkpoint.extensions == ("ext one", "ext two")
    assert checkpoint.text() == f"o\n1\n{ROOT64}\next one\next two\n".encode()
    with pytest.raises(CheckpointFormatError, match="extension"):
        parse(f"o\n1\n{ROOT64}\n\next\n".encode())
    with pytest.raises(CheckpointFormatError, match="extension"):
        Checkpoint("o", 1, ROOT, ("",))


def test_lines_end_in_newline() -> None:
    with pytest.raises(CheckpointFormatError, match="newline"):
        parse(f"o\n1\n{ROOT64}".encode())


@pytest.mark.parametrize(
    "origin", ["example.com/log42", "example.com", "sigsum.org/v1/tree/4e89cc51", "localhost:8080/log"]
)
def test_check_origin_accepts_schema_less_urls(origin: str) -> None:
    assert check_origin(origin) == origin


@pytest.mark.parametrize(
    ("origin", "rule"),
    [
        ("", "empty"),
        ("https://example.com/log", "scheme"),
        ("http:example.com", "scheme"),
        ("example.com/my log", "space"),
        ("example.com/log\u00a0x", "space"),
        ("example.com/a+b", "plus"),
        ("example.com/log/", "slash"),
        ("/log", "slash"),
    ],
)
def test_check_origin_refuses_what_is_not_a_schema_less_url_naming_the_rule(origin: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule) as info:
        check_origin(origin)
    assert isinstance(info.value, UnusableInput) and "schema-less URL" in str(info.value)


def test_sign_and_verify_a_checkpoint() -> None:
    signer = log_signer("example.com/log")
    checkpoint = Checkpoint("example.com/log", 5, ROOT, ("ext",))
    note = sign_checkpoint(checkpoint, [signer])
    verified = verify_checkpoint(note, [signer.verifier()], origin="example.com/log")
    assert verified.checkpoint == checkpoint
    assert verified.note.verifiers == (signer.verifier(),)


def test_verify_checkpoint_ignores_unknown_signatures_and_checks_the_origin() -> None:
    log, other = log_signer("example.com/log"), log_signer("example.com/other")
    note = sign_checkpoint(Checkpoint("example.com/log", 5, ROOT), [log, other])
    assert verify_checkpoint(note, [log.verifier()]).note.unknown[0].name == "example.com/other"
    with pytest.raises(CheckpointFormatError, match="origin"):
        verify_checkpoint(note, [log.verifier()], origin="example.com/else")
    with pytest.raises(NoteNotVerified):
        verify_checkpoint(note, [log_signer("example.com/log", seed="other").verifier()])


def test_a_signed_note_that_is_not_a_checkpoint_is_refused_after_verification() -> None:
    signer = log_signer("example.com/log")
    note = sign_note(b"just text\n", [signer])
    with pytest.raises(CheckpointFormatError):
        verify_checkpoint(note, [signer.verifier()])
    assert parse_note(note).text == b"just text\n"
