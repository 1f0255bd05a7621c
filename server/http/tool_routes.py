"""`GET /v1/hosted_tools`: the hosted tools this server runs as they are named (the console's tool presets)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from server.http.context import serving_context
from server.tools.builtins import runnable_tools

router = APIRouter()


@router.get("/v1/hosted_tools")
async def hosted_tools(request: Request) -> dict[str, Any]:
    """Each as a request's `tools` entry: the MCP servers the operator registered (by label), the built-ins whose
    tool server is set, `file_search` where vector stores are on, and `tool_search`. A server extension: OpenAI has no such list."""
    context = serving_context(request)
    mcp = context.config.mcp
    return {"object": "list", "data": runnable_tools(mcp.servers, mcp.tool_servers, context.retrieval is not None)}
