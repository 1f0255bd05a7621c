"""Forwarding a request to its home replica (`server/replicas/homes.py`): the body and the client's headers sent on
as they came, with a hop marker; the answer (SSE or JSON) relayed byte for byte as it arrives. When the home cannot
take it (not live, no connection within a second, its 429 or 503), the request is served here: a cache miss, never
an error."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Callable

import httpx
from fastapi import Request
from opentelemetry.trace import SpanKind
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from server import tracing
from server.http.context import caller
from server.http.disconnect import client_gone, while_connected
from server.metrics import FORWARDING
from server.replicas.homes import Home, find_home
from server.replicas.registry import ReplicaRegistry
from server.requests import ResponsesRequest
from server.store.database import StoreUnavailable
from server.responses.project_store import ProjectStore
from streaming.sse import error_event_json

logger = logging.getLogger(__name__)
HOP_HEADER = "x-responses-server-forwarded-by"  # names the replica that forwarded a request: it goes no further
CONNECT_SECONDS = 1.0
_FALLBACKS = {429: "overloaded", 503: "draining"}  # the home's answers that send a request back here
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection", "trailer"}
_NOT_SENT = _HOP_BY_HOP | {"host", "content-length"}  # httpx sets these for the hop
_NOT_RELAYED = _HOP_BY_HOP | {"date", "server"}  # uvicorn sets these for the answer
_SEQUENCE = re.compile(rb'"sequence_number":\s*(\d+)')
HOME_LOST = "The replica generating this response stopped before it ended; send the request again."


@dataclass
class Forwarder:
    """Sends a request to its home when that is another live replica; `None` from `forwarded`: serve it here."""

    registry: ReplicaRegistry
    stores: Callable[[str], ProjectStore]  # a project's responses and conversations, where homes are read
    connect_seconds: float = CONNECT_SECONDS
    _client: httpx.AsyncClient = field(init=False)

    def __post_init__(self) -> None:
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=self.connect_seconds),
                                         limits=httpx.Limits(max_connections=None, max_keepalive_connections=32))

    async def forwarded(self, request: Request, body: ResponsesRequest) -> Response | None:
        """The home's answer, relayed; None when this replica serves the request (counted by why)."""
        if HOP_HEADER in request.headers:
            return None  # counted by the replica that forwarded it
        try:
            home = await find_home(body, self.stores(caller(request).project), self.registry)
        except StoreUnavailable:
            home = None
        if home is None:
            FORWARDING.labels("none", "served_here").inc()
            return None
        if home.replica == self.registry.replica_id or home.url is None:
            FORWARDING.labels(home.key, "home_here" if home.url is not None else "home_gone").inc()
            return None
        answers: list[httpx.Response | None] = []

        async def send() -> None:
            answers.append(await self._send(home, request))

        if not await while_connected(send(), request.receive):  # the home's engine request ends with the connection
            return client_gone()
        upstream = answers[0]
        if upstream is None:
            return None
        FORWARDING.labels(home.key, "forwarded").inc()
        logger.info("%s %s forwarded to its home %s (by %s)", request.method, request.url.path, home.replica, home.key)
        return RelayedResponse(upstream)

    async def close(self) -> None:
        await self._client.aclose()

    async def _send(self, home: Home, request: Request) -> httpx.Response | None:
        """The home's answer as its headers arrive; None (counted) when it cannot take the request."""
        assert home.url is not None
        headers = {name: value for name, value in request.headers.items() if name not in _NOT_SENT}
        headers[HOP_HEADER] = self.registry.replica_id
        with tracing.span("forward", SpanKind.CLIENT, {"responses_server.replica": home.replica,
                                                       "responses_server.forward.key": home.key}) as span:
            tracing.inject(headers)  # the home's server span is this one's child: one trace across replicas
            sent = self._client.build_request(request.method, home.url.rstrip("/") + request.url.path,
                                              params=request.query_params, headers=headers,
                                              content=await request.body())
            try:
                upstream = await self._client.send(sent, stream=True)
            except httpx.HTTPError as exc:  # no connection, or it broke before the answer began: nothing came back
                logger.warning("home replica %s did not take a request (%s: %s); serving it here", home.replica,
                               type(exc).__name__, exc)
                FORWARDING.labels(home.key, "unreachable").inc()
                tracing.failed(span, "the home replica was unreachable")
                return None
            tracing.set_attributes(span, {"http.response.status_code": upstream.status_code})
        if upstream.status_code in _FALLBACKS:
            await upstream.aclose()
            FORWARDING.labels(home.key, _FALLBACKS[upstream.status_code]).inc()
            return None
        return upstream


class NoForwarding:
    """Every request is served where it lands (no shared store, or `--no-forwarding`)."""

    async def forwarded(self, request: Request, body: ResponsesRequest) -> Response | None:
        return None

    async def close(self) -> None:
        return None


class RelayedResponse(Response):
    """The home's answer relayed as it arrives. A client that goes away closes the connection to the home, which
    aborts its engine request; a home lost mid-stream ends the stream with an `error` event."""

    def __init__(self, upstream: httpx.Response) -> None:
        super().__init__(status_code=upstream.status_code)
        self.upstream = upstream
        self.raw_headers = [(name, value) for name, value in upstream.headers.raw
                            if name.decode("latin-1").lower() not in _NOT_RELAYED]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await while_connected(self._relay(send), receive)
        finally:
            await self.upstream.aclose()

    async def _relay(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        last = b""  # the end of what was relayed, to find the last sequence number if the home is lost
        try:
            async for chunk in self.upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                last = (last + chunk)[-4096:]
        except httpx.HTTPError as exc:
            logger.warning("the home replica was lost mid-answer: %s: %s", type(exc).__name__, exc)
            if self.upstream.headers.get("content-type", "").startswith("text/event-stream"):
                await send({"type": "http.response.body", "body": _lost_event(last), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _lost_event(relayed_tail: bytes) -> bytes:
    """The `error` event that ends a stream whose home was lost, numbered after the last event relayed (a frame the
    home left half-sent is ended first)."""
    numbers = _SEQUENCE.findall(relayed_tail)
    data = error_event_json(int(numbers[-1]) + 1 if numbers else 0, "home_replica_lost", HOME_LOST)
    ended = b"" if relayed_tail.endswith(b"\n\n") or not relayed_tail else b"\n\n"
    return ended + f"event: error\ndata: {data}\n\n".encode()
