"""Attribute filters of a search (`filters`): comparisons and compounds, as OpenAI has them, checked once and then
turned into SQL by each index (applied in the query, before any cut to the best results)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Union

from server.errors import RequestError

Value = Union[str, float, bool]
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
COMPOUNDS = ("and", "or")
MAX_DEPTH = 16  # compounds within compounds: deeper is a 400, never a recursion past Python's limit
MAX_FILTERS = 256  # comparisons in one filter


@dataclass(frozen=True)
class Comparison:
    """`key` compared with `value` (a list for `in` and `nin`). A comparison of an attribute of another type, or of
    one the file lacks, is false; `ne` and `nin` are their opposites (true)."""

    key: str
    op: Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]
    value: Value | tuple[str | float, ...]


@dataclass(frozen=True)
class Compound:
    """All (`and`) or any (`or`) of its filters."""

    op: Literal["and", "or"]
    filters: tuple["Filter", ...]


Filter = Union[Comparison, Compound]


def checked_filter(value: object, param: str = "filters") -> Filter | None:
    """The request's filter, checked (a 400 naming the place of what is wrong; a filter nested deeper than
    MAX_DEPTH is refused before it is walked deeper)."""
    if value is None:
        return None
    count = [0]
    return _filter(value, param, 0, count)


def _filter(value: object, param: str, depth: int, count: list[int]) -> Filter:
    if depth > MAX_DEPTH:
        raise RequestError(f"Filters may be nested at most {MAX_DEPTH} deep.", param=param)
    if not isinstance(value, dict):
        raise RequestError("A filter must be an object.", param=param)
    op = value.get("type")
    if op in COMPOUNDS:
        filters = value.get("filters")
        if not isinstance(filters, list) or not filters:
            raise RequestError(f"An '{op}' filter needs a non-empty list of filters.", param=f"{param}.filters")
        return Compound(op, tuple(_filter(item, f"{param}.filters[{index}]", depth + 1, count)
                                  for index, item in enumerate(filters)))
    if op not in COMPARISONS:
        raise RequestError(f"A filter's type must be one of: {', '.join(COMPARISONS + COMPOUNDS)}.",
                           param=f"{param}.type")
    count[0] += 1
    if count[0] > MAX_FILTERS:
        raise RequestError(f"A filter may hold at most {MAX_FILTERS} comparisons.", param=param)
    key = value.get("key")
    if not isinstance(key, str) or not key:
        raise RequestError("A comparison filter needs a 'key' (a string).", param=f"{param}.key")
    return Comparison(key, op, _value(op, value.get("value"), f"{param}.value"))


def _value(op: str, value: object, param: str) -> Value | tuple[str | float, ...]:
    if op in ("in", "nin"):
        if not isinstance(value, list) or not all(_scalar(item) and not isinstance(item, bool) for item in value):
            raise RequestError(f"An '{op}' filter's value must be a list of strings and numbers.", param=param)
        return tuple(value)
    if not _scalar(value):
        raise RequestError("A comparison filter's value must be a string, a number or a boolean.", param=param)
    if op in ("gt", "gte", "lt", "lte") and isinstance(value, bool):
        raise RequestError(f"A '{op}' filter compares strings or numbers, not booleans.", param=param)
    return value  # type: ignore[return-value]


def _scalar(value: object) -> bool:
    """A string, a finite number or a boolean (booleans are ints; NaN and infinities are no values)."""
    return isinstance(value, (str, int)) or (isinstance(value, float) and math.isfinite(value))


def value_kind(value: str | float | bool) -> Literal["text", "number", "boolean"]:
    """Which attributes a value compares with: strings with strings, numbers with numbers, booleans with booleans."""
    return "boolean" if isinstance(value, bool) else "text" if isinstance(value, str) else "number"


def compiled(where: Filter | None, comparison: Callable[[Comparison], tuple[str, list[Any]]],
             everything: str) -> tuple[str, list[Any]]:
    """A filter as an SQL condition and its parameters: compounds joined here, each comparison by the index's own
    `comparison`; no filter is `everything` (the dialect's TRUE)."""
    if where is None:
        return everything, []
    if isinstance(where, Compound):
        parts = [compiled(item, comparison, everything) for item in where.filters]
        joiner = " AND " if where.op == "and" else " OR "
        return "(" + joiner.join(sql for sql, _ in parts) + ")", [param for _, params in parts for param in params]
    return comparison(where)
