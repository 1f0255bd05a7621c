"""Request body size limit: an ASGI middleware that answers 413 with OpenAI's error body before a route reads on, and
decodes a compressed body (`Content-Encoding`) within the same limit."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.http.content_encoding import BadEncoding, DecodedTooLarge, UnknownEncoding, content_encodings, decoded
from server.http.errors import APIError

OFF_LOOP_BYTES = 256 * 1024  # a compressed body larger than this is decoded in a thread


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
            encoding = dict(scope.get("headers") or ()).get(b"content-encoding")
            if encoding is not None:
                await self._decoding(scope, counting_receive, tracking_send, encoding.decode("latin-1"), limit)
            else:
                await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send, limit)

    async def _decoding(self, scope: Scope, receive: Receive, send: Send, header: str, limit: int) -> None:
        """The route reads the body decoded (read whole first, bounded by the limit both ways); an encoding this
        server does not know is a 415, a body that is not what it says a 400."""
        try:
            encodings = content_encodings(header)
        except UnknownEncoding as exc:
            error = APIError(f"The request body's Content-Encoding `{exc}` is not one this server decodes (gzip, "
                             "deflate, br, zstd).", status=415, code="unsupported_content_encoding")
            return await error.response()(scope, receive, send)
        raw = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            if len(raw) > OFF_LOOP_BYTES:
                body = await asyncio.to_thread(decoded, bytes(raw), encodings, limit)
            else:
                body = decoded(bytes(raw), encodings, limit)
        except DecodedTooLarge:
            raise _TooLarge() from None
        except BadEncoding as exc:
            error = APIError(f"The request body is not the {header} data its Content-Encoding says ({exc}).",
                             code="invalid_content_encoding")
            return await error.response()(scope, receive, send)
        headers = [(name, value) for name, value in scope.get("headers") or ()
                   if name not in (b"content-encoding", b"content-length")]
        delivered = False

        async def decoded_receive() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()  # the client's disconnect, when it comes
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app({**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]},
                       decoded_receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        error = APIError(f"The request body is larger than this server accepts ({limit} bytes).",
                         status=413, code="request_too_large")
        await error.response()(scope, receive, send)
