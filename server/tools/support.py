"""What the server does with each tool type a client can send, and each option it cannot honour: the model is offered
the tool (the client runs its calls), the server runs it, it is accepted and not offered (a client that sends it on
every request and cannot be told otherwise), or it is refused with a 400 naming what would enable it. Nothing is
dropped in silence: docs/tools.md's table is checked against TOOL_SUPPORT (tests/test_docs.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from server.errors import RequestError
from server.tools.builtins import BROWSER, PYTHON, WEB_SEARCH_TYPES, builtin_server

Handling = Literal["offered", "run", "not offered", "refused"]
NOT_OFFERED_HEADER = "x-tools-not-offered"  # the request's tool types accepted and not offered, comma-separated


@dataclass(frozen=True)
class Support:
    """What happens to one tool type: how it is handled, and the docs' one line on it."""

    handling: Handling
    note: str


_WEB_SEARCH = Support("run", "with the operator's browser tool server (`--tool-server browser=URL`); without one, "
                             "accepted and not offered (Codex sends it on every request), said in the "
                             f"`{NOT_OFFERED_HEADER}` header; `filters` are a 400 (the browser cannot apply them)")
TOOL_SUPPORT: dict[str, Support] = {
    "function": Support("offered", "its calls are `function_call` items; `strict` schemas are enforced"),
    "custom": Support("offered", "freeform input, its `lark` or `regex` grammar enforced; `custom_tool_call` items"),
    "namespace": Support("offered", "its members (functions, custom tools) offered as `namespace__name`"),
    "shell": Support("offered", "its calls are `shell_call` items"),
    "local_shell": Support("offered", "its calls are `local_shell_call` items (one command as argv)"),
    "apply_patch": Support("offered", "its calls are `apply_patch_call` items"),
    "mcp": Support("run", "the server calls the MCP server (`allowed_tools`, `read_only`, `require_approval` "
                          "honoured)"),
    "file_search": Support("run", "over the project's vector stores (filters, ranking, `max_num_results`)"),
    **{kind: _WEB_SEARCH for kind in WEB_SEARCH_TYPES},
    "code_interpreter": Support("run", "with the operator's python tool server (`--tool-server python=URL`); "
                                       "without one, a 400; a container other than `auto` without files is a 400"),
    "tool_search": Support("run", "searches the deferred tools (`defer_loading` on functions, namespaces' members "
                                  "and MCP servers) by name and description and loads what it finds; "
                                  "`execution: \"client\"` passes its calls to the client (its catalog is the client's); "
                                  "a server's search with nothing deferred is accepted and not offered, said in the "
                                  f"`{NOT_OFFERED_HEADER}` header"),
    "computer_use_preview": Support("refused", "a 400: it needs a computer-use model, which this server does not serve"),
    "computer": Support("refused", "a 400: it needs a computer-use model, which this server does not serve"),
    "image_generation": Support("refused", "a 400: it needs an image generation model, which this server does not "
                                           "serve"),
    "programmatic_tool_calling": Support("refused", "a 400: it needs OpenAI's hosted code execution of tool calls"),
}


def checked_tools(tools: list[dict[str, Any]], tool_servers: Mapping[str, str]) -> tuple[str, ...]:
    """The request's tool types accepted and not offered (in order, once each); a tool or option the server cannot
    offer or run is a RequestError naming it and what would enable it."""
    not_offered: list[str] = []
    for index, tool in enumerate(tools):
        kind, where = str(tool.get("type")), f"tools[{index}]"
        support = TOOL_SUPPORT.get(kind)
        if support is None:
            raise RequestError(f"Unknown tool type {kind!r}; the types this server knows: "
                               f"{', '.join(sorted(TOOL_SUPPORT))}.", param=where)
        if support.handling == "refused":
            raise RequestError(f"This server cannot offer the {kind} tool: {support.note.removeprefix('a 400: ')}.",
                               param=where)
        needed = builtin_server(tool)
        if needed is not None and needed not in tool_servers:
            if needed == PYTHON:
                raise RequestError(f"This server runs no {kind} tool: its operator names no {needed} tool "
                                   f"server (--tool-server {needed}=URL).", param=where)
            support = Support("not offered", "")
        elif needed is not None:
            _check_builtin_options(tool, needed, where)
        if support.handling == "not offered" and kind not in not_offered:
            not_offered.append(kind)
    return tuple(not_offered)


def _check_builtin_options(tool: dict[str, Any], server: str, where: str) -> None:
    """Options of a run built-in tool that its tool server cannot apply: a 400, never ignored."""
    if server == BROWSER and (tool.get("filters") or {}).get("allowed_domains"):
        raise RequestError("web_search filters are not applied by this server's browser tool server; leave out "
                           "`filters.allowed_domains`.", param=f"{where}.filters")
    container = tool.get("container", {"type": "auto"})
    if server == PYTHON and (not isinstance(container, dict) or container.get("type") != "auto"
                             or container.get("file_ids")):
        raise RequestError("code_interpreter runs on the operator's python tool server, which has no containers "
                           "or files: use `container: {\"type\": \"auto\"}` with no `file_ids`.",
                           param=f"{where}.container")
