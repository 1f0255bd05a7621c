"""The per-model path: how prompts are rendered and output parsed, chosen once per served model."""

from __future__ import annotations

from typing import Any, Protocol

from parsers.base import OutputParser
from parsers.decoder import IncrementalDecoder
from parsers.registry import (
    DEFAULT_TOOL_CALL_PARSER,
    NEEDS_SPECIAL_TOKENS,
    TOOL_CALL_PARSERS,
    ToolParserFactory,
    make_chat_parser,
)
from server.config import ServerConfig
from server.constraints.chat import CALL_SYNTAX, chat_structural_tag
from server.constraints.rules import OutputRules
from server.http.errors import APIError
from server.paths.chat_template import ChatTemplateRenderer, RenderedPrompt
from server.requests import ResponsesRequest


class ModelPath(Protocol):
    """Chat-template models and harmony (gpt-oss) models differ only behind this interface."""

    name: str

    def render(self, request: ResponsesRequest) -> RenderedPrompt: ...

    def structural_tag(self, rules: OutputRules) -> str | None:
        """The grammar (an xgrammar structural tag) that makes the output follow `rules`; None: free output."""
        ...

    def new_parser(self, rendered: RenderedPrompt) -> OutputParser: ...

    def new_decoder(self) -> IncrementalDecoder | None: ...

    def token_text(self, token_id: int) -> str: ...


class ChatTemplatePath:
    """The tokenizer's chat template in, reasoning/tool-call parsers over decoded text out."""

    name = "chat-template"

    def __init__(self, tokenizer: Any, config: ServerConfig) -> None:
        self._tokenizer = tokenizer
        self._config = config
        self._renderer = ChatTemplateRenderer(tokenizer)
        self._tool_parsers = tool_parser_factory(config.tool_call_parser, tokenizer)

    def render(self, request: ResponsesRequest) -> RenderedPrompt:
        return self._renderer.render(request)

    def structural_tag(self, rules: OutputRules) -> str | None:
        parser = self._config.tool_call_parser or DEFAULT_TOOL_CALL_PARSER
        try:
            return chat_structural_tag(rules, CALL_SYNTAX.get(parser))
        except ValueError:
            raise APIError(f"This tool_choice needs a grammar for the tool-call format '{parser}', which this server "
                           f"does not have (it has: {', '.join(CALL_SYNTAX)}).", param="tool_choice") from None

    def new_parser(self, rendered: RenderedPrompt) -> OutputParser:
        return make_chat_parser(self._config.reasoning_parser, self._tool_parsers, rendered.text, rendered.tools)

    def new_decoder(self) -> IncrementalDecoder | None:
        keep_special = self._config.tool_call_parser in NEEDS_SPECIAL_TOKENS
        return IncrementalDecoder(self._tokenizer, skip_special_tokens=not keep_special)

    def token_text(self, token_id: int) -> str:
        return self._tokenizer.decode([token_id])


def tool_parser_factory(name: str | None, tokenizer: Any) -> ToolParserFactory:
    """Our own parser for the name if we have one, else vLLM's parser of that name through an adapter."""
    if name is None or name in TOOL_CALL_PARSERS:
        return TOOL_CALL_PARSERS[name or DEFAULT_TOOL_CALL_PARSER]
    from server.paths import vllm_tool_parser

    return vllm_tool_parser.factory(name, tokenizer)


def check_tool_call_parser(name: str | None) -> None:
    """Fail at start-up on a tool-call parser that neither this project nor vLLM has."""
    if name and name not in TOOL_CALL_PARSERS:
        from server.paths import vllm_tool_parser

        if not vllm_tool_parser.known(name):
            raise ValueError(f"unknown --tool-call-parser {name!r}; ours: {', '.join(TOOL_CALL_PARSERS)}, "
                             "or any name vLLM registers")


def choose_path(engine: Any, config: ServerConfig) -> ModelPath:
    """Harmony when forced (`--harmony`) or when the model's config says gpt_oss; else the chat template."""
    if config.harmony or getattr(engine, "model_type", None) == "gpt_oss":
        from server.paths.harmony import HarmonyPath

        return HarmonyPath(config)
    return ChatTemplatePath(engine.tokenizer, config)
