"""A recording proxy for end-to-end tests: keeps each request body a client sends and can strip the plaintext of
reasoning items first (as a stateless client that keeps only `encrypted_content` does)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route


@dataclass
class RecordingProxy:
    """Forwards every request to `target` (a base URL ending in /v1); `bodies` holds the JSON bodies seen."""

    target: str
    strip_reasoning_text: bool = False
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/{path:path}", self._forward, methods=["GET", "POST", "DELETE"])])

    async def _forward(self, request: Request) -> Response:
        content = await request.body()
        if content and request.method == "POST":
            body = json.loads(content)
            if self.strip_reasoning_text:
                body["input"] = [_stripped(item) for item in body.get("input") or []] if isinstance(
                    body.get("input"), list) else body.get("input")
            self.bodies.append(body)
            content = json.dumps(body).encode()
        client = httpx.AsyncClient(timeout=600)
        upstream = await client.send(client.build_request(
            request.method, f"{self.target}/{request.path_params['path']}", params=request.query_params,
            content=content, headers={"content-type": "application/json",
                                      "authorization": request.headers.get("authorization", "")}), stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in upstream.aiter_raw():
                    yield chunk
            finally:
                await upstream.aclose()
                await client.aclose()

        return StreamingResponse(chunks(), status_code=upstream.status_code,
                                 media_type=upstream.headers.get("content-type"))


def _stripped(item: Any) -> Any:
    if isinstance(item, dict) and item.get("type") == "reasoning":
        return {key: value for key, value in item.items() if key not in ("content", "summary")} | {"summary": []}
    return item
