"""The reference for parsers/harmony.py: the harmony parser as it was before it became linear (it reads
StreamableParser's `state` and `messages` on every token, whose cost grows with the output). Tests compare the
linear parser's deltas with these, for the same tokens at every step size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from parsers.deltas import (
    Delta,
    ItemEnded,
    OutputText,
    ReasoningText,
    ToolCallArguments,
    ToolCallStarted,
    merge_adjacent,
)
from parsers.harmony import FUNCTIONS_PREFIX, _custom_input
from parsers.tools import ToolSpec, ToolTable

OpenKind = Literal["reasoning", "message", "call", "custom"]


@dataclass
class ReferenceHarmonyParser:
    """Maps harmony messages to items as they stream, whatever the engine's step size.

    `analysis` -> reasoning; `final` -> message; `commentary` to `functions.NAME` -> a function call whose
    arguments are the message body; `commentary` with no recipient -> a message (a preamble). Every message
    end inside a step closes its item. A malformed token stream stops parsing and sets `error`; what was
    parsed before stays.
    """

    encoding: Any
    tools: ToolTable | None = None
    reasoning_tokens: int = 0
    error: str | None = None
    _parser: Any = None
    _open: OpenKind | None = None
    _custom: tuple[ToolSpec, list[str]] | None = None  # a custom tool's call is buffered to its end
    _messages: int = 0  # messages the harmony parser has completed

    def __post_init__(self) -> None:
        from openai_harmony import Role, StreamableParser

        self._parser = StreamableParser(self.encoding, role=Role.ASSISTANT)

    def feed(self, token_ids: Sequence[int], text: str = "", token_ends: Sequence[int] | None = None) -> list[Delta]:
        deltas: list[Delta] = []
        for token_id in token_ids:
            if self.error is not None:
                break
            deltas += self._token(token_id)
        return merge_adjacent(deltas)

    def finish(self) -> list[Delta]:
        """An unfinished message stays open: the builder closes it (incomplete when the output was cut)."""
        return []

    def _token(self, token_id: int) -> list[Delta]:
        from openai_harmony import HarmonyError, StreamState

        parser = self._parser
        was_analysis = parser.current_channel == "analysis"
        try:
            parser.process(token_id)
        except HarmonyError as exc:
            self.error = f"the model's output is not valid harmony: {exc}"
            return []
        deltas: list[Delta] = []
        if parser.state == StreamState.CONTENT:
            if self._open is None:
                deltas += self._open_message(parser.current_channel, parser.current_recipient)
            if parser.last_content_delta:
                deltas += self._content(parser.last_content_delta)
        if was_analysis or parser.current_channel == "analysis":
            self.reasoning_tokens += 1
        if len(parser.messages) > self._messages:  # a message ended with this token
            self._messages = len(parser.messages)
            deltas += self._close_message()
        return deltas

    def _open_message(self, channel: str | None, recipient: str | None) -> list[Delta]:
        if recipient and recipient != "assistant":
            name = recipient.removeprefix(FUNCTIONS_PREFIX)
            tool = self.tools.lookup(name) if self.tools else ToolSpec(name)
            if tool.kind == "custom":
                self._open, self._custom = "custom", (tool, [])
                return []
            self._open = "call"
            return [ToolCallStarted(tool.name, namespace=tool.namespace)]
        self._open = "reasoning" if channel == "analysis" else "message"
        return []

    def _content(self, text: str) -> list[Delta]:
        if self._open == "reasoning":
            return [ReasoningText(text)]
        if self._open == "call":
            return [ToolCallArguments(text)]
        if self._open == "custom":
            assert self._custom is not None
            self._custom[1].append(text)
            return []
        return [OutputText(text)]

    def _close_message(self) -> list[Delta]:
        kind, self._open = self._open, None
        if kind == "custom":
            assert self._custom is not None
            tool, body = self._custom
            self._custom = None
            return [ToolCallStarted(tool.name, kind="custom"), ToolCallArguments(_custom_input("".join(body))),
                    ItemEnded()]
        return [ItemEnded()] if kind is not None else []

