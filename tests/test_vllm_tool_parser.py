"""vLLM's own tool parsers through the adapter: same items as ours for the same output."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers.chat import ChatParser
from parsers.decoder import IncrementalDecoder
from parsers.tools import ToolSpec, ToolTable
from server.paths import vllm_tool_parser
from server.paths.chat_template import check_tool_call_parser, tool_parser_factory
from streaming.outcome import Finished
from tests.helpers import build_events
from conformance.contract import validate_events

TOOLS = ToolTable((ToolSpec("get_weather", parameter_types=(("city", "string"),)),))
OUTPUT = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
          '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')


@pytest.fixture(scope="module")
def tag_tokenizer(bundled_model: Any) -> Any:
    from server.engine.vllm_engine import load_tokenizer

    tokenizer = type(load_tokenizer(str(bundled_model))).from_pretrained(str(bundled_model))
    tokenizer.add_tokens(["<tool_call>", "</tool_call>"])
    return tokenizer


def final_output(tokenizer: Any, factory: Any, step: int) -> list[dict[str, Any]]:
    ids = tokenizer.encode(OUTPUT, add_special_tokens=False)
    decoder, parser = IncrementalDecoder(tokenizer), ChatParser(tools=factory(TOOLS))
    deltas = []
    for start in range(0, len(ids), step):
        chunk = ids[start:start + step]
        deltas += parser.feed(chunk, *decoder.decode_step(chunk))
    events = build_events(deltas + parser.finish(), Finished("stop"))
    validate_events(events)
    return events[-1]["response"]["output"]


@pytest.mark.parametrize("step", [1, 4])
def test_vllm_hermes_through_the_adapter_matches_ours(tag_tokenizer: Any, step: int) -> None:
    theirs = final_output(tag_tokenizer, vllm_tool_parser.factory("hermes", tag_tokenizer), step)
    ours = final_output(tag_tokenizer, tool_parser_factory("hermes", tag_tokenizer), step)
    def calls(output: list[dict[str, Any]]) -> list[tuple[str, Any]]:
        return [(i["name"], json.loads(i["arguments"])) for i in output if i["type"] == "function_call"]

    assert calls(theirs) == calls(ours) == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]


def test_parser_names_are_checked_at_start_up() -> None:
    check_tool_call_parser("qwen3_coder")  # ours
    check_tool_call_parser("phi4_mini_json")  # vLLM's, through the adapter
    with pytest.raises(ValueError):
        check_tool_call_parser("no_such_parser")
