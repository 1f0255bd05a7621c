"""The `hermes` tool-call parser: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the answer text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from parsers.deltas import Delta, ItemEnded, OutputText, ToolCallArguments, ToolCallStarted
from parsers.tags import TagScanner
from parsers.tools import ToolTable

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"

# The head of a call written name-first: `{"name": "f", "arguments": ` (then the arguments stream).
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*(?=\S)')
_TRAILING_CLOSERS = re.compile(r"[\s}]*\Z")

State = Literal["text", "head", "arguments", "buffered"]


@dataclass
class HermesToolParser:
    """Streams tool-call arguments as the model writes them; text outside calls stays answer text.

    A call written name-first streams its arguments raw, holding back only trailing `}` and
    whitespace (the last `}` closes the call object, not the arguments). Any other shape of call
    (arguments first, arguments as a JSON string, a custom tool's input) is buffered to its end tag
    and emitted whole. A call that does not parse is given back as text, so nothing is lost.
    """

    tools: ToolTable
    _scanner: TagScanner = field(default_factory=TagScanner)
    _state: State = "text"
    _buffer: list[str] = field(default_factory=list)  # the call text so far (head and buffered states)
    _sent: list[str] = field(default_factory=list)  # arguments text already streamed
    _closers: str = ""  # trailing `}`/whitespace held back from the arguments

    def feed_text(self, text: str) -> list[Delta]:
        deltas: list[Delta] = []
        while True:
            tags = [CALL_START] if self._state == "text" else [CALL_END]
            before, tag, after = self._scanner.scan(text, tags)
            deltas += self._content(before)
            if tag is None:
                return deltas
            deltas += self._start_call() if tag == CALL_START else self._end_call()
            text = after

    def finish(self) -> list[Delta]:
        deltas = self._content(self._scanner.flush())
        if self._state == "text":
            return deltas
        return deltas + self._end_call(at_end_of_output=True)

    # -- states ------------------------------------------------------------------------------

    def _content(self, text: str) -> list[Delta]:
        if not text:
            return []
        if self._state == "text":
            return [OutputText(text)]
        if self._state == "arguments":
            return self._stream_arguments(text)
        self._buffer.append(text)
        return self._try_head() if self._state == "head" else []

    def _start_call(self) -> list[Delta]:
        self._state, self._buffer, self._sent, self._closers = "head", [], [], ""
        return []

    def _try_head(self) -> list[Delta]:
        buffered = "".join(self._buffer)  # small: only the call's head is ever re-read
        match = _HEAD.match(buffered)
        if match is None:
            key = buffered.find('"arguments"')
            head_passed = key >= 0 and buffered[key + len('"arguments"'):].strip(" \t\r\n:") != ""
            if head_passed or len(buffered) > 4096:
                self._state = "buffered"  # not written name-first: wait for the whole call
            return []
        name = json.loads(f'"{match.group(1)}"')
        rest = buffered[match.end():]
        tool = self.tools.lookup(name)
        if tool.kind == "custom" or rest.startswith('"'):
            self._state = "buffered"
            return []
        self._state, self._buffer = "arguments", []
        return [ToolCallStarted(tool.name, kind="function", namespace=tool.namespace)] + self._stream_arguments(rest)

    def _stream_arguments(self, text: str) -> list[Delta]:
        pending = self._closers + text
        cut = _TRAILING_CLOSERS.search(pending).start()  # type: ignore[union-attr]
        self._closers = pending[cut:]
        if cut == 0:
            return []
        self._sent.append(pending[:cut])
        return [ToolCallArguments(pending[:cut])]

    def _end_call(self, at_end_of_output: bool = False) -> list[Delta]:
        state, self._state = self._state, "text"
        if state == "arguments":
            tail = self._closers.rstrip()
            complete = tail.endswith("}")
            if complete:
                tail = tail[:-1].rstrip()  # the `}` closing the call object
            if complete and at_end_of_output:  # no end tag: complete only if the arguments parse
                complete = _is_json("".join(self._sent) + tail)
            deltas: list[Delta] = [ToolCallArguments(tail)] if tail else []
            if complete or not at_end_of_output:
                deltas.append(ItemEnded())
            return deltas
        return self._whole_call("".join(self._buffer), at_end_of_output)

    def _whole_call(self, text: str, at_end_of_output: bool) -> list[Delta]:
        call = _parse_call(text)
        if call is None:
            return [OutputText(CALL_START + text + ("" if at_end_of_output else CALL_END))]
        name, arguments = call
        tool = self.tools.lookup(name)
        if tool.kind == "custom":
            payload = arguments.get("input", "") if isinstance(arguments, dict) else arguments
            value = payload if isinstance(payload, str) else json.dumps(payload)
        else:
            value = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        started = ToolCallStarted(tool.name, kind=tool.kind, namespace=tool.namespace)
        return [started] + ([ToolCallArguments(value)] if value else []) + [ItemEnded()]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _parse_call(text: str) -> tuple[str, Any] | None:
    try:
        call = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    return call["name"], arguments
