"""The harmony (gpt-oss) output parser: token by token through openai_harmony's StreamableParser."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
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
from parsers.tools import ToolSpec, ToolTable

FUNCTIONS_PREFIX = "functions."
OpenKind = Literal["reasoning", "message", "preamble", "call", "custom"]  # preamble: a commentary message


@dataclass(frozen=True)
class HarmonyTokens:
    """The special token ids that delimit harmony messages, resolved once per encoding."""

    message: int  # `<|message|>`: the header is over, the body follows
    ends: frozenset[int]  # `<|end|>`, `<|call|>`, `<|return|>`: the message is over

    @classmethod
    def of(cls, encoding: Any) -> HarmonyTokens:
        def token(text: str) -> int:
            (token_id,) = encoding.encode(text, allowed_special="all")
            return int(token_id)

        return cls(message=token("<|message|>"), ends=frozenset(token(t) for t in ("<|end|>", "<|call|>", "<|return|>")))


@dataclass
class HarmonyParser:
    """Maps harmony messages to items as they stream, whatever the engine's step size.

    `analysis` -> reasoning; `final` -> message; `commentary` to `functions.NAME` -> a function call whose
    arguments are the message body; `commentary` with no recipient -> a message (a preamble). Every message
    end inside a step closes its item. A malformed token stream stops parsing and sets `error`; what was
    parsed before stays.

    Cost per token is constant: message boundaries are read from the token ids (`HarmonyTokens`), and of
    openai_harmony's StreamableParser only `process`, `last_content_delta`, `current_channel` and
    `current_recipient` are used, never `state` or `messages`, which serialize the whole parser state per call.
    """

    encoding: Any
    tools: ToolTable | None = None
    reasoning_tokens: int = 0
    error: str | None = None
    stream_parser: Any = None  # makes openai_harmony's StreamableParser (tests pass a watched one)
    _parser: Any = None
    _tokens: HarmonyTokens | None = None
    _in_body: bool = False  # between `<|message|>` and the message's end token
    _analysis: bool = False  # the current channel is `analysis` (as last read)
    _harmony_error: type[Exception] = Exception
    _open: OpenKind | None = None
    _custom: tuple[ToolSpec, list[str]] | None = None  # a custom tool's call is buffered to its end

    def __post_init__(self) -> None:
        from openai_harmony import HarmonyError, Role, StreamableParser

        self._parser = (self.stream_parser or StreamableParser)(self.encoding, role=Role.ASSISTANT)
        self._harmony_error = HarmonyError
        self._tokens = _harmony_tokens(self.encoding)

    def feed(self, token_ids: Sequence[int], text: str = "", token_ends: Sequence[int] | None = None) -> list[Delta]:
        deltas: list[Delta] = []
        for token_id in token_ids:
            if self.error is not None:
                break
            deltas += self._token(token_id)
        return merge_adjacent(deltas) if len(deltas) > 1 else deltas

    def finish(self) -> list[Delta]:
        """An unfinished message stays open: the builder closes it (incomplete when the output was cut)."""
        return []

    def _token(self, token_id: int) -> list[Delta]:
        parser, tokens = self._parser, self._tokens
        assert tokens is not None
        try:
            parser.process(token_id)
        except self._harmony_error as exc:
            self.error = f"the model's output is not valid harmony: {exc}"
            return []
        if self._in_body and token_id not in tokens.ends:  # the per-token case: more of the body
            if self._analysis:  # the channel does not change inside a body
                self.reasoning_tokens += 1
            delta = parser.last_content_delta
            return self._content(delta) if delta else []
        was_analysis, self._analysis = self._analysis, parser.current_channel == "analysis"
        if was_analysis or self._analysis:
            self.reasoning_tokens += 1
        if self._in_body:  # the message's end token
            self._in_body = False
            return self._close_message()
        if token_id == tokens.message:  # the body begins: the header says what the message is
            self._in_body = True
            return self._open_message(parser.current_channel, parser.current_recipient)
        return []

    def _open_message(self, channel: str | None, recipient: str | None) -> list[Delta]:
        if self._open is not None:  # a second header before the first message ended
            return []
        if recipient and recipient != "assistant":
            name = recipient.removeprefix(FUNCTIONS_PREFIX)
            tool = self.tools.lookup(name) if self.tools else ToolSpec(name)
            if tool.kind == "custom":
                self._open, self._custom = "custom", (tool, [])
                return []
            self._open = "call"
            return [ToolCallStarted(tool.name, namespace=tool.namespace)]
        self._open = "reasoning" if channel == "analysis" else "preamble" if channel == "commentary" else "message"
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
        return [OutputText(text)]  # a message or a preamble

    def _close_message(self) -> list[Delta]:
        kind, self._open = self._open, None
        if kind == "custom":
            assert self._custom is not None
            tool, body = self._custom
            self._custom = None
            return [ToolCallStarted(tool.name, kind="custom"), ToolCallArguments(_custom_input("".join(body))),
                    ItemEnded()]
        if kind in ("message", "preamble"):
            return [ItemEnded(phase="commentary" if kind == "preamble" else "final_answer")]
        return [ItemEnded()] if kind is not None else []


@lru_cache(maxsize=None)
def _harmony_tokens(encoding: Any) -> HarmonyTokens:
    return HarmonyTokens.of(encoding)


def _custom_input(body: str) -> str:
    """A custom tool's freeform input, from `{"input": "..."}` or the raw body."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return body
    return value["input"] if isinstance(value, dict) and isinstance(value.get("input"), str) else body
