"""API keys: every route but `/health` and `/metrics` (unless asked) needs `Authorization: Bearer KEY` when keys are set, found by hash."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from server.http.errors import APIError
from server.store.database import StoreUnavailable
from server.tenancy.authenticator import Authenticator

_COMMENT = re.compile(r"\s#")  # `KEY  # comment`: what follows is not part of the key
OPEN_PATHS = frozenset({"/health", "/metrics"})  # load balancers and scrapers come without a key
INFERENCE_PATHS = ("/v1/responses", "/v1/conversations", "/v1/models")  # what admin keys may not call
KEY_SUBPROTOCOL = b"openai-insecure-api-key."  # a browser's key, on a WebSocket
BROWSER_SUBPROTOCOL = "openai-responses"  # what a browser offers beside its key, and is answered with


class APIKeyMiddleware:
    """An ASGI middleware in front of the whole app, so routes added later are covered too: it finds the caller
    (server/tenancy) and puts it in the request's state (`caller`), or answers 401."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator, open_paths: frozenset[str] = OPEN_PATHS,
                 open_prefixes: tuple[str, ...] = ()) -> None:
        self.app = app
        self._authenticator = authenticator
        self._open_paths = open_paths
        self._open_prefixes = open_prefixes  # pages for a browser: what they show, they fetch with a key

    def _open(self, scope: Scope) -> bool:
        path = scope["path"]
        return scope["type"] == "http" and (path in self._open_paths or path.startswith(self._open_prefixes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self._open(scope):
            try:
                caller = await self._authenticator.caller(_authorization(scope))
            except StoreUnavailable:
                await APIError("The key store is unavailable; try again.", status=503,
                               code="store_unavailable").response()(scope, receive, send)
                return
            if caller is None:  # a WebSocket is refused before its upgrade, as HTTP
                error = APIError("Incorrect API key provided.", status=401, code="invalid_api_key")
                await error.response({"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
            if caller.admin and scope["path"].startswith(INFERENCE_PATHS):
                error = APIError("Admin keys manage keys and read usage; they cannot call inference.", status=403,
                                 code="admin_key_not_allowed")
                await error.response()(scope, receive, send)
                return
            scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)


def _authorization(scope: Scope) -> bytes:
    """The `Authorization` header; for a browser's WebSocket (which cannot send headers), the key it offers as a
    subprotocol `openai-insecure-api-key.KEY`, as OpenAI's Realtime API takes it in browsers."""
    offered = b""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return bytes(value)
        if name == b"sec-websocket-protocol":
            offered = bytes(value)
    for protocol in offered.split(b","):
        if protocol.strip().startswith(KEY_SUBPROTOCOL):
            return b"Bearer " + protocol.strip()[len(KEY_SUBPROTOCOL):]
    return b""


def browser_subprotocol(offered: list[str]) -> str | None:
    """The subprotocol to accept a WebSocket with: a browser that offers its key as one must be answered with
    another it offered (`openai-responses`), or it drops the connection."""
    return BROWSER_SUBPROTOCOL if BROWSER_SUBPROTOCOL in offered else None


def api_keys(keys: str | None, key_file: Path | None) -> tuple[str, ...]:
    """Keys from `--api-key` (comma-separated) and `--api-key-file` (one per line; `#` starts a comment, on its own
    line or after the key and a space)."""
    found = [key.strip() for key in (keys or "").split(",")]
    if key_file is not None:
        found += [_COMMENT.split(line, maxsplit=1)[0].strip() for line in key_file.read_text().splitlines()
                  if not line.lstrip().startswith("#")]
    return tuple(key for key in found if key)
