"""Where a request's MCP servers may be (the operator's registered servers and allowed domains), and each request
tool read into what the server needs to reach it and to show its tools: its label, URL, secrets and policies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit

from server.errors import RequestError

DEFAULT_CONNECT_SECONDS = 10.0
DEFAULT_CALL_SECONDS = 60.0
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class McpSettings:
    """The operator's: servers registered by label, hosts request-given URLs may name, and the bounds of a call."""

    servers: Mapping[str, str] = field(default_factory=dict)  # label -> URL (--mcp-server LABEL=URL)
    allowed_domains: tuple[str, ...] = ()  # hosts a request's own `server_url` may name (--allowed-mcp-domains)
    connect_seconds: float = DEFAULT_CONNECT_SECONDS  # to connect and list a server's tools
    call_seconds: float = DEFAULT_CALL_SECONDS  # for one call
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES  # of a call's output (more is cut, and said so)
    tool_servers: Mapping[str, str] = field(default_factory=dict)  # gpt-oss's built-ins: browser, python -> URL


@dataclass(frozen=True)
class McpServer:
    """One request's MCP tool: where the server is, what is sent with every message to it (never stored or echoed),
    which of its tools the model sees, and which of their calls wait for the client's approval."""

    label: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    allowed: frozenset[str] | None = None  # tool names the model may see (None: all)
    approval: Any = "always"  # "always", "never", or {"always": {"tool_names": [...]}, "never": {...}}
    read_only: bool = False  # only the tools the server annotates read-only (`readOnlyHint`) are seen

    def shows(self, tool: Mapping[str, Any]) -> bool:
        """Whether the model sees this listed tool (a dict in the SDK's McpListToolsTool shape)."""
        if self.read_only and not (tool.get("annotations") or {}).get("readOnlyHint"):
            return False
        return self.allowed is None or str(tool.get("name")) in self.allowed

    def needs_approval(self, tool_name: str) -> bool:
        """Whether a call of this tool waits for the client's approval (a name no filter names: it does)."""
        if isinstance(self.approval, str):
            return self.approval != "never"
        never = (self.approval.get("never") or {}).get("tool_names") or []
        return tool_name not in never


def mcp_servers(tools: list[dict[str, Any]], settings: McpSettings) -> list[McpServer]:
    """The request's MCP tools, each checked (a 400 naming the tool's field; no server is contacted for it)."""
    servers: dict[str, McpServer] = {}
    for index, tool in enumerate(tools):
        if tool.get("type") != "mcp":
            continue
        server = _server(tool, f"tools[{index}]", settings)
        if server.label in servers:
            raise RequestError(f"Two MCP tools have the server_label {server.label!r}.",
                               param=f"tools[{index}].server_label")
        servers[server.label] = server
    return list(servers.values())


def _server(tool: dict[str, Any], where: str, settings: McpSettings) -> McpServer:
    label = tool.get("server_label")
    if not isinstance(label, str) or not label.replace("_", "").replace("-", "").isalnum():
        raise RequestError("An MCP tool needs a server_label of letters, digits, '_' and '-'.",
                           param=f"{where}.server_label")
    allowed = tool.get("allowed_tools")
    return McpServer(label, _url(tool, label, where, settings), _headers(tool, where), _allowed(allowed, where),
                     _approval(tool.get("require_approval"), where), _read_only(allowed, where))


def _url(tool: dict[str, Any], label: str, where: str, settings: McpSettings) -> str:
    """The server's URL: the one registered under its label, or its own when its host is allowed."""
    url = tool.get("server_url")
    if url is None:
        if tool.get("connector_id") is not None:
            raise RequestError("Connectors are not available on this server; give a server_url or a registered "
                               "server_label.", param=f"{where}.connector_id")
        if label not in settings.servers:
            known = ", ".join(sorted(settings.servers)) or "none"
            raise RequestError(f"No MCP server is registered as {label!r} (registered: {known}); give a server_url.",
                               param=f"{where}.server_label")
        return settings.servers[label]
    if not isinstance(url, str):
        raise RequestError("server_url must be a string.", param=f"{where}.server_url")
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host, parts = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        raise RequestError("server_url must be an http(s) URL.", param=f"{where}.server_url")
    if host.lower() not in settings.allowed_domains:
        raise RequestError(f"MCP servers at {host!r} are not allowed on this server; its operator allows "
                           f"{', '.join(settings.allowed_domains) or 'no request-given server'}.",
                           param=f"{where}.server_url")
    return url


def _headers(tool: dict[str, Any], where: str) -> dict[str, str]:
    headers = tool.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise RequestError("headers must be an object of strings.", param=f"{where}.headers")
    authorization = tool.get("authorization")
    if authorization is not None:
        if not isinstance(authorization, str):
            raise RequestError("authorization must be a string.", param=f"{where}.authorization")
        headers = {**headers, "Authorization": f"Bearer {authorization}"}
    return headers


def _allowed(allowed: Any, where: str) -> frozenset[str] | None:
    if allowed is None:
        return None
    if isinstance(allowed, dict):
        allowed = allowed.get("tool_names")
        if allowed is None:
            return None
    if not isinstance(allowed, list) or not all(isinstance(name, str) for name in allowed):
        raise RequestError("allowed_tools must be a list of tool names or {'tool_names': [...]}.",
                           param=f"{where}.allowed_tools")
    return frozenset(allowed)


def _read_only(allowed: Any, where: str) -> bool:
    """`allowed_tools: {"read_only": true}`: only tools whose annotations say they change nothing."""
    flag = allowed.get("read_only", False) if isinstance(allowed, dict) else False
    if not isinstance(flag, bool):
        raise RequestError("allowed_tools.read_only must be true or false.", param=f"{where}.allowed_tools.read_only")
    return flag


def _approval(approval: Any, where: str) -> Any:
    if approval is None:
        return "always"
    if approval in ("always", "never"):
        return approval
    if isinstance(approval, dict) and set(approval) <= {"always", "never"} and all(
            isinstance(value, dict) for value in approval.values()):
        return approval
    raise RequestError("require_approval must be 'always', 'never', or {'always': {'tool_names': [...]}, "
                       "'never': {'tool_names': [...]}}.", param=f"{where}.require_approval")
