"""JSON grammars from JSON schemas (xgrammar's converter), shaped so that a small model's JSON closes.

Three things let a small model run away inside JSON until `max_output_tokens`: free whitespace between tokens,
numbers with no limit on their digits, and strings with no limit on their length. The grammar here has the
separators `,` and `:` each with one optional space after it, as JSON is written compact (gpt-oss) or spaced (most
chat models), and no other whitespace; at most 16 digits in a number's integer part and its
fraction, and 3 in its exponent (a double carries 15 to 17 significant digits: more would be noise); and in a
string whose schema sets no constraint of its own, at most STRING_SEGMENT characters between escapes and
STRING_ESCAPES escapes (such as `\n`), so a code snippet of 256 lines fits but a loop must end.

Given an output budget, the bounds are tightened until no JSON the grammar allows is longer than the budget in
bytes (server/constraints/json_budget.py), so an answer always closes within `max_output_tokens`: JSON a schema
leaves free (`json_object`, `{}`) is then nested at most a few levels deep with a few members in each array or object
(free_json_rules).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from server.constraints.json_budget import FreeShape, budget_bounds, with_open_arrays_bounded
from server.constraints.schema_shape import SchemaShapeError, check_shape

# xgrammar's converter writes unbounded repetitions for a number's digits; these bound them.
_BOUNDED_DIGITS = (
    ("[1-9] [0-9]*", "[1-9] [0-9]{0, 15}"),
    ('[eE] basic_number_4 basic_number_digits{1, -1}', '[eE] basic_number_4 basic_number_digits{1, 3}'),
    ("basic_number_digits{1, -1}", "basic_number_digits{1, 16}"),
)
ANY_OBJECT: dict[str, Any] = {"type": "object"}
STRING_SEGMENT = 512  # plain characters in a row
STRING_ESCAPES = 256  # escapes (`\n`, `\"`, ...) in one string
# xgrammar's rule for a string with no constraints of its own is recursive (one character per step, unbounded).
# It is replaced by plain-character segments between escapes, each a counted character class: a counted
# alternation of characters and escapes would be as strict but costs xgrammar ~80 ms per token to mask.
_BASIC_STRING = re.compile(r"^basic_string ::= .*$", re.MULTILINE)
# xgrammar's rules for free JSON (any value, any object, any array), replaced under a budget by free_json_rules.
_FREE_JSON = re.compile(r"^basic_(any|array|object) ::= .*$\n?", re.MULTILINE)
# xgrammar's character of a string with a length bound (minLength, maxLength) refuses only `"`, `\\`, CR and LF, so
# a raw tab or another control character, which JSON forbids in a string (json.loads refuses it), passes. Ours
# refuses U+0000-U+001F as basic_string does.
_BOUNDED_STRING_CHARACTER = (r'[^\"\\\r\n]', r'[^\0-\x1f\"\\]')
# xgrammar's separators `", "` and `": "` as grammar literals (a property name is a literal with escaped quotes).
_SEPARATOR = re.compile(r'(?<=[ (])"([,:]) "(?=[ )])')
# The time and C++ source location xgrammar puts before its messages: "[15:58:20] /project/cpp/x.cc:4944: ".
_WHERE_IN_XGRAMMAR = re.compile(r"^(\[[0-9:]+\] )?\S+\.(cc|h):[0-9]+: ")
_ESCAPE_BYTES = 6  # the longest escape, `\uXXXX`
_CHAR_BYTES = 4  # the longest plain character, in UTF-8
_ESCAPED_RUN = 64  # per escape allowed under a budget: the escape and the plain characters after it


def _string_rules(first: int, escapes: int, segment: int) -> str:
    """A string of at most `first` plain characters, then up to `escapes` escapes each followed by at most
    `segment` plain characters (characters in a row are a counted class, cheap for xgrammar to mask)."""
    if escapes == 0:
        return f'basic_string ::= (("\\"" basic_string_first "\\""))\n' + _plain("basic_string_first", first)
    return "\n".join((
        f'basic_string ::= (("\\"" basic_string_first basic_string_escaped{{0, {escapes}}} "\\""))',
        _plain("basic_string_first", first),
        _plain("basic_string_segment", segment),
        'basic_string_escaped ::= (("\\\\" basic_escape basic_string_segment))',
    ))


def _plain(name: str, most: int) -> str:
    return f'{name} ::= [^\\0-\\x1f\\"\\\\]{{0, {most}}}'


UNBUDGETED_STRING_BYTES = _CHAR_BYTES * STRING_SEGMENT + STRING_ESCAPES * (_ESCAPE_BYTES + _CHAR_BYTES * STRING_SEGMENT)


def string_rules_within(content_bytes: int) -> str:
    """The string rules whose longest string holds at most `content_bytes` UTF-8 bytes between its quotes: half
    for the first run of plain characters, the rest for escapes, each with a run of characters after it."""
    if content_bytes >= UNBUDGETED_STRING_BYTES:
        return _string_rules(STRING_SEGMENT, STRING_ESCAPES, STRING_SEGMENT)
    first_bytes = content_bytes if content_bytes < 2 * _ESCAPED_RUN else content_bytes // 2
    first = min(STRING_SEGMENT, first_bytes // _CHAR_BYTES)
    rest = content_bytes - first * _CHAR_BYTES
    escapes = min(STRING_ESCAPES, rest // _ESCAPED_RUN)
    segment = min(STRING_SEGMENT, (rest // escapes - _ESCAPE_BYTES) // _CHAR_BYTES) if escapes else 0
    return _string_rules(first, escapes, segment)


def free_json_rules(shape: FreeShape) -> str:
    """Free JSON nested at most `shape.depth` arrays or objects deep, with at most `shape.members` in each: the
    levels are rules of their own (`basic_any_2` holds arrays and objects of `basic_any_1`), as json_budget's
    free_cost measures them."""
    more = shape.members - 1
    rules = ["basic_any ::= basic_any_%d" % shape.depth, "basic_array ::= basic_array_%d" % shape.depth,
             "basic_object ::= basic_object_%d" % shape.depth,
             "basic_any_0 ::= basic_number | basic_string | basic_boolean | basic_null"]
    for level in range(1, shape.depth + 1):
        inner, member = f"basic_any_{level - 1}", f'basic_string ":" " "? basic_any_{level - 1}'
        rules += [
            f"basic_any_{level} ::= basic_any_0 | basic_array_{level} | basic_object_{level}",
            f'basic_array_{level} ::= ("[" {inner} ("," " "? {inner}){{0, {more}}} "]") | ("[" "]")',
            f'basic_object_{level} ::= ("{{" {member} ("," " "? {member}){{0, {more}}} "}}") | ("{{" "}}")',
        ]
    return "\n".join(rules) + "\n"


class SchemaError(ValueError):
    """The JSON schema cannot be turned into a grammar."""


def json_grammar(schema: dict[str, Any], budget: int | None = None) -> str:
    """An EBNF grammar (xgrammar's dialect) for JSON text valid against `schema`, at most `budget` bytes long when
    a budget is given and the schema can be bounded (see json_budget); raises SchemaError."""
    try:
        check_shape(schema)
    except SchemaShapeError as exc:
        raise SchemaError(str(exc)) from None
    bounds = budget_bounds(schema, budget) if budget is not None else None
    if bounds is None:
        return _grammar(json.dumps(schema), UNBUDGETED_STRING_BYTES)  # key order kept, as the schema declares
    return _grammar(json.dumps(with_open_arrays_bounded(schema, bounds.max_items)), bounds.string_bytes, bounds.free)


@lru_cache(maxsize=512)
def _grammar(schema_json: str, string_bytes: int, free: FreeShape | None = None) -> str:
    import xgrammar

    try:
        grammar = str(xgrammar.Grammar.from_json_schema(schema_json, any_whitespace=False, strict_mode=True))
    except Exception as exc:  # xgrammar raises RuntimeError/ValueError subclasses of its own
        lines = str(exc).strip().splitlines()
        raise SchemaError(_WHERE_IN_XGRAMMAR.sub("", lines[-1]) if lines else type(exc).__name__) from None
    for unbounded, bounded in (*_BOUNDED_DIGITS, _BOUNDED_STRING_CHARACTER):
        grammar = grammar.replace(unbounded, bounded)
    grammar = _SEPARATOR.sub(lambda match: f'"{match[1]}" " "?', grammar)
    if free is not None:
        grammar = _FREE_JSON.sub("", grammar) + free_json_rules(free)
    return _BASIC_STRING.sub(lambda _: string_rules_within(string_bytes), grammar, count=1)
