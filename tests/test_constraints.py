"""Structured outputs: request rules, bounded JSON grammars, and structural tags checked with xgrammar's own matcher.

The grammars are checked for what they let through and what they stop, and the outputs they let through are
fed to this project's own parsers, which must read them back as the intended calls: the grammar writes exactly
the syntax the streaming parsers read.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import Any

import pytest
import xgrammar
from xgrammar.testing import _is_grammar_accept_string as accepts

from parsers.deltas import ItemEnded, OutputText, ReasoningText, ToolCallArguments, ToolCallStarted, merge_adjacent
from parsers.harmony import HarmonyParser
from parsers.registry import TOOL_CALL_PARSERS
from server.model_settings import ModelSettings
from server.constraints.chat import CALL_SYNTAX, GRAMMAR_CALL_LIMIT, chat_structural_tag
from server.constraints.json_budget import budget_bounds
from server.constraints.json_grammar import STRING_ESCAPES, STRING_SEGMENT, SchemaError, json_grammar
from server.constraints.rules import OutputRules, output_rules
from server.errors import RequestError
from server.requests import ResponsesRequest
from server.paths.tools import tool_definitions, tool_table
from server.paths.harmony import HarmonyPath, harmony_encoding

CITY = {"type": "object", "properties": {"name": {"type": "string"}, "population": {"type": "integer"},
                                         "area": {"type": "number"}},
        "required": ["name", "population", "area"], "additionalProperties": False}
WEATHER = {"type": "function", "name": "get_weather", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city", "unit"], "additionalProperties": False}}
TIME = {"type": "function", "name": "get_time", "strict": False,
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}
PATCH = {"type": "custom", "name": "apply_patch"}
SPAWN = {"type": "namespace", "name": "agents", "tools": [
    {"type": "function", "name": "spawn", "parameters": {"type": "object", "properties": {"task": {"type": "string"}},
                                                          "required": ["task"]}}]}


def _request(**fields: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"input": "hi", **fields})


def _rules(**fields: Any) -> OutputRules:
    request = _request(**fields)
    return output_rules(request, tool_table(request), tool_definitions(request))


# -- JSON grammars -------------------------------------------------------------------------------------------------

JSON_CASES = [
    ("a valid object", '{"name": "Paris", "population": 2100000, "area": 105.4}', True),
    ("escapes in strings", '{"name": "Pa\\"ris\\"\\nline", "population": 1, "area": 1}', True),
    ("properties out of the schema's order", '{"population": 1, "name": "P", "area": 1}', False),
    ("free whitespace", '{ "name": "P", "population": 1, "area": 1}', False),
    ("compact separators (gpt-oss writes JSON so)", '{"name":"P","population":1,"area":1}', True),
    ("a missing required property", '{"name": "P", "population": 1}', False),
    ("16 integer digits", '{"name": "P", "population": 1234567890123456, "area": 1}', True),
    ("17 integer digits", '{"name": "P", "population": 12345678901234567, "area": 1}', False),
    ("16 fraction digits", '{"name": "P", "population": 1, "area": 1.1234567890123456}', True),
    ("17 fraction digits", '{"name": "P", "population": 1, "area": 1.12345678901234567}', False),
    ("a segment at its bound", '{"name": "%s", "population": 1, "area": 1}' % ("x" * STRING_SEGMENT), True),
    ("a segment past its bound", '{"name": "%s", "population": 1, "area": 1}' % ("x" * (STRING_SEGMENT + 1)), False),
    ("escapes at their bound", '{"name": "%s", "population": 1, "area": 1}' % ("ab\\n" * STRING_ESCAPES), True),
    ("escapes past their bound", '{"name": "%s", "population": 1, "area": 1}' % ("ab\\n" * (STRING_ESCAPES + 1)),
     False),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_json_grammar_closes_and_follows_the_schema(text: str, expected: bool) -> None:
    assert accepts(xgrammar.Grammar.from_ebnf(json_grammar(CITY)), text) is expected


def test_json_grammar_bounds_strings_inside_any_object() -> None:
    grammar = xgrammar.Grammar.from_ebnf(json_grammar({"type": "object"}))
    assert accepts(grammar, '{"a": ["x", {"b": 1.5}]}')
    assert not accepts(grammar, '{"a": "%s"}' % ("y" * (STRING_SEGMENT + 1)))


def test_an_invalid_schema_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        json_grammar({"type": "object", "properties": {"a": {"type": "no-such-type"}}})


# -- the rules a request asks for ----------------------------------------------------------------------------------

RULE_ERRORS = [
    ("tool_choice not a known string", {"tools": [WEATHER], "tool_choice": "bogus"}, "tool_choice"),
    ("tool_choice a number", {"tools": [WEATHER], "tool_choice": 3}, "tool_choice"),
    ("required without tools", {"tool_choice": "required"}, "tool_choice"),
    ("named tool unknown", {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
     "tool_choice.name"),
    ("named tool of another kind", {"tools": [PATCH], "tool_choice": {"type": "function", "name": "apply_patch"}},
     "tool_choice.name"),
    ("named tool without a name", {"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice"),
    ("unknown tool_choice type", {"tools": [WEATHER], "tool_choice": {"type": "wizard"}}, "tool_choice.type"),
    ("hosted tool", {"tools": [WEATHER], "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ("allowed_tools without tools", {"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "mode": "auto"}},
     "tool_choice.tools"),
    ("allowed_tools bad mode", {"tools": [WEATHER], "tool_choice": {
        "type": "allowed_tools", "mode": "sometimes", "tools": [{"type": "function", "name": "get_weather"}]}},
     "tool_choice.mode"),
    ("allowed_tools unknown tool", {"tools": [WEATHER], "tool_choice": {
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "nope"}]}},
     "tool_choice.tools[0].name"),
    ("json_schema without schema", {"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ("json_schema with a bad schema", {"text": {"format": {"type": "json_schema", "name": "x",
                                                           "schema": {"type": "nonsense"}}}}, "text.format.schema"),
    ("unknown format type", {"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ("strict tool with a bad schema", {"tools": [{**WEATHER, "parameters": {"type": "nonsense"}}]}, "tools"),
]


@pytest.mark.parametrize(("fields", "param"), [c[1:] for c in RULE_ERRORS], ids=[c[0] for c in RULE_ERRORS])
def test_rules_that_cannot_be_honoured_are_a_400_naming_the_field(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as caught:
        _rules(**fields)
    assert type(caught.value) is RequestError and caught.value.param == param  # a 400, not a 404


def test_rules_for_each_tool_choice() -> None:
    assert not _rules(tools=[TIME]).needs_grammar  # auto, nothing strict: the model writes freely
    assert _rules(tools=[TIME], tool_choice="none").calls is None
    strict = _rules(tools=[WEATHER, TIME])
    assert strict.needs_grammar and strict.calls is not None and strict.calls.strict == {"get_weather"}
    named = _rules(tools=[WEATHER, TIME], tool_choice={"type": "function", "name": "get_time"})
    assert named.calls is not None and list(named.calls.schemas) == ["get_time"] and named.calls.required
    namespaced = _rules(tools=[SPAWN], tool_choice={"type": "function", "name": "spawn"})
    assert namespaced.calls is not None and list(namespaced.calls.schemas) == ["agents__spawn"]
    allowed = _rules(tools=[WEATHER, TIME], tool_choice={"type": "allowed_tools", "mode": "auto",
                                                         "tools": [{"type": "function", "name": "get_time"}]})
    assert allowed.calls is not None and allowed.calls.restricted and not allowed.calls.required
    assert _rules(tools=[TIME], parallel_tool_calls=False).max_calls == 1
    assert _rules(tools=[TIME], max_tool_calls=3).max_calls == 3
    assert _rules(text={"format": {"type": "json_object"}}).answer_schema == {"type": "object"}


# -- chat-template structural tags ---------------------------------------------------------------------------------

def _chat_grammar(parser: str, **fields: Any) -> xgrammar.Grammar:
    tag = chat_structural_tag(_rules(**fields), CALL_SYNTAX[parser])
    assert tag is not None
    return xgrammar.Grammar.from_structural_tag(tag)


HERMES_WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
HERMES_TIME = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'
CHAT_CASES = [
    ("required: one call", "hermes", {"tool_choice": "required"}, HERMES_WEATHER, True),
    ("required: two calls", "hermes", {"tool_choice": "required"}, HERMES_WEATHER + "\n" + HERMES_TIME, True),
    ("required: text instead", "hermes", {"tool_choice": "required"}, "It is sunny.", False),
    ("required: arguments off schema", "hermes", {"tool_choice": "required"},
     HERMES_WEATHER.replace('"c"', '"kelvin"'), False),
    ("parallel false: two calls", "hermes", {"tool_choice": "required", "parallel_tool_calls": False},
     HERMES_WEATHER + "\n" + HERMES_TIME, False),
    ("named: that tool", "hermes", {"tool_choice": {"type": "function", "name": "get_time"}}, HERMES_TIME, True),
    ("named: another tool", "hermes", {"tool_choice": {"type": "function", "name": "get_time"}}, HERMES_WEATHER,
     False),
    ("auto with a strict tool: text", "hermes", {}, "Let me check.", True),
    ("auto with a strict tool: text then a call", "hermes", {}, "Let me check. " + HERMES_WEATHER, True),
    ("auto with a strict tool: a bad strict call", "hermes", {}, "x " + HERMES_WEATHER.replace('"c"', '3'), False),
    ("allowed_tools auto: a tool left out", "hermes", {"tool_choice": {
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_time"}]}},
     HERMES_WEATHER, False),
    ("allowed_tools required: the allowed tool", "hermes", {"tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]}},
     HERMES_TIME, True),
    ("qwen3_coder: XML parameters", "qwen3_coder", {"tool_choice": "required"},
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\nc\n</parameter>"
     "\n</function>\n</tool_call>", True),
    ("qwen3_coder: a JSON body instead", "qwen3_coder", {"tool_choice": "required"},
     '<tool_call>\n<function=get_weather>\n{"city": "Paris"}\n</function>\n</tool_call>', False),
    ("llama3_json", "llama3_json", {"tool_choice": "required"},
     '{"name": "get_time", "parameters": {"tz": "CET"}}', True),
]


@pytest.mark.parametrize(("parser", "fields", "text", "expected"), [c[1:] for c in CHAT_CASES],
                         ids=[c[0] for c in CHAT_CASES])
def test_chat_grammar_lets_through_what_the_request_allows(parser: str, fields: dict[str, Any], text: str,
                                                           expected: bool) -> None:
    assert accepts(_chat_grammar(parser, tools=[WEATHER, TIME], **fields), text) is expected


@pytest.mark.parametrize(("limit", "fields"), [(GRAMMAR_CALL_LIMIT, {}), (3, {"max_tool_calls": 3})],
                         ids=["default", "max_tool_calls"])
def test_calls_under_a_grammar_are_bounded(limit: int, fields: dict[str, Any]) -> None:
    grammar = _chat_grammar("hermes", tools=[WEATHER, TIME], tool_choice="required", **fields)
    assert accepts(grammar, "\n".join([HERMES_TIME] * limit))
    assert not accepts(grammar, "\n".join([HERMES_TIME] * (limit + 1)))


def test_json_answer_or_calls_when_both_are_possible() -> None:
    grammar = _chat_grammar("hermes", tools=[TIME], text={"format": {"type": "json_object"}})
    assert accepts(grammar, '{"answer": 42}') and accepts(grammar, HERMES_TIME)
    assert not accepts(grammar, "Forty-two.")


@pytest.mark.parametrize("parser", ["hermes", "qwen3_coder", "llama3_json"])
def test_what_the_grammar_writes_the_parser_reads(parser: str) -> None:
    """Sample each grammar's output from xgrammar's own matcher, then parse it with our streaming parser."""
    text = {
        "hermes": HERMES_WEATHER + "\n" + HERMES_TIME,
        "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                       "<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>",
        "llama3_json": '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}; '
                       '{"name": "get_time", "parameters": {"tz": "CET"}}',
    }[parser]
    assert accepts(_chat_grammar(parser, tools=[WEATHER, TIME], tool_choice="required"), text)
    request = _request(tools=[WEATHER, TIME])
    tool_parser = TOOL_CALL_PARSERS[parser](tool_table(request))
    deltas = merge_adjacent([d for ch in text for d in tool_parser.feed_text(ch)] + tool_parser.finish())
    calls = [(d.name, json.loads(a.text)) for d, a in zip(deltas, deltas[1:])
             if isinstance(d, ToolCallStarted) and isinstance(a, ToolCallArguments)]
    assert calls[0] == ("get_weather", {"city": "Paris", "unit": "c"})
    assert not any(isinstance(d, OutputText) and d.text.strip() for d in deltas)


def test_a_parser_without_a_grammar_is_a_400_only_when_a_grammar_is_needed() -> None:
    from server.paths.chat_template import ChatTemplatePath

    class _Tokenizer:
        chat_template = ""

    path = ChatTemplatePath(_Tokenizer(), ModelSettings(name="m", tool_call_parser="pythonic"))
    assert path.structural_tag(_rules(tools=[TIME])) is None
    with pytest.raises(RequestError) as caught:
        path.structural_tag(_rules(tools=[TIME], tool_choice="required"))
    assert caught.value.param == "tool_choice"


# -- harmony structural tags, matched token by token over o200k_harmony -------------------------------------------

@lru_cache(maxsize=1)
def _harmony_tokenizer_info() -> xgrammar.TokenizerInfo:
    encoding = harmony_encoding()
    vocab_size = 201088
    vocab = []
    for token_id in range(vocab_size):
        try:
            vocab.append(encoding.decode([token_id]).encode())
        except Exception:  # reserved ids have no text
            vocab.append(b"")
    stops = list(encoding.stop_tokens_for_assistant_actions())
    return xgrammar.TokenizerInfo(vocab, xgrammar.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=stops)


@lru_cache(maxsize=1)
def _harmony_compiler() -> xgrammar.GrammarCompiler:
    return xgrammar.GrammarCompiler(_harmony_tokenizer_info())


def harmony_accepts(tag: str, token_ids: list[int]) -> bool:
    """Whether the grammar accepts every generated token, the turn's stop token last, as vLLM's matcher would."""
    matcher = xgrammar.GrammarMatcher(_harmony_compiler().compile_structural_tag(tag))
    return all(matcher.accept_token(token_id) for token_id in token_ids)


def _harmony_run(tag: str, completion: str) -> bool:
    return harmony_accepts(tag, harmony_encoding().encode(completion, allowed_special="all"))


ANALYSIS = "<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant"
CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "unit": "c"}'
HARMONY_CASES = [
    ("json answer after reasoning", {"text": {"format": {"type": "json_schema", "name": "c", "schema": CITY}}},
     ANALYSIS + '<|channel|>final<|message|>{"name": "Paris", "population": 2, "area": 1.5}<|return|>', True),
    ("json answer: prose instead", {"text": {"format": {"type": "json_schema", "name": "c", "schema": CITY}}},
     ANALYSIS + "<|channel|>final<|message|>Paris is big.<|return|>", False),
    ("required: a call after reasoning", {"tools": [WEATHER, TIME], "tool_choice": "required"},
     ANALYSIS + CALL + "<|call|>", True),
    ("required: a final answer instead", {"tools": [WEATHER, TIME], "tool_choice": "required"},
     ANALYSIS + "<|channel|>final<|message|>Sunny.<|return|>", False),
    ("required: arguments off schema", {"tools": [WEATHER, TIME], "tool_choice": "required"},
     CALL.replace('"c"', '"k"') + "<|call|>", False),
    ("named: another tool", {"tools": [WEATHER, TIME], "tool_choice": {"type": "function", "name": "get_time"}},
     CALL + "<|call|>", False),
    ("auto with a strict tool: free final answer", {"tools": [WEATHER, TIME]},
     ANALYSIS + "<|channel|>final<|message|>It is sunny.<|return|>", True),
    ("auto with a strict tool: a preamble then a call", {"tools": [WEATHER, TIME]},
     "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant" + CALL + "<|call|>", True),
    # A preamble comes before a call: with none possible, it would only be prose beside the JSON answer, and the
    # SDK's output_text (every message's text) would no longer parse (the tiny gpt-oss wrote one).
    ("json answer, no tools: a preamble first", {"text": {"format": {"type": "json_object"}}},
     "<|channel|>commentary<|message|>Here it is.<|end|><|start|>assistant<|channel|>final<|message|>{}<|return|>",
     False),
    ("json answer, no tools: reasoning first", {"text": {"format": {"type": "json_object"}}},
     ANALYSIS + "<|channel|>final<|message|>{}<|return|>", True),
]


@pytest.mark.parametrize(("fields", "completion", "expected"), [c[1:] for c in HARMONY_CASES],
                         ids=[c[0] for c in HARMONY_CASES])
def test_harmony_grammar_constrains_only_the_turns_end(fields: dict[str, Any], completion: str,
                                                       expected: bool) -> None:
    tag = HarmonyPath(ModelSettings(name="gpt-oss")).structural_tag(_rules(**fields))
    assert tag is not None
    assert _harmony_run(tag, completion) is expected


def test_harmony_output_the_grammar_allows_parses_as_the_call() -> None:
    request = _request(tools=[WEATHER, TIME], tool_choice="required")
    tokens = harmony_encoding().encode(ANALYSIS + CALL + "<|call|>", allowed_special="all")
    parser = HarmonyParser(harmony_encoding(), tools=tool_table(request))
    deltas = merge_adjacent(parser.feed(tokens) + parser.finish())
    assert [type(d) for d in deltas] == [ReasoningText, ItemEnded, ToolCallStarted, ToolCallArguments, ItemEnded]
    assert json.loads(deltas[3].text) == {"city": "Paris", "unit": "c"}


# -- tool calls under the output budget ----------------------------------------------------------------------------

def _budgeted(budget: int, **fields: Any) -> OutputRules:
    request = _request(**fields)
    return output_rules(request, tool_table(request), tool_definitions(request), budget=budget)


@pytest.mark.parametrize("budget", [256, 512, 2048])
def test_a_called_tools_arguments_close_within_the_output_budget(budget: int) -> None:
    """A string argument the model never ends (as SmolLM2 once wrote a `tz`) must still close: the grammar refuses
    a first call longer than `max_output_tokens` bytes (each token writes at least one byte). One call may be made,
    so it has the whole budget."""
    tag = chat_structural_tag(_budgeted(budget, tools=[TIME], tool_choice="required", parallel_tool_calls=False),
                              CALL_SYNTAX["hermes"])
    assert tag is not None
    grammar = xgrammar.Grammar.from_structural_tag(tag)

    def call(tz: str) -> str:
        return HERMES_TIME.replace('"CET"', json.dumps(tz))

    assert accepts(grammar, call("Europe/Paris"))
    low, high = 0, budget  # the longest accepted run of "x" (acceptance only falls as the string grows)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if accepts(grammar, call("x" * middle)) else (low, middle - 1)
    longest = low
    assert len(call("x" * longest).encode()) <= budget
    # The bound assumes 4-byte characters and keeps half for escapes: plain ASCII gets at least a tenth.
    assert longest >= (budget - len(call("").encode())) // 10, "the bound leaves a useful string"


@pytest.mark.parametrize("budget", [256, 512])
def test_a_harmony_calls_arguments_close_within_the_output_budget(budget: int) -> None:
    tag = HarmonyPath(ModelSettings(name="gpt-oss")).structural_tag(
        _budgeted(budget, tools=[TIME], tool_choice="required"))
    assert tag is not None
    header = "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>"
    assert _harmony_run(tag, header + '{"tz": "CET"}<|call|>')
    encoding = harmony_encoding()
    one_byte = encoding.encode("x")  # a token of one byte, the least a token writes
    tokens = encoding.encode(header + '{"tz": "', allowed_special="all") + one_byte * (budget + 1)
    matcher = xgrammar.GrammarMatcher(_harmony_compiler().compile_structural_tag(tag))
    accepted = next((n for n, token_id in enumerate(tokens) if not matcher.accept_token(token_id)), len(tokens))
    assert accepted < len(tokens), "a string argument with no end is cut by the grammar"
    assert accepted <= budget


# -- xgrammar's cache across grammars, as vLLM configures it for gpt-oss ----------------------------------------------

def _vllm_compiler(cache_mb: int) -> xgrammar.GrammarCompiler:
    """A compiler as vLLM's xgrammar backend makes one (cache on, its size from VLLM_XGRAMMAR_CACHE_MB)."""
    info = _harmony_tokenizer_info()
    return xgrammar.GrammarCompiler(info, max_threads=8, cache_enabled=True, cache_limit_bytes=cache_mb * 1024 * 1024)


def _specials_allowed_after(compiler: xgrammar.GrammarCompiler, tag: str, prefix: str) -> set[int]:
    matcher = xgrammar.GrammarMatcher(compiler.compile_structural_tag(tag))
    assert all(matcher.accept_token(t) for t in harmony_encoding().encode(prefix, allowed_special="all"))
    bitmask = xgrammar.allocate_token_bitmask(1, 201088)
    matcher.fill_next_token_bitmask(bitmask)
    return {t for t in range(199998, 201088) if (int(bitmask[0, t // 32]) >> (t % 32)) & 1}


_CALL_HEADER = "<|channel|>commentary to=functions.get_weather "
_ANSWER_HEADER = "<|channel|>final"


def _json_then_call(compiler: xgrammar.GrammarCompiler, order: tuple[str, str]) -> dict[str, set[int]]:
    """What each of a JSON answer's (a tool offered) and a required call's grammars allows after its header,
    compiled in `order`."""
    path = HarmonyPath(ModelSettings(name="gpt-oss"))
    tags = {"json": (path.structural_tag(_rules(text={"format": {"type": "json_schema", "name": "c",
                                                                  "schema": CITY}}, tools=[WEATHER])), _ANSWER_HEADER),
            "call": (path.structural_tag(_rules(tools=[WEATHER], tool_choice="required")), _CALL_HEADER)}
    return {name: _specials_allowed_after(compiler, *tags[name]) for name in order}


def _token(text: str) -> int:
    return harmony_encoding().encode(text, allowed_special="all")[0]


@pytest.mark.parametrize("order", [("json", "call"), ("call", "json")], ids=["json first", "call first"])
def test_harmony_grammars_keep_their_token_masks_under_the_servers_grammar_cache(
        order: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool call after a JSON answer failed on the real engine ('grammar rejected tokens [200008]')."""
    from server.engine.vllm_engine import GRAMMAR_CACHE_VARIABLE, avoid_grammar_cache_collisions

    monkeypatch.delenv(GRAMMAR_CACHE_VARIABLE, raising=False)
    avoid_grammar_cache_collisions()  # as the server sets up vLLM for a gpt-oss model
    allowed = _json_then_call(_vllm_compiler(int(os.environ[GRAMMAR_CACHE_VARIABLE])), order)
    assert allowed == {"json": {_token("<|message|>")}, "call": {_token("<|constrain|>")}}


def test_xgrammars_cache_still_mistakes_one_token_for_another() -> None:
    """Why the server turns the cache off for gpt-oss: with vLLM's default cache (512 MB) the second grammar gets the
    first one's mask. When this fails, xgrammar has fixed it: drop avoid_grammar_cache_collisions."""
    allowed = _json_then_call(_vllm_compiler(512), ("json", "call"))
    assert allowed["call"] == {_token("<|message|>")}


@pytest.mark.parametrize(("text", "expected"), [
    ('{"name":"Paris","population":2,"area":1.5}', True),  # compact, as gpt-oss writes JSON
    ('{"name": "Paris", "population": 2, "area": 1.5}', True),  # spaced, as most chat models write it
    ('{"name":"Paris", "population": 2,"area":1.5}', True),
    ('{"name" : "Paris", "population": 2, "area": 1.5}', False),  # no other whitespace
    ('{"name":  "Paris", "population": 2, "area": 1.5}', False),
    ('{ "name": "Paris", "population": 2, "area": 1.5}', False),
], ids=["compact", "spaced", "mixed", "space before a colon", "two spaces", "space after a brace"])
def test_json_separators_are_compact_or_spaced(text: str, expected: bool) -> None:
    grammar = xgrammar.Grammar.from_ebnf(json_grammar(CITY, budget=512))
    assert accepts(grammar, text) is expected


def test_a_harmony_json_answer_may_be_compact() -> None:
    tag = HarmonyPath(ModelSettings(name="gpt-oss")).structural_tag(
        _rules(text={"format": {"type": "json_schema", "name": "c", "schema": CITY}}))
    assert tag is not None
    assert _harmony_run(tag, '<|channel|>final<|message|>{"name":"Paris","population":2,"area":1.5}<|return|>')


def test_harmony_reasoning_leaves_the_json_answer_its_budget() -> None:
    """Analysis before a JSON answer is bounded: a random-weights gpt-oss reasoned until max_output_tokens."""
    from server.constraints.harmony import EARLIER_MESSAGES, budget_shares

    budget = 200
    per_message, answer_bytes = budget_shares(budget)
    assert per_message is not None and answer_bytes is not None
    tag = HarmonyPath(ModelSettings(name="gpt-oss")).structural_tag(_budgeted(
        budget, text={"format": {"type": "json_schema", "name": "c", "schema": CITY}}))
    assert tag is not None
    encoding = harmony_encoding()
    word = encoding.encode(" think")  # one token

    def analysis(tokens: int) -> list[int]:
        return (encoding.encode("<|channel|>analysis<|message|>", allowed_special="all") + word * tokens
                + encoding.encode("<|end|><|start|>assistant", allowed_special="all"))

    answer = encoding.encode('<|channel|>final<|message|>{"name":"P","population":1,"area":1}<|return|>',
                             allowed_special="all")
    assert harmony_accepts(tag, analysis(per_message) + answer)
    matcher = xgrammar.GrammarMatcher(_harmony_compiler().compile_structural_tag(tag))
    for token_id in analysis(per_message)[:-3]:  # the body at its bound: the mask allows only the message's end
        assert matcher.accept_token(token_id)
    bitmask = xgrammar.allocate_token_bitmask(1, 201088)
    matcher.fill_next_token_bitmask(bitmask)
    allowed = [t for t in range(201088) if (int(bitmask[0, t // 32]) >> (t % 32)) & 1]
    assert allowed == encoding.encode("<|end|>", allowed_special="all")
    assert harmony_accepts(tag, analysis(3) * EARLIER_MESSAGES + answer)
    assert not harmony_accepts(tag, analysis(3) * (EARLIER_MESSAGES + 1) + answer)
    longest = EARLIER_MESSAGES * (per_message + 6) + answer_bytes + 4  # the answer's header and end
    assert longest <= budget + 4, "reasoning at its bound still leaves the answer room within the budget"


ECHO = {"type": "custom", "name": "run", "description": "Runs one echo command.",
        "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "echo " WORD\nWORD: /[a-z]{1,12}/'}}


@pytest.mark.parametrize(("tool_choice", "body", "expected"), [
    ("required", "echo hello", True),
    ("required", "rm -rf /", False),
    ("required", '{"input": "echo hello"}', False),
    ("auto", "echo hello", True),  # a grammar holds whenever the tool is called
    ("auto", "echo Hello", False),
], ids=["follows the grammar", "off the grammar", "JSON instead of the body", "auto: follows", "auto: off"])
def test_a_harmony_custom_tools_input_follows_its_grammar(tool_choice: str, body: str, expected: bool) -> None:
    tag = HarmonyPath(ModelSettings(name="gpt-oss")).structural_tag(
        _rules(tools=[ECHO], tool_choice=tool_choice))
    assert tag is not None
    assert _harmony_run(tag, f"<|channel|>commentary to=functions.run<|message|>{body}<|call|>") is expected


HERMES_RUN = '<tool_call>\n{"name": "run", "arguments": {"input": %s}}\n</tool_call>'
QWEN_RUN = "<tool_call>\n<function=run>\n<parameter=input>\n%s\n</parameter>\n</function>\n</tool_call>"
QUOTED = {"type": "custom", "name": "say", "format": {"type": "grammar", "syntax": "regex",
                                                      "definition": r'say "[a-z]+"\n'}}


@pytest.mark.parametrize(("parser", "tools", "tool_choice", "text", "expected"), [
    ("hermes", [ECHO], "required", HERMES_RUN % '"echo hello"', True),
    ("hermes", [ECHO], "required", HERMES_RUN % '"rm -rf /"', False),
    ("hermes", [ECHO], "auto", "Sure. " + HERMES_RUN % '"echo hello"', True),
    ("hermes", [ECHO], "auto", "Sure. " + HERMES_RUN % '"echo Hello"', False),
    ("hermes", [QUOTED], "required", HERMES_RUN.replace("run", "say") % json.dumps('say "hi"\n'), True),
    ("hermes", [QUOTED], "required", HERMES_RUN.replace("run", "say") % '"say \"hi\"\n\n"', False),
    ("hermes", [ECHO], "required", HERMES_RUN % '"echo hello", "more": 1', False),
    ("llama3_json", [ECHO], "required", '{"name": "run", "parameters": {"input": "echo hello"}}', True),
    ("llama3_json", [ECHO], "required", '{"name": "run", "parameters": {"input": "echo 42"}}', False),
    ("qwen3_coder", [ECHO], "required", QWEN_RUN % "echo hello", True),
    ("qwen3_coder", [ECHO], "required", QWEN_RUN % "echo 42", False),
], ids=["follows", "off the grammar", "auto: follows", "auto: off", "escaped quotes and newline",
        "one newline too many", "another field", "llama3_json: follows", "llama3_json: off", "qwen3_coder: follows",
        "qwen3_coder: off"])
def test_a_chat_custom_tools_escaped_input_follows_its_grammar(parser: str, tools: list[Any], tool_choice: str,
                                                               text: str, expected: bool) -> None:
    assert accepts(_chat_grammar(parser, tools=tools, tool_choice=tool_choice), text) is expected


def test_a_freeform_body_parses_as_the_custom_call() -> None:
    request = _request(tools=[ECHO], tool_choice="required")
    tokens = harmony_encoding().encode("<|channel|>commentary to=functions.run<|message|>echo hello<|call|>",
                                       allowed_special="all")
    parser = HarmonyParser(harmony_encoding(), tools=tool_table(request))
    deltas = merge_adjacent(parser.feed(tokens) + parser.finish())
    assert deltas == [ToolCallStarted("run", kind="custom"), ToolCallArguments("echo hello"), ItemEnded()]


@pytest.mark.parametrize(("tool_format", "param"), [
    ({"type": "grammar", "syntax": "lark", "definition": "start: ("}, "tools.format.definition"),
    ({"type": "grammar", "syntax": "peg", "definition": "start"}, "tools.format.syntax"),
    ({"type": "grammar", "syntax": "regex", "definition": ""}, "tools.format.definition"),
], ids=["bad lark", "unknown syntax", "empty definition"])
def test_a_bad_custom_grammar_is_a_400(tool_format: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as caught:
        _rules(tools=[{**ECHO, "format": tool_format}], tool_choice="required")
    assert caught.value.param == param


def test_a_free_custom_call_closes_within_the_output_budget() -> None:
    """A freeform call's body under the budget left after reasoning: the call ends before max_output_tokens."""
    from server.constraints.harmony import EARLIER_MESSAGES, MESSAGE_OVERHEAD, budget_shares

    budget = 120
    per_message, _ = budget_shares(budget)
    assert per_message is not None
    tag = HarmonyPath(ModelSettings(name="gpt-oss")).structural_tag(
        _budgeted(budget, tools=[{"type": "custom", "name": "run"}], tool_choice="required"))
    assert tag is not None
    encoding = harmony_encoding()
    matcher = xgrammar.GrammarMatcher(_harmony_compiler().compile_structural_tag(tag))
    analysis = (encoding.encode("<|channel|>analysis<|message|>", allowed_special="all") + encoding.encode(" x") * per_message
                + encoding.encode("<|end|><|start|>assistant", allowed_special="all"))
    tokens = analysis * EARLIER_MESSAGES + encoding.encode("<|channel|>commentary to=functions.run<|message|>",
                                                           allowed_special="all")
    assert all(matcher.accept_token(t) for t in tokens)
    bitmask = xgrammar.allocate_token_bitmask(1, 201088)
    written = len(tokens)
    end = encoding.encode("<|call|>", allowed_special="all")[0]
    while True:  # the body as long as the grammar lets it grow
        matcher.fill_next_token_bitmask(bitmask)
        if not (int(bitmask[0, 1000 // 32]) >> (1000 % 32)) & 1:  # an ordinary token is no longer allowed
            break
        assert matcher.accept_token(1000)
        written += 1
        assert written <= budget, "the body ran past the budget"
    assert matcher.accept_token(end) and written + 1 <= budget
    assert EARLIER_MESSAGES * (per_message + MESSAGE_OVERHEAD) < budget


@pytest.mark.parametrize("budget", [256, 1024, 4096])
def test_parallel_calls_together_close_within_the_output_budget(budget: int) -> None:
    """Each call's arguments are bounded by its share of the budget, so the last of several calls still closes."""
    tag = chat_structural_tag(_budgeted(budget, tools=[TIME], tool_choice="required"), CALL_SYNTAX["hermes"])
    assert tag is not None
    grammar = xgrammar.Grammar.from_structural_tag(tag)

    def call(tz: str) -> str:
        return HERMES_TIME.replace('"CET"', json.dumps(tz))

    low, high = 0, budget  # the longest run of "x" one call accepts
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if accepts(grammar, call("x" * middle)) else (low, middle - 1)
    longest = call("x" * low)
    calls = GRAMMAR_CALL_LIMIT
    while calls > 1 and not accepts(grammar, "\n".join([longest] * calls)):
        calls -= 1  # the most calls of that length the grammar accepts
    assert len("\n".join([longest] * calls).encode()) <= budget


def test_chat_reasoning_leaves_the_json_answer_its_budget(tokenizer: Any) -> None:
    """On a chat-template reasoning model, vLLM ends thinking at its token budget (forcing the end string), and the
    JSON answer after it is bounded by what is left: together they close within max_output_tokens."""
    from server.constraints.chat import REASONING_END_TOKENS
    from server.paths.chat_template import ChatTemplatePath

    budget = 400
    path = ChatTemplatePath(tokenizer, ModelSettings(name="m", reasoning_parser="qwen3"))
    city = {"type": "object", "additionalProperties": False, "required": ["city"],
            "properties": {"city": {"type": "string"}}}
    rules = _budgeted(budget, text={"format": {"type": "json_schema", "name": "c", "schema": city}})
    thinking = path.thinking_budget(rules)
    assert thinking is not None and 0 < thinking < budget
    tag = path.structural_tag(rules)
    assert tag is not None
    grammar = xgrammar.Grammar.from_structural_tag(tag)
    low, high = 0, budget  # the longest city name the answer's grammar accepts
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if accepts(grammar, json.dumps({"city": "x" * middle})) else (low, middle - 1)
    assert low > 0
    answer = len(json.dumps({"city": "x" * low}).encode())
    assert thinking + REASONING_END_TOKENS + answer <= budget
    free = ChatTemplatePath(tokenizer, ModelSettings(name="m"))
    assert free.thinking_budget(rules) is None  # no reasoning parser: no thinking to bound


def test_the_engine_gets_the_thinking_budget() -> None:
    from server.engine.interface import EngineRequest, SamplingSettings
    from server.engine.vllm_engine import _sampling_params

    params = _sampling_params(EngineRequest("r", [1], SamplingSettings(max_tokens=10, thinking_token_budget=4)), 100)
    assert params.thinking_token_budget == 4


def test_vllm_takes_the_sampling_params_without_a_deep_copy() -> None:
    """Each request's SamplingParams are made for it alone: vLLM's client need not deep-copy them (it does unless told,
    17 µs a request here, more with a logit bias), as its own chat completions route tells it."""
    from server.engine.interface import EngineRequest, SamplingSettings
    from server.engine.vllm_engine import _sampling_params

    params = _sampling_params(EngineRequest("r", [1], SamplingSettings(max_tokens=10, stop_token_ids=(5,))), 100)
    assert params.clone().stop_token_ids is params.stop_token_ids


STRING_KINDS = {"plain": {"type": "string"}, "maxLength": {"type": "string", "maxLength": 20},
                "minLength": {"type": "string", "minLength": 1}, "both": {"type": "string", "minLength": 1, "maxLength": 8},
                "pattern": {"type": "string", "pattern": "^.*$"}}


@pytest.mark.parametrize("control", ["\t", "\x00", "\x1f", "\n", "\r"], ids=repr)
@pytest.mark.parametrize("kind", list(STRING_KINDS))
def test_no_string_the_grammar_allows_holds_a_raw_control_character(kind: str, control: str) -> None:
    """JSON forbids U+0000-U+001F unescaped in a string (json.loads refuses them): xgrammar's rule for a string
    with a length bound let a tab through, and the tiny gpt-oss's strict call once held one."""
    schema = {"type": "object", "properties": {"city": STRING_KINDS[kind]}, "required": ["city"],
              "additionalProperties": False}
    grammar = xgrammar.Grammar.from_ebnf(json_grammar(schema, 400))
    assert accepts(grammar, '{"city": "ab"}')
    assert not accepts(grammar, '{"city": "a%sb"}' % control)


def test_a_non_strict_tool_whose_schema_no_bound_limits_is_called_with_a_bounded_object() -> None:
    """Non-strict parameters are guidance (OpenAI does not enforce them): where no bound can keep them within the
    budget (a pattern, free properties, recursion), a forced call writes any JSON object, which closes; a strict
    tool keeps its schema."""
    parameters = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}},
                  "required": ["code"], "additionalProperties": False}
    loose = {"type": "function", "name": "lookup", "strict": False, "parameters": parameters}
    rules = _budgeted(256, tools=[loose], tool_choice="required")
    assert rules.calls is not None and budget_bounds(rules.calls.schemas["lookup"], 256) is not None
    strict = _budgeted(256, tools=[{**loose, "strict": True}], tool_choice="required")
    assert strict.calls is not None and strict.calls.schemas["lookup"] == parameters


@pytest.mark.parametrize("budget", [120, 160])
def test_a_json_answer_too_big_for_the_reasoning_shares_still_closes_within_the_budget(budget: int) -> None:
    """City's JSON needs ~110 bytes: under 120 or 160 tokens, the quarter-budget reasoning shares left the answer
    too little room to bound it, and the tiny gpt-oss's answer ran past max_output_tokens, open. The shares
    shrink until the answer can be bounded: a name written as long as the grammar lets it still closes in time."""
    tag = HarmonyPath(ModelSettings(name="gpt-oss")).structural_tag(_budgeted(
        budget, text={"format": {"type": "json_schema", "name": "c", "schema": CITY}}))
    assert tag is not None
    encoding = harmony_encoding()
    matcher = xgrammar.GrammarMatcher(_harmony_compiler().compile_structural_tag(tag))
    tokens = encoding.encode('<|channel|>final<|message|>{"name":"', allowed_special="all")
    assert all(matcher.accept_token(t) for t in tokens)
    letter = encoding.encode("a")[0]
    written = len(tokens)
    while written <= budget and matcher.accept_token(letter):  # the name as long as the grammar lets it grow
        written += 1
    assert written < budget  # the grammar closed the string before the budget ran out
    rest = encoding.encode('","population":1,"area":1}<|return|>', allowed_special="all")
    assert all(matcher.accept_token(t) for t in rest) and written + len(rest) <= budget
