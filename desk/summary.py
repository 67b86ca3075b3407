"""What the agent wants to do, in plain words: the line a reviewer reads first.

A pure function of the tool's name, description and parameter schema, the call's arguments, the
agent's name and the hint the call paused with (:func:`summarize`). It knows no particular tool:
it recognises an amount with its currency, a recipient, and names the rest, so that
``transfer_money(amount=1250.0, currency="EUR", to_account="DE89 …", memo="Invoice 1042")``
from ``back_office`` reads "back_office wants to transfer_money: 1,250.00 EUR to DE89 … (memo:
Invoice 1042)".

The protocol text ADK and the bridge put in a confirmation's hint ("Please approve or reject the
tool call …() by responding with a FunctionResponse …") is for developers, and is never shown
(:func:`own_question`); a hint the tool wrote itself (``tool_context.request_confirmation(hint=…)``)
is the tool's own question to the reviewer, and is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HEADLINE_MAX = 220
"""Characters in a whole headline."""
VALUE_MAX = 40
"""Characters of one value inside the headline."""
FIELD_MAX = 72
"""Characters of one key argument's value in a queue row."""
FULL_MAX = 300
"""Characters of one key argument's value in its tooltip (the review page shows it whole)."""
KEY_FIELDS = 4
"""Key arguments a queue row shows."""
EXTRA_IN_HEADLINE = 3
"""Other arguments named in the headline's parentheses."""

# Hints that are ADK's or the bridge's protocol, not the tool's own words.
_PROTOCOL_HINTS = (
    re.compile(r"^\s*Please approve or reject the (tool call|bash command)\b", re.I),
    re.compile(r"^\s*This tool call requires confirmation\b", re.I),
    re.compile(r"^\s*Signoff: a person must approve \S+\(\) before it runs\.?\s*$", re.I),
)
_AMOUNT = re.compile(
    r"(^|_)(amount|amt|price|total|sum|cost|fee|fees|value|balance|limit|payment|payout|refund|charge)s?(_|$)", re.I
)
_CURRENCY = re.compile(r"^(currency|ccy|cur|currency_code|currency_iso)$", re.I)
_ISO_4217 = re.compile(r"^[A-Z]{3}$")
# A few common currencies an amount's name may carry (amount_eur, price_usd).
_SUFFIX_CURRENCIES = {"eur", "usd", "gbp", "chf", "jpy", "cad", "aud", "sek", "nok", "dkk", "pln", "cny", "inr"}
_ZERO_DECIMALS = {"JPY", "KRW", "ISK", "CLP", "VND"}
_TARGET = re.compile(
    r"^(to|recipients?|to_account|to_address|to_email|to_iban|destination|dest|target|payee|beneficiary|"
    r"account_to|to_user|to_number|phone_number|addressee)$",
    re.I,
)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class KeyArg:
    """One argument as a queue row shows it: its name, its value cut for the row, and in full."""

    name: str
    text: str
    full: str


@dataclass(frozen=True)
class Summary:
    """The plain-words view of one paused call."""

    headline: str  # "back_office wants to transfer_money: 1,250.00 EUR to DE89 … (memo: Invoice 1042)"
    agent: str  # who asks ("" when the call names no agent)
    action: str  # the tool's name
    detail: str  # the headline after "wants to <tool>: "
    lead: str  # its main phrase: the amount and the recipient ("1,250.00 EUR to DE89 …"), "" when none
    purpose: str  # the first sentence of the tool's description
    question: str  # the tool's own question (its hint), "" for protocol text
    key_args: tuple[KeyArg, ...]
    more: int  # arguments not among key_args
    in_lead: tuple[str, ...] = ()  # the arguments the lead names (a queue row lists the others)

    @property
    def other_args(self) -> tuple[KeyArg, ...]:
        """The key arguments the lead does not name: a queue row's second line."""
        return tuple(a for a in self.key_args if a.name not in self.in_lead)

    def to_json(self) -> dict[str, Any]:
        """For a live queue row (the page inserts these with textContent)."""
        return {
            "headline": self.headline,
            "lead": self.lead,
            "purpose": self.purpose,
            "question": self.question,
            "key_args": [{"name": a.name, "text": a.text, "full": a.full} for a in self.key_args],
            "more": self.more,
            "other_args": [{"name": a.name, "text": a.text, "full": a.full} for a in self.other_args],
        }


def own_question(hint: str | None) -> str:
    """The hint when the tool wrote it (its own question), "" when it is ADK's or the bridge's protocol text."""
    text = (hint or "").strip()
    if not text or any(p.search(text) for p in _PROTOCOL_HINTS):
        return ""
    return text


def first_sentence(text: str | None, limit: int = 160) -> str:
    """The first sentence (or line) of a tool's description, cut at ``limit`` characters."""
    flat = (text or "").strip().split("\n\n", 1)[0]
    flat = _SPACE.sub(" ", flat)
    match = re.search(r"(?<=[.!?])\s", flat)
    if match:
        flat = flat[: match.start()]
    return cut(flat, limit)


def cut(text: str, limit: int) -> str:
    """``text`` with runs of white space made one space, cut at ``limit`` characters with "…"."""
    flat = _SPACE.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    head = flat[: max(1, limit - 1)]
    space = head.rfind(" ")
    if space >= limit * 0.6:  # cut at a word when one ends near the limit
        head = head[:space]
    return head.rstrip(" ,;:") + "…"


def number(value: float | int, decimals: int | None = None) -> str:
    """A number with thousands separators: 1250 → "1,250", 1250.5 → "1,250.5", with ``decimals`` fixed."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if decimals is not None:
        return f"{value:,.{decimals}f}"
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    text = f"{value:,.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else repr(value)


def money(amount: float | int, currency: str) -> str:
    """``1250.0, "EUR"`` → "1,250.00 EUR" (no decimals for currencies without minor units)."""
    return f"{number(amount, 0 if currency in _ZERO_DECIMALS else 2)} {currency}"


def value_text(value: Any, limit: int, *, nested: bool = False) -> str:
    """One argument's value as a person reads it, cut at ``limit`` characters (a list inside
    other text, ``nested``, in brackets)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return number(value)
    if isinstance(value, str):
        return cut(value, limit) if value.strip() else '""'
    if isinstance(value, Sequence):
        if not value:
            return "none"
        shown = [value_text(v, max(8, limit // 2), nested=True) for v in list(value)[:3]]
        more = f", +{len(value) - 3} more" if len(value) > 3 else ""
        text = cut(", ".join(shown), limit) + more
        return f"[{text}]" if nested else text
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        inner = ", ".join(f"{k}: {value_text(v, 16, nested=True)}" for k, v in list(value.items())[:3])
        more = ", …" if len(value) > 3 else ""
        return cut("{" + inner + more + "}", limit)
    return cut(str(value), limit)


def ordered(args: Mapping[str, Any], schema: Mapping[str, Any] | None) -> list[str]:
    """Argument names as the tool declares them: the required ones in their declared order (the log
    keeps ``required`` as a list, while an object's keys come back sorted, RFC 8785), then the
    other declared ones, then any others the call gives."""
    props = (schema or {}).get("properties") or {}
    required = [r for r in dict.fromkeys((schema or {}).get("required") or []) if r in args]
    declared = [p for p in props if p in args and p not in required]
    rest = [k for k in args if k not in required and k not in declared]
    return [*required, *declared, *rest]


def _currency_for(name: str, args: Mapping[str, Any], names: list[str]) -> tuple[str, str | None]:
    """(currency code, the argument that holds it) for an amount argument, or ("", None)."""
    for other in names:
        value = args.get(other)
        if _CURRENCY.match(other) and isinstance(value, str) and _ISO_4217.match(value.strip().upper()):
            return value.strip().upper(), other
    suffix = name.rsplit("_", 1)[-1].lower() if "_" in name else ""
    if suffix in _SUFFIX_CURRENCIES:
        return suffix.upper(), None
    return "", None


def summarize(
    tool: str,
    args: Mapping[str, Any] | None,
    *,
    description: str = "",
    schema: Mapping[str, Any] | None = None,
    agent: str = "",
    hint: str = "",
) -> Summary:
    """The plain-words summary of one call (see the module docstring)."""
    args = args if isinstance(args, Mapping) else {}
    names = ordered(args, schema)
    used: set[str] = set()
    lead: list[str] = []  # the headline's main phrase: amount, then recipient
    keys: list[KeyArg] = []

    for name in names:
        value = args[name]
        if _AMOUNT.search(name) and isinstance(value, int | float) and not isinstance(value, bool):
            currency, holder = _currency_for(name, args, names)
            text = money(value, currency) if currency else number(value)
            lead.append(text)
            used.add(name)
            if holder:
                used.add(holder)
            keys.append(KeyArg(name, text, text))
            break
    for name in names:
        if name in used or not _TARGET.match(name):
            continue
        value = args[name]
        lead.append("to " + value_text(value, VALUE_MAX))
        used.add(name)
        keys.append(KeyArg(name, value_text(value, FIELD_MAX), value_text(value, FULL_MAX)))
        break

    rest = [n for n in names if n not in used]
    for name in rest:
        if len(keys) >= KEY_FIELDS:
            break
        keys.append(KeyArg(name, value_text(args[name], FIELD_MAX), value_text(args[name], FULL_MAX)))

    # Short values first in the parentheses: a memo or a subject says more in a headline than a body.
    def weight(name: str) -> int:
        value = args[name]
        return 1 if isinstance(value, str) and (len(value) > VALUE_MAX or "\n" in value) else 0

    extra = sorted(rest, key=weight)[:EXTRA_IN_HEADLINE]
    extra_text = ", ".join(
        f"{n}: {value_text(args[n], VALUE_MAX if weight(n) == 0 else 24, nested=True)}" for n in extra
    )
    if len(rest) > len(extra):
        extra_text += f", +{len(rest) - len(extra)} more"
    detail = (" ".join(lead) + (f" ({extra_text})" if extra_text else "")) if lead else extra_text
    who = agent.strip() or "The agent"
    headline = f"{who} wants to {tool}" + (f": {detail}" if detail else "")
    return Summary(
        headline=cut(headline, HEADLINE_MAX),
        agent=agent.strip(),
        action=tool,
        detail=detail,
        lead=" ".join(lead),
        purpose=first_sentence(description),
        question=own_question(hint),
        key_args=tuple(keys),
        more=len(set(names) - used - {k.name for k in keys}),
        in_lead=tuple(n for n in names if n in used),
    )


def of_call(call: Any) -> Summary:
    """:func:`summarize` over a :class:`signoff.audit.CallSpec` (or anything with its fields)."""
    return summarize(
        str(getattr(call, "tool", "")),
        getattr(call, "args", None),
        description=str(getattr(call, "tool_description", "") or ""),
        schema=getattr(call, "tool_schema", None),
        agent=str(getattr(call, "agent", "") or ""),
        hint=str(getattr(call, "hint", "") or ""),
    )


def of_call_json(call: Mapping[str, Any]) -> Summary:
    """:func:`summarize` over a ``review.opened`` entry's ``call`` object."""
    return summarize(
        str(call.get("tool") or ""),
        call.get("args") if isinstance(call.get("args"), Mapping) else None,
        description=str(call.get("tool_description") or ""),
        schema=call.get("tool_schema") if isinstance(call.get("tool_schema"), Mapping) else None,
        agent=str(call.get("agent") or ""),
        hint=str(call.get("hint") or ""),
    )


__all__ = [
    "KeyArg",
    "Summary",
    "cut",
    "money",
    "number",
    "of_call",
    "of_call_json",
    "ordered",
    "own_question",
    "summarize",
]
