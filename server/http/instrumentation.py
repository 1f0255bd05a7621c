"""`/metrics` (prometheus_client's exposition of our series and vLLM's) and the middleware that counts requests."""

from __future__ import annotations

import re

from fastapi import FastAPI
from prometheus_client import make_asgi_app
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.metrics import HTTP_REQUESTS, metrics_registry


class RequestMetrics:
    """Counts every HTTP answer by method, route template (not the raw path: ids would explode the series) and
    status code."""

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

        try:
            await self.app(scope, receive, observing_send)
        finally:
            route = scope.get("route")
            HTTP_REQUESTS.labels(scope["method"], getattr(route, "path", "unmatched"), str(status)).inc()


def install(app: FastAPI) -> None:
    """Serve the registry at `/metrics` and count requests."""
    metrics = Mount("/metrics", make_asgi_app(registry=metrics_registry()))
    metrics.path_regex = re.compile("^/metrics(?P<path>.*)$")  # `/metrics` itself, without a redirect to `/metrics/`
    app.router.routes.append(metrics)
    app.add_middleware(RequestMetrics)
