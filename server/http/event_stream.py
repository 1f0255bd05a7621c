"""The SSE response every streaming route returns: sse-starlette with our keep-alives, headers and send timeout."""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from typing import Any, AsyncIterable, AsyncIterator

from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError

from server.config import ServerConfig
from server.http.errors import api_error_of, unexpected
from server.metrics import ACTIVE_STREAMS
from streaming.sse import SEPARATOR, keepalive_comment

logger = logging.getLogger(__name__)
_STREAM_TASK: ContextVar[asyncio.Task[Any] | None] = ContextVar("stream_task", default=None)  # set in a stream's task


class EventStream(EventSourceResponse):
    """A client that stops reading for `send_timeout` seconds ends its stream (and so its engine request),
    logged as that, without a traceback.

    sse-starlette arms an anyio cancel scope (a timer set and cleared, about 9 µs) around every send, once per
    event; here a send only notes when it began, and one timer per stream, every quarter of the timeout, cancels
    a send that has waited longer (so a stalled client is cut after 1 to 1.25 times the timeout).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sending: dict[asyncio.Task[Any], float] = {}  # the tasks inside a send now, and since when
        self._stalled: set[asyncio.Task[Any]] = set()  # cancelled by the watchdog, not by anything else
        self._watchdog: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set once its events are sent

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            with ACTIVE_STREAMS.track_inprogress():
                await super().__call__(scope, receive, send)
        except SendTimeoutError:
            logger.info("%s %s: the client stopped reading for %ss; its stream was ended",
                        scope.get("method"), scope.get("path"), self.send_timeout)
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()

    async def _stream_response(self, send: Any) -> None:
        """The response starts with its first frame: an error raised before it (a request no engine took) is
        answered as HTTP would, not as a stream cut short."""
        _STREAM_TASK.set(asyncio.current_task())  # the task that sends the events, seen by it alone (its context)
        self._loop = asyncio.get_running_loop()
        frames = aiter(self.body_iterator)
        async with self._send_lock:  # no keep-alive before the response starts
            try:
                first = await anext(frames)
            except StopAsyncIteration:
                first = None
            except Exception as exc:
                self.active = False
                await _answer(exc, send)
                return
        self.body_iterator = _after(first, frames)
        await super()._stream_response(send)

    async def _send_with_timeout(self, send: Any, message: Any) -> None:
        if self.send_timeout is None:
            await send(message)
            return
        task = _STREAM_TASK.get() or asyncio.current_task()  # asking the loop makes a getpid() system call
        assert task is not None
        loop = self._loop or asyncio.get_running_loop()
        self._sending[task] = loop.time()
        if self._watchdog is None:
            self._watchdog = loop.call_later(self.send_timeout / 4, self._cancel_stalled_sends)
        try:
            await send(message)
        except asyncio.CancelledError:
            if task not in self._stalled:
                raise
            self._stalled.discard(task)
            task.uncancel()  # the cancellation was ours, and it ends here as the send timeout
            raise SendTimeoutError() from None
        finally:
            del self._sending[task]

    def _cancel_stalled_sends(self) -> None:
        assert self.send_timeout is not None
        loop = asyncio.get_running_loop()
        for task, since in self._sending.items():
            if loop.time() - since >= self.send_timeout and task not in self._stalled:
                self._stalled.add(task)
                task.cancel()  # the task waits inside its send: that is where the CancelledError lands
        self._watchdog = loop.call_later(self.send_timeout / 4, self._cancel_stalled_sends)


async def _after(first: Any, frames: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """`first` (if any), then the rest of `frames`."""
    if first is not None:
        yield first
    async for frame in frames:
        yield frame


async def _answer(exc: Exception, send: Any) -> None:
    """The error answer to a stream that failed before its first frame."""
    error = api_error_of(exc)
    if unexpected(exc):
        logger.error("a stream failed before its first event", exc_info=exc)
    else:
        logger.info("a stream was answered %d before its first event: %s", error.status, error.message)
    await error.response()({"type": "http"}, _nothing, send)


async def _nothing() -> Any:
    raise RuntimeError("not read")


def event_stream(frames: AsyncIterable[Any], config: ServerConfig,
                 headers: dict[str, str] | None = None) -> EventStream:
    return EventStream(frames, ping=config.keepalive_seconds, ping_message_factory=keepalive_comment, sep=SEPARATOR,
                       send_timeout=config.send_timeout_seconds,
                       headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})})
