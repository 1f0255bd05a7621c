"""SSE encoding of Responses events: one frame per event, `event:` equal to the JSON `type`."""

from __future__ import annotations

import json
from typing import AsyncIterable, AsyncIterator

from openai.types.responses import ResponseStreamEvent
from sse_starlette import ServerSentEvent

SEPARATOR = "\n"


def encode_event(event: ResponseStreamEvent, data: str | None = None) -> ServerSentEvent:
    """The SSE frame for one event (written to the wire in a single send by sse-starlette).

    `data` is the event's JSON when the caller already has it.
    """
    return ServerSentEvent(data=data if data is not None else event_json(event), event=event.type, sep=SEPARATOR)


def encode_stored(data: str) -> ServerSentEvent:
    """The SSE frame for an event stored as JSON (a replay from the event log)."""
    event_type = json.loads(data)["type"]
    return ServerSentEvent(data=data, event=event_type, sep=SEPARATOR)


def event_json(event: ResponseStreamEvent) -> str:
    """Compact JSON with the API's field names; only fields the builder set are written."""
    return event.to_json(indent=None)


async def stored_frames(events: AsyncIterable[str]) -> AsyncIterator[ServerSentEvent]:
    """SSE frames for events already encoded as JSON (an event log, or a background response followed)."""
    async for data in events:
        yield encode_stored(data)


def keepalive_comment() -> ServerSentEvent:
    """A comment frame that clients ignore and proxies count as traffic."""
    return ServerSentEvent(comment="keep-alive", sep=SEPARATOR)
