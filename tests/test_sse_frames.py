"""The fast encoders equal what they replace: `sse_frame` gives sse-starlette's bytes, `event_json` the SDK's JSON,
and the builder's unvalidated delta events validate as the SDK's models."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseTextDeltaEvent
from sse_starlette import ServerSentEvent

from parsers.deltas import OutputText, ReasoningText, Refusal
from streaming.builder import ResponseBuilder
from streaming.sse import SEPARATOR, encode_event, event_json
from streaming.outcome import Finished


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_frames_and_json_equal_sse_starlette_and_the_sdk(text: str) -> None:
    builder = ResponseBuilder({"model": "m"})
    events = builder.start() + builder.feed([ReasoningText(text), ReasoningText(text), OutputText(text),
                                             OutputText(text + "!"), Refusal(text), Refusal(text)])
    events += builder.finish(Finished("stop"))
    for event in events:
        data = event_json(event)
        # the SDK's JSON, but for the timestamps it types as floats: a response is written as a WireResponse
        assert data == event.model_dump_json(by_alias=True, exclude_unset=True, serialize_as_any=True)
        assert encode_event(event, data) == ServerSentEvent(data=data, event=event.type, sep=SEPARATOR).encode()
        validated = type(event).model_validate_json(data)  # the SDK's model, with its own field order
        assert json.loads(validated.to_json(indent=None)) == json.loads(data)
    deltas = [e for e in events if isinstance(e, ResponseTextDeltaEvent)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in deltas) == text + text + "!"  # an empty delta makes no event
