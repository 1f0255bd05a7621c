"""What a request asks of the output: `text.format`, `tool_choice`, strict tools and the call limits, checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from parsers.tools import CUSTOM_TOOL_PARAMETERS, ToolSpec, ToolTable
from server.constraints.custom_grammar import custom_tool_grammar
from server.constraints.json_budget import is_bounded
from server.constraints.json_grammar import ANY_OBJECT, SchemaError, json_grammar
from server.constraints.schema_shape import SchemaShapeError, check_shape
from server.errors import RequestError
from server.requests import ResponsesRequest

# Tool choices naming a tool the server does not run (OpenAI's hosted tools).
_HOSTED_TOOL_CHOICES = frozenset({"computer_use_preview", "computer", "image_generation"})
# Tool choices naming a tool by its type -> the kind of the calls it makes.
_TOOL_KIND_CHOICES = {"shell": "shell", "local_shell": "local_shell", "apply_patch": "apply_patch", "code_interpreter": "code_interpreter",
                      "file_search": "file_search", "tool_search": "tool_search",
                      **{kind: "web_search" for kind in ("web_search", "web_search_preview",
                                                         "web_search_preview_2025_03_11", "web_search_2025_08_26")}}


@dataclass(frozen=True)
class CallRules:
    """Which tools a call may name (with their arguments' schemas), whether one must be called, how many at most."""

    schemas: dict[str, dict[str, Any]]  # the name the model writes -> its arguments' JSON schema
    required: bool = False
    restricted: bool = False  # only some of the offered tools may be called (allowed_tools)
    strict: frozenset[str] = frozenset()  # names whose arguments are constrained even when a call is optional
    custom: dict[str, str | None] = field(default_factory=dict)  # custom tools' names -> their input's grammar
    tools: dict[str, ToolSpec] = field(default_factory=dict)  # the name the model writes -> the tool it calls


@dataclass(frozen=True)
class OutputRules:
    """The answer's JSON schema (None: free text) and the rules for tool calls (None: no tool may be called)."""

    answer_schema: dict[str, Any] | None = None
    calls: CallRules | None = None
    max_calls: int | None = None  # the call limit, enforced by stopping generation where no grammar does
    answer_budget: int | None = None  # the output budget (tokens, so at least as many bytes) the answer must fit

    @property
    def needs_grammar(self) -> bool:
        """Whether the output must follow a grammar; otherwise the model writes freely."""
        calls = self.calls
        return self.answer_schema is not None or (
            calls is not None and (calls.required or calls.restricted or bool(calls.strict)))


def output_rules(request: ResponsesRequest, table: ToolTable | None,
                 definitions: dict[str, dict[str, Any]], budget: int | None = None) -> OutputRules:
    """The rules for one request; `definitions` maps each callable tool's model name to its request entry, and
    `budget` is the output budget a JSON answer must fit in."""
    max_calls = 1 if not request.parallel_tool_calls else None
    if request.max_tool_calls is not None:
        max_calls = min(max_calls or request.max_tool_calls, request.max_tool_calls)
    return OutputRules(answer_schema=_answer_schema(request.text), calls=_call_rules(request, table, definitions),
                       max_calls=max_calls, answer_budget=budget)


def carries_schemas(request: ResponsesRequest) -> bool:
    """Whether the request holds a schema to check and compile (a tool's parameters, an answer's json_schema)."""
    answer_format = (request.text or {}).get("format")
    return bool(request.tools) or (isinstance(answer_format, dict) and answer_format.get("type") == "json_schema")


def check_schemas(request: ResponsesRequest) -> None:
    """The request's schemas (its answer's, its tools' parameters) are within the shape the server takes: checked
    before the prompt is rendered, which writes them out (a RequestError naming the schema else)."""
    _answer_schema(request.text)
    for index, tool in enumerate(request.tools):
        members = tool.get("tools") if tool.get("type") == "namespace" else [tool]
        for member in members if isinstance(members, list) else ():
            parameters = member.get("parameters") if isinstance(member, dict) else None
            try:
                check_shape(parameters)
            except SchemaShapeError as exc:
                raise RequestError(f"Invalid JSON schema: {exc}", param=f"tools[{index}]") from None


def _answer_schema(text: dict[str, Any] | None) -> dict[str, Any] | None:
    answer_format = (text or {}).get("format")
    if answer_format is None:
        return None
    if not isinstance(answer_format, dict):
        raise RequestError("text.format must be an object with a `type`.", param="text.format")
    kind = answer_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ANY_OBJECT
    if kind != "json_schema":
        raise RequestError(f"Unsupported text.format type {kind!r}: use 'text', 'json_object' or 'json_schema'.",
                       param="text.format.type")
    schema = answer_format.get("schema")
    if not isinstance(schema, dict) or not schema:
        raise RequestError("text.format of type 'json_schema' needs a `schema` object.", param="text.format.schema")
    _check_schema(schema, "text.format.schema")
    return schema


def _call_rules(request: ResponsesRequest, table: ToolTable | None,
                definitions: dict[str, dict[str, Any]]) -> CallRules | None:
    choice = request.tool_choice
    if choice == "none":
        return None
    tools = table.tools if table is not None else ()
    if choice == "auto":
        return _rules(tools, definitions) if tools else None
    if choice == "required":
        if not tools:
            raise RequestError("tool_choice 'required' needs at least one function or custom tool in `tools`.",
                           param="tool_choice")
        return _rules(tools, definitions, required=True)
    if not isinstance(choice, dict) or not isinstance(choice.get("type"), str):
        raise RequestError(f"Invalid tool_choice {choice!r}: use 'none', 'auto', 'required', "
                       "{'type': 'function', 'name': ...}, {'type': 'custom', 'name': ...} or "
                       "{'type': 'allowed_tools', ...}.", param="tool_choice")
    kind = choice["type"]
    if kind in ("function", "custom"):
        return _rules((_named_tool(tools, choice, kind, "tool_choice"),), definitions, required=True,
                      restricted=len(tools) > 1)
    if kind == "allowed_tools":
        return _allowed_tools(tools, choice, definitions)
    if kind == "mcp":
        return _mcp_choice(tools, choice, definitions)
    if kind in _TOOL_KIND_CHOICES:  # a call of that tool (of the browser: any of search, open, find)
        kinds = ("tool_search", "client_tool_search") if kind == "tool_search" else (_TOOL_KIND_CHOICES[kind],)
        chosen = tuple(tool for tool in tools if tool.kind in kinds)
        if not chosen:
            raise RequestError(f"tool_choice {kind!r} needs a {kind!r} tool in `tools`.", param="tool_choice")
        return _rules(chosen, definitions, required=True, restricted=len(chosen) < len(tools))
    if kind in _HOSTED_TOOL_CHOICES:
        raise RequestError(f"tool_choice {kind!r} names a hosted tool this server does not run.", param="tool_choice")
    raise RequestError(f"Unknown tool_choice type {kind!r}.", param="tool_choice.type")


def _mcp_choice(tools: tuple[ToolSpec, ...], choice: dict[str, Any],
                definitions: dict[str, dict[str, Any]]) -> CallRules:
    """`{"type": "mcp", "server_label": L, "name": N}`: a call of that server's tool N (of any it offers, without N)."""
    label, name = choice.get("server_label"), choice.get("name")
    chosen = tuple(tool for tool in tools if tool.kind in ("mcp", "mcp_approval") and tool.namespace == label
                   and name in (None, tool.name))
    if not chosen:
        what = f"tool {name!r} of MCP server {label!r}" if name is not None else f"MCP server {label!r}"
        raise RequestError(f"tool_choice names the {what}, which offers no such tool here.",
                           param="tool_choice.name" if name is not None else "tool_choice.server_label")
    return _rules(chosen, definitions, required=True, restricted=len(chosen) < len(tools))


def _allowed_tools(tools: tuple[ToolSpec, ...], choice: dict[str, Any],
                   definitions: dict[str, dict[str, Any]]) -> CallRules:
    mode = choice.get("mode", "auto")
    if mode not in ("auto", "required"):
        raise RequestError(f"allowed_tools mode must be 'auto' or 'required', not {mode!r}.", param="tool_choice.mode")
    entries = choice.get("tools")
    if not isinstance(entries, list) or not entries:
        raise RequestError("allowed_tools needs a non-empty `tools` list.", param="tool_choice.tools")
    allowed = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("type") not in ("function", "custom"):
            raise RequestError("allowed_tools entries are {'type': 'function' or 'custom', 'name': ...}.",
                           param=f"tool_choice.tools[{index}]")
        allowed.append(_named_tool(tools, entry, entry["type"], f"tool_choice.tools[{index}]"))
    return _rules(tuple(allowed), definitions, required=mode == "required",
                  restricted=len(set(allowed)) < len(tools))


def _named_tool(tools: tuple[ToolSpec, ...], choice: dict[str, Any], kind: str, param: str) -> ToolSpec:
    name = choice.get("name")
    for tool in tools:
        if tool.kind == kind and name in (tool.name, tool.model_name):
            return tool
    raise RequestError(f"tool_choice names {kind} tool {name!r}, which is not among the request's tools.",
                   param=f"{param}.name" if name is not None else param)


def _rules(tools: tuple[ToolSpec, ...], definitions: dict[str, dict[str, Any]],
           required: bool = False, restricted: bool = False) -> CallRules:
    schemas, strict, custom = {}, set(), {}
    for tool in tools:
        definition = definitions.get(tool.model_name, {})
        schema, is_strict = _arguments_schema(tool, definition)
        schemas[tool.model_name] = schema
        if tool.kind == "custom":
            custom[tool.model_name] = custom_tool_grammar(definition, "tools")
            is_strict = custom[tool.model_name] is not None  # a grammar holds whenever the tool is called
        if is_strict:
            strict.add(tool.model_name)
    return CallRules(schemas, required=required, restricted=restricted, strict=frozenset(strict), custom=custom,
                     tools={tool.model_name: tool for tool in tools})


def _arguments_schema(tool: ToolSpec, definition: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema a call's arguments follow when constrained, and whether the tool asked for that always.

    A function whose `strict` is true must have a schema the grammar can enforce (else a 400); any other
    tool's schema is used when it can be enforced and bounded (so a call closes within the output budget), else any
    JSON object: a non-strict schema is guidance, as OpenAI treats it.
    """
    if tool.kind == "custom":
        return CUSTOM_TOOL_PARAMETERS, False
    schema = definition.get("parameters") or {"type": "object", "properties": {}}
    strict = definition.get("strict") is True
    try:
        json_grammar(schema)
    except SchemaError as exc:
        if strict:
            raise RequestError(f"The parameters of strict function {tool.model_name!r} cannot be enforced: {exc}",
                           param="tools") from exc
        return ANY_OBJECT, False
    return (schema, strict) if strict or is_bounded(schema) else (ANY_OBJECT, False)


def _check_schema(schema: dict[str, Any], param: str) -> None:
    try:
        json_grammar(schema)
    except SchemaError as exc:
        raise RequestError(f"Invalid JSON schema: {exc}", param=param) from exc
