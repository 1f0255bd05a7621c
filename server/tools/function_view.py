"""Items of hosted and client-run tools as the function vocabulary the model paths render: each call a function
call, each result its output."""

from __future__ import annotations

import json
from typing import Any

from server.requests import (
    ApplyPatchCallItem,
    ApplyPatchCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    McpApprovalRequestItem,
    McpApprovalResponseItem,
    McpCallItem,
    McpListToolsItem,
    ShellCallItem,
    ShellCallOutputItem,
)
from server.tools.client_tools import shell_output_text

NOT_APPROVED = "The user did not approve this call: it was not run."
_MCP_ITEMS = (McpCallItem, McpListToolsItem, McpApprovalRequestItem, McpApprovalResponseItem)
_SHOWN_AS_FUNCTIONS = (*_MCP_ITEMS, ShellCallItem, ShellCallOutputItem, ApplyPatchCallItem, ApplyPatchCallOutputItem)


def function_items(items: list[Any]) -> list[Any]:
    """Items the model paths render as function calls and outputs: an MCP call (its output or error), a call the
    client refused (an output saying so), shell and apply_patch calls and outputs. Listings, and approvals pending
    or answered, show nothing."""
    refused = {item.approval_request_id for item in items
               if isinstance(item, McpApprovalResponseItem) and not item.approve}
    if not any(isinstance(item, _SHOWN_AS_FUNCTIONS) for item in items):
        return items
    out: list[Any] = []
    for item in items:
        if isinstance(item, ShellCallItem):
            out.append(_call(item.call_id, "shell", json.dumps(item.action)))
        elif isinstance(item, ShellCallOutputItem):
            out.append(_output(item.call_id, shell_output_text(item.output)))
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
    return [_call(call_id, name, arguments, label), _output(call_id, output)]


def _call(call_id: str, name: str, arguments: str, namespace: str | None = None) -> FunctionCallItem:
    return FunctionCallItem(type="function_call", call_id=call_id, name=name, namespace=namespace,
                            arguments=arguments)


def _output(call_id: str, output: str) -> FunctionCallOutputItem:
    return FunctionCallOutputItem(type="function_call_output", call_id=call_id, output=output)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("content") or error)
    return str(error)
