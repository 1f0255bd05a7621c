"""Parser selection by vLLM's names (`--reasoning-parser`, `--tool-call-parser`), once per request."""

from __future__ import annotations

from typing import Callable

from parsers.chat import ChatParser, TextToolParser
from parsers.hermes import HermesToolParser
from parsers.llama3_json import Llama3JsonToolParser
from parsers.mistral import MistralToolParser
from parsers.pythonic import PythonicToolParser
from parsers.qwen3_coder import Qwen3CoderToolParser
from parsers.reasoning import STYLES, ThinkingParser, starts_in_reasoning
from parsers.tools import ToolTable

REASONING_PARSERS = tuple(STYLES)
TOOL_CALL_PARSERS: dict[str, Callable[[ToolTable], TextToolParser]] = {
    "hermes": HermesToolParser,
    "qwen3_coder": Qwen3CoderToolParser,
    "llama3_json": Llama3JsonToolParser,
    "mistral": MistralToolParser,
    "pythonic": PythonicToolParser,
}
# Formats whose markers are special tokens: the decoder must keep those in the text.
NEEDS_SPECIAL_TOKENS = frozenset({"mistral"})
DEFAULT_TOOL_CALL_PARSER = "hermes"


ToolParserFactory = Callable[[ToolTable], TextToolParser]


def check_reasoning_parser(name: str | None) -> None:
    """Fail at start-up, not per request, on a reasoning parser we do not have."""
    if name and name not in REASONING_PARSERS:
        raise ValueError(f"unknown --reasoning-parser {name!r}; known: {', '.join(REASONING_PARSERS)}")


def make_chat_parser(reasoning_parser: str | None, tool_parser_factory: ToolParserFactory, prompt_text: str,
                     tools: ToolTable | None) -> ChatParser:
    """The parser for one response: reasoning split if configured, tool calls if the request offers tools."""
    reasoning = None
    if reasoning_parser:
        reasoning = ThinkingParser(in_reasoning=starts_in_reasoning(STYLES[reasoning_parser], prompt_text))
    return ChatParser(reasoning=reasoning, tools=tool_parser_factory(tools) if tools is not None else None)
