"""The tools a request offers, as parsers see them: the name the model writes -> what the call becomes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

NAMESPACE_SEPARATOR = "__"
# What a call becomes: a function's call or a custom (freeform) tool's, which the client runs, or a call of a tool
# the server runs itself (an MCP server's; `mcp_approval`: one whose calls wait for the client's approval), or of a
# tool the client runs with an item type of its own (`shell`, `apply_patch`), or of gpt-oss's built-in tools, which the
# server runs (`web_search`: the browser's search, open and find; `code_interpreter`: python).
CallKind = Literal["function", "custom", "mcp", "mcp_approval", "shell", "local_shell", "apply_patch", "web_search",
                   "code_interpreter", "file_search", "tool_search", "client_tool_search"]
# A custom (freeform) tool is offered to chat-template models as a function of one string argument.
CUSTOM_TOOL_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


def model_name(name: str, namespace: str | None = None) -> str:
    """The name the model sees and writes: a tool of a namespace (Codex's named groups) is flattened as `ns__name`."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


@dataclass(frozen=True)
class ToolSpec:
    """One callable tool: its API name, its kind, and the namespace it was flattened from."""

    name: str
    kind: CallKind = "function"
    namespace: str | None = None
    parameter_types: tuple[tuple[str, str], ...] = ()  # (parameter, JSON schema type) from the tool's schema

    def parameter_type(self, parameter: str) -> str | None:
        return dict(self.parameter_types).get(parameter)

    @property
    def model_name(self) -> str:
        return model_name(self.name, self.namespace)


@dataclass(frozen=True)
class ToolTable:
    """Lookup from the name the model writes to the tool it means; unknown names stay function calls."""

    tools: tuple[ToolSpec, ...] = ()
    _by_model_name: dict[str, ToolSpec] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for tool in self.tools:
            self._by_model_name[tool.model_name] = tool

    def lookup(self, model_name: str) -> ToolSpec:
        return self._by_model_name.get(model_name) or ToolSpec(model_name)
