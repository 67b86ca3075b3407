"""Small presentation helpers for templates (Jinja2 filters). Output is escaped by the
template's autoescape; none of these return Markup."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from signoff.desk import summary


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def iso(value: datetime | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def when(value: datetime | str | None) -> str:
    """A time to the minute, UTC: "2026-12-01 14:02"."""
    text = iso(value)
    return text[:16].replace("T", " ") if text else ""


def clock(value: datetime | str | None) -> str:
    """A time to the second, UTC: "2026-12-01 14:02:07 UTC"."""
    text = iso(value)
    return text[:19].replace("T", " ") + " UTC" if text else ""


def hhmm(value: datetime | str | None) -> str:
    """A time to the minute, UTC, without the date: "14:02 UTC" (a claim lasts minutes)."""
    text = iso(value)
    return text[11:16] + " UTC" if text else ""


def ago(value: datetime | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    s = int((datetime.now(UTC) - value).total_seconds())
    return human(s)


def human(s: int) -> str:
    neg = s < 0
    s = abs(s)
    if s < 60:
        out = f"{s}s"
    elif s < 3600:
        out = f"{s // 60}m"
    elif s < 86400:
        out = f"{s // 3600}h {s % 3600 // 60}m"
    else:
        out = f"{s // 86400}d {s % 86400 // 3600}h"
    return f"-{out}" if neg else out


def left(value: datetime | None) -> str:
    if value is None:
        return "no deadline"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    s = int((value - datetime.now(UTC)).total_seconds())
    return "expired" if s <= 0 else human(s) + " left"


def short(value: str | None, n: int = 8) -> str:
    if not value:
        return ""
    if ":" in value and value.startswith("sha256:"):
        return value[7 : 7 + n]
    return value[:n]


def who(actor: str | None) -> str:
    """An actor as the log and the CLI write it ("human:alice@example.org"), the same on every page."""
    return actor or ""


def cut(value: Any, n: int = 80) -> str:
    return summary.cut(str(value or ""), n)


def bare(value: str | None) -> str:
    """An id without its ``sha256:`` prefix (for a cut display; the full value goes in a title)."""
    return (value or "").removeprefix("sha256:")


def middle(value: str | None, n: int = 16) -> str:
    """An id cut to about ``n`` characters, keeping its start and its end (ids of one app often share a
    prefix, "demo-4242-1-63849", or differ at the start, a UUID): "demo-4…1-63849"."""
    text = value or ""
    if len(text) <= n:
        return text
    tail = (n - 1) // 2
    return text[: n - 1 - tail] + "…" + text[-tail:]


def pointer(path: Any) -> str:
    """An RFC 6901 JSON pointer as a person reads it: "/amount" → "amount", "/to/0" → "to › 0"."""
    parts = str(path or "").split("/")[1:]
    return " › ".join(p.replace("~1", "/").replace("~0", "~") for p in parts) or "(the whole value)"


def erased_in(value: Any, erased: Any) -> bool:
    """Whether ``value`` is the commitment of a value erased from beside a sealed log (``Review.erased``)."""
    return isinstance(value, str) and bool(erased) and value in erased


FILTERS: dict[str, Any] = {
    "pretty": pretty,
    "iso": iso,
    "when": when,
    "clock": clock,
    "hhmm": hhmm,
    "ago": ago,
    "left": left,
    "short": short,
    "who": who,
    "cut": cut,
    "bare": bare,
    "pointer": pointer,
    "middle": middle,
    "number": summary.number,
    "erased_in": erased_in,
}
