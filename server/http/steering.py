"""Steering on a WebSocket: a `response.steer`'s input checked and queued, and the `response.steer.*` events that
tell the client what became of it (the SDK's models, as the SDK documents them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from openai.types.responses import (
    Response,
    ResponseSteerAcceptedEvent,
    ResponseSteerInput,
    ResponseSteerPendingEvent,
)
from pydantic import TypeAdapter, ValidationError

STEER = "steer"  # the id prefix of a steering submission
_MESSAGE_KEYS = {"type", "role", "content"}
_PART_TYPES = {"input_text", "input_image", "input_file"}
_STEER_INPUT: TypeAdapter[Any] = TypeAdapter(ResponseSteerInput)


class SteerRefused(Exception):
    """A steering submission that cannot be accepted: `code` is one of the SDK's `ResponseSteerErrorCode`s."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Steer:
    """An accepted submission: its id, the response it steers, its input as sent and as user message items."""

    id: str
    previous_response_id: str
    input: Any
    items: list[dict[str, Any]]


def steering_items(raw: Any) -> list[dict[str, Any]]:
    """The input of a `response.steer` as message items: a string, or user messages with text, image and file parts
    (SteerRefused `invalid_input` otherwise, naming what is wrong)."""
    if isinstance(raw, str) and raw:
        return [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise SteerRefused("invalid_input", "input must be a non-empty string or a non-empty array of user messages.")
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or item.get("role") != "user" or item.get("type", "message") != "message":
            raise SteerRefused("invalid_input", f"input[{index}] must be a message with role `user`: steering takes "
                               "user messages only.")
        if set(item) - _MESSAGE_KEYS:
            raise SteerRefused("invalid_input", f"input[{index}] may hold only type, role and content.")
        content = item.get("content")
        parts_ok = isinstance(content, list) and content and all(
            isinstance(part, dict) and part.get("type") in _PART_TYPES for part in content)
        if not (isinstance(content, str) and content) and not parts_ok:
            raise SteerRefused("invalid_input", f"input[{index}].content must be a string or input_text, input_image "
                               "and input_file parts.")
    return [{**item, "type": "message"} for item in raw]


def required_input(response: Response) -> list[dict[str, str]]:
    """The stubs of the tool outputs a response waits for: one per client tool call it made."""
    stubs = []
    for item in response.output:
        if item.type == "function_call":
            stubs.append({"type": "function_call_output", "call_id": item.call_id, "name": item.name})
        elif item.type == "custom_tool_call":
            stubs.append({"type": "custom_tool_call_output", "call_id": item.call_id})
    return stubs


def accepted(steer: Steer, number: int) -> str:
    event = ResponseSteerAcceptedEvent(type="response.steer.accepted", sequence_number=number,
                                       steer={"id": steer.id, "previous_response_id": steer.previous_response_id})
    return event.to_json(indent=None, exclude_none=True)


def pending(steer: Steer, stubs: list[dict[str, str]], number: int) -> str:
    event = ResponseSteerPendingEvent(type="response.steer.pending", sequence_number=number,
                                      reason="waiting_for_required_input", required_input=stubs,
                                      steer={"id": steer.id, "previous_response_id": steer.previous_response_id})
    return event.to_json(indent=None, exclude_none=True)


def failed(refused: SteerRefused, previous_response_id: Any, raw_input: Any, number: int,
           steer_id: str | None = None) -> str:
    """The submission given back uncommitted (with its id when it had been accepted); what is not of the shape the
    SDK reads (input that is no steering input at all, an id that is no string) is given back empty."""
    try:
        _STEER_INPUT.validate_python(raw_input)
    except ValidationError:
        raw_input = ""
    target = previous_response_id if isinstance(previous_response_id, str) else ""
    steer = {"input": raw_input, "previous_response_id": target}
    if steer_id is not None:
        steer["id"] = steer_id
    return json.dumps({"type": "response.steer.failed", "sequence_number": number, "steer": steer,
                       "error": {"code": refused.code, "message": refused.message, "type": "invalid_request_error"}})
