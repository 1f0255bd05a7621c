"""`obfuscation` on streamed deltas, as OpenAI sends it: padding that hides each delta's length from a network
observer, on by default and off with `stream_options.include_obfuscation: false`; the SDK's accumulator unaffected."""

from __future__ import annotations

import json
from typing import Any

import httpx

from conformance.contract import validate_events
from streaming.obfuscation import BLOCK
from tests.scripted_engine import steps_from_tokens
from tests.test_server import MODEL, Harness, in_process_harness as harness  # noqa: F401

WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}}}}


def _script(tokenizer: Any, text: str) -> list[Any]:
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    return steps_from_tokens(ids, cuts=list(range(1, len(ids))))


def _frames(harness: Harness, **body: Any) -> list[str]:
    """Each event's `data:` line as the wire carries it."""
    with httpx.stream("POST", f"{harness.base_url}/responses", json={"model": MODEL, "stream": True, **body},
                      timeout=30) as response:
        return [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]


def test_every_streamed_delta_is_padded_to_hide_its_length_unless_the_client_asks_not(harness: Harness,
                                                                                      tokenizer: Any) -> None:
    text = 'Sunny, "héllo"\n <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    harness.play(_script(tokenizer, text))
    frames = _frames(harness, input="Weather?", tools=[WEATHER])
    events = [json.loads(frame) for frame in frames]
    validate_events(events)
    deltas = [(frame, event) for frame, event in zip(frames, events) if event["type"].endswith(".delta")]
    assert {event["type"] for _, event in deltas} >= {"response.output_text.delta",
                                                      "response.function_call_arguments.delta"}
    for frame, event in deltas:
        assert isinstance(event["obfuscation"], str) and 1 <= len(event["obfuscation"]) <= BLOCK
        assert len(frame.encode()) % BLOCK == 0, frame  # every delta's size is a whole number of blocks
    harness.play(_script(tokenizer, text))
    plain = harness.raw_stream(input="Weather?", tools=[WEATHER], stream_options={"include_obfuscation": False})
    assert any(event["type"].endswith(".delta") for event in plain)
    assert not any("obfuscation" in event for event in plain)


def test_the_sdks_accumulator_reads_padded_deltas_as_the_text(harness: Harness, tokenizer: Any) -> None:
    harness.play(_script(tokenizer, "Paris is the capital."))
    with harness.client.responses.stream(model=MODEL, input="Capital?") as stream:
        texts = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text == "Paris is the capital."
