"""Values beside the log (SPEC.md "Values beside the log"): salted SHA-256 commitments (pure).

On a log whose ``log.configured`` says ``"values": "sealed"``, the personal data a review carries
(a call's args, its own question and its conversation excerpt, a person's edited values and answer,
a tool's result preview, the agent's reply) is not written into the entry. The entry holds a
commitment ``sealed:sha256:<hex>`` in the value's place, where ``<hex>`` is
``SHA-256(salt ‖ RFC 8785(value))`` with a 32-byte random salt of the value's own. The salt and the
value live in ``signoff_value``, in the same store, written in the same transaction; erasing the row
leaves every entry, hash, proof and cosignature as it was, and the commitment then reveals nothing
(a guess cannot be checked without the salt).

Args are sealed per top-level member, so that one member can be erased without the others; a
policy's ``private`` list names the members sealed (all by default). Members that are large or
look like commitments are sealed whatever the list says, and args whose per-member form would be
large (more than :data:`MAX_MEMBERS` members, or over :data:`MAX_SEALED_ARGS` bytes) are sealed
whole, as the single member ``""``: so every entry stays under 65,535 bytes whatever the args.

``args_digest`` is the digest of the sealed args (the form the entry holds), so the signatures on
decisions, and the binding of what ran to what was signed, check without the values.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from signoff.audit.canonical import canonical, digest

PREFIX = "sealed:sha256:"
SALT_BYTES = 32
WHOLE = ""  # the member that holds the whole args, when they are sealed as one value
MAX_MEMBERS = 64
"""Top-level members sealed one by one; args with more are sealed whole."""
MAX_SEALED_ARGS = 32 * 1024
"""Canonical bytes of the per-member sealed args; over it, the args are sealed whole."""
MAX_CLEAR = 512
"""Canonical bytes of a member kept in clear; a larger one is sealed whatever the policy says."""


class ValueProblem(ValueError):
    """A value beside the log is missing or does not match its commitment."""


@dataclass(frozen=True)
class Kept:
    """One value to keep beside the log: its commitment, salt and value."""

    commitment: str
    salt: bytes
    value: Any


def new_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def commit(value: Any, salt: bytes) -> str:
    """``sealed:sha256:`` + hex SHA-256(salt ‖ RFC 8785 bytes of ``value``)."""
    if len(salt) != SALT_BYTES:
        raise ValueError(f"salt: expected {SALT_BYTES} bytes, found {len(salt)}")
    return PREFIX + hashlib.sha256(salt + canonical(value)).hexdigest()


def is_commitment(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX) and len(value) == len(PREFIX) + 64


def seal(value: Any, salt: bytes | None = None) -> Kept:
    salt = salt if salt is not None else new_salt()
    return Kept(commit(value, salt), salt, value)


def _forced(value: Any) -> bool:
    """A member sealed whatever the policy says: large, or text that could be read as a commitment."""
    return (isinstance(value, str) and value.startswith("sealed:")) or len(canonical(value)) > MAX_CLEAR


def is_private(name: str, value: Any, private: Sequence[str] | None) -> bool:
    return private is None or name in private or _forced(value)


def seal_args(
    args: Mapping[str, Any], private: Sequence[str] | None, salts: Mapping[str, bytes] | None = None
) -> tuple[dict[str, Any], list[Kept]]:
    """The args as the entry holds them, and the values to keep. ``salts``: per member (``""`` for the
    whole), when the caller chose them (a signer who builds the same form beforehand)."""
    salts = salts or {}
    kept: list[Kept] = []
    sealed: dict[str, Any] = {}
    for name, value in args.items():
        if is_private(name, value, private):
            item = seal(value, salts.get(name))
            kept.append(item)
            sealed[name] = item.commitment
        else:
            sealed[name] = value
    if WHOLE in args or len(args) > MAX_MEMBERS or len(canonical(sealed)) > MAX_SEALED_ARGS:
        item = seal(dict(args), salts.get(WHOLE))
        return {WHOLE: item.commitment}, [item]
    return sealed, kept


def sealed_whole(sealed_args: Mapping[str, Any]) -> bool:
    return list(sealed_args) == [WHOLE] and is_commitment(sealed_args[WHOLE])


Lookup = Callable[[str], "tuple[bytes, Any] | None"]
"""A commitment's (salt, value) beside the log, or None when there is none."""


def reveal(commitment: str, lookup: Lookup, where: str) -> Any:
    """The value a commitment stands for, checked against it; raises :class:`ValueProblem`."""
    found = lookup(commitment)
    if found is None:
        raise ValueProblem(f"{where}: expected the value of {commitment[:27]}… beside the log, found none")
    salt, value = found
    if len(salt) != SALT_BYTES or commit(value, salt) != commitment:
        raise ValueProblem(f"{where}: expected the value beside the log to match {commitment[:27]}…, found another")
    return value


def reveal_value(value: Any, lookup: Lookup, where: str) -> Any:
    """A sealed value revealed, or a plain one as it is."""
    return reveal(value, lookup, where) if is_commitment(value) else value


def reveal_args(sealed_args: Mapping[str, Any], lookup: Lookup, where: str) -> dict[str, Any]:
    if sealed_whole(sealed_args):
        whole = reveal(sealed_args[WHOLE], lookup, where)
        if not isinstance(whole, dict):
            raise ValueProblem(f"{where}: expected the sealed args to be an object, found {type(whole).__name__}")
        return whole
    return {
        name: reveal(value, lookup, f"{where}.{name}") if is_commitment(value) else value
        for name, value in sealed_args.items()
    }


def commitments_in(value: Any) -> list[str]:
    """The commitments a sealed form holds at its top level (args members, or the value itself)."""
    if is_commitment(value):
        return [value]
    if isinstance(value, dict):
        return [v for v in value.values() if is_commitment(v)]
    return []


def reseal_like(plain: Mapping[str, Any], sealed_final: Mapping[str, Any], lookup: Lookup) -> dict[str, Any]:
    """The sealed form of ``plain`` (the args a tool ran with) under the salts of ``sealed_final`` (the
    decided args): equal to ``sealed_final`` exactly when ``plain`` holds the decided values."""
    if sealed_whole(sealed_final):
        found = lookup(sealed_final[WHOLE])
        return {WHOLE: commit(dict(plain), found[0])} if found is not None else {WHOLE: None}
    out: dict[str, Any] = {}
    for name, value in plain.items():
        decided = sealed_final.get(name)
        found = lookup(decided) if isinstance(decided, str) and is_commitment(decided) else None
        out[name] = commit(value, found[0]) if found is not None else value
    return out


def edit_patch(
    round_plain: Mapping[str, Any],
    new_plain: Mapping[str, Any],
    round_sealed: Mapping[str, Any],
    private: Sequence[str] | None,
    salts: Mapping[str, bytes],
) -> tuple[list[dict[str, Any]], list[Kept]]:
    """The RFC 6902 patch a sealed edit records: members removed, then members added or changed, each in
    :func:`member_order`, whole; each changed private value replaced by a new commitment (``salts``: one
    per changed member, ``""`` for sealed-whole args). It applies to ``round_sealed`` and gives the sealed
    form of ``new_plain``."""
    if not sealed_whole(round_sealed):
        patch: list[dict[str, Any]] = []
        kept: list[Kept] = []
        result = dict(round_sealed)
        for name in sorted(round_plain, key=member_order):
            if name not in new_plain:
                patch.append({"op": "remove", "path": "/" + _escape(name)})
                result.pop(name, None)
        for name in sorted(new_plain, key=member_order):
            value = new_plain[name]
            if name in round_plain and canonical(round_plain[name]) == canonical(value):
                continue
            if is_private(name, value, private):
                item = seal(value, _salt(salts, name))
                kept.append(item)
                stored: Any = item.commitment
            else:
                stored = value
            patch.append(
                {"op": "replace" if name in round_plain else "add", "path": "/" + _escape(name), "value": stored}
            )
            result[name] = stored
        if WHOLE not in new_plain and len(result) <= MAX_MEMBERS and len(canonical(result)) <= MAX_SEALED_ARGS:
            return patch, kept
    item = seal(dict(new_plain), _salt(salts, WHOLE))
    return [{"op": "replace", "path": "", "value": {WHOLE: item.commitment}}], [item]


def member_order(name: str) -> bytes:
    """RFC 8785 §3.2.3's order of member names (by UTF-16 code units): a sealed edit's operations come
    in it, removals first, so that a signer in any language builds the same patch (JavaScript's default
    string sort is this order)."""
    return name.encode("utf-16-be")


def _salt(salts: Mapping[str, bytes], name: str) -> bytes:
    if name not in salts:
        shown = name or '""'
        raise ValueProblem(f"salts.{shown}: expected a 32-byte salt for the new value, found none")
    return salts[name]


def _escape(name: str) -> str:
    """An RFC 6901 reference token."""
    return name.replace("~", "~0").replace("/", "~1")


def salts_from_hex(given: Mapping[str, Any] | None, field: str = "salts") -> dict[str, bytes]:
    """Salts as a signer sends them (hex); raises ``ValueProblem`` naming the bad one."""
    out: dict[str, bytes] = {}
    for name, value in (given or {}).items():
        try:
            salt = bytes.fromhex(value) if isinstance(value, str) else b""
        except ValueError:
            salt = b""
        if len(salt) != SALT_BYTES:
            raise ValueProblem(f"{field}.{name}: expected {SALT_BYTES} bytes in hex, found {str(value)[:80]!r}")
        out[str(name)] = salt
    return out


def value_json(value: Any) -> str:
    """How ``signoff_value.value`` holds a value: its RFC 8785 text."""
    return canonical(value).decode("utf-8")


def _number(text: str) -> int | float:
    """An RFC 8785 integer literal: from 2**53 on it can only have been written from a float (RFC 8785
    §3.2.2.3 formats 1e16 as ``10000000000000000``), so it is read back as one, and hashes the same."""
    number = int(text)
    return number if abs(number) < 2**53 else float(number)


def value_from_json(text: str | bytes) -> Any:
    """A value as ``signoff_value.value`` (or a values file) holds it: its RFC 8785 text, read back to
    the value whose canonical bytes it is."""
    return json.loads(text, parse_int=_number)


def seal_call(call: Mapping[str, Any], private: Sequence[str] | None) -> tuple[dict[str, Any], list[Kept]]:
    """A call as a sealed ``review.opened`` (or ``review.auto_approved``) holds it: its args per member
    (:func:`seal_args`), its own question (``payload``) and hint whole, each conversation excerpt
    (``context``) by name; ``args_digest`` over the sealed args. Names, tool, ids stay in clear."""
    out = dict(call)
    sealed_args, kept = seal_args(call.get("args") or {}, private)
    out["args"] = sealed_args
    if call.get("payload") is not None:
        item = seal(call["payload"])
        kept.append(item)
        out["payload"] = item.commitment
    if call.get("hint"):
        item = seal(call["hint"])
        kept.append(item)
        out["hint"] = item.commitment
    context = call.get("context") or {}
    if context:
        sealed_context = {}
        for name, text in context.items():
            item = seal(text)
            kept.append(item)
            sealed_context[name] = item.commitment
        out["context"] = sealed_context
    out["args_digest"] = digest(sealed_args)
    return out, kept


def reveal_call(call: Mapping[str, Any], lookup: Lookup, where: str) -> dict[str, Any]:
    """The call with its values revealed (each checked); ``args_digest`` stays the sealed args' digest."""
    out = dict(call)
    out["args"] = reveal_args(call.get("args") or {}, lookup, f"{where}.args")
    out["payload"] = reveal_value(call.get("payload"), lookup, f"{where}.payload")
    out["hint"] = reveal_value(call.get("hint") or "", lookup, f"{where}.hint")
    out["context"] = {
        name: reveal_value(text, lookup, f"{where}.context.{name}")
        for name, text in (call.get("context") or {}).items()
    }
    return out


def any_sealed(call: Mapping[str, Any]) -> bool:
    """Whether a recorded call holds commitments (it was written on a sealed log)."""
    values = [call.get("payload"), call.get("hint"), *(call.get("args") or {}).values()]
    values += list((call.get("context") or {}).values())
    return any(is_commitment(v) for v in values)


def call_commitments(call: Mapping[str, Any]) -> list[str]:
    values = [call.get("payload"), call.get("hint"), *(call.get("args") or {}).values()]
    values += list((call.get("context") or {}).values())
    return [v for v in values if is_commitment(v)]
