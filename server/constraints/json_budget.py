"""Worst-case sizes of JSON a schema allows, and the string and array bounds that keep it within a byte budget.

A byte-level token writes at least one byte, so JSON the grammar keeps within `max_output_tokens` bytes always
closes before the budget ends. The budget is spread evenly over the schema's open strings (no length, enum or
format of their own) and open arrays (no maxItems); everything else has a size the grammar already fixes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

INTEGER_BYTES = 17  # "-" and at most 16 digits (json_grammar bounds them)
NUMBER_BYTES = 39  # "-", 16 digits, "." and 16 digits, "e+" and 3 digits
BOUNDED_FORMAT_BYTES = {"date": 12, "time": 30, "date-time": 40, "uuid": 38, "duration": 40}
_ITEM_CHOICES = (16, 8, 4, 2, 1)  # open arrays' maxItems, tried from the most generous
_USEFUL_STRING = 128  # bytes (32 characters): a string bound below this is worth fewer items in arrays
_MAX_REF_DEPTH = 8
_SEARCH_CEILING = 1 << 17


@dataclass(frozen=True)
class Bounds:
    """What the grammar allows: `string_bytes` between an open string's quotes, `max_items` in an open array."""

    string_bytes: int
    max_items: int


class _Unbounded(Exception):
    """The schema allows JSON of any size that no bound here limits (free objects, patterns, recursion)."""


def budget_bounds(schema: dict[str, Any], budget: int) -> Bounds | None:
    """The most generous bounds under which no JSON valid against `schema` exceeds `budget` bytes; None when
    no bounds can promise it (the schema's fixed part alone is too big, or it has parts no bound limits)."""
    try:
        for items in _ITEM_CHOICES:
            string_bytes = _largest_string(schema, budget, items)
            if string_bytes is not None and (string_bytes >= _USEFUL_STRING or items == _ITEM_CHOICES[-1]):
                return Bounds(string_bytes, items)
    except _Unbounded:
        return None
    return None


def with_open_arrays_bounded(schema: Any, max_items: int) -> Any:
    """`schema` with `maxItems` set on every array schema that has none."""
    if isinstance(schema, list):
        return [with_open_arrays_bounded(value, max_items) for value in schema]
    if not isinstance(schema, dict):
        return schema
    bounded = {key: with_open_arrays_bounded(value, max_items) if key not in ("enum", "const", "default", "examples")
               else value for key, value in schema.items()}
    if _types(schema) == {"array"} and "maxItems" not in schema:
        bounded["maxItems"] = max(max_items, schema.get("minItems", 0))
    return bounded


def _largest_string(schema: dict[str, Any], budget: int, items: int) -> int | None:
    """The largest open-string size for which the worst case fits the budget (binary search: size grows with it)."""
    if _size(schema, schema, 0, items, 0) > budget:
        return None
    low, high = 0, _SEARCH_CEILING
    while low < high:
        middle = (low + high + 1) // 2
        if _size(schema, schema, middle, items, 0) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def _size(schema: Any, root: dict[str, Any], string: int, items: int, depth: int) -> int:
    if schema is True or schema == {}:
        raise _Unbounded("any value")
    if not isinstance(schema, dict):
        raise _Unbounded("not a schema")
    if "$ref" in schema:
        return _size(_resolve(schema["$ref"], root, depth), root, string, items, depth + 1)
    if "const" in schema:
        return _json_bytes(schema["const"])
    if "enum" in schema:
        return max(_json_bytes(value) for value in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return max(_size(branch, root, string, items, depth)
                       for branch in schema[key])
    if "allOf" in schema or "not" in schema or "if" in schema:
        raise _Unbounded("combined schemas")
    kinds = _types(schema)
    if not kinds:
        raise _Unbounded("no type")
    return max(_typed_size(kind, schema, root, string, items, depth) for kind in kinds)


def _typed_size(kind: str, schema: dict[str, Any], root: dict[str, Any], string: int, items: int,
                depth: int) -> int:
    if kind == "string":
        return _string_size(schema, string)
    if kind == "integer":
        return INTEGER_BYTES
    if kind == "number":
        return NUMBER_BYTES
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    if kind == "array":
        return _array_size(schema, root, string, items, depth)
    if kind == "object":
        return _object_size(schema, root, string, items, depth)
    raise _Unbounded(f"type {kind}")


def _string_size(schema: dict[str, Any], string: int) -> int:
    if "maxLength" in schema:
        return 2 + 6 * int(schema["maxLength"])  # a character may be written as a 6-byte \uXXXX escape
    if "pattern" in schema:
        raise _Unbounded("a pattern")
    if "format" in schema:
        if schema["format"] not in BOUNDED_FORMAT_BYTES:
            raise _Unbounded(f"format {schema['format']}")
        return BOUNDED_FORMAT_BYTES[schema["format"]]
    return 2 + string


def _array_size(schema: dict[str, Any], root: dict[str, Any], string: int, items: int, depth: int) -> int:
    if "prefixItems" in schema or not isinstance(schema.get("items"), dict):
        raise _Unbounded("an array of anything")
    count = int(schema.get("maxItems", max(items, schema.get("minItems", 0))))
    if count == 0:
        return 2
    return 2 + count * _size(schema["items"], root, string, items, depth) + 2 * (count - 1)  # "[", "]", ", "


def _object_size(schema: dict[str, Any], root: dict[str, Any], string: int, items: int, depth: int) -> int:
    if schema.get("additionalProperties") not in (None, False) or "patternProperties" in schema:
        raise _Unbounded("an object with free properties")
    properties = schema.get("properties") or {}
    fields = [_json_bytes(name) + 2 + _size(value, root, string, items, depth) for name, value in properties.items()]
    return 2 + sum(fields) + 2 * max(len(fields) - 1, 0)  # "{", "}", ": " after each key, ", " between fields


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return set(kind)
    if isinstance(kind, str):
        return {kind}
    return {"object"} if "properties" in schema else set()


def _resolve(ref: str, root: dict[str, Any], depth: int) -> Any:
    if depth >= _MAX_REF_DEPTH or not ref.startswith("#/"):
        raise _Unbounded("a recursive or remote $ref")
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
    if target is None:
        raise _Unbounded(f"unresolved {ref}")
    return target


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(", ", ": ")))  # ASCII: each other character as a 6-byte escape
