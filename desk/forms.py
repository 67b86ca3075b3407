"""The edit form, generated from a tool's parameter schema (and the tool's own question, from its payload).

Pure: :func:`arg_fields` turns a schema and the proposed args into one :class:`FormField` per
parameter, each with the widget a person edits that kind of value with:

* ``enum`` → a select; ``boolean`` → a checkbox (a select with "not set" for an optional one the
  call leaves out); ``integer`` and ``number`` → number inputs; a string → a text input, or a
  multi-line text for a long or multi-line value (an e-mail body); an object, an array or a value
  of mixed type → JSON.

The page's script (desk/static/desk.js) reads the fields back into the args, writes them to the
JSON editor, and from there builds the RFC 6902 patch it shows, checks and signs: the form is a
view of the JSON, never a second source. :func:`payload_fields` does the same for a flat payload
(the tool's own question); a nested one is answered in JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from signoff.desk.summary import ordered

LONG_TEXT = 60
"""A string longer than this (or with a line break) is edited in a multi-line field."""
_TEXT_NAMES = {"body", "text", "message", "content", "description", "notes", "note", "comment", "html", "markdown"}
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Option:
    value: str  # the option's value as JSON
    label: str


@dataclass(frozen=True)
class FormField:
    name: str
    widget: str  # text | textarea | number | integer | checkbox | select | json
    value: str  # what the input shows ("" when the call leaves the parameter out)
    present: bool  # the call gives this parameter
    required: bool
    description: str = ""
    options: tuple[Option, ...] = ()
    checked: bool = False
    type_label: str = ""  # "number", "text", "yes/no", "one of 3", "JSON"


def _kinds(prop: Mapping[str, Any]) -> list[str]:
    t = prop.get("type")
    kinds = [t] if isinstance(t, str) else list(t or [])
    return [str(k).lower() for k in kinds if str(k).lower() not in ("null", "type_unspecified")]


def _infer(value: Any) -> list[str]:
    if isinstance(value, bool):
        return ["boolean"]
    if isinstance(value, int):
        return ["integer"]
    if isinstance(value, float):
        return ["number"]
    if isinstance(value, str):
        return ["string"]
    if isinstance(value, list):
        return ["array"]
    if isinstance(value, dict):
        return ["object"]
    return []


def _label(option: Any) -> str:
    if isinstance(option, bool):
        return "yes" if option else "no"
    if option is None:
        return "none"
    return option if isinstance(option, str) else json.dumps(option, ensure_ascii=False)


def field_for(name: str, prop: Mapping[str, Any] | None, value: Any, present: bool, required: bool) -> FormField:
    """One parameter's field (see the module docstring)."""
    prop = prop or {}
    description = str(prop.get("description") or "")
    kinds = _kinds(prop) or (_infer(value) if present else [])
    enum = prop.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(e, _SCALARS) for e in enum):
        options = tuple(Option(json.dumps(e, ensure_ascii=False), _label(e)) for e in enum)
        if not required:
            options = (Option("", "— not set —"), *options)
        current = json.dumps(value, ensure_ascii=False) if present else ""
        return FormField(name, "select", current, present, required, description, options, type_label="one of")
    if kinds == ["boolean"] and (present or required) and (not present or isinstance(value, bool)):
        return FormField(name, "checkbox", "", present, required, description, checked=bool(value), type_label="yes/no")
    if kinds == ["boolean"]:
        options = (Option("", "— not set —"), Option("true", "yes"), Option("false", "no"))
        current = json.dumps(value) if present and isinstance(value, bool) else ""
        return FormField(name, "select", current, present, required, description, options, type_label="yes/no")
    fits = not present or value is None
    if kinds == ["integer"] and (fits or (isinstance(value, int) and not isinstance(value, bool))):
        text = "" if not present or value is None else str(value)
        return FormField(name, "integer", text, present, required, description, type_label="whole number")
    if kinds in (["number"], ["integer", "number"], ["number", "integer"]) and (
        fits or (isinstance(value, int | float) and not isinstance(value, bool))
    ):
        text = "" if not present or value is None else json.dumps(value)
        return FormField(name, "number", text, present, required, description, type_label="number")
    if kinds == ["string"] and (fits or isinstance(value, str)):
        text = "" if not present or value is None else str(value)
        long = len(text) > LONG_TEXT or "\n" in text or "\r" in text or name.lower() in _TEXT_NAMES
        return FormField(name, "textarea" if long else "text", text, present, required, description, type_label="text")
    text = json.dumps(value, indent=2, ensure_ascii=False) if present else ""
    return FormField(name, "json", text, present, required, description, type_label="JSON")


def arg_fields(schema: Mapping[str, Any] | None, args: Mapping[str, Any]) -> list[FormField]:
    """A field per parameter: the schema's, in its order (the call's own first), then any others the call gives."""
    props = (schema or {}).get("properties") or {}
    required = set((schema or {}).get("required") or [])
    present = ordered(args, schema)  # the call's own, as the tool declares them
    names = present + [n for n in ordered(dict.fromkeys(props), schema) if n not in args]
    return [
        field_for(n, props.get(n) if isinstance(props.get(n), Mapping) else None, args.get(n), n in args, n in required)
        for n in names
    ]


def is_flat(payload: Any) -> bool:
    """A payload a form can answer: an object of plain values (no nesting)."""
    return isinstance(payload, Mapping) and bool(payload) and all(isinstance(v, _SCALARS) for v in payload.values())


def payload_fields(payload: Any) -> list[FormField]:
    """Fields for the tool's own question, when its payload is flat (else none: it is answered in JSON)."""
    if not is_flat(payload):
        return []
    return [field_for(str(k), None, v, True, True) for k, v in payload.items()]


__all__ = ["FormField", "Option", "arg_fields", "field_for", "is_flat", "payload_fields"]
