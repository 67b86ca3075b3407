"""Tool parameter schemas, read from the tool's ADK ``FunctionDeclaration``.

Internal module, not public API; import from ``bridge``.

The schema is a JSON-Schema-like dict ``{"type": "object", "properties": {...}, "required": [...]}``.
It travels in ``CallSpec.tool_schema`` so that ``audit`` checks every edit against it
(``audit.check_args``: a missing required parameter, an unknown parameter, a wrong JSON type); the
bridge runs the same check before calling ``audit``, so a bad edit is refused with nothing recorded.
"""

from __future__ import annotations

from typing import Any

from google.adk.tools.base_tool import BaseTool
from google.genai import types

from signoff.audit import check_args

_JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


def tool_schema(tool: BaseTool) -> dict[str, Any] | None:
    """The parameter schema of ``tool``, or ``None`` when it declares none."""
    try:
        declaration = tool._get_declaration()
    except Exception:  # noqa: BLE001 - a tool whose declaration cannot be built has no schema
        return None
    if declaration is None:
        return None
    raw = declaration.parameters_json_schema
    if isinstance(raw, dict):
        return _from_json_schema(raw)
    if declaration.parameters is not None:
        return _from_genai_schema(declaration.parameters)
    return {"type": "object", "properties": {}, "required": []}


def _from_json_schema(raw: dict[str, Any]) -> dict[str, Any]:
    props = raw.get("properties") or {}
    return {
        "type": "object",
        "properties": {name: _slim(p) for name, p in props.items() if isinstance(p, dict)},
        "required": [str(r) for r in raw.get("required") or []],
    }


def _slim(prop: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    t = prop.get("type")
    if isinstance(t, str) and t in _JSON_TYPES:
        out["type"] = t
    elif isinstance(t, list):
        out["type"] = [x for x in t if x in _JSON_TYPES]
    elif "anyOf" in prop:
        types_ = [a.get("type") for a in prop["anyOf"] if isinstance(a, dict)]
        if all(isinstance(x, str) and x in _JSON_TYPES for x in types_) and types_:
            out["type"] = types_
    if isinstance(prop.get("description"), str):
        out["description"] = prop["description"]
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        out["enum"] = list(prop["enum"])  # the desk offers a select; audit refuses other values
    if isinstance(prop.get("items"), dict):
        out["items"] = _slim(prop["items"])
    if prop.get("nullable") is True:
        out["nullable"] = True
    return out


def _from_genai_schema(schema: types.Schema) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for name, prop in (schema.properties or {}).items():
        entry: dict[str, Any] = {}
        if prop.type is not None and prop.type != types.Type.TYPE_UNSPECIFIED:
            json_type = str(prop.type.value).lower()
            entry["type"] = [json_type, "null"] if prop.nullable else json_type
        elif prop.any_of:
            kinds = [str(a.type.value).lower() for a in prop.any_of if a.type is not None]
            if kinds:
                entry["type"] = kinds
        if prop.description:
            entry["description"] = prop.description
        if prop.enum:
            entry["enum"] = list(prop.enum)
        if prop.items is not None and prop.items.type is not None:
            entry["items"] = {"type": str(prop.items.type.value).lower()}
        properties[name] = entry
    return {"type": "object", "properties": properties, "required": list(schema.required or [])}


__all__ = ["check_args", "tool_schema"]
