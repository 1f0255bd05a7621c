"""The `llama3_json` tool-call parser: an answer that is one or more `{"name": ..., "parameters": {...}}` objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parsers.deltas import Delta, OutputText
from parsers.json_call import JsonCallStreamer, close_or_text
from parsers.tools import ToolTable

_BETWEEN_CALLS = " \t\r\n;,"


@dataclass
class Llama3JsonToolParser:
    """An answer starting with `{` is tool calls (`;`-separated, as Llama 3.x writes them); any other is text."""

    tools: ToolTable
    _mode: Literal["start", "text", "calls"] = "start"
    _lead: str = ""  # leading whitespace, held until the first real character decides the mode
    _call: JsonCallStreamer | None = None

    def feed_text(self, text: str) -> list[Delta]:
        if self._mode == "start":
            self._lead += text
            stripped = self._lead.lstrip()
            if not stripped:
                return []
            self._mode = "calls" if stripped.startswith("{") else "text"
            text, self._lead = (stripped if self._mode == "calls" else self._lead), ""
        if self._mode == "text":
            return [OutputText(text)] if text else []
        return self._calls(text)

    def open_call(self) -> tuple[str, str] | None:
        """The open call's tool name and arguments so far (None: no call's arguments are open)."""
        call = self._call.open_call() if self._call is not None else None
        return (call[0], call[1]) if call is not None else None

    def finish(self) -> list[Delta]:
        if self._mode == "start" and self._lead:
            return [OutputText(self._lead)]
        return self._end_call() if self._call else []

    def _calls(self, text: str) -> list[Delta]:
        deltas: list[Delta] = []
        while text:
            if self._call is None:
                text = text.lstrip(_BETWEEN_CALLS)
                if not text:
                    break
                if not text.startswith("{"):  # text after the calls: the rest is answer text
                    self._mode = "text"
                    return deltas + [OutputText(text)]
                self._call = JsonCallStreamer(self.tools)
            inside, after = self._call.feed(text)
            deltas += inside
            if after is None:
                break
            deltas += self._end_call()
            text = after
        return deltas

    def _end_call(self) -> list[Delta]:
        call, self._call = self._call, None
        assert call is not None
        return close_or_text(call)
