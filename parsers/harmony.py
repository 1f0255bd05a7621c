"""The harmony (gpt-oss) output parser: token by token through openai_harmony's StreamableParser."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Sequence

from parsers.deltas import (
    Delta,
    ItemEnded,
    MessagePhase,
    OutputText,
    ReasoningText,
    ToolCallArguments,
    ToolCallStarted,
    merge_adjacent,
)
from parsers.json_text import string_field
from parsers.tools import ToolSpec, ToolTable, model_name

FUNCTIONS_PREFIX = "functions."
HOSTED_KINDS = ("mcp", "mcp_approval")  # an MCP server's tools: a namespace of their own, as gpt-oss's built-ins are
BUILTIN_KINDS = ("web_search", "code_interpreter")  # gpt-oss's own: the `browser` namespace and `python`


def recipient(tool: ToolSpec) -> str:
    """Who a call of `tool` is addressed to: `functions.NAME`; `LABEL.NAME` for a tool of an MCP server or of the
    browser (`browser.search`); `python`."""
    if tool.kind in (*HOSTED_KINDS, "web_search") and tool.namespace:
        return f"{tool.namespace}.{tool.name}"
    if tool.kind == "code_interpreter":
        return tool.name
    return FUNCTIONS_PREFIX + tool.model_name
OpenKind = Literal["reasoning", "message", "preamble", "call", "custom"]  # preamble: a commentary message


HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|return|>", "<|call|>")


@dataclass(frozen=True)
class HarmonyTokens:
    """The special token ids that delimit harmony messages, resolved once per encoding.

    What the other special tokens mean in output: `<|endoftext|>` (one of gpt-oss's end ids, which vLLM stops on
    and returns) ends the turn as `<|return|>` does; any other (`<|startoftext|>`, the reserved ones) is malformed
    output. Inside a message body only its end tokens may come. None of them is ever text."""

    message: int  # `<|message|>`: the header is over, the body follows
    ends: frozenset[int]  # `<|end|>`, `<|call|>`, `<|return|>`: the message is over
    structural: frozenset[int]  # HARMONY_TOKENS: what a header and a message's end are made of
    end_of_text: int  # `<|endoftext|>`
    return_: int  # `<|return|>`
    first_special: int  # every special token's id is at least this; ordinary tokens' are below it
    last_special: int  # the highest special token's id

    @classmethod
    def of(cls, encoding: Any) -> HarmonyTokens:
        def token(text: str) -> int:
            (token_id,) = encoding.encode(text, allowed_special="all")
            return int(token_id)

        specials = [token(t) for t in encoding.special_tokens_set]
        return cls(message=token("<|message|>"), ends=frozenset(token(t) for t in ("<|end|>", "<|call|>", "<|return|>")),
                   structural=frozenset(token(t) for t in HARMONY_TOKENS), end_of_text=token("<|endoftext|>"),
                   return_=token("<|return|>"), first_special=min(specials), last_special=max(specials))

    def banned(self) -> tuple[int, ...]:
        """The special tokens a model must never sample: all but harmony's own and `<|endoftext|>`."""
        allowed = self.structural | {self.end_of_text}
        return tuple(t for t in range(self.first_special, self.last_special + 1) if t not in allowed)


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
    _called: tuple[ToolSpec, list[str]] | None = None  # the open call's tool and body so far (a custom call's is
    # held to its end; a function call's streams, and is kept for its closing)

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
        """An unfinished message stays open: the builder closes it (incomplete when the output was cut), as the
        preamble its header said it was."""
        return [MessagePhase("commentary")] if self._open == "preamble" else []

    def open_call(self) -> tuple[str, str] | None:
        """The open call's tool name and its arguments (a custom call's input) so far; None: no call is open."""
        if self._called is None or not self._in_body:
            return None
        tool, body = self._called
        return tool.model_name, "".join(body)

    def end_call(self, rest: str) -> list[Delta]:
        """End the open call as if its message ended after `rest` (its closing, written by the server when the
        output budget would cut it)."""
        assert self._called is not None and self._in_body
        deltas = self._content(rest) if rest else []
        self._in_body = False
        return deltas + self._close_message()

    def _token(self, token_id: int) -> list[Delta]:
        parser, tokens = self._parser, self._tokens
        assert tokens is not None
        if token_id >= tokens.first_special:
            admitted = self._admitted(token_id, self._in_body)
            if admitted is None:
                return []
            token_id = admitted
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

    def _admitted(self, special: int, in_body: bool) -> int | None:
        """The token to parse for a special token (see HarmonyTokens), or None: skip it (`error` says if it is
        malformed)."""
        tokens = self._tokens
        assert tokens is not None
        if special in (tokens.ends if in_body else tokens.structural):
            return special
        if special != tokens.end_of_text:
            self.error = f"the model's output is not valid harmony: special token {special} where it has no place"
            return None
        return tokens.return_ if in_body else None  # the turn ends, in a message as <|return|> ends it

    def _open_message(self, channel: str | None, recipient: str | None) -> list[Delta]:
        if self._open is not None:  # a second header before the first message ended
            return []
        if recipient and recipient != "assistant":
            tool = self._addressed(recipient)
            self._called = (tool, [])
            if tool.kind == "custom":
                self._open = "custom"
                return []
            self._open = "call"
            return [ToolCallStarted(tool.name, kind=tool.kind, namespace=tool.namespace)]
        self._open = "reasoning" if channel == "analysis" else "preamble" if channel == "commentary" else "message"
        return []

    def _addressed(self, to: str) -> ToolSpec:
        """The tool a recipient names (`functions.NAME`, or `LABEL.NAME` of an MCP server); an unknown one is a
        function of that name."""
        name = to.removeprefix(FUNCTIONS_PREFIX)
        if name == to and "." in to and self.tools is not None:
            namespace, _, member = to.partition(".")
            tool = self.tools.lookup(model_name(member, namespace))
            if recipient(tool) == to:
                return tool
        return self.tools.lookup(name) if self.tools else ToolSpec(name)

    def _content(self, text: str) -> list[Delta]:
        if self._open == "reasoning":
            return [ReasoningText(text)]
        if self._open in ("call", "custom"):
            assert self._called is not None
            self._called[1].append(text)
            return [ToolCallArguments(text)] if self._open == "call" else []
        return [OutputText(text)]  # a message or a preamble

    def _close_message(self) -> list[Delta]:
        kind, self._open, called, self._called = self._open, None, self._called, None
        if kind == "custom":
            assert called is not None
            tool, body = called
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
    return string_field(body, "input")
