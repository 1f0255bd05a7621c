"""The harmony (gpt-oss) path: prompts rendered and output parsed with openai_harmony, no HF tokenizer needed."""

from __future__ import annotations

import datetime
from functools import lru_cache, partial
from typing import Any, Callable

from parsers.base import OutputParser
from parsers.harmony import BUILTIN_KINDS, FUNCTIONS_PREFIX, HOSTED_KINDS, HarmonyParser, HarmonyTokens, recipient
from parsers.tools import ToolTable
from server.model_settings import ModelSettings
from server.constraints.closing import GrammarClosing, arguments_grammar, grammar_closing
from server.constraints.harmony import harmony_structural_tag
from server.constraints.rules import OutputRules
from server.errors import RequestError
from server.paths.base import RenderedPrompt
from server.paths.tools import function_tools, tool_definitions, tool_table
from server.prompts.harmony_tokens import HarmonyMessageTokens
from server.prompts.known import KnownPrompt
from server.requests import (
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
)

# Every reasoning effort the SDK knows -> the nearest of harmony's three.
_EFFORTS = {"none": "LOW", "minimal": "LOW", "low": "LOW", "medium": "MEDIUM", "high": "HIGH", "xhigh": "HIGH",
            "max": "HIGH"}


@lru_cache(maxsize=1)
def harmony_encoding() -> Any:
    """The o200k_harmony encoding; it ships inside the openai_harmony package (no download)."""
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


class HarmonyPath:
    """Renders requests as harmony conversations and parses output token by token."""

    reasoning_efforts = ("low", "medium", "high")  # harmony's system message says which

    def __init__(self, config: ModelSettings, today: datetime.date | None = None) -> None:
        self._config = config
        self._encoding = harmony_encoding()
        self._today = today
        self._stop_tokens = tuple(self._encoding.stop_tokens_for_assistant_actions())
        self._messages = HarmonyMessageTokens(self._encoding, config.history_memory_bytes)  # each message rendered once
        # Reserved harmony tokens are not special to xgrammar (gpt-oss's tokenizer does not list them as such), so a
        # grammar's free text or JSON string could take one; they are banned from sampling instead.
        self._banned_tokens = HarmonyTokens.of(self._encoding).banned()

    def render(self, request: ResponsesRequest, known: KnownPrompt | None = None) -> RenderedPrompt:
        """The request's prompt, its messages' tokens reused wherever a message was rendered before (`known` is
        not needed: messages are found by their content)."""
        table = tool_table(request)
        conversation = harmony_conversation(request, self._today or datetime.date.today(), table)
        # Earlier turns' analysis is dropped after a final answer, as gpt-oss was trained.
        rendered = self._messages.render_for_completion(conversation.messages)
        return RenderedPrompt(token_ids=rendered.token_ids, text="", tools=table,
                              stop_token_ids=self._stop_tokens, banned_token_ids=self._banned_tokens,
                              outcome="extended" if rendered.reused_tokens else "full",
                              reused_tokens=rendered.reused_tokens)

    def structural_tag(self, rules: OutputRules) -> str | None:
        return harmony_structural_tag(rules, self._special_token)

    def thinking_budget(self, rules: OutputRules) -> int | None:
        return None  # the grammar bounds analysis and preambles itself (server/constraints/harmony.py)

    def _special_token(self, text: str) -> int:
        (token_id,) = self._encoding.encode(text, allowed_special="all")
        return token_id

    def new_parser(self, rendered: RenderedPrompt) -> HarmonyParser:
        return HarmonyParser(self._encoding, tools=rendered.tools)

    def grammar_closing(self, rules: OutputRules, budget: int, parser: OutputParser) -> GrammarClosing | None:
        """A call's closing is its arguments' completion (a custom call's input's), then the message's end."""
        assert isinstance(parser, HarmonyParser)
        if rules.calls is None:
            return None
        grammars: dict[str, Callable[[], str] | None] = {name: partial(arguments_grammar, schema)
                                                         for name, schema in rules.calls.schemas.items()}
        for name, ebnf in rules.calls.custom.items():
            grammars[name] = None if ebnf is None else partial(str, ebnf)
        return grammar_closing(grammars, budget, parser)

    def new_decoder(self) -> None:
        return None  # the harmony parser decodes its own content

    def token_text(self, token_id: int) -> str:
        return self._encoding.decode([token_id])


def harmony_conversation(request: ResponsesRequest, today: datetime.date, table: ToolTable | None) -> Any:
    """System (effort, date), developer (instructions, function tools), then every input item."""
    from openai_harmony import Conversation, DeveloperContent, Message, ReasoningEffort, Role, SystemContent

    effort = (request.reasoning or {}).get("effort") or "medium"
    system = SystemContent.new().with_conversation_start_date(today.isoformat()).with_reasoning_effort(
        getattr(ReasoningEffort, _EFFORTS.get(effort, "MEDIUM")))
    kinds = {spec.kind for spec in table.tools} if table is not None else set()
    if "web_search" in kinds:  # gpt-oss's own tools, described in its system message as it was trained
        system = system.with_browser_tool()
    if "code_interpreter" in kinds:
        system = system.with_python_tool()
    messages = [Message.from_role_and_content(Role.SYSTEM, system)]
    specs = {spec.model_name: spec for spec in table.tools} if table is not None else {}
    tools = [_tool_description(tool["function"], specs[tool["function"]["name"]].kind == "custom")
             for tool in function_tools(request, table)
             if specs[tool["function"]["name"]].kind not in (*HOSTED_KINDS, *BUILTIN_KINDS)]
    namespaces = _hosted_namespaces(request, table)
    if request.instructions or tools or namespaces:
        developer = DeveloperContent.new()
        if request.instructions:
            developer = developer.with_instructions(request.instructions)
        if tools:
            developer = developer.with_function_tools(tools)
        for namespace in namespaces:
            developer = developer.with_tools(namespace)
        messages.append(Message.from_role_and_content(Role.DEVELOPER, developer))
    messages += _input_messages(request, table)
    return Conversation.from_messages(messages)


def _tool_description(function: dict[str, Any], freeform: bool) -> Any:
    """A function tool with its parameters; a custom (freeform) tool with none, its description saying that the
    message body is its input as it is."""
    from openai_harmony import ToolDescription

    if not freeform:
        return ToolDescription.new(function["name"], function["description"], parameters=function["parameters"])
    description = f"{function['description']}\nFreeform: the message body is the input, as plain text, not JSON."
    return ToolDescription.new(function["name"], description.strip(), parameters=None)


def _hosted_namespaces(request: ResponsesRequest, table: ToolTable | None) -> list[Any]:
    """Each MCP server's tools, as a namespace of their own in the developer message (`LABEL.NAME`)."""
    from openai_harmony import ToolDescription, ToolNamespaceConfig

    definitions = tool_definitions(request)
    grouped: dict[str, list[Any]] = {}
    for spec in table.tools if table is not None else ():
        if spec.kind in HOSTED_KINDS and spec.namespace:
            tool = definitions.get(spec.model_name, {})
            grouped.setdefault(spec.namespace, []).append(ToolDescription.new(
                spec.name, tool.get("description") or "", parameters=tool.get("parameters")))
    return [ToolNamespaceConfig(name=label, description=f"The tools of the MCP server {label}.", tools=tools)
            for label, tools in grouped.items()]


def _input_messages(request: ResponsesRequest, table: ToolTable | None) -> list[Any]:
    from openai_harmony import Author, Message, Role

    calls: dict[str, str] = {}  # call_id -> who the model called (a function, or an MCP server's tool)
    out = []
    for index, item in enumerate(request.input_items()):
        if isinstance(item, MessageItem):
            role = {"user": Role.USER, "assistant": Role.ASSISTANT}.get(item.role, Role.DEVELOPER)
            message = Message.from_role_and_content(role, item.text())
            out.append(message.with_channel("final") if role == Role.ASSISTANT else message)
        elif isinstance(item, ReasoningItem):
            out.append(Message.from_role_and_content(Role.ASSISTANT, item.text()).with_channel("analysis"))
        elif isinstance(item, (FunctionCallItem, CustomToolCallItem)):
            name = item.model_name
            to = recipient(table.lookup(name)) if table is not None else FUNCTIONS_PREFIX + name
            calls[item.call_id] = to
            if isinstance(item, CustomToolCallItem):  # freeform: the body is the input, as the model wrote it
                out.append(Message.from_role_and_content(Role.ASSISTANT, item.input).with_channel("commentary")
                           .with_recipient(to))
                continue
            out.append(Message.from_role_and_content(Role.ASSISTANT, item.arguments or "{}").with_channel("commentary")
                       .with_recipient(to).with_content_type("<|constrain|>json"))
        elif isinstance(item, FunctionCallOutputItem) and item.tool_name is not None:  # a tool's, given unasked
            to = recipient(table.lookup(item.tool_name)) if table is not None else FUNCTIONS_PREFIX + item.tool_name
            out.append(Message.from_author_and_content(Author.new(Role.TOOL, to), item.text())
                       .with_channel("commentary").with_recipient("assistant"))
        elif isinstance(item, (FunctionCallOutputItem, CustomToolCallOutputItem)):
            if item.call_id not in calls:
                raise RequestError(f"No tool call found for function call output with call_id '{item.call_id}'.",
                               param=f"input[{index}].call_id")
            author = Author.new(Role.TOOL, calls[item.call_id])
            out.append(Message.from_author_and_content(author, item.text()).with_channel("commentary")
                       .with_recipient("assistant"))
    return out
