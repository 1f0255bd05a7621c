"""The fast encoders equal what they replace: `sse_frame` gives sse-starlette's bytes (but for the Unicode line breaks
it escapes), `event_json` the SDK's JSON, and the builder's unvalidated delta events validate as the SDK's models."""

from __future__ import annotations

import json

import httpx
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
        frame = encode_event(event, data)
        if not any(brk in data for brk in UNICODE_BREAKS):
            assert frame == ServerSentEvent(data=data, event=event.type, sep=SEPARATOR).encode()
        assert read_as_lines(frame) == (event.type, json.loads(data))
        validated = type(event).model_validate_json(data)  # the SDK's model, with its own field order
        assert json.loads(validated.to_json(indent=None)) == json.loads(data)
    deltas = [e for e in events if isinstance(e, ResponseTextDeltaEvent)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in deltas) == text + text + "!"  # an empty delta makes no event


UNICODE_BREAKS = ("\x85", "\u2028", "\u2029")  # line breaks to str.splitlines that compact JSON writes as they are


def read_as_lines(frame: bytes) -> tuple[str, object]:
    """The frame as a client reading lines with httpx's `iter_lines` (str.splitlines' breaks) gets it: its event
    type and its data's JSON."""
    lines = httpx._decoders.LineDecoder().decode(frame.decode()) + httpx._decoders.LineDecoder().flush()
    assert len(lines) == 3 and lines[2] == "", lines  # event, data, the blank line that ends the frame
    assert lines[0].startswith("event: ") and lines[1].startswith("data: "), lines
    return lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: "))


def test_model_text_with_unicode_line_breaks_reaches_a_line_reader_whole() -> None:
    """A model may write any character; one a line reader splits on (U+0085, U+2028, U+2029: httpx's `iter_lines`,
    as `responses-server check` and many a curl-like client read SSE) is escaped in the frame, not sent as is."""
    text = "a\x85b\u2028c\u2029d"
    builder = ResponseBuilder({"model": "m"})
    events = builder.start() + builder.feed([OutputText(text)]) + builder.finish(Finished("stop"))
    delta = next(event for event in events if isinstance(event, ResponseTextDeltaEvent))
    assert read_as_lines(encode_event(delta)) == (delta.type, json.loads(event_json(delta)))
    assert read_as_lines(encode_event(delta))[1]["delta"] == text
