"""A minimal SSE reader for tests, like curl users parse the stream: frames of `event:`/`data:` lines."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass
class Frame:
    event: str | None
    data: str | None
    comment: str | None

    def json(self) -> dict[str, Any]:
        assert self.data is not None
        return json.loads(self.data)


def sse_lines(body: bytes) -> list[str]:
    """A whole body's lines as the SSE spec splits them: at CR, LF or CRLF only (not at U+2028 and the other
    breaks `str.splitlines` knows, which JSON leaves unescaped inside a data line)."""
    return re.split(r"\r\n|\r|\n", body.decode())


def parse_frames(lines: Iterable[str]) -> list[Frame]:
    """Frames from the body's lines; a blank line ends a frame."""
    frames: list[Frame] = []
    event = data = comment = None
    for line in lines:
        if line == "":
            if event is not None or data is not None or comment is not None:
                frames.append(Frame(event, data, comment))
            event = data = comment = None
        elif line.startswith(":"):
            comment = line[1:].strip()
        elif line.startswith("event:"):
            event = line[len("event:"):].strip()
        elif line.startswith("data:"):
            chunk = line[len("data:"):].lstrip(" ")
            data = chunk if data is None else data + "\n" + chunk
    if event is not None or data is not None:
        frames.append(Frame(event, data, comment))
    return frames


def events_of(frames: list[Frame]) -> list[dict[str, Any]]:
    """The JSON events, checking that each frame's `event:` name equals its `type`."""
    events = []
    for frame in frames:
        if frame.data is None:
            continue
        event = frame.json()
        assert frame.event == event["type"], f"event: {frame.event} framed a {event['type']}"
        events.append(event)
    return events
