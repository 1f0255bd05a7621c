"""JSON grammars from JSON schemas (xgrammar's converter), shaped so that a small model's JSON closes.

Three things let a small model run away inside JSON until `max_output_tokens`: free whitespace between tokens,
numbers with no limit on their digits, and strings with no limit on their length. The grammar here has the
fixed separators `", "` and `": "` (no free whitespace); at most 16 digits in a number's integer part and its
fraction, and 3 in its exponent (a double carries 15 to 17 significant digits: more would be noise); and in a
string whose schema sets no constraint of its own, at most STRING_SEGMENT characters between escapes and
STRING_ESCAPES escapes (such as `\n`), so a code snippet of 256 lines fits but a loop must end.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

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
_BOUNDED_STRING = "\n".join((
    f'basic_string ::= (("\\"" basic_string_segment basic_string_escaped{{0, {STRING_ESCAPES}}} "\\""))',
    f'basic_string_segment ::= [^\\0-\\x1f\\"\\\\]{{0, {STRING_SEGMENT}}}',
    'basic_string_escaped ::= (("\\\\" basic_escape basic_string_segment))',
))


class SchemaError(ValueError):
    """The JSON schema cannot be turned into a grammar."""


def json_grammar(schema: dict[str, Any]) -> str:
    """An EBNF grammar (xgrammar's dialect) for JSON text valid against `schema`; raises SchemaError."""
    return _grammar(json.dumps(schema))  # key order kept: properties come in the order the schema declares


@lru_cache(maxsize=512)
def _grammar(schema_json: str) -> str:
    import xgrammar

    try:
        grammar = str(xgrammar.Grammar.from_json_schema(schema_json, any_whitespace=False, strict_mode=True))
    except Exception as exc:  # xgrammar raises RuntimeError/ValueError subclasses of its own
        lines = str(exc).strip().splitlines()
        raise SchemaError(lines[-1] if lines else type(exc).__name__) from exc
    for unbounded, bounded in _BOUNDED_DIGITS:
        grammar = grammar.replace(unbounded, bounded)
    return _BASIC_STRING.sub(lambda _: _BOUNDED_STRING, grammar, count=1)
