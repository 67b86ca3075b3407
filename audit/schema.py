"""Check tool args against the tool's declared parameters (a JSON-Schema subset).

This is the subset an ADK ``FunctionDeclaration`` can express: ``type`` (JSON Schema names,
or the upper-case OpenAPI names ADK uses), ``properties``, ``required``, ``items``,
``enum`` and ``nullable``. Pure: plain data in, :class:`SchemaViolation` out.
"""

from __future__ import annotations

from typing import Any

from signoff.audit.errors import SchemaViolation

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _type_of(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if name == "integer" and isinstance(value, bool):
            continue
        if isinstance(value, _PYTHON_TYPES[name]) and not (name == "number" and isinstance(value, bool)):
            return name
    return type(value).__name__


def _matches(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _PYTHON_TYPES.get(kind, (object,)))


def check_args(schema: dict[str, Any] | None, args: Any) -> None:
    """Raise :class:`SchemaViolation` naming the first parameter that breaks ``schema``."""
    if not schema:
        return
    _check(schema, args, "")


def _check(schema: dict[str, Any], value: Any, path: str) -> None:
    name = path or "args"
    if value is None and schema.get("nullable"):
        return
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    kinds = [str(k).lower() for k in kinds if str(k).lower() != "type_unspecified"]
    if kinds and not any(_matches(value, k) for k in kinds):
        raise SchemaViolation(name, f"expected type {' or '.join(kinds)}, found {_type_of(value)}")
    if "enum" in schema and schema["enum"] and value not in schema["enum"]:
        raise SchemaViolation(name, f"expected one of {schema['enum']}, found {value!r}")
    if isinstance(value, dict) and ("properties" in schema or "required" in schema):
        properties: dict[str, Any] = schema.get("properties") or {}
        for required in schema.get("required") or []:
            if required not in value:
                raise SchemaViolation(_join(path, required), "expected a required parameter, found it missing")
        if schema.get("additionalProperties", False) is False and properties:
            for key in value:
                if key not in properties:
                    raise SchemaViolation(
                        _join(path, key),
                        f"expected one of the declared parameters {sorted(properties)}, found an unknown one",
                    )
        for key, item in value.items():
            if key in properties and isinstance(properties[key], dict):
                _check(properties[key], item, _join(path, key))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _check(schema["items"], item, f"{name}[{index}]")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
