"""The `mistral` tool-call parser: `[TOOL_CALLS][{...}, ...]` (v3 tokenizers) or `[TOOL_CALLS]name[ARGS]{...}` (v11+)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from parsers.deltas import Delta, ItemEnded, OutputText, ToolCallArguments, ToolCallStarted
from parsers.json_call import JsonCallStreamer, close_or_text
from parsers.jsonscan import JsonValueEnd
from parsers.tags import TagScanner
from parsers.tools import ToolTable

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"

State = Literal["text", "marker", "list", "name", "call_id", "arguments"]


@dataclass
class MistralToolParser:
    """Needs the decoder to keep special tokens: `[TOOL_CALLS]` and `[ARGS]` are special in Mistral vocabularies."""

    tools: ToolTable
    _state: State = "text"
    _scanner: TagScanner = field(default_factory=TagScanner)
    _name: str = ""
    _call_id: str = ""
    _call: JsonCallStreamer | None = None  # list format: the current element
    _arguments: JsonValueEnd = field(default_factory=JsonValueEnd)

    def feed_text(self, text: str) -> list[Delta]:
        deltas: list[Delta] = []
        while text or self._state == "text":
            if self._state in ("text", "name", "call_id"):
                tags = {"text": [TOOL_CALLS], "name": [ARGS, CALL_ID], "call_id": [ARGS]}[self._state]
                before, tag, text = self._scanner.scan(text, tags)
                deltas += self._plain(before, tag)
                if tag is None:
                    return deltas
            elif self._state == "marker":
                text = text.lstrip()
                if not text:
                    return deltas
                self._state = "list" if text.startswith("[") else "name"
                text = text[1:] if self._state == "list" else text
            elif self._state == "list":
                out, text = self._list_element(text)
                deltas += out
            else:
                out, text = self._stream_arguments(text)
                deltas += out
        return deltas

    def finish(self) -> list[Delta]:
        deltas = self._plain(self._scanner.flush(), None) if self._state == "text" else []
        if self._state == "list" and self._call is not None:
            deltas += close_or_text(self._call)
        return deltas

    def _plain(self, text: str, tag: str | None) -> list[Delta]:
        """Text before a tag: answer text, a function name, or a call id, by state."""
        deltas: list[Delta] = []
        if self._state == "text":
            deltas = [OutputText(text)] if text else []
            if tag == TOOL_CALLS:
                self._state, self._name, self._call_id = "marker", "", ""
        elif self._state == "name":
            self._name += text
        else:
            self._call_id += text
        if tag == CALL_ID:
            self._state = "call_id"
        elif tag == ARGS:
            self._state, self._arguments = "arguments", JsonValueEnd()
            tool = self.tools.lookup(self._name.strip())
            deltas.append(ToolCallStarted(tool.name, call_id=self._call_id.strip() or None, kind=tool.kind,
                                           namespace=tool.namespace))
        return deltas

    def _stream_arguments(self, text: str) -> tuple[list[Delta], str]:
        end = self._arguments.feed(text)
        if end < 0:
            return ([ToolCallArguments(text)] if text else []), ""
        self._state = "text"
        return [ToolCallArguments(text[:end]), ItemEnded()], text[end:]

    def _list_element(self, text: str) -> tuple[list[Delta], str]:
        """Inside `[...]`: call objects separated by commas; `]` returns to text."""
        if self._call is None:
            text = text.lstrip(" \t\r\n,")
            if not text:
                return [], ""
            if text.startswith("]"):
                self._state = "text"
                return [], text[1:]
            self._call = JsonCallStreamer(self.tools)
        deltas, after = self._call.feed(text)
        if after is None:
            return deltas, ""
        call, self._call = self._call, None
        return deltas + close_or_text(call), after
