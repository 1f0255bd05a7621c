"""The request settings a Response echoes back, each checked against the openai SDK's Response fields."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from openai.types.responses import Response
from openai.types.responses.tool import Tool
from pydantic import TypeAdapter, ValidationError

from server.requests import ResponsesRequest

# `temperature` and `top_p` are not here: the response echoes the values used (the request's, else the
# model's defaults), which the route sets.
_ECHOED = (
    "instructions", "tool_choice", "parallel_tool_calls", "max_output_tokens", "metadata",
    "previous_response_id", "reasoning", "text", "truncation", "store", "background", "user",
    "prompt_cache_key", "top_logprobs",
)


@lru_cache(maxsize=None)
def _adapter(field: str) -> TypeAdapter[Any]:
    return TypeAdapter(Response.model_fields[field].annotation)


_TOOL = TypeAdapter(Tool)


def response_settings(request: ResponsesRequest, model: str) -> dict[str, Any]:
    """Fields for the Response template; a value the SDK's types would reject is left out, not failed on."""
    settings: dict[str, Any] = {"model": model, "tools": [t for t in request.tools if _valid_tool(t)]}
    if request.conversation is not None:
        settings["conversation"] = {"id": request.conversation}
    for field in _ECHOED:
        value = getattr(request, field, None)
        if value is None or field not in Response.model_fields:
            continue
        try:
            _adapter(field).validate_python(value)
        except ValidationError:
            continue
        settings[field] = value
    return settings


def _valid_tool(tool: dict[str, Any]) -> bool:
    try:
        _TOOL.validate_python(tool)
        return True
    except ValidationError:
        return False
