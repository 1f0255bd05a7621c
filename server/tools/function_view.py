"""Items of hosted and client-run tools as the function vocabulary the model paths render: each call a function
call, each result its output."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, Mapping

from server.requests import (
    ApplyPatchCallItem,
    ApplyPatchCallOutputItem,
    CodeInterpreterCallItem,
    FileSearchCallItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    LocalShellCallItem,
    LocalShellCallOutputItem,
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpListToolsItem,
    ShellCallItem,
    ShellCallOutputItem,
    ToolSearchCallItem,
    ToolSearchOutputItem,
    WebSearchCallItem,
)
from server.tools.builtins import BROWSER, FILE_SEARCH, PYTHON
from server.tools.client_tools import shell_output_text
from server.tools.tool_search import loaded_text
from streaming.items import ToolResult

NOT_APPROVED = "The user did not approve this call: it was not run."
_MCP_ITEMS = (McpCallItem, McpListToolsItem, McpApprovalRequestItem, McpApprovalResponseItem)
_SHOWN_AS_FUNCTIONS = (*_MCP_ITEMS, ShellCallItem, ShellCallOutputItem, ApplyPatchCallItem, ApplyPatchCallOutputItem,
                       WebSearchCallItem, CodeInterpreterCallItem, FileSearchCallItem, LocalShellCallItem,
                       LocalShellCallOutputItem,
                       ToolSearchCallItem, ToolSearchOutputItem)
RESULTS_NOT_KEPT = "(The results of this search were shown in an earlier response; they are not kept.)"


def function_items(items: list[Any], results: Mapping[str, str] = MappingProxyType({})) -> list[Any]:
    """Items the model paths render as function calls and outputs: an MCP call (its output or error), a call the
    client refused (an output saying so), shell and apply_patch calls and outputs, built-in tools' calls with what
    the model read of them (`results`, by item id: a web search's results are kept nowhere else). Listings, and
    approvals pending or answered, show nothing."""
    refused = {item.approval_request_id for item in items
               if isinstance(item, McpApprovalResponseItem) and not item.approve}
    if not any(isinstance(item, _SHOWN_AS_FUNCTIONS) for item in items):
        return items
    out: list[Any] = []
    search = ""  # the last tool search's call id: a search's output names it, or follows it
    for index, item in enumerate(items):
        if isinstance(item, WebSearchCallItem):
            name, arguments = _browser_call(item.action)
            call_id = item.id or f"ws_input_{index}"  # Codex sends back other servers' searches without an id
            out += _call_and_output(call_id, BROWSER, name, arguments, results.get(call_id, RESULTS_NOT_KEPT))
        elif isinstance(item, CodeInterpreterCallItem):
            logs = "\n".join(str(output.get("logs") or "") for output in item.outputs or [] if isinstance(output, dict))
            out += _call_and_output(item.id, "", PYTHON, json.dumps({"code": item.code or ""}),
                                    results.get(item.id, logs))
        elif isinstance(item, FileSearchCallItem):
            shown = results.get(item.id) or _search_results(item.results)
            out += _call_and_output(item.id, "", FILE_SEARCH, json.dumps({"queries": item.queries}), shown)
        elif isinstance(item, ShellCallItem):
            out.append(_call(item.call_id, "shell", json.dumps(item.action)))
        elif isinstance(item, ShellCallOutputItem):
            out.append(_output(item.call_id, shell_output_text(item.output)))
        elif isinstance(item, LocalShellCallItem):
            out.append(_call(item.answered_by, "local_shell", json.dumps(item.action)))
        elif isinstance(item, LocalShellCallOutputItem):
            out.append(_output(item.id, item.output))
        elif isinstance(item, ToolSearchCallItem):
            search = item.call_id or item.id or f"tsc_input_{index}"
            out.append(_call(search, "tool_search", json.dumps(item.arguments)))
        elif isinstance(item, ToolSearchOutputItem):
            out.append(_output(item.call_id or search, loaded_text(item.tools)))
        elif isinstance(item, ApplyPatchCallItem):
            out.append(_call(item.call_id, "apply_patch", json.dumps(item.operation)))
        elif isinstance(item, ApplyPatchCallOutputItem):
            out.append(_output(item.call_id, f"[{item.status}] {item.output or ''}".strip()))
        elif isinstance(item, McpCallItem):
            output = item.output if item.error is None else f"Error: {_error_text(item.error)}"
            out += _call_and_output(item.id or f"mcp_{len(out)}", item.server_label, item.name, item.arguments,
                                    output or "")
        elif isinstance(item, McpApprovalRequestItem):
            if item.id in refused:
                out += _call_and_output(item.id, item.server_label, item.name, item.arguments, NOT_APPROVED)
        elif not isinstance(item, _MCP_ITEMS):
            out.append(item)
    return out


def _call_and_output(call_id: str, label: str, name: str, arguments: str, output: str) -> list[Any]:
    return [_call(call_id, name, arguments, label or None), _output(call_id, output)]


def _search_results(results: list[dict[str, Any]] | None) -> str:
    """What the model reads of an earlier file search: its results as the item kept them (numbered from 1 again:
    the numbers of an earlier response's citations are that response's), or a note that they were not kept."""
    if results is None:
        return RESULTS_NOT_KEPT
    return "\n\n".join(f"[{number}] {result.get('filename') or ''}\n{result.get('text') or ''}"
                        for number, result in enumerate(results, 1)) or "No results."


def _browser_call(action: dict[str, Any]) -> tuple[str, str]:
    """A web search's action as the browser call that made it."""
    kind = action.get("type")
    if kind == "open_page":
        return "open", json.dumps({"id": action.get("url") or -1})
    if kind == "find_in_page":
        return "find", json.dumps({"pattern": action.get("pattern") or ""})
    return "search", json.dumps({"query": action.get("query") or ""})


def result_text(result: ToolResult) -> str:
    """What the model reads of a hosted call's result: its output, or its error."""
    return result.output or "" if result.error is None else f"Error: {_error_text(result.error)}"


def _call(call_id: str, name: str, arguments: str, namespace: str | None = None) -> FunctionCallItem:
    return FunctionCallItem(type="function_call", call_id=call_id, name=name, namespace=namespace,
                            arguments=arguments)


def _output(call_id: str, output: str) -> FunctionCallOutputItem:
    return FunctionCallOutputItem(type="function_call_output", call_id=call_id, output=output)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("content") or error)
    return str(error)
