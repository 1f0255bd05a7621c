"""Prompt rendering for chat-template models: request input items -> chat messages -> prompt token ids."""

from __future__ import annotations

import json
from typing import Any

from server.errors import APIError
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
    for index, item in enumerate(request.input_items()):
        try:
            _append_item(messages, item)
        except ValueError as exc:
            raise APIError(str(exc), param=f"input[{index}]") from exc
    return messages


def _append_item(messages: list[ChatMessage], item: Any) -> None:
    if isinstance(item, MessageItem):
        role = "system" if item.role == "developer" else item.role
        messages.append({"role": role, "content": item.text()})
    elif isinstance(item, (FunctionCallItem, CustomToolCallItem)):
        _assistant_for_tool_calls(messages)["tool_calls"].append(_tool_call(item))
    elif isinstance(item, (FunctionCallOutputItem, CustomToolCallOutputItem)):
        messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
    elif isinstance(item, ReasoningItem):
        pass  # chat templates drop earlier turns' reasoning; nothing to render
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
    return {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": arguments}}


def _json_or_text(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return arguments


def function_tools(request: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's function tools in chat-completions form; other tool types are not run here."""
    tools = []
    for tool in request.tools:
        if tool.get("type") == "function" and tool.get("name"):
            tools.append({"type": "function", "function": {
                "name": tool["name"],
                "description": tool.get("description") or "",
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            }})
    return tools


class ChatTemplateRenderer:
    """Renders requests with the tokenizer's own chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def render(self, request: ResponsesRequest) -> list[int]:
        messages = chat_messages(request)
        if not messages:
            raise APIError("input must contain at least one message", param="input")
        try:
            text = self._tokenizer.apply_chat_template(
                messages,
                tools=function_tools(request) or None,
                add_generation_prompt=True,
                tokenize=False,
            )
        except Exception as exc:  # jinja2 raises TemplateError and friends for conversations it rejects
            raise APIError(f"the model's chat template rejected this conversation: {exc}", param="input") from exc
        return list(self._tokenizer.encode(text, add_special_tokens=False))
