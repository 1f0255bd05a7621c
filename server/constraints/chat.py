"""Structural tags for chat-template models: the answer's JSON and tool calls in the model's own call syntax.

The grammar writes exactly what the configured tool-call parser reads, so the streaming parsers see ordinary
output and arguments still stream. A reasoning model's thinking is left free by the engine itself: vLLM applies
the grammar only after the reasoning ends when it runs with the same `--reasoning-parser`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Literal

from server.constraints.closing import arguments_grammar
from server.constraints.json_grammar import json_grammar
from server.constraints.json_string import ebnf_literal, json_string_grammar, renamed_root
from server.constraints.rules import CallRules, OutputRules

Format = dict[str, Any]
# Calls in one answer when a grammar writes them and the request sets no limit: a small model can otherwise
# repeat a call until the context is full.
GRAMMAR_CALL_LIMIT = 8
# Bytes a call gets at least when the output budget is shared between parallel calls: fewer calls, not smaller.
MIN_CALL_BYTES = 256
REASONING_END_TOKENS = 16  # the end string vLLM writes when thinking reaches its budget (`</think>`), at most
CUSTOM_INPUT_OPEN, CUSTOM_INPUT_CLOSE = '{"input": "', '"}'  # a custom call's arguments around its escaped input
QWEN_INPUT_OPEN, QWEN_INPUT_CLOSE = "<parameter=input>\n", "\n</parameter>"  # and qwen3_coder's, around the raw input


@dataclass(frozen=True)
class CallSyntax:
    """How a model family writes one tool call: the text before the arguments, their style, the text after."""

    trigger: str  # the text that opens every call
    begin: Callable[[str], str]  # the tool's name -> the text before its arguments
    end: str
    style: Literal["json", "qwen_xml"] = "json"
    separator: str = "\n"  # between consecutive calls


CALL_SYNTAX: dict[str, CallSyntax] = {
    "hermes": CallSyntax("<tool_call>", lambda name: f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": ',
                         "}\n</tool_call>"),
    "qwen3_coder": CallSyntax("<tool_call>", lambda name: f"<tool_call>\n<function={name}>\n",
                              "\n</function>\n</tool_call>", style="qwen_xml"),
    "llama3_json": CallSyntax('{"name": ', lambda name: f'{{"name": {json.dumps(name)}, "parameters": ', "}",
                              separator="; "),
}


def chat_structural_tag(rules: OutputRules, syntax: CallSyntax | None) -> str | None:
    """The structural tag (JSON) for vLLM's structured outputs, or None when the output is free.

    `syntax` is None for a tool-call parser with no grammar here; rules that need calls then fail (ValueError).
    """
    if not rules.needs_grammar:
        return None
    answer = grammar_format(rules.answer_schema, rules.answer_budget) if rules.answer_schema is not None else None
    calls = rules.calls
    if calls is None:
        assert answer is not None, "a grammar without calls is the answer's"
        return _structural_tag(answer)
    if syntax is None:
        raise ValueError("this tool-call format has no grammar")
    limit, per_call = calls_within(rules.max_calls or GRAMMAR_CALL_LIMIT, rules.answer_budget, syntax.separator)
    tags = [_call_tag(syntax, name, schema, per_call, calls.custom.get(name)) for name, schema in calls.schemas.items()]
    if calls.required:
        return _structural_tag(_calls_only(tags, syntax, limit))
    if answer is not None:  # a JSON answer, or calls
        return _structural_tag({"type": "or", "elements": [answer, _calls_only(tags, syntax, limit)]})
    return _structural_tag({"type": "triggered_tags", "triggers": [syntax.trigger], "tags": tags,
                            "stop_after_first": limit == 1})


def thinking_shares(budget: int | None) -> tuple[int | None, int | None]:
    """(tokens thinking may take, bytes the answer or calls after it may take) under an output budget in tokens.

    vLLM ends a chat-template model's thinking at its `thinking_token_budget` by writing the reasoning end string;
    half the budget goes to thinking, and what follows it is bounded by the rest, so it still closes."""
    if budget is None:
        return None, None
    thinking = budget // 2
    return thinking, max(budget - thinking - REASONING_END_TOKENS, 1)


def grammar_format(schema: dict[str, Any], budget: int | None = None) -> Format:
    """A structural-tag element holding JSON valid against `schema`, with bounded numbers and no free whitespace
    (and no longer than `budget` bytes, when the schema allows a bound)."""
    return {"type": "grammar", "grammar": json_grammar(schema, budget)}


def calls_within(limit: int, budget: int | None, separator: str) -> tuple[int, int | None]:
    """(calls at most, bytes each may take) so that `limit` calls or fewer, with separators, fit the output budget:
    the budget is shared evenly, and calls are fewer when a share would fall below MIN_CALL_BYTES."""
    if budget is None:
        return limit, None
    calls = max(1, min(limit, budget // MIN_CALL_BYTES))
    return calls, budget // calls - len(separator.encode())


def call_budget(budget: int | None, *fixed: str) -> int | None:
    """The bytes a call's arguments may take so that the call, with its `fixed` text, fits the output budget: a
    string argument the model never ends still closes (None: no budget, or none left beyond the fixed text)."""
    if budget is None:
        return None
    left = budget - sum(len(text.encode()) for text in fixed)
    return left if left > 0 else None


def custom_arguments_grammar(ebnf: str, after: str = "") -> str:
    """The arguments of a custom call in a JSON call syntax, `{"input": "..."}`, whose input written as a JSON string
    follows the tool's grammar `ebnf`; then `after` (the call's end, for its closing: server/constraints/closing.py)."""
    return (f"root ::= {ebnf_literal(CUSTOM_INPUT_OPEN)} custom_input {ebnf_literal(CUSTOM_INPUT_CLOSE + after)}\n"
            + renamed_root(json_string_grammar(ebnf), "custom_input"))


def call_grammars(calls: CallRules, after: str = "") -> dict[str, Callable[[], str] | None]:
    """Each callable tool's name -> what makes the grammar of its call's arguments (a custom tool's input's, when it
    has a grammar), then `after`: what a closing completes an open call under (made only if one is asked for)."""
    grammars: dict[str, Callable[[], str] | None] = {name: partial(arguments_grammar, schema, after)
                                                     for name, schema in calls.schemas.items()}
    for name, ebnf in calls.custom.items():
        grammars[name] = None if ebnf is None else partial(custom_arguments_grammar, ebnf, after)
    return grammars


def _call_tag(syntax: CallSyntax, name: str, schema: dict[str, Any], budget: int | None,
              custom: str | None) -> Format:
    """One call of tool `name`: its arguments valid against `schema`, or a custom tool's input under its grammar
    (`custom`; the closing bounds it, not the grammar)."""
    begin = syntax.begin(name)
    if custom is not None:
        grammar = custom_arguments_grammar(custom) if syntax.style == "json" else _qwen_input_grammar(custom)
        content: Format = {"type": "grammar", "grammar": grammar}
    elif syntax.style != "json":
        content = {"type": "json_schema", "json_schema": schema, "style": syntax.style}
    else:
        content = grammar_format(schema, call_budget(budget, begin, syntax.end))
    return {"type": "tag", "begin": begin, "content": content, "end": syntax.end}


def _qwen_input_grammar(ebnf: str) -> str:
    """A custom call's input as qwen3_coder writes a string parameter: as it is, between the parameter's tags."""
    return (f"root ::= {ebnf_literal(QWEN_INPUT_OPEN)} custom_input {ebnf_literal(QWEN_INPUT_CLOSE)}\n"
            + renamed_root(ebnf, "custom_input"))


def _calls_only(tags: list[Format], syntax: CallSyntax, limit: int) -> Format:
    """One to `limit` calls, separated as the model separates them, and nothing else."""
    call = {"type": "or", "elements": tags}
    more = {"type": "sequence", "elements": [{"type": "const_string", "value": syntax.separator}, call]}
    return {"type": "sequence", "elements": [call, {"type": "repeat", "min": 0, "max": limit - 1, "content": more}]}


def _structural_tag(output: Format) -> str:
    return json.dumps({"type": "structural_tag", "format": output})
