"""A JSON answer's grammar under an output budget: the longest JSON it allows fits the budget in bytes (so it
closes within as many tokens), and the bounds are as generous as that allows."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
import xgrammar
from xgrammar.testing import _is_grammar_accept_string as accepts

from server.constraints.json_budget import budget_bounds
from server.constraints.json_grammar import json_grammar

WIDE = "\U0001F600"  # a 4-byte character: the most bytes a plain character can take
CITY = {"type": "object", "additionalProperties": False, "required": ["city"], "properties": {"city": {"type": "string"}}}
PLACE = {"type": "object", "additionalProperties": False, "required": ["name", "country", "population"], "properties": {
    "name": {"type": "string"}, "country": {"type": "string"}, "population": {"type": "integer"},
    "area_km2": {"type": "number"}, "capital": {"type": "boolean"},
    "kind": {"enum": ["city", "town", "village"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "mayor": {"type": "object", "properties": {"name": {"type": "string"}, "party": {"type": ["string", "null"]}},
              "required": ["name"], "additionalProperties": False}}}
BUDGETS = [60, 200, 512, 2000, 8000]
CASES = [(CITY, budget) for budget in BUDGETS] + [(PLACE, budget) for budget in BUDGETS[2:]]


def _string_bounds(grammar: str) -> tuple[int, int, int]:
    """(first run, escapes, later runs) of the grammar's open strings, as written in its rules."""
    first = int(re.search(r"^basic_string_first ::= .*\{0, (\d+)\}$", grammar, re.MULTILINE).group(1))  # type: ignore[union-attr]
    escapes = re.search(r"basic_string_escaped\{0, (\d+)\}", grammar)
    segment = re.search(r"^basic_string_segment ::= .*\{0, (\d+)\}$", grammar, re.MULTILINE)
    return first, int(escapes.group(1)) if escapes else 0, int(segment.group(1)) if segment else 0


def _longest(schema: Any, string: str, items: int) -> Any:
    """The JSON value with the most bytes the bounded grammar allows: every property, the widest characters, the
    most escapes and items, the longest numbers."""
    if "enum" in schema:
        return max(schema["enum"], key=lambda value: len(json.dumps(value)))
    kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    kind = kinds[0]
    if kind == "string":
        return string
    if kind == "integer":
        return -1234567890123456
    if kind == "number":
        return "NUMBER"  # replaced by its longest spelling once dumped
    if kind == "boolean":
        return False
    if kind == "array":
        return [_longest(schema["items"], string, items) for _ in range(items)]
    return {name: _longest(value, string, items) for name, value in schema["properties"].items()}


def _worst_text(schema: dict[str, Any], budget: int) -> tuple[str, xgrammar.Grammar, str]:
    text = json_grammar(schema, budget)
    first, escapes, segment = _string_bounds(text)
    bounds = budget_bounds(schema, budget)
    assert bounds is not None
    widest = WIDE * first + ("\u0001" + WIDE * segment) * escapes  # \u0001 is written as the 6-byte \\u0001
    worst = json.dumps(_longest(schema, widest, bounds.max_items), ensure_ascii=False, separators=(", ", ": "))
    worst = worst.replace('"NUMBER"', "-1234567890123456.1234567890123456e+123")
    return worst, xgrammar.Grammar.from_ebnf(text), widest


@pytest.mark.parametrize(("schema", "budget"), CASES, ids=[f"{len(s['properties'])}-{b}" for s, b in CASES])
def test_the_longest_json_the_grammar_allows_fits_the_budget(schema: dict[str, Any], budget: int) -> None:
    worst, grammar, widest = _worst_text(schema, budget)
    assert accepts(grammar, worst), "the worst case is one the grammar allows"
    assert len(worst.encode()) <= budget
    one_more = worst.replace(json.dumps(widest, ensure_ascii=False), json.dumps(widest + WIDE, ensure_ascii=False), 1)
    assert not accepts(grammar, one_more), "the bound is the grammar's own"


def test_a_larger_budget_allows_longer_strings_and_more_items() -> None:
    bounds = [budget_bounds(PLACE, budget) for budget in BUDGETS[2:]]
    assert all(b is not None for b in bounds)
    strings = [b.string_bytes for b in bounds]  # type: ignore[union-attr]
    items = [b.max_items for b in bounds]  # type: ignore[union-attr]
    assert strings == sorted(strings) and items == sorted(items) and strings[0] < strings[-1]


def test_the_issue_case_a_city_in_200_tokens_has_room_for_a_real_name() -> None:
    bounds = budget_bounds(CITY, 200)
    assert bounds is not None and bounds.string_bytes >= 150
    grammar = xgrammar.Grammar.from_ebnf(json_grammar(CITY, 200))
    assert accepts(grammar, '{"city": "San Francisco"}')
    assert not accepts(grammar, json.dumps({"city": "x" * 738}, separators=(", ", ": ")))


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"note": {"type": "string", "pattern": "^a+$"}}},
    {"type": "object", "additionalProperties": True},
    {"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}}, "$ref": "#/$defs/node"},
])
def test_schemas_no_bound_can_limit_keep_the_unbudgeted_grammar(schema: dict[str, Any]) -> None:
    assert budget_bounds(schema, 500) is None
    assert json_grammar(schema, 500) == json_grammar(schema)


def test_a_fixed_part_bigger_than_the_budget_keeps_the_unbudgeted_grammar() -> None:
    assert budget_bounds(PLACE, 200) is None  # its keys, numbers and enum alone take more
    assert json_grammar(PLACE, 200) == json_grammar(PLACE)


def test_an_array_that_may_be_null_is_bounded_too() -> None:
    """`"type": ["array", "null"]` (strict mode's optional field) gets maxItems like any array."""
    schema = {"type": "object", "additionalProperties": False, "required": ["tags"],
              "properties": {"tags": {"type": ["array", "null"], "items": {"type": "integer"}}}}
    grammar = xgrammar.Grammar.from_ebnf(json_grammar(schema, 120))
    many = json.dumps({"tags": list(range(1000, 1100))}, separators=(",", ":"))
    assert len(many) > 400 and not accepts(grammar, many)


@pytest.mark.parametrize("name", ["examples", "enum", "default", "const"])
def test_a_property_named_like_a_keyword_is_still_a_schema(name: str) -> None:
    schema = {"type": "object", "additionalProperties": False, "required": [name],
              "properties": {name: {"type": "array", "items": {"type": "integer"}}}}
    grammar = xgrammar.Grammar.from_ebnf(json_grammar(schema, 120))
    many = json.dumps({name: list(range(1000, 1100))}, separators=(",", ":"))
    assert len(many) > 400 and not accepts(grammar, many)


def _fanned_out(levels: int, fan: int) -> dict[str, Any]:
    """Each of `levels` $defs has `fan` properties referring to the next one: 'fan ** levels' paths."""
    defs: dict[str, Any] = {f"d{levels}": {"type": "string", "maxLength": 4}}
    for level in reversed(range(levels)):
        defs[f"d{level}"] = {"type": "object", "additionalProperties": False, "required": [f"p{n}" for n in range(fan)],
                             "properties": {f"p{n}": {"$ref": f"#/$defs/d{level + 1}"} for n in range(fan)}}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


def test_the_budget_search_does_work_in_proportion_to_the_schema() -> None:
    """Chained $defs that fan out are measured once each, not once per path to them (which is exponential)."""
    import server.constraints.json_budget as json_budget

    calls = 0

    def count(frame: Any, event: str, _: Any) -> None:
        nonlocal calls
        calls += event == "call" and frame.f_code.co_filename == json_budget.__file__

    schema = _fanned_out(levels=7, fan=4)
    sys.setprofile(count)
    try:
        budget_bounds(schema, 200_000)
    finally:
        sys.setprofile(None)
    subschemas = 7 * 4 + 2
    assert calls < 200 * subschemas, calls  # 4 ** 7 paths is 16,384 per measure, and the search measures often


NUMBER = "-1234567890123456.1234567890123456e+123"  # the longest number the grammar allows
FREE_SCHEMAS = {
    "json_object": {"type": "object"},
    "a free property": {"type": "object", "properties": {"data": {}, "list": {"type": "array"}},
                        "required": ["data", "list"], "additionalProperties": False},
}
FREE_CASES = [("json_object", budget) for budget in BUDGETS] + [("a free property", budget) for budget in BUDGETS[1:]]


def _free_worst(kind: str, depth: int, members: int, string: str, extra: int = 0) -> str:
    """The longest free JSON of `kind` ("any", "object", "array") `depth` deep with `members` in each (and `extra`
    more in the outermost): every scalar the longest of a string and a number."""
    scalar = max(string, NUMBER, key=lambda text: len(text.encode()))
    if depth == 0:
        return scalar
    inner = [_free_worst("any", depth - 1, members, string)] * (members + extra)
    shapes = {"array": "[" + ", ".join(inner) + "]", "object": "{" + ", ".join(f"{string}: {v}" for v in inner) + "}"}
    return shapes.get(kind) or max((scalar, *shapes.values()), key=lambda text: len(text.encode()))


@pytest.mark.parametrize(("name", "budget"), FREE_CASES, ids=[f"{n}-{b}" for n, b in FREE_CASES])
def test_free_json_closes_within_the_budget(name: str, budget: int) -> None:
    """`json_object` (any object) and schemas with free parts: the longest JSON the grammar allows fits the budget
    (an unbounded any-object ran a 200-token answer to its end, open, 3 times in 12)."""
    schema = FREE_SCHEMAS[name]
    bounds = budget_bounds(schema, budget)
    assert bounds is not None and bounds.free is not None
    text = json_grammar(schema, budget)
    first, escapes, segment = _string_bounds(text)
    string = json.dumps(WIDE * first + ("\u0001" + WIDE * segment) * escapes, ensure_ascii=False)
    depth, members = bounds.free.depth, bounds.free.members

    def document(extra: int = 0) -> str:
        if name == "json_object":
            return _free_worst("object", depth, members, string, extra)
        return (f'{{"data": {_free_worst("any", depth, members, string, extra)}, '
                f'"list": {_free_worst("array", depth, members, string)}}}')

    grammar = xgrammar.Grammar.from_ebnf(text)
    worst = document()
    json.loads(worst)
    assert accepts(grammar, worst), "the worst case is one the grammar allows"
    assert len(worst.encode()) <= budget
    assert not accepts(grammar, document(extra=1)), "the bound is the grammar's own"


def test_json_object_without_a_budget_stays_free() -> None:
    grammar = xgrammar.Grammar.from_ebnf(json_grammar({"type": "object"}))
    assert accepts(grammar, json.dumps({"a": [[[[{"b": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}]]]]}))
