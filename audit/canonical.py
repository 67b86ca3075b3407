"""Canonical JSON: RFC 8785 (JSON Canonicalization Scheme) through the ``rfc8785`` library.

Before handing a value to ``rfc8785`` we walk it once, so a refused value is named by its
JSON path. The domain is I-JSON (RFC 7493 §2.2, as RFC 8785 §3.2.2.3 requires): finite
floats, integers within ±(2^53−1), string keys, and strings that are valid Unicode.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from typing import Any

import orjson
import rfc8785

from signoff.audit.errors import CanonicalFormError

MAX_SAFE_INTEGER = 2**53 - 1
MAX_DEPTH = 64
"""Nesting deeper than this is refused wherever a value is written or read (an entry's body sits
three levels below its top, and args at most :data:`signoff.audit.limits.MAX_VALUE_DEPTH` below it)."""
_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _SIMPLE_KEY.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def check(value: Any, path: str = "$") -> bool:
    """Raise :class:`CanonicalFormError` naming the path of the first value outside I-JSON.

    Returns True when the value holds a float or a character beyond the BMP, the two
    cases where RFC 8785 differs from sorted, compact ``json.dumps``. The common, valid
    case walks without building paths; paths are built only to name a refused value.
    Nesting deeper than :data:`MAX_DEPTH` levels is refused before it can exhaust the stack.
    """
    try:
        return _quick(value, MAX_DEPTH)
    except _Refused:
        return _named(value, path, MAX_DEPTH)


class _Refused(Exception):
    pass


def _quick(value: Any, room: int) -> bool:
    if value is None or value is True or value is False:
        return False
    kind = type(value)
    if kind is str:
        if value.isascii():
            return False
        try:
            return _has_astral(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise _Refused from None
    if kind is int:
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return False
        raise _Refused
    if kind is dict:
        if not room:
            raise _Refused
        slow = False
        for key, item in value.items():
            if type(key) is not str:
                raise _Refused
            slow = _quick(key, room) | _quick(item, room - 1) | slow
        return slow
    if kind is list or kind is tuple:
        if not room:
            raise _Refused
        slow = False
        for item in value:
            slow = _quick(item, room - 1) | slow
        return slow
    if kind is float:
        if math.isfinite(value):
            return True
        raise _Refused
    raise _Refused  # anything else (subclasses, bytes, objects): the named walk decides


def _named(value: Any, path: str, room: int) -> bool:
    if value is None or isinstance(value, bool):
        return False
    if isinstance(value, str):
        return _check_str(value, path)
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise CanonicalFormError(path, f"expected an integer within ±(2^53−1) (RFC 8785 §3.2.2.3), found {value}")
        return False
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalFormError(path, f"expected a finite number (RFC 8785 §3.2.2.3), found {value}")
        return True
    slow = False
    if isinstance(value, dict | list | tuple) and not room:
        raise CanonicalFormError(path, f"expected at most {MAX_DEPTH} levels of nesting, found deeper nesting here")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalFormError(
                    path, f"expected string object keys (RFC 8259 §4), found {type(key).__name__} {key!r}"
                )
            slow = _check_str(key, path, what="key") | _named(item, _child(path, key), room - 1) | slow
        return slow
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            slow = _named(item, _child(path, index), room - 1) | slow
        return slow
    if isinstance(value, bytes | bytearray):
        raise CanonicalFormError(path, "expected a JSON string, found bytes (decode them as UTF-8 first)")
    raise CanonicalFormError(path, f"expected a JSON value, found {type(value).__name__}")


def _check_str(text: str, path: str, what: str = "string") -> bool:
    if text.isascii():
        return False
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalFormError(
            path,
            f"expected a {what} of valid Unicode (RFC 8785 §3.2.2.2), found a lone surrogate {exc.object[exc.start]!r}",
        ) from None
    return _has_astral(encoded)


def _sorted_compact(value: Any) -> bytes:
    """Compact UTF-8 JSON with sorted keys: RFC 8785 itself for values without floats, long
    integers or characters beyond the BMP (same escapes, §3.2.2.2; UTF-16 and code point
    order agree on the BMP, §3.2.3). ``orjson`` writes it ~10x faster than ``json``."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # nested deeper than orjson's 255 levels, or a lone surrogate
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode_checked(value: Any, slow: bool) -> bytes:
    """RFC 8785 bytes of a value already passed through :func:`check`; ``slow`` is what it returned."""
    if slow:
        return rfc8785.dumps(value)
    return _sorted_compact(value)


def canonical(value: Any) -> bytes:
    """Return the RFC 8785 canonical bytes of ``value`` (UTF-8), refusing values outside I-JSON.

    Values with no floats and no characters beyond the BMP take a fast path that is
    byte-identical to RFC 8785 (see :func:`is_canonical`; property-tested against
    ``rfc8785``). Everything else is written by ``rfc8785`` itself.
    """
    return encode_checked(value, check(value))


def decode(raw: bytes, what: str = "input") -> Any:
    """Parse JSON bytes as strict I-JSON (RFC 7493): UTF-8, no NaN/Infinity, safe integers,
    no lone surrogates, no duplicate keys. A refused value is named by its JSON path."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CanonicalFormError("$", f"expected UTF-8 {what}, found an invalid byte at offset {exc.start}") from None

    def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise CanonicalFormError("$", f"expected unique object keys (RFC 7493 §2.3), found {key!r} twice")
            out[key] = value
        return out

    too_deep = nesting_beyond(raw)
    if too_deep is not None:
        raise CanonicalFormError(
            "$", f"expected {what} with at most {MAX_DEPTH} levels of nesting, found deeper at byte {too_deep}"
        )
    try:
        value = json.loads(text, parse_constant=float, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        raise CanonicalFormError("$", f"expected JSON {what}, found a syntax error: {exc}") from None
    check(value)
    return value


_STRUCTURE = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def nesting_beyond(raw: bytes | str, limit: int = MAX_DEPTH) -> int | None:
    """The byte offset where JSON text first nests deeper than ``limit`` levels, or None.

    Checked before parsing, so that no parser recurses into hostile input. Brackets inside
    strings do not count; the bound is exact, not a guess."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") <= limit:  # cannot nest deeper than it has brackets
        return None
    depth = 0
    for match in _STRUCTURE.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return match.start()
        elif token in (b"]", b"}"):
            depth -= 1
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(name)


class _Decoder(threading.local):
    """A per-thread JSON decoder that notes whether it met a float (the slow-path case)."""

    def __init__(self) -> None:
        self.saw_float = False
        self.decoder = json.JSONDecoder(parse_float=self._float, parse_int=self._int, parse_constant=_no_constant)

    def _float(self, text: str) -> float:
        self.saw_float = True
        return float(text)

    def _int(self, text: str) -> int | float:
        number = int(text)
        if len(text) > 15:  # may lie outside ±(2^53−1): the slow path decides
            self.saw_float = True
            if not -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
                # I-JSON numbers are doubles; RFC 8785 §3.2.2.3 writes a whole double such as 1e16
                # as the literal 10000000000000000. Read it back as that double.
                return float(text)
        return number


_DECODER = _Decoder()


def parse_canonical(raw: bytes) -> tuple[Any, bool]:
    """Parse ``raw`` and return its value if ``raw`` is exactly its RFC 8785 form, else raise ValueError.

    Fast path: for values with no floats, no integers of 16+ digits and no non-BMP
    characters, compact JSON with sorted keys is byte-identical to RFC 8785
    (same escapes, §3.2.2.2; same key order, since UTF-16 and code point order agree on
    the BMP). Such text with no backslash is read by ``orjson`` (the strict reader, ``json``
    with a callback per number, costs ~5x more); everything else goes through ``rfc8785``.
    Returns the value and whether it took the fast path (then :func:`fast_digest` is exact
    for its parts).
    """
    too_deep = nesting_beyond(raw)
    if too_deep is not None:
        raise ValueError(f"not canonical: nested deeper than {MAX_DEPTH} levels at byte {too_deep}")
    plain = b"\\" not in raw and (raw.isascii() or not _has_astral(raw))
    if plain and _SLOW_NUMBER.search(b"".join(raw.split(b'"')[::2])) is None:
        # With no backslash, every '"' delimits a string, so the even pieces are all that lies outside
        # strings: no float and no 16-digit integer there. orjson reads such text as json does.
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the strict reader below says what is wrong
        else:
            if _sorted_compact(value) != raw:
                raise ValueError("not canonical")
            return value, True
    try:
        text = raw.decode("utf-8")
        _DECODER.saw_float = False
        value = _DECODER.decoder.decode(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not _DECODER.saw_float and not _has_astral(raw):
        try:
            fast = _sorted_compact(value)
        except UnicodeEncodeError:
            raise ValueError("not canonical: lone surrogate") from None
        if fast != raw:
            raise ValueError("not canonical")
        return value, True
    try:
        slow = canonical(value)
    except (CanonicalFormError, rfc8785.CanonicalizationError) as exc:
        raise ValueError(f"not canonical: {exc}") from None
    if slow != raw:
        raise ValueError("not canonical")
    return value, False


def is_canonical(raw: bytes) -> bool:
    """True if ``raw`` is exactly the RFC 8785 form of the JSON value it encodes."""
    try:
        parse_canonical(raw)
    except ValueError:
        return False
    return True


_ASTRAL = re.compile(rb"[\xf0-\xf4]")
_SLOW_NUMBER = re.compile(rb"[0-9][.eE]|[0-9]{16}|-[0-9]{15}")
"""Outside strings, where JSON holds only numbers, literals and punctuation: a float, or an integer
written in 16+ characters (the number cases the fast path leaves to the strict reader)."""


def _has_astral(raw: bytes) -> bool:
    return _ASTRAL.search(raw) is not None


def fast_digest(value: Any) -> str:
    """:func:`digest` of a part of a value :func:`parse_canonical` accepted on its fast path."""
    return "sha256:" + hashlib.sha256(_sorted_compact(value)).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical bytes of ``value``: the digest of args, patches and the like."""
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()
