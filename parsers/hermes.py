"""The `hermes` tool-call parser: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the answer text."""

from __future__ import annotations

from dataclasses import dataclass, field

from parsers.deltas import Delta, OutputText
from parsers.json_call import JsonCallStreamer, close_or_text
from parsers.tags import TagScanner
from parsers.tools import ToolTable

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"


@dataclass
class HermesToolParser:
    """Text outside the tags stays answer text; each tagged call streams through a JsonCallStreamer.

    A call that does not parse is given back as text, tags included, so nothing is lost.
    """

    tools: ToolTable
    _scanner: TagScanner = field(default_factory=TagScanner)
    _call: JsonCallStreamer | None = None

    def feed_text(self, text: str) -> list[Delta]:
        if self._call is None and not self._scanner.held and "<" not in text:  # the per-token fast path: plain text
            return [OutputText(text)] if text else []
        deltas: list[Delta] = []
        while True:
            before, tag, after = self._scanner.scan(text, [CALL_END] if self._call else [CALL_START])
            deltas += self._content(before)
            if tag is None:
                return deltas
            if tag == CALL_START:
                self._call = JsonCallStreamer(self.tools)
            else:
                deltas += self._end_call(CALL_END)
            text = after

    def open_call(self) -> tuple[str, str] | None:
        """The open call's tool name and arguments so far (None: no call's arguments are open)."""
        call = self._call.open_call() if self._call is not None else None
        return (call[0], call[1] + self._scanner.held) if call is not None else None

    def finish(self) -> list[Delta]:
        deltas = self._content(self._scanner.flush())
        return deltas + (self._end_call("") if self._call else [])

    def _content(self, text: str) -> list[Delta]:
        if not text:
            return []
        if self._call is None:
            return [OutputText(text)]
        deltas, _ = self._call.feed(text)  # after the object closed, it only records the text
        return deltas

    def _end_call(self, end_tag: str) -> list[Delta]:
        call, self._call = self._call, None
        assert call is not None
        return close_or_text(call, CALL_START, end_tag)
