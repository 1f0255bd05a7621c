"""API keys: every route but `/health` and `/metrics` (unless asked) needs `Authorization: Bearer KEY` when keys are set, checked in constant time."""

from __future__ import annotations

import hmac
import re
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from server.http.errors import APIError

_COMMENT = re.compile(r"\s#")  # `KEY  # comment`: what follows is not part of the key
OPEN_PATHS = frozenset({"/health", "/metrics"})  # load balancers and scrapers come without a key


class APIKeyMiddleware:
    """An ASGI middleware in front of the whole app, so routes added later are covered too."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...], open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self._keys = tuple(key.encode() for key in keys)
        self._open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self._keys and scope["path"] not in self._open_paths:
            if not self._accepts(_authorization(scope)):  # a WebSocket is refused before its upgrade, as HTTP
                error = APIError("Incorrect API key provided.", status=401, code="invalid_api_key")
                await error.response({"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _accepts(self, authorization: bytes) -> bool:
        scheme, _, given = authorization.partition(b" ")
        matched = False
        for key in self._keys:  # every key is compared, so the time does not tell which one came close
            matched |= hmac.compare_digest(given.strip(), key)
        return matched and scheme.lower() == b"bearer"


def _authorization(scope: Scope) -> bytes:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return bytes(value)
    return b""


def api_keys(keys: str | None, key_file: Path | None) -> tuple[str, ...]:
    """Keys from `--api-key` (comma-separated) and `--api-key-file` (one per line; `#` starts a comment, on its own
    line or after the key and a space)."""
    found = [key.strip() for key in (keys or "").split(",")]
    if key_file is not None:
        found += [_COMMENT.split(line, maxsplit=1)[0].strip() for line in key_file.read_text().splitlines()
                  if not line.lstrip().startswith("#")]
    return tuple(key for key in found if key)
