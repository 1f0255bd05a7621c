"""Reasoning and hermes tool-call parsing: expected items per output, identical under any token grouping."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.chat import ChatParser
from parsers.decoder import IncrementalDecoder
from parsers.deltas import Delta, Finished, ItemEnded, OutputText, ReasoningText, ToolCallArguments, ToolCallStarted
from parsers.hermes import HermesToolParser
from parsers.reasoning import STYLES, ThinkingParser, starts_in_reasoning
from parsers.tags import TagScanner
from parsers.tools import ToolSpec, ToolTable
from tests.helpers import build_events
from tests.validator import validate_events

TOOLS = ToolTable((ToolSpec("get_weather"), ToolSpec("apply_patch", kind="custom"), ToolSpec("read", namespace="fs")))
TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]


@pytest.fixture(scope="module")
def tag_tokenizer(bundled_model: Any) -> Any:
    """The bundled tokenizer with the think/tool tags as single added tokens, as Qwen3's vocabulary has them."""
    from server.vllm_engine import load_tokenizer

    tokenizer = load_tokenizer(str(bundled_model))
    tokenizer = type(tokenizer).from_pretrained(str(bundled_model))
    tokenizer.add_tokens(TAGS)
    return tokenizer


def make_parser(reasoning: bool, in_reasoning: bool = False) -> ChatParser:
    return ChatParser(reasoning=ThinkingParser(in_reasoning=in_reasoning) if reasoning else None,
                      tools=HermesToolParser(TOOLS))


def run(tokenizer: Any, output: str, cuts: list[int], reasoning: bool = True, in_reasoning: bool = False,
        ) -> tuple[list[Delta], ChatParser]:
    token_ids = tokenizer.encode(output, add_special_tokens=False)
    bounds = [0, *sorted({c % (len(token_ids) + 1) for c in cuts}), len(token_ids)]
    decoder, parser = IncrementalDecoder(tokenizer), make_parser(reasoning, in_reasoning)
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
