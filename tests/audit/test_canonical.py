"""Canonical JSON (RFC 8785): the RFC's published examples, refusals that name the JSON
path, and properties under hypothesis that guard the fast paths in ``canonical`` and
``is_canonical`` against the ``rfc8785`` library itself."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from signoff.audit import CanonicalFormError, canonical, digest
from signoff.audit.canonical import MAX_DEPTH, decode, is_canonical, parse_canonical

MAX = 2**53 - 1

# -- RFC 8785 published examples ----------------------------------------------------------

# RFC 8785 §3.2.3 (sorting of object properties): the input object and the order the
# RFC lists for its properties after sorting by UTF-16 code units.
SORTING_INPUT = {
    "\u20ac": "Euro Sign",
    "\r": "Carriage Return",
    "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One",
    "\U0001f600": "Emoji: Grinning Face",
    "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis",
}
SORTING_ORDER = [
    "Carriage Return",
    "One",
    "Control",
    "Latin Small Letter O With Diaeresis",
    "Euro Sign",
    "Emoji: Grinning Face",
    "Hebrew Letter Dalet With Dagesh",
]

# RFC 8785 §3.2.2 example input (numbers, string escapes, literals) and its canonical output.
RFC_INPUT = b"""{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\"\\/",
  "literals": [null, true, false]
}"""
RFC_OUTPUT = (
    b'{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    b'"string":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
)

# RFC 8785 Appendix B: IEEE 754 bit patterns and their ECMAScript serialisation.
NUMBER_SAMPLES = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),  # minus zero
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def test_rfc8785_sorting_example() -> None:
    out = canonical(SORTING_INPUT)
    assert list(json.loads(out).values()) == SORTING_ORDER
    assert out.startswith(b'{"\\r":"Carriage Return","1":"One","\xc2\x80":"Control"')
    assert is_canonical(out)


def test_rfc8785_example_object() -> None:
    value = json.loads(RFC_INPUT)
    assert canonical(value) == RFC_OUTPUT
    assert is_canonical(RFC_OUTPUT)
    assert not is_canonical(RFC_INPUT)


def _integer_literal_beyond_2_53(value: float) -> bool:
    """Floats RFC 8785 writes as integer literals that lie beyond ±(2^53−1) (see the xfail below)."""
    return value.is_integer() and MAX < abs(value) < 1e21


@pytest.mark.parametrize(("bits", "expected"), NUMBER_SAMPLES)
def test_rfc8785_number_samples(bits: str, expected: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonical(value) == expected.encode()
    assert canonical([value]) == f"[{expected}]".encode()
    if not _integer_literal_beyond_2_53(value):
        assert is_canonical(f'{{"n":{expected}}}'.encode())


@pytest.mark.parametrize("value", [2.0**53, 1e16, -1e20, 295147905179352830000.0])
def test_every_value_canonical_accepts_reads_back_as_canonical(value: float) -> None:
    out = canonical({"n": value})
    assert is_canonical(out)


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_number_samples_refused(bits: str) -> None:
    """Appendix B's NaN and Infinity samples are errors."""
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    with pytest.raises(CanonicalFormError) as caught:
        canonical({"n": value})
    assert caught.value.path == "$.n"


def test_string_escapes_and_unescaped_characters() -> None:
    assert (
        canonical('\x00\x08\t\n\x0c\r\x1f"\\/\x7f\u2028é')
        == b'"\\u0000\\b\\t\\n\\f\\r\\u001f\\"\\\\/\x7f\xe2\x80\xa8\xc3\xa9"'
    )


def test_integers_within_the_safe_range_are_kept_exactly() -> None:
    assert canonical([MAX, -MAX, 0, -0, 10**15]) == f"[{MAX},{-MAX},0,0,1000000000000000]".encode()


def test_digest_is_sha256_of_the_canonical_bytes() -> None:
    value = {"b": [1, 2.5], "a": "é"}
    assert digest(value) == "sha256:" + hashlib.sha256(canonical(value)).hexdigest()
    assert digest({"a": "é", "b": [1, 2.5]}) == digest(value)  # key order does not matter


# -- refusals that name the JSON path ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "path", "words"),
    [
        ({"amount": math.nan}, "$.amount", "finite"),
        ({"a": [1, {"b": math.inf}]}, "$.a[1].b", "finite"),
        ({"a": {"x y": -math.inf}}, '$.a["x y"]', "finite"),
        ({"n": 2**53}, "$.n", "2^53"),
        ({"n": -(2**53)}, "$.n", "2^53"),
        ({"deep": [[[10**20]]]}, "$.deep[0][0][0]", "2^53"),
        ({"a": {1: "x"}}, "$.a", "string object keys"),
        ({"a": {(1, 2): "x"}}, "$.a", "string object keys"),
        ({"s": "ok\ud800"}, "$.s", "lone surrogate"),
        ({"k": {"\udfff": 1}}, "$.k", "lone surrogate"),
        ({"b": b"bytes"}, "$.b", "bytes"),
        ({"s": {1, 2}}, "$.s", "JSON value"),
    ],
    ids=[
        "nan",
        "inf",
        "-inf",
        "2^53",
        "-2^53",
        "10^20",
        "int-key",
        "tuple-key",
        "surrogate",
        "surrogate-key",
        "bytes",
        "set",
    ],
)
def test_refusal_names_the_path(value: Any, path: str, words: str) -> None:
    with pytest.raises(CanonicalFormError) as caught:
        canonical(value)
    assert caught.value.path == path
    assert words in str(caught.value)
    assert "expected" in str(caught.value) and "found" in str(caught.value)
    with pytest.raises(CanonicalFormError):
        digest(value)


def test_boundaries_of_the_integer_domain() -> None:
    assert canonical(MAX) == str(MAX).encode()
    assert canonical(-MAX) == str(-MAX).encode()
    assert canonical(True) == b"true"  # a bool is not an integer here
    assert canonical(2.0**60) == b"1152921504606847000"  # ECMAScript's shortest round-trip form


def test_decode_refuses_invalid_utf8_naming_the_offset() -> None:
    with pytest.raises(CanonicalFormError) as caught:
        decode(b'{"a":"\xff"}')
    assert caught.value.path == "$"
    assert "UTF-8" in str(caught.value) and "offset 6" in str(caught.value)


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_decode_refuses_non_finite_literals(literal: bytes) -> None:
    with pytest.raises(CanonicalFormError) as caught:
        decode(b'{"a":[' + literal + b"]}")
    assert "finite" in str(caught.value)


def test_decode_refuses_bad_json_saying_what_it_found() -> None:
    with pytest.raises(CanonicalFormError) as caught:
        decode(b'{"a":', "entry")
    assert "expected JSON entry" in str(caught.value)


def test_decode_names_the_path_of_a_non_finite_literal() -> None:
    with pytest.raises(CanonicalFormError) as caught:
        decode(b'{"a":[NaN]}')
    assert caught.value.path == "$.a[0]"


def test_decode_refuses_an_escaped_lone_surrogate() -> None:
    with pytest.raises(CanonicalFormError) as caught:
        decode(b'{"s":"\\ud800"}')
    assert caught.value.path == "$.s"


def test_decode_refuses_an_integer_beyond_the_safe_range() -> None:
    with pytest.raises(CanonicalFormError) as caught:
        decode(b'{"n":9007199254740993}')
    assert caught.value.path == "$.n"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,"a":2}',  # duplicate key
        b'{"b":1,"a":2}',  # unsorted
        b'{"a": 1}',  # whitespace
        b'{"a":1.0}',  # number form
        b'{"a":-0}',
        b'{"a":1E2}',
        b'{"a":"\\u00e9"}',  # needless escape
        b'{"a":"\\ud800"}',  # lone surrogate
        b'"\\ud83d\\ude00"',  # astral character escaped instead of written
        b'{"a":9007199254740993}',  # beyond the I-JSON integers
        b'{"a":NaN}',
        b"\xff",
        b"",
        b"[1,2]\n",
    ],
)
def test_is_canonical_refuses(raw: bytes) -> None:
    assert not is_canonical(raw)


# -- properties -----------------------------------------------------------------------------

TRICKY = [
    "",
    "a",
    "A",
    "é",
    "\u0080",
    "\u20ac",
    "\ue000",
    "\ufb33",
    "\uffff",
    "\U00010000",
    "\U0001f600",
    "\r",
    "\x7f",
    '"',
    "\\",
]

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=8) | st.sampled_from(TRICKY)
keys = st.lists(st.sampled_from(TRICKY), min_size=1, max_size=3).map("".join) | text
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX, max_value=MAX)
    | st.integers(min_value=-(10**16), max_value=10**16).filter(lambda n: abs(n) <= MAX)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not _integer_literal_beyond_2_53(f))
    | text
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=24,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
@example({"\U0001f600": 1, "\ufb33": 2, "\ue000": 3})  # UTF-16 order differs from code point order
@example([1e21, 1e-7, -0.0, 5e-324, 0.1])
def test_canonical_is_stable_and_equals_rfc8785(value: Any) -> None:
    out = canonical(value)
    assert out == rfc8785.dumps(value)
    assert canonical(json.loads(out)) == out
    assert is_canonical(out)


def _nested(levels: int) -> Any:
    """``levels`` containers, objects and arrays in turn, around one non-ASCII leaf."""
    value: Any = "é"
    for level in range(levels):
        value = {"next": value} if level % 2 else [value]
    return value


def test_nesting_up_to_the_bound_equals_rfc8785() -> None:
    value = _nested(MAX_DEPTH)
    out = canonical(value)
    assert out == rfc8785.dumps(value)
    assert is_canonical(out)
    assert decode(out) == value


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 200, 5_000])
def test_nesting_deeper_than_the_bound_is_refused_naming_the_path(levels: int) -> None:
    """Deeper values are refused with the JSON path where the bound is crossed, never a RecursionError
    (orjson, the fast path's writer, stops at 255 levels; Python's json at about 1,000)."""
    value = _nested(levels)
    with pytest.raises(CanonicalFormError) as caught:
        canonical(value)
    assert f"expected at most {MAX_DEPTH} levels of nesting" in str(caught.value)
    assert caught.value.path.count("[") + caught.value.path.count(".") == MAX_DEPTH, caught.value.path
    text = ("[" * levels + "]" * levels).encode()
    with pytest.raises(CanonicalFormError, match="levels of nesting"):
        decode(text)
    assert not is_canonical(text)


def _serialise(value: Any, style: int) -> bytes:
    """Several ways a producer might write the same value; only one of them is canonical."""
    if style == 0:
        return canonical(value)
    if style == 1:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if style == 2:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    if style == 3:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if style == 4:
        return json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False).encode("utf-8")


def _oracle(raw: bytes) -> bool:
    try:
        return rfc8785.dumps(json.loads(raw)) == raw
    except (ValueError, rfc8785.CanonicalizationError):
        return False


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.integers(min_value=0, max_value=5))
@example({"\U0001f600": 1, "\ufb33": 2}, 1)  # sorted by code point, not UTF-16: not canonical
@example({"\ufb33": 2, "\U0001f600": 1}, 3)
@example({"a": 1.0}, 1)
@example({"a": 10**15 + 1, "b": 1e16}, 1)
@example({"k": "\U0001f600"}, 2)
def test_is_canonical_agrees_with_rfc8785(value: Any, style: int) -> None:
    raw = _serialise(value, style)
    assert is_canonical(raw) == _oracle(raw)


@settings(max_examples=150, deadline=None)
@given(values, st.data())
def test_is_canonical_refuses_any_single_byte_change(value: Any, data: st.DataObject) -> None:
    raw = canonical(value)
    index = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    replacement = data.draw(st.sampled_from(b' 0"\\{}[],:eE.-+9a\xc3'))
    changed = raw[:index] + bytes([replacement]) + raw[index + 1 :]
    assert is_canonical(changed) == _oracle(changed)


# -- the fast path of parse_canonical ---------------------------------------------------------------


def _simple(value: Any) -> bool:
    """What ``parse_canonical`` must say of a canonical value: True unless it holds a float, an integer
    written in 16+ characters or a character beyond the BMP (where sorted compact JSON may differ
    from RFC 8785, or where the strict reader decides)."""
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, float):
        return False
    if isinstance(value, int):
        return len(str(value)) < 16
    if isinstance(value, str):
        return all(ord(char) <= 0xFFFF for char in value)
    if isinstance(value, list):
        return all(_simple(item) for item in value)
    return all(_simple(key) and _simple(item) for key, item in value.items())


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values)
@example({"at": "2026-12-01T07:00:58.521604Z", "n": 1})  # number-like text inside a string
@example({"a": 'x":1.5,"b', "n": [2, 3]})  # escaped quotes around number-like text
@example({"a": [1e21, "1.5"], "b": "q"})
@example({"a": 10**15, "b": "10000000000000000"})
def test_parse_canonical_reads_what_json_reads_and_flags_the_slow_cases(value: Any) -> None:
    raw = canonical(value)
    parsed, simple = parse_canonical(raw)
    assert parsed == json.loads(raw)
    assert simple == _simple(json.loads(raw))


@pytest.mark.parametrize(
    "raw, simple",
    [
        (b'{"a":"07:58.5,","b":1}', True),  # ":58.5," is text, not a number
        (b'{"a":"[1.5]"}', True),
        (b'{"a":1.5}', False),
        (b"[1,2.5]", False),
        (b"1.5", False),
        (b'{"a":1e+21}', False),
        (b'{"a":1000000000000000}', False),  # 16 digits: the strict path decides
        (b'{"a":-100000000000000}', False),  # 16 characters
        (b'{"a":-10000000000000}', True),
        (b'{"a":"\\"1.5"}', True),  # an escaped quote: the strict path reads it
        (b'{"a":"\xf0\x9f\x98\x80"}', False),
    ],
)
def test_parse_canonical_fast_path_examples(raw: bytes, simple: bool) -> None:
    assert parse_canonical(raw) == (json.loads(raw), simple)
