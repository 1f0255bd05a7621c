"""One writer per output item kind: the item's SDK model, and the events only its kind has (a call's input as it
streams and once it is whole). The builder keeps the state machine (items open and close, parts, sequence numbers)
and asks the open item's writer for what differs between kinds."""

from __future__ import annotations

from typing import Any, Callable

from openai.types.responses import (
    ResponseCustomToolCall,
    ResponseCustomToolCallInputDeltaEvent,
    ResponseCustomToolCallInputDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseReasoningItem,
    ResponseStreamEvent,
)

from streaming.items import ItemKind, ItemRecord, ItemStatus, part_model

Emit = Callable[..., ResponseStreamEvent]  # an event of this class with these fields, numbered in sequence


class ItemWriter:
    """What every kind has: its model; no events of its own, and no input to stream."""

    calls_tool = False  # a tool call: the client owes its output once it ends

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        raise NotImplementedError

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> ResponseStreamEvent:
        """The event of more input for a call (only calls have input)."""
        raise NotImplementedError

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        """The events of this kind before the item's `output_item.done`."""
        return []


class MessageWriter(ItemWriter):
    """An assistant message: its content parts, and its phase once it ends."""

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        if status == "in_progress":
            return ResponseOutputMessage(type="message", id=item.id, role="assistant", status=status, content=[])
        content = [part_model(part, part.final_text) for part in item.parts]
        return ResponseOutputMessage(type="message", id=item.id, role="assistant", status=status, content=content,
                                     phase=item.phase)


class ReasoningWriter(ItemWriter):
    """A reasoning item: its text, its summary when one is asked for, sealed as `encrypted_content` when `seal`."""

    def __init__(self, seal: Callable[[str], str] | None = None) -> None:
        self._seal = seal

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        done = status != "in_progress"
        content = [part_model(part, part.final_text) for part in item.parts] if done else []
        summary = [part_model(item.summary, item.summary.final_text)] if done and item.summary else []
        reasoning = ResponseReasoningItem(type="reasoning", id=item.id, summary=summary, content=content,
                                          status=status)
        if done and self._seal is not None:
            text = "".join(part.final_text or "" for part in item.parts)
            reasoning = reasoning.model_copy(update={"encrypted_content": self._seal(text)})
        return reasoning


class CallWriter(ItemWriter):
    """A call whose input streams: a function's `arguments` (`response.function_call_arguments.*`) or a custom
    tool's `input` (`response.custom_tool_call_input.*`)."""

    calls_tool = True

    def __init__(self, kind: ItemKind, model: type[Any], field: str, events: str, delta: type[Any],
                 done: type[Any]) -> None:
        self._kind, self._model, self._field, self._events = kind, model, field, events
        self._delta, self._done = delta, done

    def model(self, item: ItemRecord, status: ItemStatus) -> ResponseOutputItem:
        extra = {"namespace": item.namespace} if item.namespace else {}
        text = "".join(item.arguments) if status != "in_progress" else ""
        # The SDK's custom_tool_call has no `status` field; it is sent anyway, as for every other item.
        return self._model(type=self._kind, id=item.id, call_id=item.call_id, name=item.name, status=status,
                           **{self._field: text}, **extra)

    def input_delta(self, item: ItemRecord, text: str, emit: Emit) -> ResponseStreamEvent:
        return emit(self._delta, type=f"{self._events}.delta", item_id=item.id, output_index=item.output_index,
                    delta=text)

    def closing(self, item: ItemRecord, emit: Emit) -> list[ResponseStreamEvent]:
        named = {"name": item.name} if self._kind == "function_call" else {}  # the SDK's done event names a function
        return [emit(self._done, type=f"{self._events}.done", item_id=item.id, output_index=item.output_index,
                     **{self._field: "".join(item.arguments)}, **named)]


def item_writers(seal_reasoning: Callable[[str], str] | None = None) -> dict[ItemKind, ItemWriter]:
    """The writer of each kind the builder streams (a reasoning item sealed with `seal_reasoning`, when given)."""
    return {"message": MessageWriter(), "reasoning": ReasoningWriter(seal_reasoning),
            "function_call": CallWriter("function_call", ResponseFunctionToolCall, "arguments",
                                        "response.function_call_arguments", ResponseFunctionCallArgumentsDeltaEvent,
                                        ResponseFunctionCallArgumentsDoneEvent),
            "custom_tool_call": CallWriter("custom_tool_call", ResponseCustomToolCall, "input",
                                           "response.custom_tool_call_input", ResponseCustomToolCallInputDeltaEvent,
                                           ResponseCustomToolCallInputDoneEvent)}
