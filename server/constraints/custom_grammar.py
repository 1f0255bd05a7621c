"""A custom (freeform) tool's input format as a grammar: its `lark` or `regex` definition in xgrammar's EBNF."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from server.errors import RequestError

SYNTAXES = ("lark", "regex")


def custom_tool_grammar(tool: dict[str, Any], param: str) -> str | None:
    """The EBNF its input must follow, or None when the tool takes free text (no format, or `{"type": "text"}`)."""
    answer_format = tool.get("format")
    if not isinstance(answer_format, dict) or answer_format.get("type") != "grammar":
        return None
    syntax, definition = answer_format.get("syntax"), answer_format.get("definition")
    if syntax not in SYNTAXES:
        raise RequestError(f"A custom tool's grammar syntax is 'lark' or 'regex', not {syntax!r}.",
                           param=f"{param}.format.syntax")
    if not isinstance(definition, str) or not definition.strip():
        raise RequestError("A custom tool's grammar needs a `definition`.", param=f"{param}.format.definition")
    try:
        return _ebnf(syntax, definition)
    except (RuntimeError, ValueError) as exc:  # xgrammar's parse errors
        lines = str(exc).strip().splitlines()
        raise RequestError(f"Invalid {syntax} grammar for custom tool {tool.get('name')!r}: "
                           f"{lines[-1] if lines else type(exc).__name__}", param=f"{param}.format.definition") from exc


@lru_cache(maxsize=256)
def _ebnf(syntax: str, definition: str) -> str:
    import xgrammar

    grammar = xgrammar.Grammar.from_lark(definition) if syntax == "lark" else xgrammar.Grammar.from_regex(definition)
    return str(grammar)
