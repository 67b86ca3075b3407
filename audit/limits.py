"""Bounds on what comes from outside: nesting and size of args, payloads, patches and texts.

Applied before any work is done (no transaction is opened for a value over a bound), so a hostile
value costs a walk, not a write. Each refusal is a :class:`CanonicalFormError` that names the JSON
path and the bound. The README's "Limits" section lists the same numbers.
"""

from __future__ import annotations

from typing import Any

from signoff.audit.canonical import canonical, check
from signoff.audit.errors import CanonicalFormError, InvalidEntry

MAX_VALUE_DEPTH = 32
"""Levels of nesting in args, a payload or a patch (the entry around them adds a few more)."""
MAX_ARGS_BYTES = 256 * 1024
"""Canonical (RFC 8785) size of one call's args, and of the args an edit produces."""
MAX_PAYLOAD_BYTES = 64 * 1024
"""Canonical size of a tool's own question, or of the person's answer to it."""
MAX_PATCH_BYTES = 256 * 1024
"""Canonical size of an RFC 6902 patch."""
MAX_PATCH_OPS = 1_000
"""Operations in one patch."""
MAX_TEXT = 10_000
"""Characters in a rationale, a reason, a hint or a conversation excerpt."""
MAX_DAYS = 36_500
MAX_SECONDS = MAX_DAYS * 86_400.0
"""The longest span the record accepts (100 years): a deadline, an escalation, a claim, a retention, a
delegation. Longer ones are refused at the write; a log written before this bound still verifies (its
times stop at :data:`signoff.audit.entry.END_OF_TIME`)."""


def _depth(value: Any, path: str, limit: int) -> None:
    """Refuse nesting deeper than ``limit``, naming where (iterative: no recursion on hostile input)."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = ((f"{where}.{key}" if key.isidentifier() else f"{where}[{key!r}]", v)
                             for key, v in item.items() if isinstance(key, str))  # fmt: skip
        elif isinstance(item, list | tuple):
            children = ((f"{where}[{index}]", v) for index, v in enumerate(item))
        else:
            continue
        if depth >= limit:
            raise CanonicalFormError(where, f"expected at most {limit} levels of nesting, found deeper nesting here")
        stack.extend((child, child_path, depth + 1) for child_path, child in children)


def bounded(value: Any, path: str, max_bytes: int, *, depth: int = MAX_VALUE_DEPTH) -> bytes:
    """Check ``value`` against the nesting and size bounds; return its canonical bytes."""
    _depth(value, path, depth)
    check(value, path)
    raw = canonical(value)
    if len(raw) > max_bytes:
        raise CanonicalFormError(path, f"expected at most {max_bytes:,} bytes in canonical form, found {len(raw):,}")
    return raw


def bounded_text(value: Any, path: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise CanonicalFormError(path, f"expected text, found {type(value).__name__}")
    if len(value) > limit:
        raise CanonicalFormError(path, f"expected at most {limit:,} characters, found {len(value):,}")
    return value


def bounded_seconds(value: Any, path: str) -> float:
    """A span in seconds: a finite number > 0 and at most :data:`MAX_SECONDS`; :class:`InvalidEntry`
    names ``path`` and the bound."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_SECONDS:
        raise InvalidEntry(f"{path}: expected a number of seconds > 0 and at most {MAX_SECONDS:,.0f} "
                           f"({MAX_DAYS:,} days), found {value!r}")  # fmt: skip
    return float(value)


def bounded_patch(patch: Any, path: str = "$.patch") -> None:
    if isinstance(patch, list) and len(patch) > MAX_PATCH_OPS:
        raise CanonicalFormError(path, f"expected at most {MAX_PATCH_OPS:,} operations, found {len(patch):,}")
    bounded(patch, path, MAX_PATCH_BYTES, depth=MAX_VALUE_DEPTH + 2)
