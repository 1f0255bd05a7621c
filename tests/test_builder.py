"""The response builder: event sequences per item kind and terminal state, and chunking invariance."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.deltas import (
    Delta,
    ItemEnded,
    OutputText,
    ReasoningText,
    Refusal,
    ToolCallArguments,
    ToolCallStarted,
)
from streaming.builder import ResponseBuilder
from streaming.outcome import Finished, Usage
from tests.helpers import build_events, collapsed_types
from conformance.contract import ContractViolation, validate_events

START = ["response.created", "response.in_progress"]
MESSAGE_OPEN = ["response.output_item.added", "response.content_part.added"]
MESSAGE_CLOSE = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
REASONING = ["response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
             "response.reasoning_text.done", "response.content_part.done", "response.output_item.done"]
CALL_OPEN = ["response.output_item.added"]
CALL_CLOSE = ["response.function_call_arguments.done", "response.output_item.done"]

CASES: list[tuple[str, list[Delta], str, list[str]]] = [
    ("text", [OutputText("Hello"), OutputText(" world")], "stop",
     START + MESSAGE_OPEN + ["response.output_text.delta"] * 2 + MESSAGE_CLOSE + ["response.completed"]),
    ("empty output is one empty message", [], "stop",
     START + ["response.output_item.added", "response.content_part.added"] + MESSAGE_CLOSE + ["response.completed"]),
    ("reasoning then text", [ReasoningText("hmm"), OutputText("Yes")], "stop",
     START + REASONING + MESSAGE_OPEN + ["response.output_text.delta"] + MESSAGE_CLOSE + ["response.completed"]),
    ("whitespace before a tool call is no message",
     [OutputText("\n\n"), ToolCallStarted("get_weather"), ToolCallArguments('{"city": "Paris"}'), ItemEnded()], "stop",
     START + CALL_OPEN + ["response.function_call_arguments.delta"] + CALL_CLOSE + ["response.completed"]),
    ("tool call with no arguments still gets its events", [ToolCallStarted("now"), ItemEnded()], "stop",
     START + CALL_OPEN + CALL_CLOSE + ["response.completed"]),
    ("two tool calls then text",
     [ToolCallStarted("a"), ToolCallArguments("{}"), ToolCallStarted("b"), ToolCallArguments("{}"), ItemEnded(),
      OutputText("done")], "stop",
     START + (CALL_OPEN + ["response.function_call_arguments.delta"] + CALL_CLOSE) * 2
     + MESSAGE_OPEN + ["response.output_text.delta"] + MESSAGE_CLOSE + ["response.completed"]),
    ("custom tool call",
     [ToolCallStarted("apply_patch", kind="custom"), ToolCallArguments("*** Begin Patch"), ItemEnded()], "stop",
     START + ["response.output_item.added", "response.custom_tool_call_input.delta",
              "response.custom_tool_call_input.done", "response.output_item.done", "response.completed"]),
    ("refusal", [Refusal("I can't help with that.")], "stop",
     START + ["response.output_item.added", "response.content_part.added", "response.refusal.delta",
              "response.refusal.done", "response.content_part.done", "response.output_item.done",
              "response.completed"]),
    ("text then reasoning again", [OutputText("a"), ReasoningText("b"), OutputText("c")], "stop",
     START + MESSAGE_OPEN + ["response.output_text.delta"] + MESSAGE_CLOSE + REASONING
     + MESSAGE_OPEN + ["response.output_text.delta"] + MESSAGE_CLOSE + ["response.completed"]),
    ("cut by max_output_tokens", [OutputText("Once upon")], "length",
     START + MESSAGE_OPEN + ["response.output_text.delta"] + MESSAGE_CLOSE + ["response.incomplete"]),
    ("cut inside reasoning", [ReasoningText("let me")], "length",
     START + REASONING + ["response.incomplete"]),
    ("cut inside tool arguments", [ToolCallStarted("f"), ToolCallArguments('{"a": ')], "length",
     START + CALL_OPEN + ["response.function_call_arguments.delta"] + CALL_CLOSE + ["response.incomplete"]),
    ("failure mid-stream", [OutputText("partial")], "error",
     START + MESSAGE_OPEN + ["response.output_text.delta"] + MESSAGE_CLOSE + ["response.failed"]),
    ("failure before any output", [], "error", START + ["response.failed"]),
]


@pytest.mark.parametrize(("deltas", "reason", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_event_sequence(deltas: list[Delta], reason: str, expected: list[str]) -> None:
    events = build_events(deltas, Finished(reason, Usage(5, 1, 3, 0)))  # type: ignore[arg-type]
    assert [e["type"] for e in events] == expected
    validate_events(events)


def test_ids_are_stable_from_added_to_final_response() -> None:
    events = build_events([ToolCallStarted("f"), ToolCallArguments("{}"), OutputText("x")], Finished("stop"))
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    final = events[-1]["response"]["output"]
    assert [(i["id"], i.get("call_id")) for i in added] == [(i["id"], i.get("call_id")) for i in final]
    assert final[0]["id"].startswith("fc_") and final[0]["call_id"].startswith("call_")
    assert final[1]["id"].startswith("msg_") and events[-1]["response"]["id"].startswith("resp_")


def test_truncated_item_is_incomplete_and_earlier_items_complete() -> None:
    events = build_events([ReasoningText("r"), OutputText("cut")], Finished("length"))
    output = events[-1]["response"]["output"]
    assert [item["status"] for item in output] == ["completed", "incomplete"]
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_failed_response_carries_error_and_usage() -> None:
    events = build_events([OutputText("x")], Finished("error", Usage(3, 0, 1, 0), error_message="engine died"))
    response = events[-1]["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "engine died"}
    assert response["usage"]["total_tokens"] == 4


def test_usage_reports_cached_and_reasoning_tokens() -> None:
    events = build_events([ReasoningText("r"), OutputText("x")], Finished("stop", Usage(10, 4, 6, 2)))
    usage = events[-1]["response"]["usage"]
    assert usage["input_tokens_details"]["cached_tokens"] == 4
    assert usage["output_tokens_details"]["reasoning_tokens"] == 2
    assert usage["total_tokens"] == 16


def test_settings_are_echoed_in_every_response_snapshot() -> None:
    settings = {"model": "m", "instructions": "be brief", "temperature": 0.5, "max_output_tokens": 9}
    events = build_events([OutputText("x")], Finished("stop"), settings=settings)
    for event in (events[0], events[1], events[-1]):
        assert {k: event["response"][k] for k in settings} == settings


def test_a_summary_asked_for_streams_the_reasoning_as_its_summary() -> None:
    deltas = [ReasoningText("Paris is "), ReasoningText("the capital."), OutputText("Paris.")]
    events = build_events(deltas, Finished("stop"), summarize=True)
    validate_events(events)
    reasoning = [e["type"] for e in events if e.get("output_index") == 0]
    assert reasoning == [
        "response.output_item.added", "response.content_part.added", "response.reasoning_summary_part.added",
        "response.reasoning_text.delta", "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta", "response.reasoning_summary_text.delta",
        "response.reasoning_text.done", "response.content_part.done",
        "response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "response.output_item.done"]
    item = events[-1]["response"]["output"][0]
    assert item["summary"] == [{"type": "summary_text", "text": "Paris is the capital."}]
    assert item["content"] == [{"type": "reasoning_text", "text": "Paris is the capital."}]


def test_without_a_summary_asked_for_there_is_none() -> None:
    events = build_events([ReasoningText("hmm"), OutputText("x")], Finished("stop"))
    assert not [e for e in events if "summary" in e["type"]]
    assert events[-1]["response"]["output"][0]["summary"] == []


def test_validator_catches_a_summary_that_differs_from_its_deltas() -> None:
    events = build_events([ReasoningText("abc")], Finished("stop"), summarize=True)
    broken = [dict(e) for e in events]
    done = next(e for e in broken if e["type"] == "response.reasoning_summary_text.done")
    done["text"] = "abd"
    with pytest.raises(ContractViolation):
        validate_events(broken)


def test_arguments_without_open_tool_call_are_rejected() -> None:
    builder = ResponseBuilder({"model": "m"})
    events = builder.start() + builder.feed([OutputText("x"), ToolCallArguments("{}"), OutputText("never")])
    assert builder.error is not None and "no open tool call" in builder.error
    assert builder.feed([OutputText("after")]) == []
    events += builder.finish(Finished("error", error_message=builder.error))
    final = validate_events([event.model_dump(mode="json", exclude_unset=True) for event in events])
    assert final.status == "failed" and final.output[0].content[0].text == "x"  # type: ignore[union-attr]


def test_validator_catches_a_broken_stream() -> None:
    events = build_events([OutputText("Hello")], Finished("stop"))
    broken = [dict(e) for e in events]
    delta = next(e for e in broken if e["type"] == "response.output_text.delta")
    delta["delta"] = "Help"
    with pytest.raises(ContractViolation):
        validate_events(broken)
    with pytest.raises(ContractViolation):
        validate_events(events[:2] + events[3:])  # a gap in sequence numbers


# -- properties ------------------------------------------------------------------------------

_text = st.text(st.sampled_from(list("ab \n{}\"é日🎉")), min_size=0, max_size=12)
_segment = st.one_of(
    st.tuples(st.just("text"), _text),
    st.tuples(st.just("reasoning"), _text),
    st.tuples(st.just("refusal"), _text.filter(bool)),
    st.tuples(st.just("call"), st.tuples(st.sampled_from(["f", "g"]), _text)),
    st.tuples(st.just("custom"), st.tuples(st.just("apply_patch"), _text)),
)


def _deltas(segments: list[tuple[str, Any]], splits: list[int]) -> list[Delta]:
    """The deltas of a segment list, each text split at positions drawn from `splits`."""
    cuts = iter(splits)

    def pieces(text: str) -> list[str]:
        a, b = sorted(next(cuts, 0) % (len(text) + 1) for _ in range(2))
        return [p for p in (text[:a], text[a:b], text[b:]) if p]

    deltas: list[Delta] = []
    for kind, value in segments:
        if kind in ("text", "reasoning", "refusal"):
            make = {"text": OutputText, "reasoning": ReasoningText, "refusal": Refusal}[kind]
            deltas += [make(p) for p in pieces(value)]
        else:
            name, arguments = value
            deltas.append(ToolCallStarted(name, kind="custom" if kind == "custom" else "function"))
            deltas += [ToolCallArguments(p) for p in pieces(arguments)]
            deltas.append(ItemEnded())
    return deltas


def _batches(deltas: list[Delta], sizes: list[int]) -> list[list[Delta]]:
    batches, start = [], 0
    for size in sizes:
        if start >= len(deltas):
            break
        batches.append(deltas[start: start + 1 + size])
        start += 1 + size
    return batches + ([deltas[start:]] if start < len(deltas) else [])


@settings(max_examples=300, deadline=None)
@given(
    segments=st.lists(_segment, max_size=8),
    splits=st.lists(st.integers(0, 50), max_size=40),
    sizes=st.lists(st.integers(0, 4), max_size=20),
    reason=st.sampled_from(["stop", "length", "error"]),
    summarize=st.booleans(),
)
def test_any_chunking_gives_the_same_stream_and_response(
    segments: list[tuple[str, Any]], splits: list[int], sizes: list[int], reason: str, summarize: bool
) -> None:
    finished = Finished(reason, Usage(7, 0, 5, 1))  # type: ignore[arg-type]
    whole = build_events(_deltas(segments, []), finished, summarize=summarize)
    chunked_deltas = _deltas(segments, splits)
    chunked = build_events([], finished, batches=_batches(chunked_deltas, sizes), summarize=summarize)
    assert validate_events(whole) and validate_events(chunked)
    assert collapsed_types(chunked) == collapsed_types(whole)
    assert chunked[-1]["response"] == whole[-1]["response"]


@pytest.mark.parametrize("reason", ["length", "error", "steered", "cancelled"])
def test_a_hosted_call_the_pass_ended_before_its_result_ends_incomplete_never_run(reason: str) -> None:
    """The budget (or a stop) closed a hosted call's arguments: the call is reported incomplete, no message is made
    up after it, and the response still ends with one terminal event (a property of every hosted kind)."""
    for kind in ("file_search", "mcp", "web_search", "code_interpreter"):
        events = build_events([ToolCallStarted("search", kind=kind, namespace="docs" if kind == "mcp" else None),
                               ToolCallArguments('{"queries": ["a"'), ItemEnded()], Finished(reason))
        validate_events(events)
        done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
        assert [item["status"] for item in done] == ["incomplete"], (kind, done)
        assert [event["type"] for event in events].count("response.output_item.added") == 1
        assert events[-1]["type"] != "response.failed" or reason in ("error", "cancelled")
