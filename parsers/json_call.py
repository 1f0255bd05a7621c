"""One tool call written as a JSON object (`{"name": ..., "arguments": {...}}`), streamed as it is written."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from parsers.deltas import Delta, ItemEnded, OutputText, ToolCallArguments, ToolCallStarted
from parsers.jsonscan import JsonValueEnd
from parsers.tools import ToolTable

# The head of a call written name-first: `{"name": "f", "arguments": ` (then the arguments stream).
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\S)')
_ARGUMENT_KEYS = ('"arguments"', '"parameters"')
_HEAD_LIMIT = 4096

Mode = Literal["head", "arguments", "whole"]


@dataclass
class JsonCallStreamer:
    """Feed the call's text; arguments stream while written when the call is name-first with object arguments.

    Any other shape (arguments first, arguments as a JSON string, a custom tool's input) is buffered to the
    end of the object and emitted whole. `feed` returns the text after the object once it has closed.
    """

    tools: ToolTable
    _outer: JsonValueEnd = field(default_factory=JsonValueEnd)
    _mode: Mode = "head"
    _buffer: list[str] = field(default_factory=list)  # the call's text (head and whole modes)
    _arguments: JsonValueEnd = field(default_factory=JsonValueEnd)
    _arguments_done: bool = False
    closed: bool = False  # the call's object has closed
    _ended: bool = False  # close() has run
    _raw: list[str] = field(default_factory=list)  # all text fed, to give back a call that does not parse
    _custom: tuple[str, int] | None = None  # a custom tool's call: the name written, where its arguments start
    _name: str = ""  # the name written, once the head is read
    _written: list[str] = field(default_factory=list)  # the streamed arguments so far (for their closing)

    def feed(self, text: str) -> tuple[list[Delta], str | None]:
        """Deltas for the call text, and the text after the call once its object closed (else None).

        The caller then calls `close()`.
        """
        if self.closed:
            self._raw.append(text)  # text after the object (say, before an end tag) is part of the call's source
            return [], text
        end = self._outer.feed(text)
        inside, after = (text, None) if end < 0 else (text[:end], text[end:])
        self._raw.append(inside)
        self.closed = after is not None
        return self._consume(inside), after

    def open_call(self) -> tuple[str, str] | None:
        """The tool's name and its arguments so far, while the call's arguments are being written (else None)."""
        if self.closed or self._arguments_done:
            return None
        if self._mode == "arguments":
            return self._name, "".join(self._written)
        if self._custom is None:
            return None
        name, start = self._custom
        return name, "".join(self._buffer)[start:]

    @property
    def raw_text(self) -> str:
        """The text the call was written as, for giving it back when it does not parse."""
        return "".join(self._raw)

    def close(self) -> list[Delta] | None:
        """End the call (its object closed, or its end tag or the output came first); None: not a call.

        A call whose arguments were cut off stays open (no ItemEnded), so the builder marks it incomplete.
        """
        if self._ended:
            return []
        self._ended = True
        if self._mode == "arguments":
            return [ItemEnded()] if self.closed or self._arguments_done else []
        return _whole_call("".join(self._buffer), self.tools)

    def _consume(self, text: str) -> list[Delta]:
        if self._mode == "arguments":
            return self._stream_arguments(text)
        self._buffer.append(text)
        return self._try_head() if self._mode == "head" else []

    def _try_head(self) -> list[Delta]:
        buffered = "".join(self._buffer)  # only the call's head is ever re-read
        match = _HEAD.match(buffered)
        if match is None:
            if _head_passed(buffered):
                self._mode = "whole"
            return []
        self._name = json.loads(f'"{match.group(1)}"')
        tool = self.tools.lookup(self._name)
        rest = buffered[match.end():]
        if tool.kind == "custom" or not rest.startswith("{"):
            self._mode = "whole"
            if tool.kind == "custom":
                self._custom = (self._name, match.end())
            return []
        self._mode, self._buffer = "arguments", []
        return [ToolCallStarted(tool.name, kind=tool.kind, namespace=tool.namespace)] + self._stream_arguments(rest)

    def _stream_arguments(self, text: str) -> list[Delta]:
        if self._arguments_done or not text:
            return []
        end = self._arguments.feed(text)
        if end >= 0:
            self._arguments_done, text = True, text[:end]
        self._written.append(text)
        return [ToolCallArguments(text)] if text else []


def close_or_text(call: JsonCallStreamer, before: str = "", after: str = "") -> list[Delta]:
    """End `call`; one that does not parse is given back as text (between `before` and `after`, its tags), never
    dropped."""
    ended = call.close()
    return ended if ended is not None else [OutputText(before + call.raw_text + after)]


def _head_passed(buffered: str) -> bool:
    """True once the text can no longer be a name-first head (so waiting longer is pointless)."""
    if len(buffered) > _HEAD_LIMIT:
        return True
    for key in _ARGUMENT_KEYS:
        at = buffered.find(key)
        if at >= 0 and buffered[at + len(key):].strip(" \t\r\n:") != "":
            return True
    return False


def _whole_call(text: str, tools: ToolTable) -> list[Delta] | None:
    try:
        call = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments: Any = call.get("arguments", call.get("parameters", {}))
    tool = tools.lookup(call["name"])
    if tool.kind == "custom":
        payload = arguments.get("input", "") if isinstance(arguments, dict) else arguments
        value = payload if isinstance(payload, str) else json.dumps(payload)
    else:
        value = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    started = ToolCallStarted(tool.name, kind=tool.kind, namespace=tool.namespace)
    return [started] + ([ToolCallArguments(value)] if value else []) + [ItemEnded()]
