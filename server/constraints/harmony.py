"""Structural tags for harmony (gpt-oss): reasoning bounded by the budget, the `final` channel or the call constrained.

One assistant turn is up to EARLIER_MESSAGES `analysis` (or, when a call may follow, preamble `commentary`) messages,
each at most a quarter of the output budget in tokens (budget_shares), then the message that ends the turn, in the
budget left: a `final` answer (its JSON when `text.format` asks for it) or a call
`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}`. Harmony's special tokens are matched
by id and kept out of free text, so free text cannot swallow a channel change. The engine stops at `<|return|>`
or `<|call|>` once the grammar has ended.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from parsers.harmony import FUNCTIONS_PREFIX, HARMONY_TOKENS, recipient
from server.constraints.chat import Format, call_budget, grammar_format
from server.constraints.json_budget import budget_bounds, is_bounded
from server.constraints.rules import CallRules, OutputRules

# Analysis and preamble messages before the turn's last one, at most; a quarter of the output budget each.
EARLIER_MESSAGES = 2
MESSAGE_OVERHEAD = 6  # tokens around an earlier message's body: <|channel|>, its channel, <|message|>, <|end|>, ...


def harmony_structural_tag(rules: OutputRules, token_id: Callable[[str], int]) -> str | None:
    """The structural tag (JSON) for one harmony assistant turn, or None when the output is free.

    `token_id` maps a special token's text to its id in the served encoding.
    """
    if not rules.needs_grammar:
        return None
    ids = {name: token_id(name) for name in HARMONY_TOKENS}
    per_message, answer_budget = budget_shares(rules.answer_budget, lambda left: _closes(rules, left))
    text = _free_text()
    final = _sequence(_token(ids["<|channel|>"]), _text("final"), _token(ids["<|message|>"]),
                      grammar_format(rules.answer_schema, answer_budget) if rules.answer_schema is not None else text)
    endings = [] if rules.calls is not None and rules.calls.required else [final]
    if rules.calls is not None:
        custom = rules.calls.custom
        endings += [_custom_call(ids, name, custom[name], answer_budget) if name in custom
                    else _call(ids, _recipient(rules.calls, name), schema, answer_budget)
                    for name, schema in rules.calls.schemas.items()]
    body = _free_tokens(ids, per_message)
    # A preamble (`commentary`) comes before a call: with no call possible, it would be prose beside the answer.
    channels = ("analysis", "commentary") if rules.calls is not None else ("analysis",)
    message = {"type": "or", "elements": [_message(ids, channel, body) for channel in channels]}
    earlier = {"type": "repeat", "min": 0, "max": EARLIER_MESSAGES if per_message != 0 else 0, "content": message}
    turn = _sequence(earlier, endings[0] if len(endings) == 1 else {"type": "or", "elements": endings})
    return json.dumps({"type": "structural_tag", "format": turn})


def budget_shares(budget: int | None,
                  closes: Callable[[int], bool] = lambda left: True) -> tuple[int | None, int | None]:
    """(tokens each earlier message may take, bytes the answer or call may take) under an output budget in tokens.

    Reasoning and preambles come before the message that ends the turn and share its budget; bounded, they leave
    the JSON answer or the call the rest, so it still closes within `max_output_tokens`. Their share (a quarter of
    the budget each) halves while the rest is too little for the answer to be bounded (`closes(bytes)` False), down
    to none: then there is no reasoning, and the answer has the whole budget."""
    if budget is None:
        return None, None
    per_message = budget // 4
    while per_message > 0:
        left = max(budget - EARLIER_MESSAGES * (per_message + MESSAGE_OVERHEAD), 1)
        if closes(left):
            return per_message, left
        per_message //= 2
    return 0, budget


def _closes(rules: OutputRules, left: int) -> bool:
    """Whether a JSON answer, and each call's arguments, can be bounded to close within `left` bytes (those whose
    schema no bound limits are not counted: no share of reasoning would bound them)."""
    wanted = [(rules.answer_schema, left)] if rules.answer_schema is not None else []
    if rules.calls is not None:
        wanted += [(schema, call_budget(left, f"commentary to={_recipient(rules.calls, name)} ", "json", "....") or 0)
                   for name, schema in rules.calls.schemas.items() if name not in rules.calls.custom]
    return all(budget_bounds(schema, room) is not None for schema, room in wanted if is_bounded(schema))


def _free_tokens(ids: dict[str, int], most: int | None) -> Format:
    """A message body: any tokens but harmony's own (matched by id), at most `most` of them."""
    body: Format = {"type": "any_tokens", "exclude_tokens": sorted(ids.values())}
    return {**body, "max_tokens": most} if most is not None else body


def _message(ids: dict[str, int], channel: str, text: Format) -> Format:
    """A message that does not end the turn: `<|channel|>X<|message|>...<|end|><|start|>assistant`."""
    body = {"type": "tag", "begin": _token(ids["<|message|>"]), "content": text, "end": _token(ids["<|end|>"])}
    return _sequence(_token(ids["<|channel|>"]), _text(channel), body, _token(ids["<|start|>"]), _text("assistant"))


def _recipient(calls: CallRules, name: str) -> str:
    tool = calls.tools.get(name)
    return recipient(tool) if tool is not None else FUNCTIONS_PREFIX + name


def _call(ids: dict[str, int], to: str, schema: dict[str, Any], budget: int | None) -> Format:
    header = f"commentary to={to} "
    arguments = grammar_format(schema, call_budget(budget, header, "json", "...."))  # 4 special tokens, one each
    return _sequence(_token(ids["<|channel|>"]), _text(header), _token(ids["<|constrain|>"]), _text("json"),
                     _token(ids["<|message|>"]), arguments)


def _custom_call(ids: dict[str, int], name: str, grammar: str | None, budget: int | None) -> Format:
    """A custom (freeform) tool's call: its input is the message body as it is, following the tool's grammar."""
    header = f"commentary to={FUNCTIONS_PREFIX}{name}"
    free = _free_tokens(ids, call_budget(budget, header, "...."))  # the header and 4 special tokens, within budget
    body: Format = {"type": "grammar", "grammar": grammar} if grammar is not None else free
    return _sequence(_token(ids["<|channel|>"]), _text(header), _token(ids["<|message|>"]), body)


def _free_text() -> Format:
    return {"type": "any_text", "excludes": list(HARMONY_TOKENS)}


def _sequence(*elements: Format) -> Format:
    return {"type": "sequence", "elements": list(elements)}


def _token(token_id: int) -> Format:
    return {"type": "token", "token": token_id}


def _text(value: str) -> Format:
    return {"type": "const_string", "value": value}
