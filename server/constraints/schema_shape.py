"""Where a JSON schema's subschemas are (by keyword), and bounds on its shape (nesting depth, subschema count),
checked in one pass without recursion before any grammar is built, so that every later walk is bounded by them."""

from __future__ import annotations

from typing import Any, Callable, Iterator

MAX_SCHEMA_DEPTH = 32  # subschemas inside subschemas (OpenAI's strict mode allows 10 levels of objects)
MAX_SCHEMA_NODES = 5_000  # subschemas in all (OpenAI's strict mode allows 5,000 properties)
_MAPS_OF_SCHEMAS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LISTS_OF_SCHEMAS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
            "unevaluatedItems", "unevaluatedProperties", "additionalItems")


class SchemaShapeError(ValueError):
    """The schema is deeper or larger than the server takes, or holds an empty list of choices."""


def check_shape(schema: Any) -> None:
    """Raise SchemaShapeError when `schema` nests deeper than MAX_SCHEMA_DEPTH, holds more than MAX_SCHEMA_NODES
    subschemas, or has an `anyOf`, `oneOf` or `enum` with nothing to choose from."""
    pending: list[tuple[Any, int, str]] = [(schema, 0, "the schema")]
    nodes = 0
    while pending:
        node, depth, where = pending.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise SchemaShapeError(f"the schema has more than {MAX_SCHEMA_NODES:,} subschemas")
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaShapeError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if not isinstance(node, dict):
            continue
        for key in ("anyOf", "oneOf", "enum"):
            if key in node and (not isinstance(node[key], list) or not node[key]):
                raise SchemaShapeError(f"`{key}` in {where} must be a non-empty list")
        pending += [(child, depth + 1, name) for name, child in _subschemas(node)]


def _subschemas(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for key in _MAPS_OF_SCHEMAS:
        if isinstance(node.get(key), dict):
            yield from ((f"{key}.{name}", child) for name, child in node[key].items())
    for key in _LISTS_OF_SCHEMAS:
        if isinstance(node.get(key), list):
            yield from ((f"{key}[{index}]", child) for index, child in enumerate(node[key]))
    for key in _SCHEMAS:
        if isinstance(node.get(key), (dict, list)):
            children = node[key] if isinstance(node[key], list) else [node[key]]
            yield from ((key, child) for child in children)


def with_subschemas_mapped(node: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """`node` with `change` applied to each of its direct subschemas; every other keyword (`enum`, `const`,
    `default`, `examples`, ...) is kept as it is, and so is a property whose name is one of those words."""
    mapped = dict(node)
    for key in _MAPS_OF_SCHEMAS:
        if isinstance(node.get(key), dict):
            mapped[key] = {name: change(child) for name, child in node[key].items()}
    for key in _LISTS_OF_SCHEMAS + _SCHEMAS:
        if isinstance(node.get(key), list):
            mapped[key] = [change(child) for child in node[key]]
    for key in _SCHEMAS:
        if isinstance(node.get(key), dict):
            mapped[key] = change(node[key])
    return mapped
