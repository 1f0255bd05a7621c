"""Reasoning and hermes tool-call parsing: expected items per output, identical under any token grouping."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.chat import ChatParser
from parsers.decoder import IncrementalDecoder
from parsers.deltas import Delta, ItemEnded, OutputText, ReasoningText, ToolCallArguments, ToolCallStarted
from parsers.registry import NEEDS_SPECIAL_TOKENS, TOOL_CALL_PARSERS
from parsers.reasoning import STYLES, ThinkingParser, starts_in_reasoning
from parsers.tags import TagScanner
from parsers.tools import ToolSpec, ToolTable
from streaming.outcome import Finished
from tests.helpers import build_events
from conformance.contract import validate_events

TOOLS = ToolTable((ToolSpec("get_weather", parameter_types=(("city", "string"), ("days", "integer"))),
                   ToolSpec("apply_patch", kind="custom"), ToolSpec("read", namespace="fs")))
TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]


@pytest.fixture(scope="module")
def tag_tokenizer(bundled_model: Any) -> Any:
    """The bundled tokenizer with the think/tool tags as single added tokens, as Qwen3's vocabulary has them."""
    from server.engine.vllm_engine import load_tokenizer

    tokenizer = load_tokenizer(str(bundled_model))
    tokenizer = type(tokenizer).from_pretrained(str(bundled_model))
    tokenizer.add_tokens(TAGS)
    return tokenizer


def make_parser(reasoning: bool, in_reasoning: bool = False, tool_parser: str = "hermes") -> ChatParser:
    return ChatParser(reasoning=ThinkingParser(in_reasoning=in_reasoning) if reasoning else None,
                      tools=TOOL_CALL_PARSERS[tool_parser](TOOLS))


def run(tokenizer: Any, output: str, cuts: list[int], reasoning: bool = True, in_reasoning: bool = False,
        tool_parser: str = "hermes") -> tuple[list[Delta], ChatParser]:
    token_ids = tokenizer.encode(output, add_special_tokens=False)
    bounds = [0, *sorted({c % (len(token_ids) + 1) for c in cuts}), len(token_ids)]
    decoder = IncrementalDecoder(tokenizer, skip_special_tokens=tool_parser not in NEEDS_SPECIAL_TOKENS)
    parser = make_parser(reasoning, in_reasoning, tool_parser)
    deltas: list[Delta] = []
    for a, b in zip(bounds, bounds[1:]):
        deltas += parser.feed(token_ids[a:b], *decoder.decode_step(token_ids[a:b]))
    return deltas + parser.finish(), parser


def merged(deltas: list[Delta]) -> list[tuple[str, Any]]:
    """Adjacent text pieces of the same kind joined: what any chunking must agree on."""
    out: list[tuple[str, Any]] = []
    for delta in deltas:
        kind = type(delta).__name__
        if isinstance(delta, (OutputText, ReasoningText, ToolCallArguments)):
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + delta.text)
            elif delta.text:
                out.append((kind, delta.text))
        else:
            out.append((kind, getattr(delta, "name", None)))
    return out


CORPUS: list[tuple[str, str, list[tuple[str, Any]]]] = [
    ("reasoning, text, two calls, text",
     '<think>The user wants weather.</think>\n\nLet me check.\n<tool_call>\n{"name": "get_weather", "arguments": '
     '{"city": "Paris", "days": [1, 2]}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
     '{"city": "Rome"}}\n</tool_call>\nDone.',
     [("ReasoningText", "The user wants weather."), ("OutputText", "Let me check.\n"),
      ("ToolCallStarted", "get_weather"), ("ToolCallArguments", '{"city": "Paris", "days": [1, 2]}'),
      ("ItemEnded", None), ("OutputText", "\n"), ("ToolCallStarted", "get_weather"),
      ("ToolCallArguments", '{"city": "Rome"}'), ("ItemEnded", None), ("OutputText", "\nDone.")]),
    ("plain answer", "The capital of France is Paris.", [("OutputText", "The capital of France is Paris.")]),
    ("answer mentioning a tag later", "Use <think> tags like this.", [("OutputText", "Use <think> tags like this.")]),
    ("call without arguments", '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
     [("ToolCallStarted", "get_weather"), ("ToolCallArguments", "{}"), ("ItemEnded", None)]),
    ("arguments written before the name",
     '<tool_call>{"arguments": {"city": "Oslo"}, "name": "get_weather"}</tool_call>',
     [("ToolCallStarted", "get_weather"), ("ToolCallArguments", '{"city": "Oslo"}'), ("ItemEnded", None)]),
    ("custom tool input", '<tool_call>{"name": "apply_patch", "arguments": {"input": "*** Begin Patch\\n"}}</tool_call>',
     [("ToolCallStarted", "apply_patch"), ("ToolCallArguments", "*** Begin Patch\n"), ("ItemEnded", None)]),
    ("namespaced tool", '<tool_call>{"name": "fs__read", "arguments": {"path": "a"}}</tool_call>',
     [("ToolCallStarted", "read"), ("ToolCallArguments", '{"path": "a"}'), ("ItemEnded", None)]),
    ("malformed call is kept as text", "<tool_call>{not json}</tool_call> ok",
     [("OutputText", "<tool_call>{not json}</tool_call> ok")]),
    ("truncated inside reasoning", "<think>Let me think about", [("ReasoningText", "Let me think about")]),
    ("truncated inside arguments", '<tool_call>{"name": "get_weather", "arguments": {"city": "Par',
     [("ToolCallStarted", "get_weather"), ("ToolCallArguments", '{"city": "Par')]),
    ("missing end tag at end of output", '<tool_call>{"name": "get_weather", "arguments": {"city": "X"}}',
     [("ToolCallStarted", "get_weather"), ("ToolCallArguments", '{"city": "X"}'), ("ItemEnded", None)]),
]


@pytest.mark.parametrize("single_token_tags", [False, True], ids=["tags-as-text", "tags-as-tokens"])
@pytest.mark.parametrize(("output", "expected"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_corpus_in_every_step_size(tokenizer: Any, tag_tokenizer: Any, single_token_tags: bool,
                                   output: str, expected: list[tuple[str, Any]]) -> None:
    tok = tag_tokenizer if single_token_tags else tokenizer
    n = len(tok.encode(output, add_special_tokens=False))
    for step in sorted({1, 2, 3, 5, n}):
        deltas, _ = run(tok, output, cuts=list(range(step, n, step)))
        assert merged(deltas) == expected, f"step size {step}"


@settings(max_examples=150, deadline=None)
@given(case=st.sampled_from(CORPUS), cuts=st.lists(st.integers(0, 300), max_size=25))
def test_any_grouping_gives_the_same_items(tokenizer: Any, case: Any, cuts: list[int]) -> None:
    _, output, expected = case
    deltas, _ = run(tokenizer, output, cuts)
    assert merged(deltas) == expected
    events = build_events(deltas, Finished("stop"))
    validate_events(events)


def test_arguments_stream_while_written(tokenizer: Any) -> None:
    output = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}</tool_call>'
    deltas, _ = run(tokenizer, output, cuts=list(range(1, 200)))
    pieces = [d.text for d in deltas if isinstance(d, ToolCallArguments)]
    assert len(pieces) > 5, "arguments arrive in many deltas, not one at the end"
    assert json.loads("".join(pieces)) == {"city": "Paris", "unit": "celsius"}


def test_prompt_opened_reasoning_and_thinking_switched_off() -> None:
    assert starts_in_reasoning(STYLES["qwen3"], "<|im_start|>assistant\n<think>\n")
    assert not starts_in_reasoning(STYLES["qwen3"], "<|im_start|>assistant\n")
    assert not starts_in_reasoning(STYLES["qwen3"], "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert starts_in_reasoning(STYLES["deepseek_r1"], "<｜Assistant｜>")
    assert not starts_in_reasoning(STYLES["deepseek_r1"], "<｜Assistant｜><think>\n\n</think>")


def test_missing_opening_tag_when_the_prompt_opened_it(tokenizer: Any) -> None:
    deltas, parser = run(tokenizer, "Hmm, 2+2.</think>\n\nIt is 4.", cuts=list(range(1, 40)), in_reasoning=True)
    assert merged(deltas) == [("ReasoningText", "Hmm, 2+2."), ("OutputText", "It is 4.")]
    assert 0 < parser.reasoning_tokens < len(tokenizer.encode("Hmm, 2+2.</think>\n\nIt is 4."))


def test_reasoning_tokens_counted_exactly_for_one_token_steps(tag_tokenizer: Any) -> None:
    reasoning = "I am thinking hard"
    output = f"<think>{reasoning}</think>Answer."
    _, parser = run(tag_tokenizer, output, cuts=list(range(1, 100)))
    inside = len(tag_tokenizer.encode(reasoning, add_special_tokens=False))
    assert parser.reasoning_tokens == inside + 2  # the opening and closing tags' tokens count as reasoning


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(0, 120), max_size=20))
def test_reasoning_token_count_is_the_same_under_any_grouping(tokenizer: Any, cuts: list[int]) -> None:
    output = CORPUS[0][1]
    _, whole = run(tokenizer, output, cuts=[])
    _, grouped = run(tokenizer, output, cuts=cuts)
    assert grouped.reasoning_tokens == whole.reasoning_tokens > 0


def test_tag_scanner_work_is_linear() -> None:
    scanner, emitted = TagScanner(), []
    for _ in range(20000):
        before, tag, _ = scanner.scan("ab<", ["<tool_call>"])
        emitted.append(before)
        assert tag is None
        assert len(scanner.held) <= len("<tool_call>")
    assert "".join(emitted) + scanner.flush() == "ab<" * 20000


# -- the other tool-call formats -------------------------------------------------------------------

WEATHER = [("ToolCallStarted", "get_weather"), ("ToolCallArguments", '{"city": "Paris", "days": 3}'), ("ItemEnded", None)]
ROME = [("ToolCallStarted", "get_weather"), ("ToolCallArguments", '{"city": "Rome"}'), ("ItemEnded", None)]
FORMATS: list[tuple[str, str, str, list[tuple[str, Any]]]] = [
    ("qwen3_coder", "one call",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
     "</parameter>\n</function>\n</tool_call>", WEATHER),
    ("qwen3_coder", "text, two calls, no tool_call tags",
     "Checking.\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>"
     "\n</function>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>",
     [("OutputText", "Checking.\n")] + WEATHER + [("OutputText", "\n")] + ROME),
    ("qwen3_coder", "multi-line string with quotes",
     '<tool_call>\n<function=read>\n<parameter=path>\na "b"\nc\\d\n</parameter>\n</function>\n</tool_call>',
     [("ToolCallStarted", "read"), ("ToolCallArguments", '{"path": "a \\"b\\"\\nc\\\\d"}'), ("ItemEnded", None)]),
    ("qwen3_coder", "truncated in a value",
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
     [("ToolCallStarted", "get_weather"), ("ToolCallArguments", '{"city": "Par')]),
    ("llama3_json", "one call", '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}', WEATHER),
    ("llama3_json", "two calls", '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}; '
     '{"name": "get_weather", "parameters": {"city": "Rome"}}', WEATHER + ROME),
    ("llama3_json", "plain answer", "Paris is the capital.", [("OutputText", "Paris is the capital.")]),
    ("llama3_json", "nested braces in strings", '{"name": "fs__read", "parameters": {"path": "a}{b", "o": {"x": [1]}}}',
     [("ToolCallStarted", "read"), ("ToolCallArguments", '{"path": "a}{b", "o": {"x": [1]}}'), ("ItemEnded", None)]),
    ("mistral", "v11 format with text before",
     'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}',
     [("OutputText", "Sure.")] + WEATHER + ROME),
    ("mistral", "list format", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
     '{"name": "get_weather", "arguments": {"city": "Rome"}}]', WEATHER + ROME),
    ("mistral", "plain answer", "No tools needed.", [("OutputText", "No tools needed.")]),
    ("mistral", "malformed list element kept as text", '[TOOL_CALLS] [{"name": 1}, {"name": "get_weather", '
     '"arguments": {"city": "Rome"}}]', [("OutputText", '{"name": 1}')] + ROME),
    ("pythonic", "two calls", '[get_weather(city="Paris", days=3), get_weather(city=\'Rome\')]', WEATHER + ROME),
    ("pythonic", "nested literal values", "[fs__read(path='a,b)', opts={'x': [1, 2]}, flag=True)]",
     [("ToolCallStarted", "read"), ("ToolCallArguments", '{"path": "a,b)", "opts": {"x": [1, 2]}, "flag": true}'),
      ("ItemEnded", None)]),
    ("pythonic", "no-argument call", "[now()]", [("ToolCallStarted", "now"), ("ToolCallArguments", "{}"),
                                                ("ItemEnded", None)]),
    ("pythonic", "plain answer starting with a bracket", "[1] is a footnote.",
     [("OutputText", "[1] is a footnote.")]),
]


@pytest.fixture(scope="module")
def mistral_tokenizer(bundled_model: Any) -> Any:
    """A tokenizer whose `[TOOL_CALLS]`, `[ARGS]`, `[CALL_ID]` are special tokens, as in Mistral's vocabularies."""
    from server.engine.vllm_engine import load_tokenizer

    tokenizer = type(load_tokenizer(str(bundled_model))).from_pretrained(str(bundled_model))
    tokenizer.add_special_tokens({"additional_special_tokens": ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"]})
    return tokenizer


@pytest.mark.parametrize(("tool_parser", "output", "expected"), [c[:1] + c[2:] for c in FORMATS],
                         ids=[f"{c[0]}: {c[1]}" for c in FORMATS])
def test_tool_call_formats_in_every_step_size(tokenizer: Any, mistral_tokenizer: Any, tool_parser: str,
                                              output: str, expected: list[tuple[str, Any]]) -> None:
    tok = mistral_tokenizer if tool_parser == "mistral" else tokenizer
    n = len(tok.encode(output, add_special_tokens=False))
    for step in sorted({1, 2, 3, 7, n}):
        deltas, _ = run(tok, output, cuts=list(range(step, n, step)), reasoning=False, tool_parser=tool_parser)
        assert merged(deltas) == expected, f"step size {step}"
        if expected[-1] == ("ItemEnded", None):
            for piece in [m[1] for m in merged(deltas) if m[0] == "ToolCallArguments"]:
                json.loads(piece)  # the arguments are valid JSON


@settings(max_examples=200, deadline=None)
@given(case=st.sampled_from(FORMATS), cuts=st.lists(st.integers(0, 300), max_size=30))
def test_tool_call_formats_under_any_grouping(tokenizer: Any, mistral_tokenizer: Any, case: Any,
                                              cuts: list[int]) -> None:
    tool_parser, _, output, expected = case
    tok = mistral_tokenizer if tool_parser == "mistral" else tokenizer
    deltas, _ = run(tok, output, cuts, reasoning=False, tool_parser=tool_parser)
    assert merged(deltas) == expected
    validate_events(build_events(deltas, Finished("stop")))


def test_string_arguments_stream_character_by_character_in_qwen3_coder(tokenizer: Any) -> None:
    output = "<function=read>\n<parameter=path>\nsome/long/path/to/a/file.txt\n</parameter>\n</function>"
    deltas, _ = run(tokenizer, output, cuts=list(range(1, 200)), reasoning=False, tool_parser="qwen3_coder")
    assert sum(isinstance(d, ToolCallArguments) for d in deltas) > 6


@pytest.mark.parametrize("tool_parser", ["hermes", "qwen3_coder", "llama3_json", "pythonic"])
def test_parsing_work_is_proportional_to_the_output(monkeypatch: pytest.MonkeyPatch, tool_parser: str) -> None:
    """Characters the tag scanner looks at, fed one character at a time, stay within a constant factor."""
    scanned = [0]
    original = TagScanner.scan

    def counting_scan(self: TagScanner, text: str, tags: Any) -> Any:
        scanned[0] += len(self.held) + len(text)
        return original(self, text, tags)

    monkeypatch.setattr(TagScanner, "scan", counting_scan)
    body = "".join(f"word{i} " for i in range(3000))
    outputs = {
        "hermes": f'<think>{body}</think>{body}<tool_call>{{"name": "get_weather", "arguments": {{"city": "{body}"}}}}'
                  "</tool_call>",
        "qwen3_coder": f"<think>{body}</think>{body}<function=get_weather>\n<parameter=city>\n{body}\n</parameter>\n"
                       "</function>",
        "llama3_json": f'{{"name": "get_weather", "parameters": {{"city": "{body}"}}}}',
        "pythonic": f'[get_weather(city="{body}")]',
    }
    parser = make_parser(reasoning=True, tool_parser=tool_parser)
    text = outputs[tool_parser]
    for char in text:
        parser.feed([0], char, [1])
    parser.finish()
    assert scanned[0] <= 16 * len(text)
