"""c2sp.org/signed-note: the spec's example first, Go's golang.org/x/mod/sumdb/note test vectors for
interoperability, then one test per MUST."""

from __future__ import annotations

import base64

import pytest
from c2spkit import private_key

from signoff.audit.c2sp_errors import KeyFormatError, NoteFormatError, NoteNotVerified
from signoff.audit.errors import UnusableInput, VerificationFailed
from signoff.audit.signed_note import (
    MAX_SIGNATURES,
    SIG_COSIGNATURE_V1,
    SIG_ED25519,
    Ed25519Signer,
    Ed25519Verifier,
    Note,
    Signature,
    format_note,
    format_vkey,
    key_id,
    parse_note,
    parse_vkey,
    sign_note,
    verify_note,
)
from signoff.audit.tlog_cosignature import CosignatureVerifier
from signoff.audit.vkeys import verifier_from_vkey

# signed-note "Verifier keys" / "Example"
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = (
    "This is an example message.\n\n"
    "\u2014 example.com/foo "
    "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
).encode()

# golang.org/x/mod sumdb/note/note_test.go (TestSign, TestOpen)
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_PETER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_ENOCH = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = b"If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
).encode()
GO_ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
).encode()


def go_signer() -> Ed25519Signer:
    name, id_hex, key64 = GO_SKEY.split("+", 4)[2:]
    raw = base64.b64decode(key64)
    assert raw[0] == SIG_ED25519 and len(raw) == 33
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    signer = Ed25519Signer(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
    assert signer.key_id.hex() == id_hex
    return signer


# -- the spec's example and Go's vectors ----------------------------------------------------------


def test_spec_example_vkey_verifies_spec_example_note() -> None:
    verifier = verifier_from_vkey(SPEC_VKEY)
    verified = verify_note(SPEC_NOTE, [verifier])
    assert verified.text == b"This is an example message.\n"
    assert verified.verifiers == (verifier,)
    assert verified.signatures[0].key_id.hex() == "530d903a"


def test_key_id_reproduces_spec_example() -> None:
    vkey = parse_vkey(SPEC_VKEY)
    assert key_id("example.com/foo", SIG_ED25519, vkey.public).hex() == "530d903a"
    assert format_vkey("example.com/foo", SIG_ED25519, vkey.public) == SPEC_VKEY


def test_go_sumdb_note_signature_is_reproduced_byte_for_byte() -> None:
    """Ed25519 is deterministic: signing Go's TestSign text with its key gives Go's note exactly."""
    signer = go_signer()
    assert signer.vkey() == GO_PETER
    assert sign_note(GO_TEXT, [signer]) == GO_TEXT + b"\n" + GO_PETER_SIG


def test_go_sumdb_note_open_vectors() -> None:
    peter, enoch = verifier_from_vkey(GO_PETER), verifier_from_vkey(GO_ENOCH)
    note = GO_TEXT + b"\n" + GO_PETER_SIG + GO_ENOCH_SIG
    one = verify_note(note, [peter])
    assert one.verifiers == (peter,) and [s.name for s in one.unknown] == ["EnochRoot"]
    both = verify_note(note, [peter, enoch])
    assert both.verifiers == (peter, enoch) and not both.unknown
    with pytest.raises(NoteNotVerified):
        verify_note(note, [])


@pytest.mark.parametrize(
    "bad",
    [
        GO_TEXT,
        GO_TEXT + b"\n",
        GO_TEXT + b"\n" + GO_PETER_SIG[:-1],
        b"\x01" + GO_TEXT + b"\n" + GO_PETER_SIG,
        b"\xff" + GO_TEXT + b"\n" + GO_PETER_SIG,
        GO_TEXT + b"\n" + GO_PETER_SIG.replace(b"PeterNeumann", b"Bad Name"),
        GO_TEXT + b"\n" + GO_PETER_SIG + b"Unexpected line.\n",
    ],
)
def test_go_sumdb_note_malformed_messages_are_refused(bad: bytes) -> None:
    with pytest.raises(NoteFormatError):
        verify_note(bad, [verifier_from_vkey(GO_PETER)])


# -- verifier keys --------------------------------------------------------------------------------


def test_vkey_round_trips_and_base64_with_plus_signs_parses() -> None:
    for i in range(200):  # a key whose base64 holds a '+': split on the first two pluses only
        signer = Ed25519Signer("example.org/k", private_key(f"plus{i}"))
        if "+" in signer.vkey().split("+", 2)[2]:
            break
    vkey = parse_vkey(signer.vkey())
    assert (vkey.name, vkey.sig_type, vkey.public) == ("example.org/k", SIG_ED25519, signer.public)
    assert vkey.text() == signer.vkey()


@pytest.mark.parametrize("name", ["", "a b", "a\tb", "a\u00a0b", "a\u2003b", "a\u3000b", "a\u0085b", "a+b"])
def test_key_name_must_be_non_empty_without_unicode_spaces_or_plus(name: str) -> None:
    with pytest.raises(KeyFormatError):
        format_vkey(name, SIG_ED25519, b"\x00" * 32)
    with pytest.raises(NoteFormatError):
        parse_note(b"text\n\n\xe2\x80\x94 " + name.encode() + b" AAAAAAA=\n")


def test_vkey_key_id_must_match_name_and_key() -> None:
    name, _, key = SPEC_VKEY.split("+")
    with pytest.raises(KeyFormatError, match="expected key ID 530d903a"):
        parse_vkey(f"{name}+530d903b+{key}")
    with pytest.raises(KeyFormatError):  # same key, other name: other ID
        parse_vkey(f"example.com/bar+530d903a+{key}")
    with pytest.raises(KeyFormatError, match="8 lowercase hex"):
        parse_vkey(f"{name}+530D903A+{key}")


@pytest.mark.parametrize("sig_type", [SIG_ED25519, SIG_COSIGNATURE_V1])
@pytest.mark.parametrize("length", [0, 31, 33])
def test_ed25519_vkey_key_material_must_be_32_bytes(sig_type: int, length: int) -> None:
    public = b"\x01" * length
    text = f"k+{key_id('k', sig_type, public).hex()}+{base64.b64encode(bytes([sig_type]) + public).decode()}"
    with pytest.raises(KeyFormatError, match="32-byte"):
        parse_vkey(text)


def test_same_key_for_two_signature_types_gets_two_key_ids() -> None:
    signer = Ed25519Signer("example.org/k", private_key("types"))
    assert key_id(signer.name, SIG_ED25519, signer.public) != key_id(signer.name, SIG_COSIGNATURE_V1, signer.public)
    assert isinstance(verifier_from_vkey(signer.vkey()), Ed25519Verifier)
    cosig_vkey = format_vkey(signer.name, SIG_COSIGNATURE_V1, signer.public)
    assert isinstance(verifier_from_vkey(cosig_vkey), CosignatureVerifier)


def test_unsupported_vkey_types_are_refused() -> None:
    material = bytes([0x02]) + b"x" * 32
    text = f"k+{key_id('k', 0x02, b'x' * 32).hex()}+{base64.b64encode(material).decode()}"
    with pytest.raises(KeyFormatError, match="0x02"):
        verifier_from_vkey(text)


# -- note format ----------------------------------------------------------------------------------


def signer_a() -> Ed25519Signer:
    return Ed25519Signer("example.org/a", private_key("a"))


def signer_b() -> Ed25519Signer:
    return Ed25519Signer("example.org/b", private_key("b"))


def test_note_must_be_valid_utf8() -> None:
    note = sign_note(b"caf\xc3\xa9\n", [signer_a()])
    assert verify_note(note, [signer_a().verifier()]).text == "café\n".encode()
    with pytest.raises(NoteFormatError, match="UTF-8"):
        parse_note(b"caf\xe9\n\n" + note.split(b"\n\n")[1])


@pytest.mark.parametrize("char", [b"\x00", b"\t", b"\r", b"\x1b", b"\x1f"])
def test_note_must_not_contain_control_characters_but_newline(char: bytes) -> None:
    with pytest.raises(NoteFormatError, match="control"):
        sign_note(b"a" + char + b"b\n", [signer_a()])
    good = sign_note(b"ab\n", [signer_a()])
    with pytest.raises(NoteFormatError, match="control"):
        parse_note(good.replace(b"ab", b"a" + char + b"b"))


def test_note_text_must_end_in_newline() -> None:
    with pytest.raises(NoteFormatError, match="newline"):
        sign_note(b"no newline", [signer_a()])


def test_text_is_separated_from_signatures_by_the_last_empty_line() -> None:
    a = signer_a()
    text = b"first\n\n\xe2\x80\x94 looks like a signature line AAAA\n\nlast\n"
    note = sign_note(text, [a])
    parsed = parse_note(note)
    assert parsed.text == text and [s.name for s in parsed.signatures] == [a.name]
    assert verify_note(note, [a.verifier()]).text == text


def test_note_needs_one_or_more_signature_lines() -> None:
    with pytest.raises(NoteFormatError):
        parse_note(b"text\n\n")
    with pytest.raises(NoteFormatError):
        format_note(b"text\n", [])


@pytest.mark.parametrize(
    "line",
    [
        b"- example.org/a AAAAAAA=",  # hyphen, not an em dash
        b"\xe2\x80\x94example.org/a AAAAAAA=",  # no space after the dash
        b"\xe2\x80\x94 example.org/a",  # no signature
        b"\xe2\x80\x94 example.org/a AAAAAA==",  # 4 bytes: a key ID and no signature
        b"\xe2\x80\x94 example.org/a AAAA AAAA",  # not base64
        b"\xe2\x80\x94 example.org/a AAAAAAA",  # unpadded
    ],
)
def test_signature_line_is_em_dash_space_name_space_base64_of_key_id_and_signature(line: bytes) -> None:
    with pytest.raises(NoteFormatError):
        parse_note(b"text\n\n" + line + b"\n")


def test_signature_line_format_round_trips() -> None:
    sig = Signature("example.org/a", b"\x01\x02\x03\x04", b"sig")
    assert sig.line() == "\u2014 example.org/a " + base64.b64encode(b"\x01\x02\x03\x04sig").decode()
    note = format_note(b"t\n", [sig])
    assert parse_note(note) == Note(b"t\n", (sig,))


# -- verification ---------------------------------------------------------------------------------


def test_signatures_from_unknown_keys_are_ignored_even_if_they_share_a_name_or_an_id() -> None:
    a, b = signer_a(), signer_b()
    note = sign_note(b"text\n", [a])
    same_name = Signature(a.name, b.key_id, b"\x00" * 64).line().encode()  # a's name, another ID
    same_id = Signature(b.name, a.key_id, b"\x00" * 64).line().encode()  # a's ID, another name
    verified = verify_note(note + same_name + b"\n" + same_id + b"\n", [a.verifier()])
    assert verified.verifiers == (a.verifier(),)
    assert len(verified.unknown) == 2


def test_a_signature_from_a_known_key_must_verify_and_rejects_the_whole_note() -> None:
    a, b = signer_a(), signer_b()
    note = sign_note(b"text\n", [a, b])
    forged = note.replace(note.split(b"\n")[-2], Signature(b.name, b.key_id, b"\x00" * 64).line().encode())
    assert verify_note(forged, [a.verifier()]).verifiers == (a.verifier(),)  # b unknown: ignored
    with pytest.raises(NoteNotVerified, match="invalid"):
        verify_note(forged, [a.verifier(), b.verifier()])  # b known: its bad signature rejects all


def test_every_signature_of_a_known_key_is_verified_even_a_repeated_one() -> None:
    a = signer_a()
    note = sign_note(b"text\n", [a])
    bad = Signature(a.name, a.key_id, b"\x00" * 64).line().encode() + b"\n"
    assert verify_note(note + note.split(b"\n\n")[1], [a.verifier()]).verifiers == (a.verifier(),)
    with pytest.raises(NoteNotVerified):
        verify_note(note + bad, [a.verifier()])


def test_a_note_no_known_key_verified_is_rejected() -> None:
    note = sign_note(b"text\n", [signer_a()])
    with pytest.raises(NoteNotVerified, match="found none"):
        verify_note(note, [signer_b().verifier()])
    with pytest.raises(NoteNotVerified):
        verify_note(note, [])


@pytest.mark.parametrize("count", [16, MAX_SIGNATURES])
def test_verifiers_accept_at_least_16_signatures(count: int) -> None:
    signers = [Ed25519Signer(f"example.org/s{i}", private_key(f"s{i}")) for i in range(count)]
    verified = verify_note(sign_note(b"text\n", signers), [s.verifier() for s in signers])
    assert len(verified.verifiers) == count  # a quorum counts them


def test_more_signatures_than_the_maximum_are_refused() -> None:
    a = signer_a()
    note = sign_note(b"text\n", [a])
    line = note.split(b"\n\n")[1]
    with pytest.raises(NoteFormatError, match=f"at most {MAX_SIGNATURES}"):
        verify_note(note + line * MAX_SIGNATURES, [a.verifier()])


def test_verifiers_sharing_a_name_and_key_id_are_refused() -> None:
    a = signer_a()
    twin = Ed25519Verifier(a.name, a.public)
    with pytest.raises(KeyFormatError):
        verify_note(sign_note(b"t\n", [a]), [a.verifier(), twin])


def test_errors_map_to_the_cli_exit_codes() -> None:
    assert issubclass(NoteFormatError, UnusableInput) and issubclass(NoteFormatError, ValueError)
    assert issubclass(KeyFormatError, UnusableInput)
    assert issubclass(NoteNotVerified, VerificationFailed)
    assert "expected" in str(NoteNotVerified("note: expected x, found y"))
