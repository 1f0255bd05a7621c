"""Prompt rendering for chat-template models: request input items -> chat messages -> prompt token ids."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from parsers.tools import CUSTOM_TOOL_PARAMETERS, NAMESPACE_SEPARATOR, ToolSpec, ToolTable
from server.http.errors import APIError
from server.requests import (
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
)

ChatMessage = dict[str, Any]


def chat_messages(request: ResponsesRequest) -> list[ChatMessage]:
    """The conversation in the chat-completions shape that Hugging Face chat templates expect."""
    messages: list[ChatMessage] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    reasoning: list[str] = []  # reasoning waiting for the assistant message it led to
    for index, item in enumerate(request.input_items()):
        if isinstance(item, ReasoningItem):
            reasoning.append(item.text())
            continue
        try:
            _append_item(messages, item)
        except ValueError as exc:
            raise APIError(str(exc), param=f"input[{index}]") from exc
        if reasoning:  # it goes with the assistant message it led to; templates that do not use it ignore it
            if messages[-1]["role"] == "assistant":
                messages[-1]["reasoning_content"] = "".join(reasoning)
            reasoning = []
    return messages


def _append_item(messages: list[ChatMessage], item: Any) -> None:
    if isinstance(item, MessageItem):
        role = "system" if item.role == "developer" else item.role
        messages.append({"role": role, "content": item.text()})
    elif isinstance(item, (FunctionCallItem, CustomToolCallItem)):
        _assistant_for_tool_calls(messages)["tool_calls"].append(_tool_call(item))
    elif isinstance(item, (FunctionCallOutputItem, CustomToolCallOutputItem)):
        messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
    else:  # pragma: no cover - the request model admits no other kinds
        raise ValueError(f"unsupported input item {type(item).__name__}")


def _assistant_for_tool_calls(messages: list[ChatMessage]) -> ChatMessage:
    """The assistant message that collects consecutive tool calls (one turn may make several)."""
    last = messages[-1] if messages else None
    if last is None or last["role"] != "assistant" or "tool_calls" not in last:
        if last is not None and last["role"] == "assistant":
            last["tool_calls"] = []
            return last
        last = {"role": "assistant", "content": "", "tool_calls": []}
        messages.append(last)
    return last


def _tool_call(item: FunctionCallItem | CustomToolCallItem) -> dict[str, Any]:
    if isinstance(item, FunctionCallItem):
        arguments: Any = _json_or_text(item.arguments)
    else:
        arguments = {"input": item.input}
    return {"id": item.call_id, "type": "function", "function": {"name": item.model_name, "arguments": arguments}}


def _json_or_text(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return arguments


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
        elif kind == "namespace" and tool.get("name"):
            specs += [ToolSpec(t["name"], namespace=tool["name"], parameter_types=_parameter_types(t))
                      for t in tool.get("tools") or [] if t.get("type") == "function" and t.get("name")]
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
                definitions[f"{tool.get('name')}{NAMESPACE_SEPARATOR}{member.get('name')}"] = member
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


HERMES_TOOL_PROMPT = (
    "You are a function calling AI model. You are provided with function signatures within <tools></tools> "
    "XML tags. You may call one or more functions to assist with the user query. Don't make assumptions about "
    "what values to plug into functions. Here are the available tools: <tools>\n{tools}\n</tools>\n"
    "For each function call return a json object with function name and arguments within <tool_call></tool_call> "
    "XML tags as follows:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-dict>}}\n</tool_call>"
)


def hermes_messages(messages: list[ChatMessage], tools: list[dict[str, Any]]) -> list[ChatMessage]:
    """For a template with no tool section: tools in the system prompt, calls and results as Hermes text."""
    description = HERMES_TOOL_PROMPT.format(tools="\n".join(json.dumps(t, separators=(",", ":")) for t in tools))
    out: list[ChatMessage] = []
    for message in messages:
        if message.get("tool_calls"):
            calls = "".join(
                "<tool_call>\n" + json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
                + "\n</tool_call>" for c in message["tool_calls"])
            out.append({"role": "assistant", "content": (message.get("content") or "") + calls})
        elif message["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{message['content']}\n</tool_response>"})
        else:
            out.append(dict(message))
    if out and out[0]["role"] == "system":
        out[0]["content"] = f"{out[0]['content']}\n\n{description}"
    else:
        out.insert(0, {"role": "system", "content": description})
    return out


@dataclass(frozen=True)
class RenderedPrompt:
    """A prompt ready for the engine, with what the parsers need to know about it."""

    token_ids: list[int]
    text: str
    tools: ToolTable | None
    stop_token_ids: tuple[int, ...] = ()


class ChatTemplateRenderer:
    """Renders requests with the tokenizer's own chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        template = getattr(tokenizer, "chat_template", None) or ""
        self.template_has_tools = isinstance(template, str) and "tools" in template

    def render(self, request: ResponsesRequest) -> RenderedPrompt:
        messages = chat_messages(request)
        if not messages:
            raise APIError("input must contain at least one message", param="input")
        table = tool_table(request)
        tools = function_tools(request, table)
        if tools and not self.template_has_tools:
            messages = hermes_messages(messages, tools)
        options: dict[str, Any] = {}
        effort = (request.reasoning or {}).get("effort")
        if effort is not None:  # templates read one or the other (or neither: extra variables are ignored)
            options["enable_thinking"] = effort not in ("none", "minimal")
            options["reasoning_effort"] = effort
        try:
            text = self._tokenizer.apply_chat_template(
                messages,
                tools=tools if tools and self.template_has_tools else None,
                add_generation_prompt=True,
                tokenize=False,
                **options,
            )
        except Exception as exc:  # jinja2 raises TemplateError and friends for conversations it rejects
            raise APIError(f"the model's chat template rejected this conversation: {exc}", param="input") from exc
        token_ids = list(self._tokenizer.encode(text, add_special_tokens=False))
        return RenderedPrompt(token_ids=token_ids, text=text, tools=table)
