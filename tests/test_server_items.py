"""Every item kind and terminal state through the real server (Qwen3-style output from a scripted engine)."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.http.app import create_app
from server.runs.context import ServingContext
from server.config import ServerConfig
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.helpers import collapsed_types, without_volatile
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL, Harness
from conformance.contract import validate_events

TOOLS = [
    {"type": "function", "name": "get_weather", "description": "Weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch"},
]
QWEN3_OUTPUT = (
    "<think>\nThe user asks about two cities. I will call the tool twice.\n</think>\n\n"
    "I'll check both cities.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
)
PATCH_OUTPUT = '<tool_call>\n{"name": "apply_patch", "arguments": {"input": "*** Begin Patch\\n*** End Patch"}}\n</tool_call>'


@pytest.fixture(scope="module")
def qwen3(tokenizer: Any) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    config = ServerConfig(served_model_name=MODEL, reasoning_parser="qwen3", tool_call_parser="hermes")
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def tokens(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


def test_reasoning_message_and_two_calls(qwen3: Harness, tokenizer: Any) -> None:
    qwen3.play(steps_from_tokens(tokens(tokenizer, QWEN3_OUTPUT), cuts=list(range(1, 200))))
    events = qwen3.raw_stream(input="Weather in Paris and Rome?", tools=TOOLS)
    final = validate_events(events)
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert final.output[0].content[0].text.strip().startswith("The user asks")  # type: ignore[union-attr, index]
    assert final.output_text == "I'll check both cities.\n"
    calls = [item for item in final.output if item.type == "function_call"]
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert len({c.call_id for c in calls}) == 2
    argument_deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert len(argument_deltas) > 4, "arguments stream as they are generated"
    assert final.usage is not None and 0 < final.usage.output_tokens_details.reasoning_tokens < final.usage.output_tokens


def test_sdk_strict_and_accumulator_over_all_kinds(qwen3: Harness, tokenizer: Any) -> None:
    qwen3.play(steps_from_tokens(tokens(tokenizer, QWEN3_OUTPUT), cuts=[3, 10, 11, 40]))
    events = list(qwen3.client.responses.create(model=MODEL, input="x", tools=TOOLS, stream=True))  # type: ignore[arg-type]
    assert events[-1].type == "response.completed"
    with qwen3.client.responses.stream(model=MODEL, input="x", tools=TOOLS) as stream:  # type: ignore[arg-type]
        kinds = {event.type for event in stream}
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and "response.reasoning_text.delta" in kinds
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]


def test_custom_tool_call(qwen3: Harness, tokenizer: Any) -> None:
    qwen3.play(steps_from_tokens(tokens(tokenizer, PATCH_OUTPUT), cuts=list(range(1, 100))))
    events = qwen3.raw_stream(input="patch it", tools=TOOLS)
    final = validate_events(events)
    assert [item.type for item in final.output] == ["custom_tool_call"]
    assert final.output[0].input == "*** Begin Patch\n*** End Patch"  # type: ignore[union-attr]
    assert "response.function_call_arguments.delta" not in {e["type"] for e in events}
    with qwen3.client.responses.stream(model=MODEL, input="x", tools=TOOLS) as stream:  # type: ignore[arg-type]
        assert stream.get_final_response().output[0].type == "custom_tool_call"


def test_truncated_inside_reasoning(qwen3: Harness, tokenizer: Any) -> None:
    cut = tokenizer.encode("<think>\nThe user asks about two", add_special_tokens=False)
    qwen3.play(steps_from_tokens(cut, cuts=[2, 5], finish="length"))
    events = qwen3.raw_stream(input="x", tools=TOOLS, max_output_tokens=len(cut))
    final = validate_events(events)
    assert events[-1]["type"] == "response.incomplete"
    assert [(item.type, item.status) for item in final.output] == [("reasoning", "incomplete")]  # type: ignore[union-attr]


def test_truncated_inside_arguments(qwen3: Harness, tokenizer: Any) -> None:
    text = QWEN3_OUTPUT[: QWEN3_OUTPUT.index('"Rome"') + 3]
    cut = tokenizer.encode(text, add_special_tokens=False)
    qwen3.play(steps_from_tokens(cut, cuts=list(range(1, 200)), finish="length"))
    final = validate_events(qwen3.raw_stream(input="x", tools=TOOLS))
    assert [(item.type, item.status) for item in final.output][-1] == ("function_call", "incomplete")  # type: ignore[union-attr]
    assert [item.status for item in final.output][:-1] == ["completed"] * 3  # type: ignore[union-attr]


def test_failure_after_a_tool_call(qwen3: Harness, tokenizer: Any) -> None:
    head = tokenizer.encode(QWEN3_OUTPUT[: QWEN3_OUTPUT.index("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                                               "{\"city\": \"Rome\"")], add_special_tokens=False)
    qwen3.play(steps_from_tokens(head, cuts=[5, 9], finish=None) + [RuntimeError("worker lost")])
    events = qwen3.raw_stream(input="x", tools=TOOLS)
    final = validate_events(events)
    assert events[-1]["type"] == "response.failed" and final.error is not None
    assert [item.type for item in final.output][:3] == ["reasoning", "message", "function_call"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, 120), max_size=20))
def test_any_step_grouping_gives_the_same_items(qwen3: Harness, tokenizer: Any, cuts: list[int]) -> None:
    ids = tokens(tokenizer, QWEN3_OUTPUT)
    qwen3.play(steps_from_tokens(ids, cuts=[]))
    whole = qwen3.raw_stream(input="x", tools=TOOLS)
    qwen3.play(steps_from_tokens(ids, cuts=cuts))
    chunked = qwen3.raw_stream(input="x", tools=TOOLS)
    validate_events(chunked)
    assert collapsed_types(chunked) == collapsed_types(whole)
    assert without_volatile(chunked[-1]["response"]) == without_volatile(whole[-1]["response"])


def test_tools_are_described_to_a_template_without_tool_support(qwen3: Harness, tokenizer: Any) -> None:
    qwen3.play(steps_from_tokens(tokens(tokenizer, "ok"), cuts=[]))
    qwen3.raw_stream(input="x", tools=TOOLS)
    prompt = tokenizer.decode(qwen3.engine.requests[-1].prompt_token_ids, skip_special_tokens=False)
    assert "<tools>" in prompt and '"get_weather"' in prompt and '"apply_patch"' in prompt


def test_replayed_qwen3_output_through_the_replay_engine(tokenizer: Any) -> None:
    """The production replay engine (not the test double), with recorded multi-token steps."""
    from server.engine.recording import Recording, ReplayEngine

    ids = tokens(tokenizer, QWEN3_OUTPUT)
    recording = Recording([1, 2, 3], [ids[i:i + 5] for i in range(0, len(ids), 5)], "stop")
    engine = ReplayEngine([recording], tokenizer, max_model_len=8192)
    config = ServerConfig(served_model_name=MODEL, reasoning_parser="qwen3", tool_call_parser="hermes")
    context = ServingContext(config=config, engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        harness = Harness(ScriptedEngine(tokenizer, [[]]), base_url)
        events = harness.raw_stream(input="Weather in Paris and Rome?", tools=TOOLS)
        with harness.client.responses.stream(model=MODEL, input="x", tools=TOOLS) as stream:  # type: ignore[arg-type]
            sdk_final = stream.get_final_response()
    final = validate_events(events)
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert [item.type for item in sdk_final.output] == ["reasoning", "message", "function_call", "function_call"]
    assert sum(e["type"] == "response.function_call_arguments.delta" for e in events) >= 2
