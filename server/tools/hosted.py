"""One request's hosted tools: its MCP servers with the tools each listed (in the history, or now), the calls
approved for this turn, and the conversation as the model paths see it (MCP tools and items as functions)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from server import tracing
from server.errors import RequestError
from server.metrics import MCP_CALL_SECONDS, MCP_CALLS, TOOL_CALL_SECONDS
from server.requests import (
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpListToolsItem,
    ResponsesRequest,
    ToolSearchOutputItem,
)
from server.tools.builtins import FILE_SEARCH, PYTHON, builtin_server, shown_builtin
from server.tools.file_search import FileSearch, shown_file_search
from server.tools.client_tools import CLIENT_TOOLS, shown
from server.tools.support import checked_tools
from server.tools.function_view import function_items, result_text
from server.tools.mcp_client import McpUnavailable, call_tool, list_tools
from server.tools.mcp_servers import McpServer, McpSettings, mcp_servers
from server.tools.tool_search import TOOL_SEARCH, Embed, ToolSearch
from streaming.client_calls import python_code
from streaming.items import ListedTools, ToolResult


@dataclass
class HostedTools:
    """The MCP servers of one request, what each offers the model, and how to call them."""

    settings: McpSettings
    servers: dict[str, McpServer] = field(default_factory=dict)
    offered: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)  # label -> tools the model sees
    listings: list[ListedTools] = field(default_factory=list)  # made for this response: its first output items
    approved: list[McpApprovalRequestItem] = field(default_factory=list)  # approved in this turn, not yet run
    builtins: bool = False  # the request offers gpt-oss's built-in tools (web_search, code_interpreter)
    results: dict[str, str] = field(default_factory=dict)  # call item id -> what the model read of its result
    file_search: FileSearch | None = None  # the request's file_search tool, run on the project's vector stores
    not_offered: tuple[str, ...] = ()  # tool types the request sent that are accepted and not offered
    tool_search: ToolSearch | None = None  # the request's tool_search tool, when it has tools to search

    @property
    def runs_tools(self) -> bool:
        """The server may run tools for this request: its responses go on after their calls."""
        return bool(self.servers) or self.builtins or self.file_search is not None or (
            self.tool_search is not None and self.tool_search.runs_here)

    @property
    def unavailable(self) -> ListedTools | None:
        """The first server that could not be listed (the response fails, saying so)."""
        return next((listed for listed in self.listings if listed.error is not None), None)

    async def call(self, item_id: str, label: str, name: str, arguments: str) -> ToolResult:
        """The server's result for one call (an error result when it fails: the model reads it and goes on): of
        an MCP server's tool, of the browser's (`browser`, `search`), or python (no label, `python`). What the
        model reads of it is kept by the call's item id, for the passes after it."""
        kind = "mcp" if label in self.servers else FILE_SEARCH if not label and name == FILE_SEARCH \
            else TOOL_SEARCH if not label and name == TOOL_SEARCH else "code_interpreter" if not label else "web_search"
        with tracing.span(f"execute_tool {name}", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.type": kind,
                "gen_ai.tool.call.id": item_id, "responses_server.mcp.server_label": label or None}) as span:
            started = time.monotonic()
            if kind == "mcp":
                result = await self._measured(self.servers[label], label, name, arguments)
            elif kind == FILE_SEARCH and self.file_search is not None:
                result = await self.file_search.call(arguments)
            elif kind == TOOL_SEARCH and self.tool_search is not None:
                result = await self.tool_search.call(arguments)
            else:  # a built-in tool, on the operator's tool server
                server = McpServer(label or name, self.settings.tool_servers[label or name])
                if not label:
                    name, arguments = PYTHON, json.dumps({"code": python_code(arguments)})
                result = await self._measured(server, label or name, name, arguments)
            TOOL_CALL_SECONDS.labels(kind, "output" if result.error is None else "error").observe(
                time.monotonic() - started, tracing.exemplar())
            if result.error is not None:  # its type and code: the message may repeat the arguments
                tracing.failed(span, " ".join(str(result.error.get(key)) for key in ("type", "code")
                                              if result.error.get(key) is not None))
        self.results[item_id] = result_text(result)
        return result

    async def _measured(self, server: McpServer, label: str, name: str, arguments: str) -> ToolResult:
        known = label in self.settings.servers or label in self.settings.tool_servers
        measured = label if known else urlsplit(server.url).hostname or "?"  # a bounded set
        started = time.monotonic()
        result = await call_tool(server, name, arguments, self.settings)
        MCP_CALL_SECONDS.labels(measured).observe(time.monotonic() - started)
        MCP_CALLS.labels(measured, "output" if result.error is None else "error").inc()
        return result

    def view(self, conversation: ResponsesRequest) -> ResponsesRequest:
        """The conversation as a model path renders it: each MCP tool a namespace of the tools its server offers,
        each MCP call a function call and its output (server/tools/function_view.py); `shell` and `apply_patch`
        tools as functions of their own schema; deferred tools left to the tool search (server/tools/tool_search.py)
        until one loads them."""
        tools = [self._namespace(tool) if tool.get("type") == "mcp" else shown(tool) if tool.get("type") in CLIENT_TOOLS
                 else shown_builtin(tool) if builtin_server(tool) in self.settings.tool_servers
                 else shown_file_search() if tool.get("type") == FILE_SEARCH else tool
                 for tool in conversation.tools
                 if (tool.get("type") != "mcp" or tool.get("server_label") in self.servers)  # unlisted: not offered
                 and (tool.get("type") != FILE_SEARCH or self.file_search is not None)]
        if self.tool_search is not None:
            tools = self.tool_search.offered(tools, conversation.input_items())
        items = function_items(conversation.input_items(), self.results)
        return conversation.model_copy(update={"tools": tools, "input": items})

    def _namespace(self, tool: dict[str, Any]) -> dict[str, Any]:
        server = self.servers[tool["server_label"]]
        deferred = {"defer_loading": True} if tool.get("defer_loading") else {}
        members = [{"type": "mcp_approval" if server.needs_approval(listed["name"]) else "mcp",
                    "name": listed["name"], "description": listed.get("description") or "",
                    "parameters": listed.get("input_schema") or {"type": "object", "properties": {}}, **deferred}
                   for listed in self.offered.get(server.label, ())]
        return {"type": "namespace", "name": server.label, "description": tool.get("server_description") or "",
                "tools": members}


async def hosted_tools(conversation: ResponsesRequest, body: ResponsesRequest, settings: McpSettings,
                       file_search: FileSearch | None = None, embed: Embed | None = None) -> HostedTools:
    """The request's hosted tools: servers checked (400s), listed where the history holds no listing of them; its
    `file_search` tool (checked by server/tools/file_search.py); its tool search (on the embedding model `embed`
    when the server has one)."""
    not_offered = checked_tools(body.tools, settings.tool_servers)
    hosted = HostedTools(settings, {server.label: server for server in mcp_servers(body.tools, settings)},
                         file_search=file_search, not_offered=not_offered)
    items = conversation.input_items()
    search = _tool_search_tool(body.tools)
    searchable = search is not None and (search.get("execution") == "client" or _defers(body.tools))
    if searchable or any(isinstance(item, ToolSearchOutputItem) for item in items):  # (what searches loaded)
        hosted.tool_search = ToolSearch(search if searchable else None, embed)
    if search is not None and not searchable:  # nothing to search (Codex sends it with every request): said so
        hosted.not_offered = (*not_offered, TOOL_SEARCH)
    hosted.builtins = any(builtin_server(tool) in settings.tool_servers for tool in body.tools)
    earlier = {item.server_label: item for item in items if isinstance(item, McpListToolsItem) and item.error is None}
    to_list = [server for server in hosted.servers.values() if server.label not in earlier]
    listed = await asyncio.gather(*(_listing(server, settings) for server in to_list))
    hosted.listings = list(listed)
    for server in hosted.servers.values():
        tools = earlier[server.label].tools if server.label in earlier else ()
        tools = next((done.tools for done in hosted.listings if done.server_label == server.label), tools)
        hosted.offered[server.label] = tuple(tool for tool in tools if server.shows(tool))
    hosted.approved = _approved(items, body, hosted.servers)
    return hosted


def _tool_search_tool(tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The request's tool_search tool, checked (a 400 naming what is wrong), or None."""
    for index, tool in enumerate(tools):
        if tool.get("type") != TOOL_SEARCH:
            continue
        if tool.get("execution") not in (None, "server", "client"):
            raise RequestError(f"tool_search's execution must be 'server' or 'client', not {tool.get('execution')!r}.",
                               param=f"tools[{index}].execution")
        if tool.get("parameters") is not None and not isinstance(tool.get("parameters"), dict):
            raise RequestError("tool_search's parameters must be a JSON schema object.",
                               param=f"tools[{index}].parameters")
        return tool
    return None


def _defers(tools: list[dict[str, Any]]) -> bool:
    """Whether any of the request's tools is deferred (a function, a namespace's member, an MCP server's tools)."""
    return any(tool.get("defer_loading") is True or (tool.get("type") == "namespace" and any(
        isinstance(member, dict) and member.get("defer_loading") is True for member in tool.get("tools") or []))
        for tool in tools)


async def _listing(server: McpServer, settings: McpSettings) -> ListedTools:
    with tracing.span("mcp list_tools", attributes={"responses_server.mcp.server_label": server.label}) as span:
        try:
            tools = await list_tools(server, settings)
        except McpUnavailable as exc:
            tracing.failed(span, "the server could not be listed")
            return ListedTools(server.label,
                               error=f"Error retrieving tool list from MCP server: '{server.label}'. {exc}")
    return ListedTools(server.label, tuple(tool for tool in tools if server.shows(tool)))


def _approved(items: list[Any], body: ResponsesRequest, servers: dict[str, McpServer]) -> list[McpApprovalRequestItem]:
    """The approval requests this turn approves, not run yet (a 400 naming an answer to no request)."""
    requests = {item.id: item for item in items if isinstance(item, McpApprovalRequestItem)}
    ran = {item.approval_request_id for item in items if isinstance(item, McpCallItem)}
    approved = []
    for index, item in enumerate(body.input_items()):
        if not isinstance(item, McpApprovalResponseItem) or not item.approve or item.approval_request_id in ran:
            continue
        request = requests.get(item.approval_request_id)
        if request is None:
            raise RequestError(f"No mcp_approval_request has the id {item.approval_request_id!r}.",
                               param=f"input[{index}].approval_request_id")
        if request.server_label not in servers:
            raise RequestError(f"The approved call is of MCP server {request.server_label!r}, which is not among "
                               "this request's tools.", param=f"input[{index}].approval_request_id")
        approved.append(request)
    return approved
