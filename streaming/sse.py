"""SSE encoding of Responses events: one frame per event, `event:` equal to the JSON `type`."""

from __future__ import annotations

from openai.types.responses import ResponseStreamEvent
from sse_starlette import ServerSentEvent

SEPARATOR = "\n"


def encode_event(event: ResponseStreamEvent) -> ServerSentEvent:
    """The SSE frame for one event (written to the wire in a single send by sse-starlette)."""
    return ServerSentEvent(data=event_json(event), event=event.type, sep=SEPARATOR)


def event_json(event: ResponseStreamEvent) -> str:
    """Compact JSON with the API's field names; only fields the builder set are written."""
    return event.to_json(indent=None)


def keepalive_comment() -> ServerSentEvent:
    """A comment frame that clients ignore and proxies count as traffic."""
    return ServerSentEvent(comment="keep-alive", sep=SEPARATOR)
