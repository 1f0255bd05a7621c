"""The response builder: a state machine turning neutral deltas into Responses events and the final Response."""

from __future__ import annotations

import time

import pydantic
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from openai.types.responses import (
    Response,
    ResponseCompactionItem,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseError,
    ResponseFailedEvent,
    ResponseIncompleteEvent,
    ResponseInProgressEvent,
    ResponseOutputItem,
    ResponseOutputItemAddedEvent,
    ResponseQueuedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputTextAnnotationAddedEvent,
    ResponseReasoningSummaryPartAddedEvent,
    ResponseReasoningSummaryPartDoneEvent,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseReasoningSummaryTextDoneEvent,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
    ResponseRefusalDeltaEvent,
    ResponseRefusalDoneEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from openai.types.responses.response import IncompleteDetails
from openai.types.responses.response_compaction_compacting_event import ResponseCompactionCompactingEvent

from parsers.deltas import (
    Delta,
    ItemEnded,
    MessagePhase,
    OutputText,
    ReasoningText,
    Refusal,
    ToolCallArguments,
    ToolCallStarted,
)
from streaming import ids as id_prefixes
from streaming.ids import ITEM_PREFIXES, IdFactory, random_id
from streaming.items import (
    ItemKind,
    ItemRecord,
    Citable,
    ItemStatus,
    ListedTools,
    PartKind,
    Phase,
    PartRecord,
    delta_logprob,
    part_model,
    ToolResult,
    usage_model,
)
from streaming.citations import file_citations
from streaming.outcome import Finished
from streaming.response import wire_response
from streaming.writers import item_writers

Clock = Callable[[], float]


def _construct(model: type[pydantic.BaseModel], fields: dict[str, Any]) -> Any:
    """A model instance from trusted values of all its fields, as pydantic's `model_construct` makes it, at a fraction
    of its cost: the SDK overrides that with a recursive, type-inspecting one (~30 us per call)."""
    instance = model.__new__(model)
    _set(instance, "__dict__", fields)
    _set(instance, "__pydantic_fields_set__", set(fields))
    _set(instance, "__pydantic_extra__", None)
    _set(instance, "__pydantic_private__", None)
    return instance


_set = object.__setattr__
_OTHER_DELTAS: dict[type, tuple[type[pydantic.BaseModel], str]] = {
    Refusal: (ResponseRefusalDeltaEvent, "response.refusal.delta"),
    ReasoningText: (ResponseReasoningTextDeltaEvent, "response.reasoning_text.delta"),
}

# Which item and content part each kind of text delta belongs to.
_TEXT_TARGETS: dict[type, tuple[ItemKind, PartKind]] = {
    OutputText: ("message", "output_text"),
    Refusal: ("message", "refusal"),
    ReasoningText: ("reasoning", "reasoning_text"),
}
# The item each kind of call becomes (parsers/tools.py's CallKind).
_CALL_ITEMS: dict[str, ItemKind] = {"function": "function_call", "custom": "custom_tool_call", "mcp": "mcp_call",
                                    "mcp_approval": "mcp_approval_request", "shell": "shell_call",
                                    "local_shell": "local_shell_call",
                                    "apply_patch": "apply_patch_call", "web_search": "web_search_call",
                                    "code_interpreter": "code_interpreter_call", "file_search": "file_search_call",
                                    "tool_search": "tool_search_call", "client_tool_search": "client_tool_search_call"}
_FAILURE_MESSAGES = {"abort": "generation was aborted", "error": "generation failed",
                     "cancelled": "the response was cancelled"}


class InvalidDelta(ValueError):
    """A delta that cannot follow the ones before it; checked before any event for it is made."""


@dataclass
class _State:
    sequence_number: int = 0
    items: list[ResponseOutputItem] = field(default_factory=list)  # finished items, in output order
    open_item: ItemRecord | None = None
    awaited: ItemRecord | None = None  # a hosted item the model (or the server) has finished, waiting for its result
    pending_whitespace: list[OutputText] = field(default_factory=list)
    citable: dict[int, Citable] = field(default_factory=dict)  # the results the answer may cite, by their number
    compaction: ResponseCompactionItem | None = None  # a compaction begun, its content to come
    started: bool = False
    queued: bool = False  # waiting for its turn to run: in progress once `admitted`
    terminal: Response | None = None


class ResponseBuilder:
    """Owns ids, indices, sequence numbers and the terminal state of one response."""

    def __init__(
        self,
        settings: dict[str, Any],
        *,
        ids: IdFactory = random_id,
        clock: Clock = time.time,
        response_id: str | None = None,
        seal_reasoning: Callable[[str], str] | None = None,
        summarize_reasoning: bool = False,
    ) -> None:
        """`seal_reasoning`, when given, turns a reasoning item's text into its `encrypted_content`.

        With `summarize_reasoning`, reasoning also streams as its own summary (open models have no summarizer).
        """
        self._ids = ids
        self._clock = clock
        self._writers = item_writers(seal_reasoning)
        self._summarize = summarize_reasoning
        self._state = _State()
        self.error: str | None = None  # why feeding stopped early (see `feed`)
        self._template = wire_response({
            **settings,
            "id": response_id or ids(id_prefixes.RESPONSE),
            "created_at": int(clock()),
            "status": "in_progress",
            "output": [],
        })

    # -- public API -------------------------------------------------------------------------

    @property
    def response_id(self) -> str:
        return self._template.id

    @property
    def model(self) -> str:
        """The model the response names."""
        return self._template.model

    @property
    def finished(self) -> bool:
        return self._state.terminal is not None

    def response(self) -> Response:
        """The terminal response, or an in-progress snapshot of what is finished so far."""
        return self._state.terminal or self._snapshot("queued" if self._state.queued else "in_progress")

    def begin_compaction(self) -> list[ResponseStreamEvent]:
        """An automatic compaction, before generation: its item (its content to come), then
        `response.compaction.compacting` while the summary is sampled."""
        assert self._state.started and self._state.open_item is None and not self.finished
        item = ResponseCompactionItem(type="compaction", id=self._ids(ITEM_PREFIXES["compaction"]), encrypted_content="")
        self._state.compaction = item
        index = len(self._state.items)
        return [self._emit(ResponseOutputItemAddedEvent, type="response.output_item.added", output_index=index,
                           item=item),
                self._emit(ResponseCompactionCompactingEvent, type="response.compaction.compacting", item_id=item.id,
                           output_index=index)]

    def end_compaction(self, made: ResponseOutputItem | None) -> list[ResponseStreamEvent]:
        """The compaction's item done: the one `made` (under the id its begin gave), or with no content when it
        failed (the response then fails)."""
        begun, self._state.compaction = self._state.compaction, None
        assert begun is not None
        item = made.model_copy(update={"id": begun.id}) if made is not None else begun
        index = len(self._state.items)
        self._state.items.append(item)
        return [self._emit(ResponseOutputItemDoneEvent, type="response.output_item.done", output_index=index,
                           item=item)]

    @property
    def awaited(self) -> ItemRecord | None:
        """The hosted item (an MCP call, a listing) whose result the server owes before anything else is output."""
        return self._state.awaited

    def open_hosted(self, kind: ItemKind, *, name: str = "", namespace: str | None = None, arguments: str = "",
                    approval_request_id: str | None = None) -> list[ResponseStreamEvent]:
        """A hosted item the server makes itself (a listing, an approved call), whole: it then awaits its result."""
        assert self._state.started and self._state.open_item is None and not self.finished
        events = self._open_item(kind, name=name, namespace=namespace, approval_request_id=approval_request_id)
        item = self._state.open_item
        assert item is not None and self._writers[kind].awaits_result
        if arguments:
            item.arguments.append(arguments)
            events.extend(self._writers[kind].input_delta(item, arguments, self._emit))
        return events + self._close_open_item("completed")

    def resolve_awaited(self, result: ToolResult | ListedTools) -> list[ResponseStreamEvent]:
        """The awaited item's result: its events, then its `output_item.done`."""
        item = self._state.awaited
        assert item is not None and not self.finished
        item.result, self._state.awaited = result, None
        if isinstance(result, ToolResult):
            for number, source in enumerate(result.citable, result.first_citation):
                self._state.citable[number] = source
        status: ItemStatus = "completed"
        writer = self._writers[item.kind]
        events = writer.resulting(item, self._emit) + self._item_done(item, status)
        following = writer.following(item, lambda kind: self._ids(ITEM_PREFIXES[kind]))
        if following is not None:  # made whole by the server: added and done at once
            index = len(self._state.items)
            self._state.items.append(following)
            events += [self._emit(ResponseOutputItemAddedEvent, type="response.output_item.added", output_index=index,
                                  item=following.model_copy(update={"status": "in_progress"})),
                       self._emit(ResponseOutputItemDoneEvent, type="response.output_item.done", output_index=index,
                                  item=following)]
        return events

    @property
    def called_tools(self) -> bool:
        """A tool call has ended in the output (the client owes its output)."""
        return any(self._calls_tool(item.type) for item in self._state.items)

    @property
    def in_tool_call(self) -> bool:
        """A tool call is open: its arguments are still coming (no safe place to stop)."""
        open_item = self._state.open_item
        return open_item is not None and self._writers[open_item.kind].takes_input

    def _calls_tool(self, kind: str) -> bool:
        writer = self._writers.get(kind)  # type: ignore[call-overload]
        return writer is not None and writer.calls_tool

    def queue(self) -> None:
        """The response waits for its turn to run: it is created and reads as queued until `admitted()`."""
        assert not self._state.started, "queue() after start()"
        self._state.queued = True

    def start(self) -> list[ResponseStreamEvent]:
        """`response.created` then `response.in_progress`; or, queued, `response.created` then `response.queued`
        (`response.in_progress` comes with `admitted()`)."""
        assert not self._state.started, "start() called twice"
        self._state.started = True
        if self._state.queued:
            return [
                self._emit(ResponseCreatedEvent, type="response.created", response=self._snapshot("queued")),
                self._emit(ResponseQueuedEvent, type="response.queued", response=self._snapshot("queued")),
            ]
        return [
            self._emit(ResponseCreatedEvent, type="response.created", response=self._snapshot("in_progress")),
            self._emit(ResponseInProgressEvent, type="response.in_progress", response=self._snapshot("in_progress")),
        ]

    def admitted(self) -> list[ResponseStreamEvent]:
        """A queued response's turn has come: `response.in_progress`."""
        assert self._state.queued and not self.finished, "admitted() of a response not queued"
        self._state.queued = False
        return [self._emit(ResponseInProgressEvent, type="response.in_progress",
                           response=self._snapshot("in_progress"))]

    def feed(self, deltas: Iterable[Delta]) -> list[ResponseStreamEvent]:
        """Events for a batch of deltas, in order.

        A delta that cannot follow what came before (arguments with no open call) sets `error` and ends the
        feeding: the events made before it are returned, so no sequence number is lost; the caller then finishes
        the response as failed.
        """
        events: list[ResponseStreamEvent] = []
        if self.error is not None:
            return events
        for delta in deltas:
            item = self._continued_by(delta)
            if item is not None:  # the per-token case: one delta event, nothing opens or closes
                events.append(self._delta_event(item, delta))  # type: ignore[arg-type]
                continue
            try:
                events.extend(self._apply(delta))
            except InvalidDelta as exc:
                self.error = str(exc)
                break
        return events

    def _continued_by(self, delta: Delta) -> ItemRecord | None:
        """The open item, when `delta` is just more text for its last content part."""
        target = _TEXT_TARGETS.get(type(delta))
        item = self._state.open_item
        if (target is None or item is None or self._summarize or self._state.terminal is not None
                or self._state.pending_whitespace or not delta.text):  # type: ignore[union-attr]
            return None
        if item.kind != target[0] or not item.parts or item.parts[-1].kind != target[1]:
            return None
        return item

    def finish(self, finished: Finished) -> list[ResponseStreamEvent]:
        """Close what is open and emit exactly one terminal event."""
        assert self._state.started and not self.finished, "finish() needs start() and runs once"
        events: list[ResponseStreamEvent] = []
        cut = finished.reason not in ("stop", "prepared")
        nothing = not self._state.items and self._state.open_item is None and self._state.awaited is None
        if nothing and finished.reason in ("stop", "length"):
            # An answer with no visible text is still one (empty) message.
            events.extend(self._open_item("message"))
            events.extend(self._ensure_part("output_text"))
            events.extend(self._flush_whitespace())
        self._state.pending_whitespace.clear()
        events.extend(self._close_open_item("incomplete" if cut else "completed"))
        if self._state.compaction is not None:  # the run ended while it compacted
            events.extend(self.end_compaction(None))
        if self._state.awaited is not None:  # a hosted call the run ended before its result: never run
            events.extend(self._item_done(self._state.awaited, "incomplete"))
            self._state.awaited = None
        events.append(self._terminal_event(finished))
        return events

    # -- deltas -----------------------------------------------------------------------------

    def _apply(self, delta: Delta) -> list[ResponseStreamEvent]:
        if self.finished:
            raise RuntimeError("delta after the terminal event")  # a bug of the caller, not of the output
        if isinstance(delta, ToolCallStarted):
            return self._start_tool_call(delta)
        if isinstance(delta, ToolCallArguments):
            return self._tool_arguments(delta)
        if isinstance(delta, ItemEnded):
            self._state.pending_whitespace.clear()
            return self._close_open_item("completed", phase=delta.phase)
        if isinstance(delta, MessagePhase):
            if self._state.open_item is not None and self._state.open_item.kind == "message":
                self._state.open_item.phase = delta.phase
            return []
        return self._text(delta)

    def _text(self, delta: OutputText | Refusal | ReasoningText) -> list[ResponseStreamEvent]:
        if not delta.text:
            return []
        item_kind, part_kind = _TEXT_TARGETS[type(delta)]
        open_item = self._state.open_item
        events: list[ResponseStreamEvent] = []
        if open_item is None or open_item.kind != item_kind:
            if isinstance(delta, OutputText) and not delta.text.strip():
                # Whitespace between items (a model's "\n\n" before a tool call) opens nothing yet.
                self._state.pending_whitespace.append(delta)
                return []
            events.extend(self._close_open_item("completed", phase="commentary"))
            events.extend(self._open_item(item_kind))
            if part_kind == "output_text":
                events.extend(self._flush_whitespace())
        self._state.pending_whitespace.clear()
        events.extend(self._part_delta(part_kind, delta))
        return events

    def _flush_whitespace(self) -> list[ResponseStreamEvent]:
        pending, self._state.pending_whitespace = self._state.pending_whitespace, []
        events: list[ResponseStreamEvent] = []
        for delta in pending:
            events.extend(self._part_delta("output_text", delta))
        return events

    def _start_tool_call(self, delta: ToolCallStarted) -> list[ResponseStreamEvent]:
        self._state.pending_whitespace.clear()
        events = self._close_open_item("completed", phase="commentary")
        kind = _CALL_ITEMS[delta.kind]
        events.extend(
            self._open_item(
                kind,
                name=delta.name,
                call_id=delta.call_id or self._ids(id_prefixes.CALL),
                namespace=delta.namespace,
            )
        )
        return events

    def _tool_arguments(self, delta: ToolCallArguments) -> list[ResponseStreamEvent]:
        item = self._state.open_item
        if item is None or not self._writers[item.kind].takes_input:
            raise InvalidDelta(f"the output parser sent tool call arguments with no open tool call ({delta.text!r})")
        if not delta.text:
            return []
        item.arguments.append(delta.text)
        return self._writers[item.kind].input_delta(item, delta.text, self._emit)

    # -- items ------------------------------------------------------------------------------

    def _open_item(self, kind: ItemKind, **tool: Any) -> list[ResponseStreamEvent]:
        if self._state.awaited is not None:
            raise InvalidDelta("output followed a hosted tool's call before the call's result")
        item = ItemRecord(kind=kind, id=self._ids(ITEM_PREFIXES[kind]), output_index=len(self._state.items), **tool)
        self._state.open_item = item
        writer = self._writers[kind]
        return [self._emit(ResponseOutputItemAddedEvent, type="response.output_item.added",
                           output_index=item.output_index, item=writer.model(item, "in_progress")),
                *writer.opening(item, self._emit)]

    def _close_open_item(self, status: ItemStatus, phase: Phase | None = None) -> list[ResponseStreamEvent]:
        """Close the open item; a message's `phase` is the parser's word for it, else `commentary` when more output
        follows it (the caller says so) and `final_answer` when it ends the response or nothing more is known."""
        item = self._state.open_item
        if item is None:
            return []
        if item.kind == "message":
            item.phase = item.phase or phase or "final_answer"
        events: list[ResponseStreamEvent] = []
        if item.parts:
            events.extend(self._close_part(item, item.parts[-1]))
        if item.summary is not None:
            events.extend(self._close_summary(item, item.summary))
        writer = self._writers[item.kind]
        events.extend(writer.closing(item, self._emit))
        self._state.open_item = None
        if writer.awaits_result and status == "completed":  # done once the server has its result
            self._state.awaited = item
            return events
        return events + self._item_done(item, status)

    def _item_done(self, item: ItemRecord, status: ItemStatus) -> list[ResponseStreamEvent]:
        done = self._writers[item.kind].model(item, status)
        self._state.items.append(done)
        return [self._emit(ResponseOutputItemDoneEvent, type="response.output_item.done",
                           output_index=item.output_index, item=done)]

    # -- content parts ----------------------------------------------------------------------

    def _part_delta(self, kind: PartKind, delta: OutputText | Refusal | ReasoningText) -> list[ResponseStreamEvent]:
        item = self._state.open_item
        assert item is not None
        events = self._ensure_part(kind)
        if isinstance(delta, ReasoningText) and self._summarize and item.summary is None:
            events.append(self._open_summary(item))
        events.append(self._delta_event(item, delta))
        if isinstance(delta, ReasoningText) and self._summarize:
            events.extend(self._summary_delta(item, delta.text))
        return events

    def _delta_event(self, item: ItemRecord, delta: OutputText | Refusal | ReasoningText) -> ResponseStreamEvent:
        """The delta event of text added to the item's last part: the per-token path, built without validation
        (its fields are this builder's own strings and ints; the tests validate every event with the SDK)."""
        part = item.parts[-1]
        part.chunks.append(delta.text)
        sequence_number = self._next_sequence_number()
        kind = type(delta)
        if kind is OutputText:  # the fields in the model's order, as validation would store them
            logprobs: list[Any] = []
            if delta.logprobs:  # type: ignore[union-attr]
                part.logprobs.extend(delta.logprobs)  # type: ignore[union-attr]
                logprobs = [delta_logprob(lp) for lp in delta.logprobs]  # type: ignore[union-attr]
            return _construct(ResponseTextDeltaEvent, {
                "content_index": len(item.parts) - 1, "delta": delta.text, "item_id": item.id, "logprobs": logprobs,
                "output_index": item.output_index, "sequence_number": sequence_number,
                "type": "response.output_text.delta"})
        model, event_type = _OTHER_DELTAS[kind]
        return _construct(model, {"content_index": len(item.parts) - 1, "delta": delta.text, "item_id": item.id,
                                  "output_index": item.output_index, "sequence_number": sequence_number,
                                  "type": event_type})

    def _open_summary(self, item: ItemRecord) -> ResponseStreamEvent:
        """The summary of a reasoning item is its text: one summary part, streamed beside the content."""
        item.summary = PartRecord("summary_text")
        return self._emit(ResponseReasoningSummaryPartAddedEvent, type="response.reasoning_summary_part.added",
                          item_id=item.id, output_index=item.output_index, summary_index=0,
                          part=part_model(item.summary, ""))

    def _summary_delta(self, item: ItemRecord, text: str) -> list[ResponseStreamEvent]:
        assert item.summary is not None
        item.summary.chunks.append(text)
        return [self._emit(ResponseReasoningSummaryTextDeltaEvent, type="response.reasoning_summary_text.delta",
                           item_id=item.id, output_index=item.output_index, summary_index=0, delta=text)]

    def _close_summary(self, item: ItemRecord, summary: PartRecord) -> list[ResponseStreamEvent]:
        text = summary.final_text = "".join(summary.chunks)
        where = dict(item_id=item.id, output_index=item.output_index, summary_index=0)
        return [
            self._emit(ResponseReasoningSummaryTextDoneEvent, type="response.reasoning_summary_text.done",
                       text=text, **where),
            self._emit(ResponseReasoningSummaryPartDoneEvent, type="response.reasoning_summary_part.done",
                       part=part_model(summary, text), **where),
        ]

    def _ensure_part(self, kind: PartKind) -> list[ResponseStreamEvent]:
        """Open a content part of this kind in the open item unless the last part is one."""
        item = self._state.open_item
        assert item is not None
        if item.parts and item.parts[-1].kind == kind:
            return []
        events = self._close_part(item, item.parts[-1]) if item.parts else []
        item.parts.append(PartRecord(kind))
        events.append(self._emit(ResponseContentPartAddedEvent, type="response.content_part.added",
                                 item_id=item.id, output_index=item.output_index,
                                 content_index=len(item.parts) - 1, part=part_model(item.parts[-1], "")))
        return events

    def _close_part(self, item: ItemRecord, part: PartRecord) -> list[ResponseStreamEvent]:
        text = part.final_text = "".join(part.chunks)
        where = dict(item_id=item.id, output_index=item.output_index, content_index=item.parts.index(part))
        cited: list[ResponseStreamEvent] = []
        if part.kind == "output_text" and self._state.citable:
            part.annotations = file_citations(text, self._state.citable)
            cited = [self._emit(ResponseOutputTextAnnotationAddedEvent, type="response.output_text.annotation.added",
                                annotation=annotation, annotation_index=index, **where)
                     for index, annotation in enumerate(part.annotations)]
        if part.kind == "output_text":
            done = self._emit(ResponseTextDoneEvent, type="response.output_text.done", text=text,
                              logprobs=[delta_logprob(lp) for lp in part.logprobs], **where)
        elif part.kind == "refusal":
            done = self._emit(ResponseRefusalDoneEvent, type="response.refusal.done", refusal=text, **where)
        else:
            done = self._emit(ResponseReasoningTextDoneEvent, type="response.reasoning_text.done", text=text, **where)
        return [*cited, done, self._emit(ResponseContentPartDoneEvent, type="response.content_part.done",
                                             part=part_model(part, text), **where)]

    # -- the response -----------------------------------------------------------------------

    def _terminal_event(self, finished: Finished) -> ResponseStreamEvent:
        usage = usage_model(finished)
        if finished.reason in ("stop", "prepared"):
            response = self._snapshot("completed", usage=usage, completed_at=int(self._clock()))
            event = self._emit(ResponseCompletedEvent, type="response.completed", response=response)
        elif finished.reason in ("length", "steered"):
            reason = "max_output_tokens" if finished.reason == "length" else "steered"
            response = self._snapshot("incomplete", usage=usage, incomplete_details=IncompleteDetails(reason=reason))
            event = self._emit(ResponseIncompleteEvent, type="response.incomplete", response=response)
        else:
            # There is no `response.cancelled` event: a cancelled response ends with response.failed
            # whose response has status "cancelled".
            message = finished.error_message or _FAILURE_MESSAGES[finished.reason]
            error = ResponseError(code="server_error", message=message)
            status = "cancelled" if finished.reason == "cancelled" else "failed"
            response = self._snapshot(status, usage=usage, error=error)
            event = self._emit(ResponseFailedEvent, type="response.failed", response=response)
        self._state.terminal = response
        return event

    def _snapshot(self, status: str, **update: Any) -> Response:
        return self._template.model_copy(update={"status": status, "output": list(self._state.items), **update})

    def _emit(self, event_type: type, **fields: Any) -> ResponseStreamEvent:
        """An event, validated, with the next sequence number (the per-token delta events are `_delta_event`'s)."""
        return event_type(sequence_number=self._next_sequence_number(), **fields)

    def _next_sequence_number(self) -> int:
        """The one place where sequence numbers are assigned: 0, 1, 2, ... in the order events are made."""
        number = self._state.sequence_number
        self._state.sequence_number = number + 1
        return number
