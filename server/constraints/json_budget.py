"""Worst-case sizes of JSON a schema allows, and the string and array bounds that keep it within a byte budget.

A byte-level token writes at least one byte, so JSON the grammar keeps within `max_output_tokens` bytes always
closes before the budget ends. The budget is spread evenly over the schema's open strings (no length, enum or
format of their own) and open arrays (no maxItems); the parts a schema leaves free (`json_object`'s any object, `{}`,
an object with no properties, an array with no items) are any JSON nested at most `depth` deep with at most
`members` in each array or object (a `FreeShape`); everything else has a size the grammar already fixes.

A schema's worst case is measured as `fixed + per_string * string` bytes (a `Cost`) for a given number of items in
open arrays: each subschema once, however many `$ref`s lead to it, so the work grows with the schema's size. A
choice between branches costs the most fixed bytes and the most open strings of any branch: never less than the
true worst case.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

from server.constraints.schema_shape import with_subschemas_mapped

INTEGER_BYTES = 17  # "-" and at most 16 digits (json_grammar bounds them)
NUMBER_BYTES = 39  # "-", 16 digits, "." and 16 digits, "e+" and 3 digits
BOUNDED_FORMAT_BYTES = {"date": 12, "time": 30, "date-time": 40, "uuid": 38, "duration": 40}
_ITEM_CHOICES = (16, 8, 4, 2, 1)  # open arrays' maxItems, tried from the most generous
_USEFUL_STRING = 128  # bytes (32 characters): a string bound below this is worth fewer items in arrays
_MAX_DEPTH = 64  # subschemas and $refs followed inside each other; deeper is unbounded (recursion, in practice)
_STRING_CEILING = 1 << 17
# Keywords that say nothing of a value: a schema of these alone allows any JSON, as `{}` does.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly", "$schema", "$id"})


@dataclass(frozen=True)
class FreeShape:
    """How far JSON the schema leaves free may go: arrays and objects nested `depth` deep, `members` in each."""

    depth: int
    members: int


# Free JSON's shapes, tried from the most generous (as open arrays' items are).
_FREE_CHOICES = (FreeShape(3, 8), FreeShape(2, 8), FreeShape(2, 4), FreeShape(1, 8), FreeShape(1, 4), FreeShape(1, 2),
                 FreeShape(1, 1))


@dataclass(frozen=True)
class Bounds:
    """What the grammar allows: `string_bytes` between an open string's quotes, `max_items` in an open array, and
    `free` the shape of free JSON (None: the schema leaves none free)."""

    string_bytes: int
    max_items: int
    free: FreeShape | None = None


@dataclass(frozen=True)
class Cost:
    """A worst-case size in bytes: `fixed`, plus `per_string` times the bytes each open string may hold."""

    fixed: int
    per_string: int = 0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.fixed + other.fixed, self.per_string + other.per_string)

    def times(self, count: int) -> "Cost":
        return Cost(self.fixed * count, self.per_string * count)

    def most(self, other: "Cost") -> "Cost":
        return Cost(max(self.fixed, other.fixed), max(self.per_string, other.per_string))

    def largest_string(self, budget: int) -> int | None:
        """The most bytes an open string may hold for this size to stay within `budget` (None: not even empty)."""
        if self.fixed > budget:
            return None
        if self.per_string == 0:
            return _STRING_CEILING
        return min(_STRING_CEILING, (budget - self.fixed) // self.per_string)


class _Unbounded(Exception):
    """The schema allows JSON of any size that no bound here limits (free objects, patterns, recursion)."""


def budget_bounds(schema: dict[str, Any], budget: int) -> Bounds | None:
    """The most generous bounds under which no JSON valid against `schema` exceeds `budget` bytes; None when
    no bounds can promise it (the schema's fixed part alone is too big, or it has parts no bound limits)."""
    try:
        for items in _ITEM_CHOICES:
            for free in _FREE_CHOICES:
                measure = _Measure(schema, items, free)
                string_bytes = measure.cost(schema, 0).largest_string(budget)
                last = items == _ITEM_CHOICES[-1] and (free == _FREE_CHOICES[-1] or not measure.met_free)
                if string_bytes is not None and (string_bytes >= _USEFUL_STRING or last):
                    return Bounds(string_bytes, items, free if measure.met_free else None)
                if not measure.met_free:
                    break  # another free shape changes nothing
    except _Unbounded:
        return None
    return None


def is_bounded(schema: dict[str, Any]) -> bool:
    """Whether some bounds keep every JSON valid against `schema` within some budget (asked of every non-strict
    tool of every request: each schema is measured once)."""
    return _is_bounded(json.dumps(schema, sort_keys=True))


@lru_cache(maxsize=1024)
def _is_bounded(schema_json: str) -> bool:
    return budget_bounds(json.loads(schema_json), _STRING_CEILING) is not None


def with_open_arrays_bounded(schema: Any, max_items: int) -> Any:
    """`schema` with `maxItems` set on every array schema that has none."""
    if not isinstance(schema, dict):
        return schema
    bounded = with_subschemas_mapped(schema, lambda child: with_open_arrays_bounded(child, max_items))
    if "array" in _types(schema) and "maxItems" not in schema and isinstance(schema.get("items"), dict):
        bounded["maxItems"] = max(max_items, schema.get("minItems", 0))
    return bounded


class _Measure:
    """The worst-case cost of a schema's parts with `items` in each open array and free JSON of the `free` shape,
    each part measured once."""

    def __init__(self, root: dict[str, Any], items: int, free: FreeShape) -> None:
        self.root, self.items, self.free = root, items, free
        self.known: dict[int, Cost] = {}
        self.open: set[int] = set()  # parts being measured: meeting one again is recursion
        self.met_free = False  # the schema leaves some JSON free

    def cost(self, schema: Any, depth: int) -> Cost:
        if depth > _MAX_DEPTH:
            raise _Unbounded("too deep")
        key = id(schema)
        if key in self.known:
            return self.known[key]
        if key in self.open:
            raise _Unbounded("a recursive $ref")
        self.open.add(key)
        self.known[key] = cost = self._measured(schema, depth)
        self.open.discard(key)
        return cost

    def _measured(self, schema: Any, depth: int) -> Cost:
        if schema is True or (isinstance(schema, dict) and set(schema) <= _ANNOTATIONS):
            return self._free_json("any")
        if not isinstance(schema, dict):
            raise _Unbounded("not a schema")
        if "$ref" in schema:
            return self.cost(_resolve(schema["$ref"], self.root), depth + 1)
        if "const" in schema:
            return Cost(_json_bytes(schema["const"]))
        if "enum" in schema:
            return Cost(max(_json_bytes(value) for value in schema["enum"]))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return _most(self.cost(branch, depth + 1) for branch in schema[key])
        if "allOf" in schema or "not" in schema or "if" in schema:
            raise _Unbounded("combined schemas")
        kinds = _types(schema)
        if not kinds:
            raise _Unbounded("no type")
        return _most(self._typed(kind, schema, depth) for kind in kinds)

    def _typed(self, kind: str, schema: dict[str, Any], depth: int) -> Cost:
        if kind in _SCALAR_BYTES:
            return Cost(_SCALAR_BYTES[kind])
        if kind == "string":
            return _string_cost(schema)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "object":
            return self._object(schema, depth)
        raise _Unbounded(f"type {kind}")

    def _free_json(self, kind: str) -> Cost:
        self.met_free = True
        return free_cost(kind, self.free.depth, self.free.members)

    def _array(self, schema: dict[str, Any], depth: int) -> Cost:
        if not {"items", "prefixItems", "minItems", "maxItems"} & set(schema):
            return self._free_json("array")
        if "prefixItems" in schema or not isinstance(schema.get("items"), dict):
            raise _Unbounded("an array of anything")
        count = int(schema.get("maxItems", max(self.items, schema.get("minItems", 0))))
        if count == 0:
            return Cost(2)
        item = self.cost(schema["items"], depth + 1)
        return item.times(count) + Cost(2 + 2 * (count - 1))  # "[", "]", ", " between items

    def _object(self, schema: dict[str, Any], depth: int) -> Cost:
        if not {"properties", "required", "additionalProperties", "patternProperties", "minProperties",
                "maxProperties", "propertyNames"} & set(schema):
            return self._free_json("object")
        if schema.get("additionalProperties") not in (None, False) or "patternProperties" in schema:
            raise _Unbounded("an object with free properties")
        properties = schema.get("properties") or {}
        total = Cost(2 + 2 * max(len(properties) - 1, 0))  # "{", "}", ", " between fields
        for name, value in properties.items():
            total += Cost(_json_bytes(name) + 2) + self.cost(value, depth + 1)  # the key and ": "
        return total


_SCALAR_BYTES = {"integer": INTEGER_BYTES, "number": NUMBER_BYTES, "boolean": 5, "null": 4}
_FREE_SCALAR = Cost(NUMBER_BYTES).most(Cost(2, 1))  # a number, a string, true, false or null


def free_cost(kind: str, depth: int, members: int) -> Cost:
    """The worst-case size of free JSON of `kind` ("any", "object" or "array") nested at most `depth` deep, with at
    most `members` in each array or object, as json_grammar's free_json_rules write it."""
    if depth == 0:
        return _FREE_SCALAR
    inner = free_cost("any", depth - 1, members)
    separators = Cost(2 + 2 * (members - 1))  # "[" and "]" (or braces), ", " between members
    array = inner.times(members) + separators
    members_object = (Cost(2, 1) + Cost(2) + inner).times(members) + separators  # a key, ": ", its value
    return {"array": array, "object": members_object}.get(kind) or _most((_FREE_SCALAR, array, members_object))


def _most(costs: Iterable[Cost]) -> Cost:
    result = Cost(0)
    for cost in costs:
        result = result.most(cost)
    return result


def _string_cost(schema: dict[str, Any]) -> Cost:
    if "maxLength" in schema:
        return Cost(2 + 6 * int(schema["maxLength"]))  # a character may be written as a 6-byte \uXXXX escape
    if "pattern" in schema:
        raise _Unbounded("a pattern")
    if "format" in schema:
        if schema["format"] not in BOUNDED_FORMAT_BYTES:
            raise _Unbounded(f"format {schema['format']}")
        return Cost(BOUNDED_FORMAT_BYTES[schema["format"]])
    return Cost(2, 1)


def _types(schema: dict[str, Any]) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return set(kind)
    if isinstance(kind, str):
        return {kind}
    return {"object"} if "properties" in schema else set()


def _resolve(ref: Any, root: dict[str, Any]) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        raise _Unbounded("a remote $ref")
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, dict) else None
    if target is None:
        raise _Unbounded(f"unresolved {ref}")
    return target


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(", ", ": ")))  # ASCII: each other character as a 6-byte escape
