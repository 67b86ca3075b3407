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
from typing import Any

import rfc8785

from audit.errors import CanonicalFormError

MAX_SAFE_INTEGER = 2**53 - 1
_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _SIMPLE_KEY.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=True)}]"


def check(value: Any, path: str = "$") -> None:
    """Raise :class:`CanonicalFormError` naming the path of the first value outside I-JSON."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise CanonicalFormError(
                path, f"expected an integer within ±(2^53−1) (RFC 8785 §3.2.2.3), found {value}"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalFormError(path, f"expected a finite number (RFC 8785 §3.2.2.3), found {value}")
        return
    if isinstance(value, str):
        _check_str(value, path)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalFormError(
                    path, f"expected string object keys (RFC 8259 §4), found {type(key).__name__} {key!r}"
                )
            _check_str(key, path, what="key")
            check(item, _child(path, key))
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check(item, _child(path, index))
        return
    if isinstance(value, bytes | bytearray):
        raise CanonicalFormError(path, "expected a JSON string, found bytes (decode them as UTF-8 first)")
    raise CanonicalFormError(path, f"expected a JSON value, found {type(value).__name__}")


def _check_str(text: str, path: str, what: str = "string") -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalFormError(
            path, f"expected a {what} of valid Unicode (RFC 8785 §3.2.2.2), found a lone surrogate {exc.object[exc.start]!r}"
        ) from None


def canonical(value: Any) -> bytes:
    """Return the RFC 8785 canonical bytes of ``value`` (UTF-8), refusing values outside I-JSON."""
    check(value)
    return rfc8785.dumps(value)


def decode(raw: bytes, what: str = "input") -> Any:
    """Parse JSON bytes as strict UTF-8 I-JSON, refusing NaN/Infinity literals and bad UTF-8."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CanonicalFormError("$", f"expected UTF-8 {what}, found an invalid byte at offset {exc.start}") from None

    def _refuse(name: str) -> Any:
        raise CanonicalFormError("$", f"expected a finite number, found {name}")

    try:
        return json.loads(text, parse_constant=_refuse)
    except json.JSONDecodeError as exc:
        raise CanonicalFormError("$", f"expected JSON {what}, found a syntax error: {exc}") from None


def is_canonical(raw: bytes) -> bool:
    """True if ``raw`` is exactly the RFC 8785 form of the JSON value it encodes.

    Fast path: for values with no floats and no non-BMP characters, Python's compact,
    sorted ``json.dumps`` is byte-identical to RFC 8785 (same escapes, §3.2.2.2; same key
    order, since UTF-16 and code point order agree on the BMP). Everything else goes
    through ``rfc8785`` itself.
    """
    saw_float = False

    def _float(text: str) -> float:
        nonlocal saw_float
        saw_float = True
        return float(text)

    def _int(text: str) -> int:
        number = int(text)
        if not -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
            raise CanonicalFormError("$", f"integer out of range: {text}")
        return number

    try:
        value = json.loads(raw.decode("utf-8"), parse_float=_float, parse_int=_int, parse_constant=_no_constant)
    except (ValueError, UnicodeDecodeError):
        return False
    if not saw_float and not _has_astral(raw):
        try:
            fast = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:
            return False
        return fast == raw
    try:
        return canonical(value) == raw
    except (CanonicalFormError, rfc8785.CanonicalizationError):
        return False


def _no_constant(name: str) -> Any:
    raise ValueError(name)


_ASTRAL = re.compile(rb"[\xf0-\xf4]")


def _has_astral(raw: bytes) -> bool:
    return _ASTRAL.search(raw) is not None


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical bytes of ``value``: the digest of args, patches and the like."""
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()
