"""The `qwen3_coder` tool-call parser: `<function=NAME><parameter=KEY>value</parameter></function>`, as JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from parsers.deltas import Delta, ItemEnded, OutputText, ToolCallArguments, ToolCallStarted
from parsers.tags import TagScanner
from parsers.tools import ToolSpec, ToolTable

CALL_START, CALL_END = "<tool_call>", "</tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"
CLOSE = ">"

State = Literal["text", "call", "function_name", "body", "parameter_name", "value"]
_TAGS: dict[str, list[str]] = {
    "text": [CALL_START, FUNCTION],
    "call": [FUNCTION, CALL_END],
    "function_name": [CLOSE],
    "body": [PARAMETER, FUNCTION_END, CALL_END],
    "parameter_name": [CLOSE],
    "value": [PARAMETER_END, PARAMETER, FUNCTION_END],
}


@dataclass
class Qwen3CoderToolParser:
    """String parameters stream as JSON strings while written; other types (by the tool's schema) are
    converted once the parameter closes. One newline after `>` and before `</parameter>` is layout."""

    tools: ToolTable
    _state: State = "text"
    _scanner: TagScanner = field(default_factory=TagScanner)
    _in_call_tag: bool = False
    _tool: ToolSpec | None = None
    _name: str = ""
    _first: bool = True
    _string: bool = True  # the current parameter streams as a JSON string
    _value: list[str] = field(default_factory=list)  # a non-string value, buffered
    _at_value_start: bool = True
    _trailing_newline: bool = False  # a held-back "\n" that may be the layout before </parameter>

    def feed_text(self, text: str) -> list[Delta]:
        deltas: list[Delta] = []
        while True:
            before, tag, text = self._scanner.scan(text, _TAGS[self._state])
            deltas += self._content(before)
            if tag is None:
                return deltas
            deltas += self._tag(tag)

    def finish(self) -> list[Delta]:
        return self._content(self._scanner.flush())  # a cut-off call stays open: the builder marks it incomplete

    def _content(self, text: str) -> list[Delta]:
        if not text:
            return []
        if self._state == "text":
            return [OutputText(text)]
        if self._state in ("function_name", "parameter_name"):
            self._name += text
        elif self._state == "value":
            return self._value_text(text)
        return []  # layout whitespace between tags

    def _tag(self, tag: str) -> list[Delta]:
        if tag == CALL_START:
            self._state, self._in_call_tag = "call", True
        elif tag == CALL_END:
            self._state, self._in_call_tag = "text", False
        elif tag in (FUNCTION, PARAMETER):
            deltas = self._end_parameter() if self._state == "value" else []
            self._name = ""
            self._state = "function_name" if tag == FUNCTION else "parameter_name"
            return deltas
        elif tag == CLOSE:
            return self._open_function() if self._state == "function_name" else self._open_parameter()
        elif tag == PARAMETER_END:
            deltas = self._end_parameter()
            self._state = "body"
            return deltas
        elif tag == FUNCTION_END:
            deltas = self._end_parameter() if self._state == "value" else []
            self._state = "call" if self._in_call_tag else "text"
            return deltas + [ToolCallArguments("}"), ItemEnded()]
        return []

    def _open_function(self) -> list[Delta]:
        self._tool = self.tools.lookup(self._name.strip())
        self._state, self._first = "body", True
        tool = self._tool
        return [ToolCallStarted(tool.name, kind=tool.kind, namespace=tool.namespace), ToolCallArguments("{")]

    def _open_parameter(self) -> list[Delta]:
        key = self._name.strip()
        kind = self._tool.parameter_type(key) if self._tool else None
        self._string = kind in (None, "string")
        self._value, self._at_value_start, self._trailing_newline = [], True, False
        self._state = "value"
        prefix = "" if self._first else ", "
        self._first = False
        return [ToolCallArguments(f"{prefix}{json.dumps(key)}: " + ('"' if self._string else ""))]

    def _value_text(self, text: str) -> list[Delta]:
        if self._at_value_start and text:
            self._at_value_start = False
            text = text[1:] if text.startswith("\n") else text
        if self._trailing_newline:
            text, self._trailing_newline = "\n" + text, False
        if text.endswith("\n"):
            text, self._trailing_newline = text[:-1], True
        if not text:
            return []
        if not self._string:
            self._value.append(text)
            return []
        return [ToolCallArguments(json.dumps(text, ensure_ascii=False)[1:-1])]

    def _end_parameter(self) -> list[Delta]:
        if self._string:
            return [ToolCallArguments('"')]
        raw = "".join(self._value).strip()
        try:
            value = json.dumps(json.loads(raw), ensure_ascii=False)
        except json.JSONDecodeError:
            value = json.dumps(raw, ensure_ascii=False)
        return [ToolCallArguments(value)]
