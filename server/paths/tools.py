"""The tools a request offers, as the model paths present them: the callable table, each tool's request entry by
the name the model writes, and their chat-completions definitions."""

from __future__ import annotations

from typing import Any

from parsers.tools import CUSTOM_TOOL_PARAMETERS, CallKind, ToolSpec, ToolTable, model_name
from server.requests import ResponsesRequest

# A namespace's member types -> what their calls are (an MCP server's tools, as server/tools/hosted.py shows them).
_MEMBER_KINDS: dict[str, CallKind] = {"function": "function", "custom": "custom", "mcp": "mcp",
                                      "mcp_approval": "mcp_approval", "web_search": "web_search"}


def tool_table(request: ResponsesRequest) -> ToolTable | None:
    """The tools the model may call (functions, Codex namespaces flattened, custom tools); None: no tools."""
    if request.tool_choice == "none":
        return None
    specs: list[ToolSpec] = []
    for tool in request.tools:
        kind = tool.get("type")
        if kind == "function" and tool.get("name"):
            specs.append(ToolSpec(tool["name"], parameter_types=_parameter_types(tool)))
        elif kind == "custom" and tool.get("name"):
            specs.append(ToolSpec(tool["name"], kind="custom"))
        elif kind in ("shell", "local_shell", "apply_patch", "code_interpreter", "file_search") and tool.get("name"):  # named by
            # server/tools
            specs.append(ToolSpec(tool["name"], kind=kind, parameter_types=_parameter_types(tool)))
        elif kind == "tool_search" and tool.get("name"):  # offered by server/tools/tool_search.py
            specs.append(ToolSpec(tool["name"], kind="client_tool_search" if tool.get("execution") == "client"
                                  else "tool_search"))
        elif kind == "namespace" and tool.get("name"):  # Codex's groups, and the tools of an MCP server
            specs += [ToolSpec(t["name"], kind=_MEMBER_KINDS[t["type"]], namespace=tool["name"],
                               parameter_types=_parameter_types(t))
                      for t in tool.get("tools") or [] if t.get("type") in _MEMBER_KINDS and t.get("name")]
    return ToolTable(tuple(specs)) if specs else None


def _parameter_types(tool: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    properties = (tool.get("parameters") or {}).get("properties") or {}
    return tuple((name, schema.get("type")) for name, schema in properties.items()
                 if isinstance(schema, dict) and isinstance(schema.get("type"), str))


def tool_definitions(request: ResponsesRequest) -> dict[str, dict[str, Any]]:
    """Each named tool's entry in the request, by the name the model writes (namespace members flattened)."""
    definitions = {}
    for tool in request.tools:
        if tool.get("type") == "namespace":
            for member in tool.get("tools") or []:
                definitions[model_name(str(member.get("name")), str(tool.get("name")))] = member
        elif tool.get("name"):
            definitions[tool["name"]] = tool
    return definitions


def function_tools(request: ResponsesRequest, table: ToolTable | None) -> list[dict[str, Any]]:
    """The callable tools (`table`, from `tool_table`) in chat-completions form, under the names the model writes."""
    if table is None:
        return []
    definitions = tool_definitions(request)
    return [_function_definition(spec.model_name, spec.kind, definitions.get(spec.model_name, {}))
            for spec in table.tools]


def _function_definition(name: str, kind: str, tool: dict[str, Any]) -> dict[str, Any]:
    if kind == "custom":  # freeform input: one string argument
        parameters: dict[str, Any] = CUSTOM_TOOL_PARAMETERS
    else:
        parameters = tool.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": name, "description": tool.get("description") or "",
                                             "parameters": parameters}}
