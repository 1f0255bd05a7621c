"""The event-sequence validator: checks every invariant of the Responses streaming contract (gapless sequence
numbers, created first, item life and indices, stable ids, exact done values, one terminal event) on one stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from conformance.openresponses import check_event

_EVENT = TypeAdapter(ResponseStreamEvent)
_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
_TERMINAL_STATUS = {"response.completed": "completed", "response.incomplete": "incomplete",
                    "response.failed": "failed"}
# delta type -> (done type, field of the done event holding the full value)
_PART_DELTAS = {
    "response.output_text.delta": ("response.output_text.done", "text", "output_text"),
    "response.refusal.delta": ("response.refusal.done", "refusal", "refusal"),
    "response.reasoning_text.delta": ("response.reasoning_text.done", "text", "reasoning_text"),
}
_PART_DONES = {done: (value, kind) for done, value, kind in _PART_DELTAS.values()}
_TOOL_DELTAS = {
    "response.function_call_arguments.delta": ("function_call", "arguments"),
    "response.custom_tool_call_input.delta": ("custom_tool_call", "input"),
    "response.mcp_call_arguments.delta": ("mcp_call", "arguments"),
}
_TOOL_DONES = {
    "response.function_call_arguments.done": ("function_call", "arguments"),
    "response.custom_tool_call_input.done": ("custom_tool_call", "input"),
    "response.mcp_call_arguments.done": ("mcp_call", "arguments"),
}
_STATUSLESS = ("mcp_list_tools", "mcp_approval_request")  # items the SDK types with no status
# A hosted item's progress: (its item type, the progress it reports). In progress first; then, once its input is
# whole, completed or failed, as its done item says.
_HOSTED_PROGRESS = {f"response.{item}.{stage}": (item, stage)
                    for item, stages in (("mcp_call", ("in_progress", "completed", "failed")),
                                         ("mcp_list_tools", ("in_progress", "completed", "failed")),
                                         ("web_search_call", ("in_progress", "searching", "completed")),
                                         ("code_interpreter_call", ("in_progress", "interpreting", "completed")),
                                         ("file_search_call", ("in_progress", "searching", "completed")))
                    for stage in stages}
_HOSTED_RUNS = ("mcp_call", "web_search_call", "code_interpreter_call", "file_search_call")  # calls the server ran:
# done as they ended


class ContractViolation(AssertionError):
    """A stream broke the Responses streaming contract."""


@dataclass
class _OpenItem:
    index: int
    item: dict[str, Any]
    parts: list[dict[str, Any]] = field(default_factory=list)
    part_open: bool = False
    part_text: list[str] = field(default_factory=list)
    part_done_value: str | None = None
    tool_text: list[str] = field(default_factory=list)
    tool_done: bool = False
    summaries: list[dict[str, Any]] = field(default_factory=list)
    summary_open: bool = False
    summary_text: list[str] = field(default_factory=list)
    summary_done_value: str | None = None
    progress: str | None = None  # a hosted item's last progress event (in_progress, completed, failed)
    commands: list[list[str]] = field(default_factory=list)  # a shell call's commands, as their deltas came
    commands_done: int = 0
    annotations: list[dict[str, Any]] = field(default_factory=list)  # the open output_text part's, as added


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


def validate_events(raw_events: list[dict[str, Any]]) -> Response:
    """Validate a whole stream (JSON objects, as sent); return the terminal response."""
    _check(len(raw_events) >= 3, f"a stream has created, in_progress and a terminal event; got {len(raw_events)}")
    events = [_EVENT.validate_python(event) for event in raw_events]  # every event is an SDK model
    for event in raw_events:  # and what the Open Responses spec has
        check_event(event)
    for number, event in enumerate(events):
        _check(event.sequence_number == number, f"sequence_number {event.sequence_number} at position {number}")
    _check(events[0].type == "response.created", f"first event is {events[0].type}")
    _check(events[0].response.output == [], "response.created carries an empty output")
    terminals = [e for e in events if e.type in _TERMINAL]
    _check(len(terminals) == 1 and events[-1] is terminals[0], "exactly one terminal event, and it is last")
    opening = 2 if events[1].type == "response.queued" else 1  # where response.in_progress is
    if opening == 2:  # a background response that waited for its turn: created and queued as queued
        _check(events[0].response.status == events[1].response.status == "queued", "a queued response is queued")
    if not (opening == 2 and len(events) == 3):  # (one cancelled while queued ends there)
        _check(events[opening].type == "response.in_progress", f"event {opening} is {events[opening].type}")
    response_id = events[0].response.id
    for event in (events[0], events[1], events[-1]):
        _check(event.response.id == response_id, "the response id changed during the stream")

    done_items = _validate_items(raw_events[opening + 1:-1])
    final = events[-1].response
    allowed = {_TERMINAL_STATUS[events[-1].type]} | ({"cancelled"} if events[-1].type == "response.failed" else set())
    _check(final.status in allowed, f"{events[-1].type} with status {final.status}")
    final_output = raw_events[-1]["response"]["output"]
    _check(final_output == done_items, "the final output differs from the output_item.done items")
    _validate_terminal(events[-1].type, final, raw_events[-1]["response"])
    return final


def _validate_items(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done_items: list[dict[str, Any]] = []
    current: _OpenItem | None = None
    for event in raw:
        kind = event["type"]
        if kind == "response.output_item.added":
            _check(current is None, "an item was added before the previous one was done (interleaving)")
            _check(event["output_index"] == len(done_items), f"output_index {event['output_index']} is not next")
            item = event["item"]
            _check(bool(item.get("id")), "an added item has an id")
            _check(item.get("status", "in_progress") == "in_progress", "an added item is in_progress")
            _check(not item.get("content"), "an added item has empty content")
            current = _OpenItem(event["output_index"], item)
            continue
        _check(current is not None, f"{kind} arrived with no open item")
        assert current is not None
        _check(event.get("output_index") == current.index, f"{kind} for output_index {event.get('output_index')}")
        if "item_id" in event:
            _check(event["item_id"] == current.item["id"], f"{kind} carries item_id of another item")
        if kind == "response.output_item.done":
            _close_item(current, event["item"])
            done_items.append(event["item"])
            current = None
        else:
            _part_or_tool_event(current, kind, event)
    _check(current is None, "an item was never done")
    return done_items


def _part_or_tool_event(current: _OpenItem, kind: str, event: dict[str, Any]) -> None:
    if kind == "response.content_part.added":
        _check(not current.part_open, "a content part was added while another is open")
        _check(event["content_index"] == len(current.parts), "content_index is not next")
        current.part_open, current.part_text, current.part_done_value = True, [], None
        current.annotations = []
        current.parts.append(event["part"])
    elif kind in _PART_DELTAS:
        _check(current.part_open and current.part_done_value is None, f"{kind} outside an open part")
        _check(event["content_index"] == len(current.parts) - 1, f"{kind} for the wrong content_index")
        _check(current.parts[-1]["type"] == _PART_DELTAS[kind][2], f"{kind} in a {current.parts[-1]['type']} part")
        if kind == "response.output_text.delta":
            _check(isinstance(event.get("logprobs"), list), "output_text.delta carries a logprobs list")
        current.part_text.append(event["delta"])
    elif kind in _PART_DONES:
        value_field, part_kind = _PART_DONES[kind]
        _check(current.part_open and current.parts[-1]["type"] == part_kind, f"{kind} outside its part")
        _check(event[value_field] == "".join(current.part_text), f"{kind} differs from its concatenated deltas")
        current.part_done_value = event[value_field]
    elif kind == "response.output_text.annotation.added":
        _check(current.part_open and current.parts[-1]["type"] == "output_text", f"{kind} outside an output_text part")
        _check(event["content_index"] == len(current.parts) - 1, f"{kind} for the wrong content_index")
        _check(event["annotation_index"] == len(current.annotations), f"{kind}'s annotation_index is not next")
        current.annotations.append(event["annotation"])
    elif kind == "response.content_part.done":
        _check(current.part_done_value is not None, "content_part.done before the part's done event")
        part = event["part"]
        value_field = "refusal" if part["type"] == "refusal" else "text"
        _check(part[value_field] == current.part_done_value, "content_part.done carries another value")
        if part["type"] == "output_text":
            _check(part.get("annotations", []) == current.annotations, "the done part's annotations differ from the "
                   "annotations added")
        current.parts[-1] = part
        current.part_open = False
    elif kind.startswith("response.reasoning_summary_"):
        _summary_event(current, kind, event)
    elif kind in _TOOL_DELTAS:
        _check(current.item["type"] == _TOOL_DELTAS[kind][0], f"{kind} for a {current.item['type']} item")
        _check(not current.tool_done, f"{kind} after the done event")
        current.tool_text.append(event["delta"])
    elif kind in _TOOL_DONES:
        item_type, value_field = _TOOL_DONES[kind]
        _check(current.item["type"] == item_type, f"{kind} for a {current.item['type']} item")
        _check(event[value_field] == "".join(current.tool_text), f"{kind} differs from its concatenated deltas")
        if kind == "response.function_call_arguments.done":
            _check(event.get("name") == current.item["name"], "function_call_arguments.done names the call")
        current.tool_done = True
    elif kind.startswith("response.shell_call_command."):
        _shell_command_event(current, kind, event)
    elif kind in _HOSTED_PROGRESS:
        item_type, stage = _HOSTED_PROGRESS[kind]
        _check(current.item["type"] == item_type, f"{kind} for a {current.item['type']} item")
        _check((stage == "in_progress") == (current.progress is None), f"{kind} out of order")
        _check(stage == "in_progress" or item_type != "mcp_call" or current.tool_done, f"{kind} before its input")
        _check(current.progress != "completed", f"{kind} after the item completed")
        current.progress = stage
    elif kind == "response.compaction.compacting":
        _check(current.item["type"] == "compaction", f"{kind} in a {current.item['type']} item")
    elif kind.startswith("response.code_interpreter_call_code."):
        _check(current.item["type"] == "code_interpreter_call", f"{kind} in a {current.item['type']} item")
        if kind.endswith(".delta"):
            current.tool_text.append(event["delta"])
        else:
            _check(event["code"] == "".join(current.tool_text), f"{kind} differs from its deltas")
    else:
        raise ContractViolation(f"unexpected event {kind} inside an item")


def _shell_command_event(current: _OpenItem, kind: str, event: dict[str, Any]) -> None:
    """A shell call's commands, one after another: added, deltas, done (their concatenation)."""
    _check(current.item["type"] == "shell_call", f"{kind} in a {current.item['type']} item")
    index = event["command_index"]
    if kind.endswith(".added"):
        _check(index == len(current.commands) == current.commands_done, "a command was added out of order")
        current.commands.append([event["command"]])
        return
    _check(index == len(current.commands) - 1 and current.commands_done == index, f"{kind} for another command")
    if kind.endswith(".delta"):
        current.commands[index].append(event["delta"])
    else:
        _check(event["command"] == "".join(current.commands[index]), "shell_call_command.done differs from its deltas")
        current.commands_done += 1


def _summary_event(current: _OpenItem, kind: str, event: dict[str, Any]) -> None:
    """A reasoning item's summary parts: added, text deltas, text done (their concatenation), part done."""
    _check(current.item["type"] == "reasoning", f"{kind} in a {current.item['type']} item")
    if kind == "response.reasoning_summary_part.added":
        _check(not current.summary_open, "a summary part was added while another is open")
        _check(event["summary_index"] == len(current.summaries), "summary_index is not next")
        _check(event["part"] == {"type": "summary_text", "text": ""}, "an added summary part is empty")
        current.summary_open, current.summary_text, current.summary_done_value = True, [], None
        current.summaries.append(event["part"])
        return
    _check(current.summary_open, f"{kind} outside an open summary part")
    _check(event["summary_index"] == len(current.summaries) - 1, f"{kind} for the wrong summary_index")
    if kind == "response.reasoning_summary_text.delta":
        _check(current.summary_done_value is None, "summary text after its done event")
        current.summary_text.append(event["delta"])
    elif kind == "response.reasoning_summary_text.done":
        _check(event["text"] == "".join(current.summary_text), f"{kind} differs from its concatenated deltas")
        current.summary_done_value = event["text"]
    elif kind == "response.reasoning_summary_part.done":
        _check(current.summary_done_value is not None, "summary_part.done before summary_text.done")
        _check(event["part"] == {"type": "summary_text", "text": current.summary_done_value},
               "summary_part.done carries another text")
        current.summaries[-1] = event["part"]
        current.summary_open = False
    else:
        raise ContractViolation(f"unexpected event {kind}")


def _close_item(current: _OpenItem, item: dict[str, Any]) -> None:
    added = current.item
    _check(item["id"] == added["id"] and item["type"] == added["type"], "output_item.done changed the item identity")
    _check(item.get("call_id") == added.get("call_id"), "output_item.done changed the call_id")
    _check(not current.part_open, "output_item.done while a content part is open")
    if item["type"] == "compaction":  # added as it begins (its content to come) or whole; no status
        _check(not added.get("encrypted_content") or item == added, "a compaction item changed after it was whole")
        return
    if item["type"] == "shell_call" and item.get("status") == "completed":
        _check(item["action"]["commands"] == ["".join(c) for c in current.commands], "the commands differ from events")
    if item["type"] in _STATUSLESS:
        _check("status" not in item, f"a {item['type']} item has no status")
    elif item["type"] in _HOSTED_RUNS:
        _check(item.get("status") in ("completed", "failed", "incomplete"),
               f"{item['type']} has status {item.get('status')}")
    else:
        _check(item.get("status") in ("completed", "incomplete"), f"a done item has status {item.get('status')}")
    if item["type"] in ("mcp_call", "mcp_list_tools") and item.get("status") != "incomplete":
        failed = item.get("error") is not None
        _check(current.progress == ("failed" if failed else "completed"), f"{item['type']} done after "
               f"{current.progress} progress, with{'' if failed else 'out'} an error")
    if item["type"] in ("web_search_call", "code_interpreter_call", "file_search_call") \
            and item.get("status") == "completed":
        _check(current.progress == "completed", f"{item['type']} completed without its completed event")
    if item["type"] in ("message", "reasoning"):
        _check(item.get("content") == current.parts, "the done item's content differs from its done parts")
    if item["type"] == "reasoning":
        _check(not current.summary_open, "output_item.done while a summary part is open")
        _check(item.get("summary") == current.summaries, "the done item's summary differs from its done summary parts")
    for tool_type, value_field in _TOOL_DONES.values():
        if item["type"] == tool_type:
            _check(current.tool_done, f"{tool_type} closed without its done event")
            _check(item[value_field] == "".join(current.tool_text), f"{tool_type} {value_field} differ from deltas")


def _validate_terminal(kind: str, final: Response, raw: dict[str, Any]) -> None:
    usage = raw.get("usage")
    _check(usage is not None, "the terminal response carries usage")
    assert usage is not None
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        _check(isinstance(usage[key], int), f"usage.{key} is an integer")
    _check(isinstance(usage["input_tokens_details"]["cached_tokens"], int), "usage has cached_tokens")
    _check(isinstance(usage["output_tokens_details"]["reasoning_tokens"], int), "usage has reasoning_tokens")
    _check(usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"], "total = input + output")
    if kind == "response.incomplete":
        _check(final.incomplete_details is not None and final.incomplete_details.reason in ("max_output_tokens",
                                                                                           "steered"),
               "an incomplete response says why")
    statuses = [item.get("status") for item in raw["output"]]
    _check("incomplete" not in statuses[:-1], "only the last item can be the one cut off")
    if kind == "response.completed":
        _check("incomplete" not in statuses, "a completed response has no incomplete item")
    if kind == "response.failed":
        _check(final.error is not None and bool(final.error.code) and bool(final.error.message),
               "a failed response carries an error with code and message")
    if kind == "response.completed":
        _check(final.error is None and final.incomplete_details is None, "a completed response has no error")
