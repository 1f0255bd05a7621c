"""The output parser for chat-template models: optional reasoning split, then optional tool-call parsing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from parsers.deltas import Delta, OutputText
from parsers.reasoning import ThinkingParser


class TextToolParser(Protocol):
    """A tool-call format over answer text (hermes, qwen3_coder, llama3_json, mistral, pythonic)."""

    def feed_text(self, text: str) -> list[Delta]: ...

    def finish(self) -> list[Delta]: ...


@dataclass
class ChatParser:
    """Text goes through the reasoning parser (if any); its answer text through the tool parser (if any)."""

    reasoning: ThinkingParser | None = None
    tools: TextToolParser | None = None
    error: str | None = None  # text never fails to parse: what is not a call stays text

    @property
    def reasoning_tokens(self) -> int:
        return self.reasoning.reasoning_tokens if self.reasoning else 0

    def feed(self, token_ids: Sequence[int], text: str, token_ends: Sequence[int] | None = None) -> list[Delta]:
        if self.reasoning:
            return self._tool_pass(self.reasoning.feed(token_ids, text, token_ends))
        if self.tools is not None:
            return self.tools.feed_text(text)
        return [OutputText(text)] if text else []

    def open_call(self) -> tuple[str, str] | None:
        """The open call's tool name and its arguments so far, as written (JSON)."""
        reader = getattr(self.tools, "open_call", None)
        return reader() if reader is not None else None

    def end_call(self, rest: str) -> list[Delta]:
        """The deltas of the answer text `rest`, written by the server to end the open call."""
        assert self.tools is not None
        return self.tools.feed_text(rest)

    def finish(self) -> list[Delta]:
        deltas = self._tool_pass(self.reasoning.finish() if self.reasoning else [])
        return deltas + (self.tools.finish() if self.tools else [])

    def _tool_pass(self, deltas: list[Delta]) -> list[Delta]:
        if self.tools is None:
            return deltas
        if len(deltas) == 1 and type(deltas[0]) is not OutputText:  # reasoning: nothing for the tool parser
            return deltas
        out: list[Delta] = []
        for delta in deltas:
            out += self.tools.feed_text(delta.text) if isinstance(delta, OutputText) else [delta]
        return out
