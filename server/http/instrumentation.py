"""`/metrics` (prometheus_client's exposition of our series and vLLM's) and the middleware that counts requests."""

from __future__ import annotations

import re
import secrets
from contextlib import nullcontext

from fastapi import FastAPI
from prometheus_client import make_asgi_app
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from opentelemetry.trace import SpanKind

from server import tracing
from server.metrics import HTTP_REQUESTS, metrics_registry


class RequestMetrics:
    """Counts every HTTP answer by method, route template (not the raw path: ids would explode the series) and
    status code; an API request (`/v1/...`) is also one server span (a response's trace, when tracing is on), its
    parent the caller's `traceparent`, named by its route once matched. One wrapper of `send` does both: it is called
    for every event a stream sends."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/metrics":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client gets if the app fails before it answers

        async def observing_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        method = scope["method"]
        traced = scope["path"].startswith("/v1/")
        with tracing.span(method, SpanKind.SERVER, {"http.request.method": method, "url.path": scope["path"]},
                          parent=tracing.extract(request_headers(scope))) if traced else nullcontext() as current:
            try:
                await self.app(scope, receive, observing_send)
            finally:
                route = getattr(scope.get("route"), "path", None)
                HTTP_REQUESTS.labels(method, route or "unmatched", str(status)).inc()
                if current is not None:
                    current.update_name(f"{method} {route}" if route else method)
                    tracing.set_attributes(current, {"http.route": route, "http.response.status_code": status})
                    if status >= 500:
                        tracing.failed(current, f"answered {status}")


def request_headers(scope: Scope) -> dict[str, str]:
    """A request's headers by lowercase name (the last of a repeated one)."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())}


class RequestIds:
    """Gives every HTTP answer an `x-request-id` (`req_` and 32 hex digits), as OpenAI does: what a user quotes when
    something went wrong."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = (b"x-request-id", f"req_{secrets.token_hex(16)}".encode())

        async def naming_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await self.app(scope, receive, naming_send)


class ProcessHeader:
    """Names the API process that answered (`responses-server-process: N`) when several share the port."""

    def __init__(self, app: ASGIApp, process: int) -> None:
        self.app = app
        self.header = (b"responses-server-process", str(process).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def naming_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), self.header]
            await send(message)

        await self.app(scope, receive, naming_send)


def install(app: FastAPI, process: int | None) -> None:
    """Serve the registry at `/metrics`, count requests, give each an id and, with several API processes, name the one
    answering."""
    metrics = Mount("/metrics", make_asgi_app(registry=metrics_registry()))
    metrics.path_regex = re.compile("^/metrics(?P<path>.*)$")  # `/metrics` itself, without a redirect to `/metrics/`
    app.router.routes.append(metrics)
    app.add_middleware(RequestMetrics)
    app.add_middleware(RequestIds)
    if process is not None:
        app.add_middleware(ProcessHeader, process=process)
