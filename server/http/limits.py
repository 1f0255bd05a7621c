"""Request body size limit: an ASGI middleware that answers 413 with OpenAI's error body before a route reads on."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.http.errors import APIError


class _TooLarge(Exception):
    pass


class BodySizeLimit:
    """Bodies over `max_bytes` are refused: at once by their Content-Length, else as soon as the count passes it.
    `uploads`: the routes (method, path) that take larger bodies (file uploads), with their own limit."""

    def __init__(self, app: ASGIApp, max_bytes: int, uploads: dict[tuple[str, str], int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.uploads = uploads or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.uploads.get((scope.get("method", ""), scope.get("path", "")), self.max_bytes)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, limit)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send, limit)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        error = APIError(f"The request body is larger than this server accepts ({limit} bytes).",
                         status=413, code="request_too_large")
        await error.response()(scope, receive, send)
