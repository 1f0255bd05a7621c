"""The harmony output parser: the same deltas as the reference parser for any output at any step size, with work
per token that does not grow with the output."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.deltas import Delta, merge_adjacent
from parsers.harmony import HarmonyParser
from parsers.tools import ToolSpec, ToolTable
from server.paths.harmony import harmony_encoding
from tests.harmony_reference import ReferenceHarmonyParser

TOOLS = ToolTable((ToolSpec("get_weather"), ToolSpec("apply_patch", kind="custom"),
                   ToolSpec("exec", namespace="shell")))
SPECIAL = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>",
           "<|endoftext|>", "<|reserved_200013|>"]
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


def _tokens(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special="all"))


def _body(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, disallowed_special=()))


@st.composite
def messages(draw: st.DrawFn) -> list[int]:
    """One message as gpt-oss writes it after `<|start|>assistant`: a header, a body, an end token."""
    kind = draw(st.sampled_from(["analysis", "final", "preamble", "call", "recipient_first", "custom", "namespaced"]))
    text = draw(_TEXT)
    if kind in ("call", "recipient_first", "namespaced"):
        body = json.dumps({"city": text})
        name = "shell__exec" if kind == "namespaced" else "get_weather"
        header = (f" to=functions.{name}<|channel|>commentary <|constrain|>json" if kind == "recipient_first"
                  else f"<|channel|>commentary to=functions.{name} <|constrain|>json")
        return _tokens(header + "<|message|>") + _body(body) + _tokens("<|call|>")
    if kind == "custom":
        body = draw(st.sampled_from([json.dumps({"input": text}), text]))
        return _tokens("<|channel|>commentary to=functions.apply_patch<|message|>") + _body(body) + _tokens("<|call|>")
    channel = {"analysis": "analysis", "final": "final", "preamble": "commentary"}[kind]
    end = draw(st.sampled_from(["<|end|>", "<|return|>"])) if kind == "final" else "<|end|>"
    return _tokens(f"<|channel|>{channel}<|message|>") + _body(text) + _tokens(end)


@st.composite
def outputs(draw: st.DrawFn) -> list[int]:
    """A whole output: messages joined by `<|start|>assistant`, maybe cut short, maybe with a stray special token."""
    parts = draw(st.lists(messages(), min_size=1, max_size=4))
    tokens: list[int] = []
    for index, part in enumerate(parts):
        tokens += (_tokens("<|start|>assistant") if index else []) + part
    if draw(st.booleans()):  # truncated (max_output_tokens)
        tokens = tokens[:draw(st.integers(0, len(tokens)))]
    if draw(st.integers(0, 4)) == 0:  # malformed: a special token where it does not belong
        tokens.insert(draw(st.integers(0, len(tokens))), _tokens(draw(st.sampled_from(SPECIAL)))[0])
    return tokens


def parse(parser: Any, tokens: list[int], cuts: list[int]) -> tuple[list[Delta], int, str | None]:
    bounds = [0, *sorted({c % (len(tokens) + 1) for c in cuts}), len(tokens)]
    deltas: list[Delta] = []
    for start, end in zip(bounds, bounds[1:]):
        deltas += parser.feed(tokens[start:end])
    deltas += parser.finish()
    return merge_adjacent(deltas), parser.reasoning_tokens, parser.error


@settings(max_examples=300, deadline=None)
@given(tokens=outputs(), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_the_same_deltas_as_the_reference_at_any_step_size(tokens: list[int], cuts: list[int]) -> None:
    expected = parse(ReferenceHarmonyParser(harmony_encoding(), tools=TOOLS), tokens, [])
    assert parse(HarmonyParser(harmony_encoding(), tools=TOOLS), tokens, cuts) == expected


class _Watched:
    """openai_harmony's StreamableParser, counting reads of the properties that serialize its state."""

    costly = ("state", "messages", "tokens", "current_content", "state_json")

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.costly_reads = 0

    def __getattr__(self, name: str) -> Any:
        if name in self.costly:
            self.costly_reads += 1
        return getattr(self._inner, name)


def test_no_state_that_grows_with_the_output_is_read_per_token() -> None:
    from openai_harmony import StreamableParser

    watched: list[_Watched] = []

    def watched_parser(encoding: Any, role: Any) -> _Watched:
        watched.append(_Watched(StreamableParser(encoding, role=role)))
        return watched[-1]

    tokens = (_tokens("<|channel|>analysis<|message|>") + _body("thinking " * 300) + _tokens("<|end|>")
              + _tokens("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>")
              + _body('{"city": "Paris"}') + _tokens("<|call|>"))
    parser = HarmonyParser(harmony_encoding(), tools=TOOLS, stream_parser=watched_parser)
    for token in tokens:
        parser.feed([token])
    assert watched and watched[0].costly_reads == 0
