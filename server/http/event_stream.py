"""The SSE response every streaming route returns: sse-starlette with our keep-alives, headers and send timeout."""

from __future__ import annotations

import logging
from typing import Any, AsyncIterable

from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError

from server.config import ServerConfig
from server.metrics import ACTIVE_STREAMS
from streaming.sse import SEPARATOR, keepalive_comment

logger = logging.getLogger(__name__)


class EventStream(EventSourceResponse):
    """A client that stops reading for `send_timeout` seconds ends its stream (and so its engine request),
    logged as that, without a traceback."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            with ACTIVE_STREAMS.track_inprogress():
                await super().__call__(scope, receive, send)
        except SendTimeoutError:
            logger.info("%s %s: the client stopped reading for %ss; its stream was ended",
                        scope.get("method"), scope.get("path"), self.send_timeout)


def event_stream(frames: AsyncIterable[Any], config: ServerConfig) -> EventStream:
    return EventStream(frames, ping=config.keepalive_seconds, ping_message_factory=keepalive_comment, sep=SEPARATOR,
                       send_timeout=config.send_timeout_seconds,
                       headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
