"""The Response object as it goes on the wire: every field present (null or its default), timestamps as integers."""

from __future__ import annotations

from typing import Annotated, Any, Optional

from openai.types.responses import Response
from pydantic import BeforeValidator

# What the API sends for each field a request left out (the Open Responses schema requires every one of them).
# `temperature` and `top_p` are the model's own defaults when the request has none; the caller sets them.
DEFAULTS: dict[str, Any] = {
    "object": "response",
    "status": "in_progress",
    "completed_at": None,
    "error": None,
    "incomplete_details": None,
    "previous_response_id": None,
    "instructions": None,
    "output": [],
    "tools": [],
    "tool_choice": "auto",
    "truncation": "disabled",
    "parallel_tool_calls": True,
    "text": {"format": {"type": "text"}, "verbosity": "medium"},
    "temperature": 1.0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_logprobs": 0,
    "reasoning": None,
    "usage": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "store": True,
    "background": False,
    "service_tier": "default",
    "metadata": {},
    "safety_identifier": None,
    "prompt_cache_key": None,
    "user": None,
}


def _whole_seconds(value: Any) -> Any:
    return int(value) if isinstance(value, float) else value


Seconds = Annotated[int, BeforeValidator(_whole_seconds)]  # a stored float (written before this type) is truncated


class WireResponse(Response):
    """The SDK's Response with `created_at` and `completed_at` as the integer Unix seconds the API sends (the
    SDK types them as floats, which pydantic would write as `1795447679.0`)."""

    created_at: Seconds  # type: ignore[assignment]
    completed_at: Optional[Seconds] = None  # type: ignore[assignment]


def wire_response(fields: dict[str, Any]) -> WireResponse:
    """A response from `fields` over the defaults, validated; every field counts as set, so each is written."""
    return WireResponse.model_validate({**DEFAULTS, **fields})
