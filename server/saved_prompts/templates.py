"""A reusable prompt's `{{variables}}` filled: strings and text parts where their text is, and an image or a file
part in place of the variable that names it (a text part split around it), as OpenAI fills them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.errors import RequestError
from server.saved_prompts.prompt import VARIABLE, SavedPrompt

Value = str | dict[str, Any]  # a variable's value: a string, or an input_text, input_image or input_file part
_TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass(frozen=True)
class FilledPrompt:
    """A prompt with its variables filled: its instructions (text) and its input items (JSON, as a request's)."""

    instructions: str | None
    items: list[dict[str, Any]]

    def echoed(self) -> list[dict[str, Any]]:
        """The prompt as a response echoes it in `instructions`: its instructions as a developer message, then its
        input items."""
        head = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": self.instructions}]}]
        return (head if self.instructions else []) + [_echoed(item) for item in self.items]


def filled(prompt: SavedPrompt, variables: dict[str, Value]) -> FilledPrompt:
    """`prompt` with `variables` in place of its `{{names}}`; a RequestError naming any it uses and was not given."""
    missing = [name for name in prompt.variables() if name not in variables]
    if missing:
        raise RequestError(f"Missing prompt variables: {', '.join(missing)} (prompt '{prompt.id}' version "
                           f"{prompt.version} uses them).", param="prompt.variables")
    values = {name: _checked(name, value) for name, value in variables.items()}
    instructions = _text_only(prompt.instructions, values) if prompt.instructions is not None else None
    return FilledPrompt(instructions, [_item(item, values) for item in prompt.input or []])


def _echoed(item: dict[str, Any]) -> dict[str, Any]:
    """An item as `instructions` echo it: an assistant message's text parts as its text (an input message, as the
    SDK's types have it: an output message there would need an id and a status)."""
    content = item.get("content")
    if item.get("role") == "assistant" and isinstance(content, list) and all(
            isinstance(part, dict) and part.get("type") in _TEXT_PARTS for part in content):
        return {**item, "content": "".join(str(part.get("text") or "") for part in content)}
    return item


def _checked(name: str, value: Value) -> Value:
    if isinstance(value, dict) and value.get("type") == "input_text":
        return str(value.get("text") or "")
    return value


def _text_only(text: str, values: dict[str, Value]) -> str:
    """The instructions with their variables' text: a part that is not text cannot fill them."""
    def value_of(name: str) -> str:
        value = values[name]
        if not isinstance(value, str):
            raise RequestError(f"Prompt variable '{name}' is an {value.get('type')} part: it can fill a message's "
                               "content, not the prompt's instructions.", param=f"prompt.variables.{name}")
        return value

    return VARIABLE.sub(lambda match: value_of(match.group(1)), text)


def _item(item: dict[str, Any], values: dict[str, Value]) -> dict[str, Any]:
    filled_item = dict(item)
    for key in ("content", "output"):
        value = item.get(key)
        if isinstance(value, str):
            parts = _parts({"type": "input_text", "text": value}, values)
            filled_item[key] = parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "input_text" else parts
        elif isinstance(value, list):
            filled_item[key] = [piece for part in value for piece in
                                (_parts(part, values) if isinstance(part, dict) and part.get("type") in _TEXT_PARTS
                                 and isinstance(part.get("text"), str) else [part])]
    return filled_item


def _parts(part: dict[str, Any], values: dict[str, Value]) -> list[dict[str, Any]]:
    """A text part with its variables filled: text in its text, and split around an image or file part."""
    pieces: list[dict[str, Any]] = []
    text, start = "", 0
    for match in VARIABLE.finditer(part["text"]):
        text += part["text"][start:match.start()]
        start = match.end()
        value = values[match.group(1)]
        if isinstance(value, str):
            text += value
            continue
        if text:
            pieces.append({**part, "text": text})
        pieces.append(value)
        text = ""
    text += part["text"][start:]
    if text or not pieces:
        pieces.append({**part, "text": text})
    return pieces
