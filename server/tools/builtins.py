"""gpt-oss's built-in tools, run on MCP servers the operator names (`--tool-server browser=URL`,
`--tool-server python=URL`, as vLLM's `--tool-server`): a request's `web_search` tool is the `browser` namespace
(search, open, find), its `code_interpreter` tool is `python`. What the model is shown of them, and which server
tool each call runs."""

from __future__ import annotations

from typing import Any, Mapping


WEB_SEARCH_TYPES = ("web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26")
BROWSER, PYTHON = "browser", "python"  # the tool servers' names, and harmony's namespaces for them
FILE_SEARCH = "file_search"  # the tool the server runs on its vector stores (server/tools/file_search.py)
_OBJECT = "object"
BROWSER_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "search": ("Searches for information related to `query` and displays `topn` results.",
               {"type": _OBJECT, "properties": {"query": {"type": "string"}, "topn": {"type": "integer"}},
                "required": ["query"]}),
    "open": ("Opens the link `id` (a number from the results, or a URL) from the page `cursor`, at line `loc`.",
             {"type": _OBJECT, "properties": {"id": {"type": ["integer", "string"]}, "cursor": {"type": "integer"},
                                              "loc": {"type": "integer"}}}),
    "find": ("Finds exact matches of `pattern` in the current page, or the page given by `cursor`.",
             {"type": _OBJECT, "properties": {"pattern": {"type": "string"}, "cursor": {"type": "integer"}},
              "required": ["pattern"]}),
}
PYTHON_TOOL = ("Runs Python code and returns what it printed.",
               {"type": _OBJECT, "properties": {"code": {"type": "string"}}, "required": ["code"]})


def builtin_server(tool: dict[str, Any]) -> str | None:
    """The tool server a request tool needs (`browser`, `python`), or None for a tool that is no built-in."""
    kind = tool.get("type")
    return BROWSER if kind in WEB_SEARCH_TYPES else PYTHON if kind == "code_interpreter" else None


def shown_builtin(tool: dict[str, Any]) -> dict[str, Any]:
    """A built-in tool as the paths offer it: `web_search` as the browser namespace, `code_interpreter` as python."""
    if builtin_server(tool) == BROWSER:
        return {"type": "namespace", "name": BROWSER, "description": "Tool for browsing.",
                "tools": [{"type": "web_search", "name": name, "description": description, "parameters": schema}
                          for name, (description, schema) in BROWSER_TOOLS.items()]}
    description, schema = PYTHON_TOOL
    return {"type": "code_interpreter", "name": PYTHON, "description": description, "parameters": schema}


def runnable_tools(servers: Mapping[str, str], tool_servers: Mapping[str, str],
                   vector_stores: bool) -> list[dict[str, Any]]:
    """The hosted tools a request may name on this server as they are, each as a request's `tools` entry: the MCP
    servers registered by label, the built-ins whose tool server is set, `file_search` (its stores to fill in) and
    `tool_search`."""
    tools: list[dict[str, Any]] = [{"type": "mcp", "server_label": label, "require_approval": "always"}
                                   for label in sorted(servers)]
    if BROWSER in tool_servers:
        tools.append({"type": "web_search"})
    if PYTHON in tool_servers:
        tools.append({"type": "code_interpreter", "container": {"type": "auto"}})
    if vector_stores:
        tools.append({"type": "file_search", "vector_store_ids": []})
    return [*tools, {"type": "tool_search"}]  # over a request's deferred tools: always run
