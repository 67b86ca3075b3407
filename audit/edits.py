"""Edits as people write them: ``amount=50 to=bob`` becomes an RFC 6902 patch (pure).

Each ``name=value`` replaces (or adds) one top-level argument. The value is typed by the tool's
declared parameters (the schema the review carries): an integer parameter takes ``50``, a
boolean ``true``/``false``, an object or array JSON text, a string the text as written. Without
a declared type, JSON is tried first and plain text is the fallback. The patch is then checked
like any other (:func:`signoff.audit.rules.patched_args`, :func:`signoff.audit.schema.check_args`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from signoff.audit.errors import PatchFailed
from signoff.audit.limits import MAX_VALUE_DEPTH


def _pointer(name: str) -> str:
    """RFC 6901 §4: ``~`` and ``/`` in a member name are escaped."""
    return "/" + name.replace("~", "~0").replace("/", "~1")


def _types(schema: dict[str, Any] | None, name: str) -> list[str]:
    prop = ((schema or {}).get("properties") or {}).get(name)
    kind = prop.get("type") if isinstance(prop, dict) else None
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    return [str(k).lower() for k in kinds]


def typed_value(text: str, kinds: Sequence[str], name: str) -> Any:
    """``text`` as the declared type of parameter ``name`` (or JSON, else a string, when undeclared)."""
    if "string" in kinds:
        return text
    if "null" in kinds and text == "null":
        return None
    if "integer" in kinds:
        try:
            return int(text)
        except ValueError:
            if "number" not in kinds:
                raise PatchFailed(f"{name}: expected an integer, found {text!r}") from None
    if "number" in kinds:
        try:
            return int(text) if text.lstrip("-").isdigit() else float(text)
        except ValueError:
            raise PatchFailed(f"{name}: expected a number, found {text!r}") from None
    if "boolean" in kinds:
        if text in ("true", "false"):
            return text == "true"
        raise PatchFailed(f"{name}: expected true or false, found {text!r}")
    if "object" in kinds or "array" in kinds or not kinds:
        _check_depth(text, name)
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            if kinds:
                raise PatchFailed(f"{name}: expected JSON ({' or '.join(kinds)}), found {text!r}") from None
            return text
    return text


def _check_depth(text: str, name: str) -> None:
    """Refuse JSON nested deeper than an argument may be (:data:`MAX_VALUE_DEPTH`) before parsing it: the
    parser itself would recurse once per level (a RecursionError). Brackets inside strings do not count."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_VALUE_DEPTH:
                raise PatchFailed(
                    f"{name}: expected a value nested at most {MAX_VALUE_DEPTH} levels deep, found deeper"
                )
        elif ch in "]}":
            depth -= 1


def patch_from_pairs(args: dict[str, Any], schema: dict[str, Any] | None, pairs: Sequence[str]) -> list[dict[str, Any]]:
    """An RFC 6902 patch (``replace`` or ``add`` per pair) from ``name=value`` pairs on ``args``."""
    if not pairs:
        raise PatchFailed("edits: expected at least one name=value pair, found none")
    patch = []
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise PatchFailed(f"edit {pair!r}: expected name=value (e.g. amount=50)")
        value = typed_value(text, _types(schema, name), name)
        patch.append({"op": "replace" if name in args else "add", "path": _pointer(name), "value": value})
    return patch
