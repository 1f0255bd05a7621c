"""The per-model path: how prompts are rendered and output parsed, chosen once per served model."""

from __future__ import annotations

from typing import Any, Protocol

from parsers.base import OutputParser
from parsers.decoder import IncrementalDecoder
from parsers.registry import make_chat_parser
from server.config import ServerConfig
from server.prompt import ChatTemplateRenderer, RenderedPrompt
from server.requests import ResponsesRequest


class ModelPath(Protocol):
    """Chat-template models and harmony (gpt-oss) models differ only behind this interface."""

    name: str

    def render(self, request: ResponsesRequest) -> RenderedPrompt: ...

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

    def render(self, request: ResponsesRequest) -> RenderedPrompt:
        return self._renderer.render(request)

    def new_parser(self, rendered: RenderedPrompt) -> OutputParser:
        return make_chat_parser(self._config.reasoning_parser, self._config.tool_call_parser,
                                rendered.text, rendered.tools)

    def new_decoder(self) -> IncrementalDecoder | None:
        return IncrementalDecoder(self._tokenizer)

    def token_text(self, token_id: int) -> str:
        return self._tokenizer.decode([token_id])


def choose_path(engine: Any, config: ServerConfig) -> ModelPath:
    """Harmony when forced (`--harmony`) or when the model's config says gpt_oss; else the chat template."""
    if config.harmony or getattr(engine, "model_type", None) == "gpt_oss":
        from server.harmony import HarmonyPath

        return HarmonyPath(config)
    return ChatTemplatePath(engine.tokenizer, config)
