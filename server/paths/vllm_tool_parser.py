"""Any other tool-call parser vLLM registers, run through vLLM and converted into our deltas.

vLLM's streaming parsers take the whole
text so far on every call (`current_text`), so their cost per step grows with the output; the formats
this project parses itself (parsers/registry.py) do not have that cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from parsers.deltas import Delta, ItemEnded, OutputText, ToolCallArguments, ToolCallStarted
from parsers.tools import ToolTable


def known(name: str) -> bool:
    from vllm.tool_parsers import ToolParserManager

    return name in ToolParserManager.tool_parsers or name in ToolParserManager.lazy_parsers


def factory(name: str, tokenizer: Any) -> Callable[[ToolTable], "VllmToolParser"]:
    """A per-request parser maker for vLLM's parser `name` (looked up once, at start-up)."""
    from vllm.tool_parsers import ToolParserManager

    parser_class = ToolParserManager.get_tool_parser(name)
    return lambda tools: VllmToolParser(parser_class, tokenizer, tools)


@dataclass
class VllmToolParser:
    """Feeds vLLM's `extract_tool_calls_streaming` and turns its DeltaMessages into deltas."""

    parser_class: Any
    tokenizer: Any
    tools: ToolTable
    _parser: Any = None
    _request: Any = None
    _text: str = ""
    _token_ids: list[int] = field(default_factory=list)
    _open_index: int | None = None

    def __post_init__(self) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

        chat_tools = [{"type": "function", "function": {"name": spec.model_name, "parameters": {
            "type": "object", "properties": {key: {"type": kind} for key, kind in spec.parameter_types}}}}
            for spec in self.tools.tools]
        self._request = ChatCompletionRequest(model="served", messages=[{"role": "user", "content": ""}],
                                              tools=chat_tools or None, tool_choice="auto")
        self._parser = self.parser_class(self.tokenizer, self._request.tools)

    def feed_text(self, text: str) -> list[Delta]:
        """vLLM's parsers also read token ids: they get those of the answer text they are given (re-encoded),
        which is all of it whether or not a reasoning parser took its part first."""
        if not text:
            return []
        token_ids = self.tokenizer.encode(text, add_special_tokens=False)
        previous_text, previous_ids = self._text, list(self._token_ids)
        self._text += text
        self._token_ids += token_ids
        message = self._parser.extract_tool_calls_streaming(
            previous_text, self._text, text, previous_ids, self._token_ids, list(token_ids), self._request)
        return self._convert(message)

    def finish(self) -> list[Delta]:
        deltas: list[Delta] = []
        if self._open_index is not None:
            remaining = self._parser.get_remaining_unstreamed_args()
            deltas += [ToolCallArguments(remaining)] if remaining else []
            deltas.append(ItemEnded())
            self._open_index = None
        return deltas

    def _convert(self, message: Any) -> list[Delta]:
        """One DeltaMessage as deltas: more arguments of the open call first, then text, then new calls (text
        arriving while a call is open would otherwise close it before its own arguments)."""
        if message is None:
            return []
        calls = list(message.tool_calls or [])
        continued = [call for call in calls if self._open_index is not None and call.index == self._open_index]
        deltas: list[Delta] = [ToolCallArguments(call.function.arguments) for call in continued
                               if call.function is not None and call.function.arguments]
        deltas += [OutputText(message.content)] if message.content else []
        for call in calls:
            if call in continued:
                continue
            function = call.function
            if _names_function(call):  # a call of another index begins
                if self._open_index is not None:
                    deltas.append(ItemEnded())
                tool = self.tools.lookup(function.name)
                deltas.append(ToolCallStarted(tool.name, call_id=call.id, kind=tool.kind,
                                                namespace=tool.namespace))
                self._open_index = call.index
            if function is not None and function.arguments and self._open_index is not None:
                deltas.append(ToolCallArguments(function.arguments))
        return deltas


def _names_function(call: Any) -> bool:
    return call.function is not None and bool(call.function.name)
