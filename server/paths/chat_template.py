"""The chat-template path: the tokenizer's chat template renders prompts; reasoning and tool-call parsers (ours,
or vLLM's through an adapter) read the decoded text."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from parsers.base import OutputParser
from parsers.chat import ChatParser
from parsers.decoder import IncrementalDecoder
from parsers.registry import (
    DEFAULT_TOOL_CALL_PARSER,
    NEEDS_SPECIAL_TOKENS,
    TOOL_CALL_PARSERS,
    ToolParserFactory,
    make_chat_parser,
)
from server.model_settings import ModelSettings
from server.constraints.chat import CALL_SYNTAX, call_grammars, chat_structural_tag, thinking_shares
from server.constraints.closing import GrammarClosing, grammar_closing
from server.constraints.rules import OutputRules
from server.errors import RequestError
from server.paths.base import RenderedPrompt
from server.paths.chat_messages import PromptImages, chat_messages, hermes_messages
from server.paths.tools import function_tools, tool_table
from server.prompts.chat_tokens import IncrementalTokenizer
from server.prompts.known import KnownPrompt
from server.requests import ResponsesRequest


class ChatTemplatePath:
    """The tokenizer's chat template in, reasoning/tool-call parsers over decoded text out."""

    reasoning_efforts: tuple[str, ...] = ()  # a template may read `reasoning_effort`; none promises to

    def __init__(self, tokenizer: Any, config: ModelSettings, image_placeholder: str | None = None) -> None:
        self._tokenizer = tokenizer
        self._config = config
        self._renderer = ChatTemplateRenderer(tokenizer, image_placeholder)
        self._tool_parsers = tool_parser_factory(config.tool_call_parser, tokenizer)

    def render(self, request: ResponsesRequest, known: KnownPrompt | None = None) -> RenderedPrompt:
        return self._renderer.render(request, known)

    def structural_tag(self, rules: OutputRules) -> str | None:
        parser = self._config.tool_call_parser or DEFAULT_TOOL_CALL_PARSER
        if self._config.reasoning_parser:  # the grammar starts after thinking, in the budget thinking leaves
            rules = replace(rules, answer_budget=thinking_shares(rules.answer_budget)[1])
        try:
            return chat_structural_tag(rules, CALL_SYNTAX.get(parser))
        except ValueError:
            raise RequestError(f"This tool_choice needs a grammar for the tool-call format '{parser}', which this server "
                           f"does not have (it has: {', '.join(CALL_SYNTAX)}).", param="tool_choice") from None

    def thinking_budget(self, rules: OutputRules) -> int | None:
        """Thinking is bounded by the engine when a grammar follows it (a reasoning model only)."""
        if not self._config.reasoning_parser or not rules.needs_grammar:
            return None
        return thinking_shares(rules.answer_budget)[0]

    def grammar_closing(self, rules: OutputRules, budget: int, parser: OutputParser) -> GrammarClosing | None:
        """A call's closing is its arguments' completion (a custom call's escaped input's), then the call's end,
        read by the tool parser as if the model wrote it (a JSON call syntax only: hermes, llama3_json)."""
        syntax = CALL_SYNTAX.get(self._config.tool_call_parser or DEFAULT_TOOL_CALL_PARSER)
        if rules.calls is None or syntax is None or syntax.style != "json" or not isinstance(parser, ChatParser):
            return None
        return grammar_closing(call_grammars(rules.calls, syntax.end), budget, parser)

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



class ChatTemplateRenderer:
    """Renders requests with the tokenizer's own chat template."""

    def __init__(self, tokenizer: Any, image_placeholder: str | None = None) -> None:
        self._tokenizer = tokenizer
        self._tokens = IncrementalTokenizer(tokenizer)
        self._image_placeholder = image_placeholder  # the model sees: image parts become this text
        template = getattr(tokenizer, "chat_template", None) or ""
        self.template_has_tools = isinstance(template, str) and "tools" in template

    def render(self, request: ResponsesRequest, known: KnownPrompt | None = None) -> RenderedPrompt:
        """The request's prompt; the tokens of `known`'s text are reused as far as this text repeats it."""
        images = PromptImages(self._image_placeholder) if self._image_placeholder else None
        messages = chat_messages(request, images)
        if not messages:
            raise RequestError("input must contain at least one message", param="input")
        table = tool_table(request)
        tools = function_tools(request, table)
        if tools and not self.template_has_tools:
            messages = hermes_messages(messages, tools)
        options: dict[str, Any] = {}
        effort = (request.reasoning or {}).get("effort")
        if effort is not None:  # templates read one or the other (or neither: extra variables are ignored)
            options["enable_thinking"] = effort not in ("none", "minimal")
            options["reasoning_effort"] = effort
        try:
            text = self._tokenizer.apply_chat_template(
                messages,
                tools=tools if tools and self.template_has_tools else None,
                add_generation_prompt=True,
                tokenize=False,
                **options,
            )
        except Exception as exc:  # jinja2 raises TemplateError and friends for conversations it rejects
            raise RequestError(_template_refusal(exc), param="input") from exc
        if images is not None:
            text = images.placed(text)
        tokens = self._tokens.tokenize(text, known)
        return RenderedPrompt(token_ids=tokens.token_ids, text=text, tools=table,
                              images=tuple(images.parts) if images else (), known=tokens.known,
                              outcome=tokens.outcome, reused_tokens=tokens.reused_tokens)


def _template_refusal(exc: Exception) -> str:
    """What the client is told: a template's own `raise_exception(...)` message (a plain TemplateError, written
    for users, such as "roles must alternate"), never the text of any other error inside the template engine."""
    from jinja2 import TemplateError

    if type(exc) is TemplateError and str(exc):
        return f"the model's chat template rejected this conversation: {exc}"
    return "the model's chat template cannot render this conversation"
