"""Request input items -> the chat-completions messages that Hugging Face chat templates expect (and the Hermes
text form for templates with no tool section)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Sequence

from server.errors import RequestError
from server.requests import (
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ContentPart,
    ReasoningItem,
    ResponsesRequest,
)

ChatMessage = dict[str, Any]


@dataclass
class PromptImages:
    """The conversation's images in the order the prompt shows them, each written as the model's placeholder
    (which vLLM's processor for the model expands into the image's tokens)."""

    placeholder: str
    parts: list[ContentPart] = field(default_factory=list)
    # What an image part is written as until the prompt is whole: no text a client sends can hold it.
    marker: str = field(default_factory=lambda: f"\x00image-{secrets.token_hex(8)}\x00")

    def text(self, parts: Sequence[ContentPart]) -> str:
        pieces = []
        for part in parts:
            if part.is_image():
                self.parts.append(part)
                pieces.append(self.marker)
            else:
                pieces.append(part.as_text())
        return "".join(pieces)

    def placed(self, prompt: str) -> str:
        """The rendered prompt with a placeholder where each image is, and nowhere else: the placeholder spelled
        in text (a user's, the instructions') is broken by a zero-width space, so it makes no slot for an image."""
        written = self.placeholder[:1] + "\u200b" + self.placeholder[1:]
        return prompt.replace(self.placeholder, written).replace(self.marker, self.placeholder)


def chat_messages(request: ResponsesRequest, images: PromptImages | None = None) -> list[ChatMessage]:
    """The conversation in the chat-completions shape that Hugging Face chat templates expect; with `images`,
    image parts become placeholders in the text (else they are left out: a text model never gets them)."""
    messages: list[ChatMessage] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    reasoning: list[str] = []  # reasoning waiting for the assistant message it led to
    for index, item in enumerate(request.input_items()):
        if isinstance(item, ReasoningItem):
            reasoning.append(item.text())
            continue
        try:
            _append_item(messages, item, images)
        except ValueError as exc:
            raise RequestError(str(exc), param=f"input[{index}]") from exc
        if reasoning:  # it goes with the assistant message it led to; templates that do not use it ignore it
            if messages[-1]["role"] == "assistant":
                messages[-1]["reasoning_content"] = "".join(reasoning)
            reasoning = []
    return messages


def _append_item(messages: list[ChatMessage], item: Any, images: PromptImages | None) -> None:
    if isinstance(item, MessageItem):
        role = "system" if item.role == "developer" else item.role
        messages.append({"role": role, "content": images.text(item.parts()) if images else item.text()})
    elif isinstance(item, (FunctionCallItem, CustomToolCallItem)):
        _assistant_for_tool_calls(messages)["tool_calls"].append(_tool_call(item))
    elif isinstance(item, (FunctionCallOutputItem, CustomToolCallOutputItem)):
        content = images.text(item.parts()) if images else item.text()
        named = {"name": item.tool_name} if isinstance(item, FunctionCallOutputItem) and item.tool_name else {}
        messages.append({"role": "tool", "tool_call_id": item.call_id or "", "content": content, **named})
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
            calls = "\n".join(  # parallel calls one per line, as Hermes models write them
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
