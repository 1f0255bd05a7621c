"""Parser selection by vLLM's names (`--reasoning-parser`, `--tool-call-parser`), once per request."""

from __future__ import annotations

from parsers.chat import ChatParser
from parsers.hermes import HermesToolParser
from parsers.reasoning import STYLES, ThinkingParser, starts_in_reasoning
from parsers.tools import ToolTable

REASONING_PARSERS = tuple(STYLES)
TOOL_CALL_PARSERS = ("hermes",)
DEFAULT_TOOL_CALL_PARSER = "hermes"


def check_names(reasoning_parser: str | None, tool_call_parser: str | None) -> None:
    """Fail at start-up, not per request, on a parser name we do not have."""
    if reasoning_parser and reasoning_parser not in REASONING_PARSERS:
        raise ValueError(f"unknown --reasoning-parser {reasoning_parser!r}; known: {', '.join(REASONING_PARSERS)}")
    if tool_call_parser and tool_call_parser not in TOOL_CALL_PARSERS:
        raise ValueError(f"unknown --tool-call-parser {tool_call_parser!r}; known: {', '.join(TOOL_CALL_PARSERS)}")


def make_chat_parser(reasoning_parser: str | None, tool_call_parser: str | None, prompt_text: str,
                     tools: ToolTable | None) -> ChatParser:
    """The parser for one response: reasoning split if configured, tool calls if the request offers tools."""
    reasoning = None
    if reasoning_parser:
        reasoning = ThinkingParser(in_reasoning=starts_in_reasoning(STYLES[reasoning_parser], prompt_text))
    tool_parser = None
    if tools is not None:
        tool_parser = HermesToolParser(tools)  # the only tool-call format so far; see TOOL_CALL_PARSERS
    return ChatParser(reasoning=reasoning, tools=tool_parser)
