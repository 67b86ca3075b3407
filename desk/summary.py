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

After a reviewer changed the arguments (an edit, or an earlier round of a review that needs several
people), the summary reads as what will run, and each phrase that changed keeps the proposal's words
beside it (:attr:`Part.was`), so a page can strike them through: ``summarize(…, proposed=…)``.
The tool's question was asked about the proposal: the proposed values it quotes are marked the same
way (:attr:`Summary.question_parts`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
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
_NUMBER_TEXT = re.compile(r"-?\d[\d,]*(?:\.(\d+))?")
_MISSING = object()


@dataclass(frozen=True)
class KeyArg:
    """One argument as a queue row shows it: its name, its value cut for the row, and in full."""

    name: str
    text: str
    full: str
    was: str = ""  # the proposal's text, when a reviewer changed this argument ("" when unchanged)


@dataclass(frozen=True)
class Part:
    """One phrase of a headline (or of the tool's question): what it says now and, when a reviewer
    changed the arguments it names, what the agent's proposal said there (``was``). A removed
    argument is a part with no ``text``."""

    text: str
    was: str = ""
    names: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.was) and self.was != self.text

    def to_json(self) -> dict[str, str]:
        return {"text": self.text, "was": self.was if self.changed else ""}


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
    lead_parts: tuple[Part, ...] = ()  # the lead's phrases ("1,250.00 EUR", "to DE89 …")
    extra_parts: tuple[Part, ...] = ()  # the parentheses' phrases ("memo: Invoice 1042")
    extra_more: int = 0  # arguments the parentheses leave out ("+2 more")
    question_parts: tuple[Part, ...] = ()  # the question, its quotes of changed proposed values marked

    @property
    def other_args(self) -> tuple[KeyArg, ...]:
        """The key arguments the lead does not name: a queue row's second line."""
        return tuple(a for a in self.key_args if a.name not in self.in_lead)

    @property
    def changed(self) -> bool:
        """Whether a reviewer changed arguments this summary names (it reads as what will run)."""
        return any(p.changed for p in (*self.lead_parts, *self.extra_parts)) or any(a.was for a in self.key_args)

    @property
    def lead_changed(self) -> bool:
        return any(p.changed for p in self.lead_parts)

    def to_json(self) -> dict[str, Any]:
        """For a live queue row (the page inserts these with textContent)."""
        return {
            "headline": self.headline,
            "lead": self.lead,
            "purpose": self.purpose,
            "question": self.question,
            "key_args": [{"name": a.name, "text": a.text, "full": a.full} for a in self.key_args],
            "more": self.more,
            "other_args": [{"name": a.name, "text": a.text, "full": a.full, "was": a.was} for a in self.other_args],
            "lead_parts": [p.to_json() for p in self.lead_parts],
            "changed": self.changed,
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


@dataclass(frozen=True)
class _Phrases:
    """What :func:`summarize` says about one set of arguments, before any comparison."""

    lead: list[Part]
    extras: list[Part]
    extra_more: int
    keys: list[KeyArg]
    used: set[str]
    names: list[str]


def _phrases(args: Mapping[str, Any], schema: Mapping[str, Any] | None, first: Collection[str] = ()) -> _Phrases:
    """The lead (amount, then recipient), the key arguments and the headline's parentheses; ``first``:
    arguments the parentheses name before the others (the ones a reviewer changed)."""
    names = ordered(args, schema)
    used: set[str] = set()
    lead: list[Part] = []
    keys: list[KeyArg] = []
    for name in names:
        value = args[name]
        if _AMOUNT.search(name) and isinstance(value, int | float) and not isinstance(value, bool):
            currency, holder = _currency_for(name, args, names)
            text = money(value, currency) if currency else number(value)
            lead.append(Part(text, names=(name, holder) if holder else (name,)))
            used.add(name)
            if holder:
                used.add(holder)
            keys.append(KeyArg(name, text, text))
            break
    for name in names:
        if name in used or not _TARGET.match(name):
            continue
        value = args[name]
        lead.append(Part("to " + value_text(value, VALUE_MAX), names=(name,)))
        used.add(name)
        keys.append(KeyArg(name, value_text(value, FIELD_MAX), value_text(value, FULL_MAX)))
        break

    rest = [n for n in names if n not in used]
    shown = set(sorted(rest, key=lambda n: n not in first)[: max(0, KEY_FIELDS - len(keys))])
    keys += [KeyArg(n, value_text(args[n], FIELD_MAX), value_text(args[n], FULL_MAX)) for n in rest if n in shown]

    # Short values first in the parentheses: a memo or a subject says more in a headline than a body.
    def weight(name: str) -> tuple[bool, int]:
        return name not in first, weight_of(args[name])

    extra = sorted(rest, key=weight)[:EXTRA_IN_HEADLINE]
    extras = [
        Part(f"{n}: {value_text(args[n], VALUE_MAX if weight(n)[1] == 0 else 24, nested=True)}", names=(n,))
        for n in extra
    ]
    return _Phrases(lead, extras, len(rest) - len(extra), keys, used, names)


def weight_of(value: Any) -> int:
    """1 for a long or many-line text (the headline names it shorter, and after the short ones), else 0."""
    return 1 if isinstance(value, str) and (len(value) > VALUE_MAX or "\n" in value) else 0


def _lead_amounts(lead: Sequence[Part]) -> set[str]:
    """The amount arguments a lead names (their phrase is a number, not a text)."""
    return {p.names[0] for p in lead if not p.text.startswith("to ")}


def excerpts(old: str, new: str, limit: int) -> tuple[str, str]:
    """Two versions of a text, each cut to ``limit`` characters from a little before where they first
    differ ("…" where a cut starts), so that both say what changed rather than the same opening."""
    a, b = _SPACE.sub(" ", old).strip(), _SPACE.sub(" ", new).strip()
    same = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        same += 1
    start = 0
    if same > limit // 3 and (len(a) > limit or len(b) > limit):
        start = max(0, a.rfind(" ", 0, max(0, same - limit // 4)) + 1)

    def show(text: str) -> str:
        return ("…" + cut(text[start:], limit - 1)) if start else cut(text, limit)

    return show(a), show(b)


def _detail(lead: Sequence[Part], extras: Sequence[Part], more: int) -> str:
    """The headline after "wants to <tool>: ", in plain words (what will run: removed parts say nothing)."""
    extra_text = ", ".join(p.text for p in extras if p.text)
    if more:
        extra_text += (", " if extra_text else "") + f"+{more} more"
    lead_text = " ".join(p.text for p in lead)
    return (lead_text + (f" ({extra_text})" if extra_text else "")) if lead_text else extra_text


def same(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same value (RFC 8785: 1250 and 1250.0 are; true and 1 are not)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def changed_names(proposed: Mapping[str, Any], final: Mapping[str, Any]) -> list[str]:
    """The top-level arguments a reviewer changed, added or removed (in the proposal's order, then the added)."""
    out = [n for n in proposed if n not in final or not same(proposed[n], final[n])]
    return out + [n for n in final if n not in proposed]


def summarize(
    tool: str,
    args: Mapping[str, Any] | None,
    *,
    description: str = "",
    schema: Mapping[str, Any] | None = None,
    agent: str = "",
    hint: str = "",
    proposed: Mapping[str, Any] | None = None,
) -> Summary:
    """The plain-words summary of one call (see the module docstring). ``proposed``: the agent's own
    args when ``args`` are what a reviewer changed them to; each phrase that differs then carries the
    proposal's words in :attr:`Part.was` (and an argument the reviewer removed, a part without text)."""
    args = args if isinstance(args, Mapping) else {}
    before = proposed if isinstance(proposed, Mapping) else None
    changed = changed_names(before, args) if before is not None else []
    now = _phrases(args, schema, first=changed)
    lead, extras, keys = now.lead, now.extras, now.keys
    if changed and before is not None:
        was = _phrases(before, schema, first=changed)
        said = {p.names[0]: p.text for p in was.lead}
        said_keys = {k.name: k.text for k in was.keys}

        def text_of(name: str) -> str:
            if name in said:
                return said[name]
            return f"{name}: {value_text(before[name], VALUE_MAX, nested=True)}" if name in before else ""

        def mark(p: Part, in_lead: bool) -> Part:
            if not any(n in changed for n in p.names):
                return p
            name = p.names[0]
            was_value, now_value = before.get(name), args.get(name)
            if isinstance(was_value, str) and isinstance(now_value, str) and name not in _lead_amounts(lead):
                # Two texts: each from where they differ, so the headline shows the change, not one opening twice.
                old_text, new_text = excerpts(was_value, now_value, VALUE_MAX)
                label = "to " if in_lead else f"{name}: "
                return Part(label + new_text, label + old_text, p.names)
            old = said.get(name) if in_lead else text_of(name)
            return Part(p.text, old or "(not set)", p.names)

        lead = [mark(p, True) for p in lead]
        extras = [mark(p, False) for p in extras]
        gone = [n for n in changed if n not in args]
        extras = [Part("", text_of(n), (n,)) for n in gone] + extras
        keys = [
            KeyArg(k.name, k.text, k.full, said_keys.get(k.name, "(not set)")) if k.name in changed else k for k in keys
        ]
    detail = _detail(lead, extras, now.extra_more)
    who = agent.strip() or "The agent"
    headline = f"{who} wants to {tool}" + (f": {detail}" if detail else "")
    question = own_question(hint)
    return Summary(
        headline=cut(headline, HEADLINE_MAX),
        agent=agent.strip(),
        action=tool,
        detail=detail,
        lead=" ".join(p.text for p in lead),
        purpose=first_sentence(description),
        question=question,
        key_args=tuple(keys),
        more=len(set(now.names) - now.used - {k.name for k in keys}),
        in_lead=tuple(n for n in now.names if n in now.used),
        lead_parts=tuple(lead),
        extra_parts=tuple(extras),
        extra_more=now.extra_more,
        question_parts=question_parts(question, before, args) if before is not None else (Part(question),),
    )


def _number_texts(value: float | int) -> list[str]:
    """The ways a text may write a number: 1250.5 as "1,250.50", "1250.50", "1,250.5", "1250.5"."""
    out = {number(value), f"{value:,.2f}", f"{value:.2f}", str(value)}
    if isinstance(value, float) and value.is_integer():
        out.add(str(int(value)))
    out.add(number(value).replace(",", ""))
    return sorted((t for t in out if t and t != "-0"), key=len, reverse=True)


def _like(found: str, value: Any) -> str:
    """``value`` written the way ``found`` wrote the value it replaces (its decimals, its separators)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        match = _NUMBER_TEXT.fullmatch(found)
        if match is not None:
            decimals = len(match.group(1) or "")
            text = f"{value:,.{decimals}f}" if decimals else number(value)
            return text if "," in found else text.replace(",", "")
        return number(value)
    if isinstance(value, str):
        return cut(value, VALUE_MAX)
    return value_text(value, VALUE_MAX)


def question_parts(question: str, proposed: Mapping[str, Any] | None, final: Mapping[str, Any]) -> tuple[Part, ...]:
    """The tool's question (asked about its proposal), split where it quotes a value a reviewer changed:
    each such quote is a part whose ``was`` is the quote and whose ``text`` is the value that will run
    ("Send <del>100</del> 50 EUR to ACC-1?"). Numbers are found whole ("100", "1,250.00"), strings of
    three characters or more exactly."""
    if not question:
        return ()
    if not proposed:
        return (Part(question),)
    wanted: dict[str, str] = {}  # the text a quote may be -> the argument it quotes
    for name in changed_names(proposed, final):
        if name not in proposed:
            continue
        old = proposed[name]
        if isinstance(old, int | float) and not isinstance(old, bool):
            for text in _number_texts(old):
                wanted.setdefault(text, name)
        elif isinstance(old, str) and len(old.strip()) >= 3 and "\n" not in old:
            wanted.setdefault(old, name)
    if not wanted:
        return (Part(question),)
    pattern = "|".join(
        (r"(?<![\w.,])" + re.escape(t) + r"(?![\w]|[.,]\d)") if _NUMBER_TEXT.fullmatch(t) else re.escape(t)
        for t in sorted(wanted, key=len, reverse=True)
    )
    parts: list[Part] = []
    at = 0
    for match in re.finditer(pattern, question):
        name = wanted[match.group(0)]
        if match.start() > at:
            parts.append(Part(question[at : match.start()]))
        new = _like(match.group(0), final[name]) if name in final else ""
        parts.append(Part(new, match.group(0), (name,)))
        at = match.end()
    if at < len(question):
        parts.append(Part(question[at:]))
    return tuple(parts)


def of_call(call: Any, final_args: Mapping[str, Any] | None = None) -> Summary:
    """:func:`summarize` over a :class:`signoff.audit.CallSpec` (or anything with its fields);
    ``final_args``: what a reviewer changed its args to (the summary then reads as what will run)."""
    args = getattr(call, "args", None)
    return summarize(
        str(getattr(call, "tool", "")),
        final_args if final_args is not None else args,
        description=str(getattr(call, "tool_description", "") or ""),
        schema=getattr(call, "tool_schema", None),
        agent=str(getattr(call, "agent", "") or ""),
        hint=str(getattr(call, "hint", "") or ""),
        proposed=args if final_args is not None and isinstance(args, Mapping) else None,
    )


def of_call_json(call: Mapping[str, Any], final_args: Mapping[str, Any] | None = None) -> Summary:
    """:func:`summarize` over a ``review.opened`` entry's ``call`` object (``final_args``: as :func:`of_call`)."""
    args = call.get("args") if isinstance(call.get("args"), Mapping) else None
    return summarize(
        str(call.get("tool") or ""),
        final_args if final_args is not None else args,
        description=str(call.get("tool_description") or ""),
        schema=call.get("tool_schema") if isinstance(call.get("tool_schema"), Mapping) else None,
        agent=str(call.get("agent") or ""),
        hint=str(call.get("hint") or ""),
        proposed=args if final_args is not None else None,
    )


def runs_with(review: Any) -> dict[str, Any] | None:
    """The args a reviewer changed a review's call to: what will run once it is approved (a pending
    review's current round, after an edit toward a quorum) or what runs (an edited review); None when
    the call runs as the agent proposed it, or not at all."""
    status = getattr(review, "status", "")
    if status == "pending":
        found = getattr(review, "round_args", None)
        return dict(found) if getattr(review, "round", 0) and isinstance(found, Mapping) else None
    found = getattr(review, "final_args", None)
    return dict(found) if status == "edited" and isinstance(found, Mapping) else None


ERASED = "(erased)"
"""What a summary says in place of a value erased from beside a sealed log (its commitment stays)."""


def _without(value: Any, erased: Collection[str]) -> Any:
    return ERASED if isinstance(value, str) and value in erased else value


def _args_without(args: Mapping[str, Any] | None, erased: Collection[str]) -> dict[str, Any] | None:
    """Args with each erased value (still its commitment) said as :data:`ERASED`; args erased whole (every
    member, or the single member ``""`` of args sealed whole) have nothing left to say."""
    if args is None:
        return None
    said = {name: _without(value, erased) for name, value in args.items()}
    return {} if said and all(v == ERASED for v in said.values()) else said


def of_review(review: Any) -> Summary:
    """The summary of a review's call as it will run (:func:`runs_with`), its proposal struck beside it.
    On a sealed log, values erased since (``review.erased``) are said as :data:`ERASED`, and an erased
    question is not asked."""
    erased = getattr(review, "erased", None)
    call, final = review.call, runs_with(review)
    if erased:
        hint = "" if _without(call.hint, erased) == ERASED else call.hint
        call = replace(call, args=_args_without(call.args, erased) or {}, hint=hint)
        final = _args_without(final, erased)
    return of_call(call, final)


__all__ = [
    "KeyArg",
    "Part",
    "Summary",
    "changed_names",
    "cut",
    "excerpts",
    "money",
    "number",
    "of_call",
    "of_call_json",
    "of_review",
    "ordered",
    "own_question",
    "question_parts",
    "runs_with",
    "same",
    "summarize",
]
