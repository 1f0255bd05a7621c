"""Talking to an MCP server with the official `mcp` SDK: list its tools, call one; each within a time bound, with
the request's headers, following no redirect off the server's origin, its output bounded.

A response lists a server once (or not at all, when its history holds the listing); a call never lists again. The
SDK's `Client.call_tool` lists the tools in the call's own session to check the result against the tool's output
schema, so the call is sent as a plain `tools/call` request: the model reads the result as text either way.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import AbstractAsyncContextManager
from typing import Any

from server import tracing
from server.tools.mcp_servers import McpServer, McpSettings
from streaming.items import ToolResult

logger = logging.getLogger(__name__)


class McpUnavailable(Exception):
    """A server could not be reached or listed: the message says why, in the client's terms."""


async def list_tools(server: McpServer, settings: McpSettings) -> list[dict[str, Any]]:
    """The server's tools in the SDK's `McpListToolsTool` shape (name, input_schema, description, annotations)."""
    try:
        async with asyncio.timeout(settings.connect_seconds):
            async with _client(server, settings) as client:
                listed = await client.list_tools()
    except Exception as exc:  # any failure to reach or list is the same answer to the client
        raise McpUnavailable(_why(exc, settings.connect_seconds)) from None
    return [{"name": tool.name, "input_schema": tool.input_schema, "description": tool.description,
             "annotations": tool.annotations.model_dump(exclude_none=True, by_alias=True) if tool.annotations else None}
            for tool in listed.tools]


async def call_tool(server: McpServer, name: str, arguments: str, settings: McpSettings) -> ToolResult:
    """The call's output, or its error in one of the SDK's `McpToolCallError` shapes (never an exception)."""
    try:
        values = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return ToolResult(error={"type": "mcp_protocol_error", "code": -32602,
                                 "message": f"The arguments are not JSON: {exc}"})
    if not isinstance(values, dict):
        return ToolResult(error={"type": "mcp_protocol_error", "code": -32602,
                                 "message": "The arguments must be a JSON object."})
    try:
        async with asyncio.timeout(settings.connect_seconds + settings.call_seconds):
            async with _client(server, settings) as client:
                result = await _called(client, name, values)
    except Exception as exc:
        return ToolResult(error=_error(exc, settings.connect_seconds + settings.call_seconds))
    blocks = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
    if result.is_error:
        return ToolResult(error={"type": "mcp_tool_execution_error", "content": blocks})
    return ToolResult(output=_bounded(_text(blocks, result.structured_content), settings.max_output_bytes))


async def _called(client: Any, name: str, arguments: dict[str, Any]) -> Any:
    """`tools/call` in the client's session, and its `CallToolResult`: no listing before or after it."""
    import mcp_types

    request = mcp_types.CallToolRequest(params=mcp_types.CallToolRequestParams(name=name, arguments=arguments))
    return await client.session.send_request(request, mcp_types.CallToolResult)


def _client(server: McpServer, settings: McpSettings) -> AbstractAsyncContextManager[Any]:
    """A connected client: streamable HTTP, or SSE for a server whose URL ends in `/sse` (as older servers serve)."""
    import httpx2
    from mcp import Client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(settings.connect_seconds, read=settings.call_seconds)
    headers = tracing.inject(dict(server.headers))  # the call joins the caller's trace (`traceparent`)
    if server.url.rstrip("/").endswith("/sse"):
        transport: Any = sse_client(server.url, headers=headers, timeout=settings.connect_seconds,
                                    sse_read_timeout=settings.call_seconds)
    else:
        http = httpx2.AsyncClient(headers=headers, timeout=timeout, follow_redirects=False)
        transport = streamable_http_client(server.url, http_client=http)
    return Client(transport, read_timeout_seconds=settings.call_seconds)


def _text(blocks: list[dict[str, Any]], structured: Any) -> str:
    """What the model reads of a result: its text blocks joined, other blocks (and structured content) as JSON."""
    if not blocks and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(block["text"] if block.get("type") == "text" else json.dumps(block, ensure_ascii=False)
                     for block in blocks)


def _bounded(text: str, limit: int) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore") + f"\n[output cut at {limit} bytes]"


def _error(exc: BaseException, seconds: float) -> dict[str, Any]:
    from mcp.shared.exceptions import MCPError

    for error in _causes(exc):
        if isinstance(error, MCPError):
            return {"type": "mcp_protocol_error", "code": error.code, "message": error.message}
    status = _http_status(exc)
    if status is not None:
        return {"type": "http_error", "code": status, "message": _why(exc, seconds)}
    code = 504 if isinstance(exc, TimeoutError) else 502
    return {"type": "http_error", "code": code, "message": _why(exc, seconds)}


def _http_status(exc: BaseException) -> int | None:
    for error in _causes(exc):
        response = getattr(error, "response", None)
        if response is not None and isinstance(getattr(response, "status_code", None), int):
            return response.status_code
    return None


def _why(exc: BaseException, seconds: float) -> str:
    """A failure in plain words: the HTTP status when there was one, else its kind (never a stack's detail)."""
    if isinstance(exc, TimeoutError):
        return f"The MCP server did not answer within {seconds:g} seconds."
    status = _http_status(exc)
    if status is not None:
        return f"Http status code: {status}."
    logger.info("MCP server unreachable: %r", exc)
    return "The MCP server could not be reached."


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception, the exceptions inside it (task groups raise groups), and their causes."""
    seen: list[BaseException] = []
    pending = [exc]
    while pending and len(seen) < 32:
        error = pending.pop()
        seen.append(error)
        pending += list(getattr(error, "exceptions", ()))
        pending += [cause for cause in (error.__cause__, error.__context__) if cause is not None]
    return seen
