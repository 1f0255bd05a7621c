"""Structural tags for harmony (gpt-oss): reasoning stays free, the `final` channel or the call is constrained.

One assistant turn is any number of `analysis` (or preamble `commentary`) messages, then the message that ends
the turn: a `final` answer (its JSON when `text.format` asks for it) or a call
`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}`. Harmony's special tokens are matched
by id and kept out of free text, so free text cannot swallow a channel change. The engine stops at `<|return|>`
or `<|call|>` once the grammar has ended.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from parsers.harmony import FUNCTIONS_PREFIX, HARMONY_TOKENS
from server.constraints.chat import Format, call_budget, grammar_format
from server.constraints.rules import OutputRules

SPECIAL_TOKENS = HARMONY_TOKENS  # kept out of free text


def harmony_structural_tag(rules: OutputRules, token_id: Callable[[str], int]) -> str | None:
    """The structural tag (JSON) for one harmony assistant turn, or None when the output is free.

    `token_id` maps a special token's text to its id in the served encoding.
    """
    if not rules.needs_grammar:
        return None
    ids = {name: token_id(name) for name in SPECIAL_TOKENS}
    text = _free_text()
    final = _sequence(_token(ids["<|channel|>"]), _text("final"), _token(ids["<|message|>"]),
                      grammar_format(rules.answer_schema, rules.answer_budget) if rules.answer_schema is not None else text)
    endings = [] if rules.calls is not None and rules.calls.required else [final]
    if rules.calls is not None:
        endings += [_call(ids, name, schema, rules.answer_budget) for name, schema in rules.calls.schemas.items()]
    earlier = {"type": "star", "content": {"type": "or", "elements": [_message(ids, "analysis", text),
                                                                      _message(ids, "commentary", text)]}}
    turn = _sequence(earlier, endings[0] if len(endings) == 1 else {"type": "or", "elements": endings})
    return json.dumps({"type": "structural_tag", "format": turn})


def _message(ids: dict[str, int], channel: str, text: Format) -> Format:
    """A message that does not end the turn: `<|channel|>X<|message|>...<|end|><|start|>assistant`."""
    body = {"type": "tag", "begin": _token(ids["<|message|>"]), "content": text, "end": _token(ids["<|end|>"])}
    return _sequence(_token(ids["<|channel|>"]), _text(channel), body, _token(ids["<|start|>"]), _text("assistant"))


def _call(ids: dict[str, int], name: str, schema: dict[str, Any], budget: int | None) -> Format:
    header = f"commentary to={FUNCTIONS_PREFIX}{name} "
    arguments = grammar_format(schema, call_budget(budget, header, "json", "...."))  # 4 special tokens, one each
    return _sequence(_token(ids["<|channel|>"]), _text(header), _token(ids["<|constrain|>"]), _text("json"),
                     _token(ids["<|message|>"]), arguments)


def _free_text() -> Format:
    return {"type": "any_text", "excludes": list(SPECIAL_TOKENS)}


def _sequence(*elements: Format) -> Format:
    return {"type": "sequence", "elements": list(elements)}


def _token(token_id: int) -> Format:
    return {"type": "token", "token": token_id}


def _text(value: str) -> Format:
    return {"type": "const_string", "value": value}
