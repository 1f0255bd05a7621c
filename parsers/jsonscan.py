"""Incremental tracking of where a streamed JSON value ends (brackets and strings), one pass per character."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class JsonValueEnd:
    """Feed the text of one JSON object or array as it streams; learn where it closes."""

    depth: int = 0
    in_string: bool = False
    escaped: bool = False
    started: bool = False

    def feed(self, text: str) -> int:
        """The index in `text` just after the value's closing bracket, or -1 while it is still open."""
        for index, char in enumerate(text):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
                self.started = True
            elif char in "}]":
                self.depth -= 1
                if self.started and self.depth == 0:
                    return index + 1
        return -1
