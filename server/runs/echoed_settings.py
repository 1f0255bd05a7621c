"""The request settings a Response echoes back, as they were applied, each checked against the openai SDK's types."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from openai.types.responses import Response
from openai.types.responses.tool import Tool
from pydantic import TypeAdapter, ValidationError

from server.engine.interface import SamplingSettings
from server.requests import ResponsesRequest
from server.service_tier import served_tier

# Echoed as sent; the fields not here are resolved below (or left to streaming.response's defaults).
_ECHOED = (
    "tool_choice", "parallel_tool_calls", "metadata", "previous_response_id", "truncation", "store",
    "background", "user", "safety_identifier", "prompt_cache_key", "top_logprobs", "max_tool_calls",
)
# Fields the Open Responses spec echoes that the SDK's Response type lacks, with the type the spec gives them.
_BEYOND_THE_SDK: dict[str, type] = {"store": bool}
_NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}


@lru_cache(maxsize=None)
def _adapter(field: str) -> TypeAdapter[Any]:
    return TypeAdapter(Response.model_fields[field].annotation)


_TOOL = TypeAdapter(Tool)
SECRET_TOOL_FIELDS = ("authorization", "headers")


def response_settings(request: ResponsesRequest, model: str, sampling: SamplingSettings,
                      max_output_tokens: int | None) -> dict[str, Any]:
    """Fields for the Response template; a value the SDK's types would reject is left out, not failed on.

    The sampling values are those used (the request's, else the model's defaults, else the engine's neutral ones);
    `max_output_tokens` is the cap applied, the request's or the server's default.
    """
    settings: dict[str, Any] = {"model": model, "max_output_tokens": max_output_tokens,
                                "tools": [applied_tool(t) for t in request.tools if _valid_tool(t)]}
    for key, neutral in _NEUTRAL.items():
        value = getattr(sampling, key)
        settings[key] = neutral if value is None else value
    if request.conversation is not None:
        settings["conversation"] = {"id": request.conversation}
    candidates = {field: getattr(request, field, None) for field in _ECHOED}
    candidates["instructions"] = request.echoed_instructions()
    if request.prompt is not None:
        candidates["prompt"] = request.prompt.model_dump(exclude_none=True)
    candidates["service_tier"] = served_tier(request.service_tier)
    candidates["reasoning"] = _reasoning(request.reasoning)
    candidates["text"] = _text(request.text)
    for field, value in candidates.items():
        if value is not None and _fits(field, value):
            settings[field] = value
    return settings


def applied_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as echoed: an MCP tool without its secrets; a function tool with every field the API echoes:
    `strict` as applied (arguments are constrained only when it is true), a missing description or schema as null."""
    if tool.get("type") == "mcp":  # its secrets are sent to its server, never echoed (nor stored with the response)
        return {key: value for key, value in tool.items() if key not in SECRET_TOOL_FIELDS}
    if tool.get("type") != "function":
        return tool
    return {**tool, "description": tool.get("description"), "parameters": tool.get("parameters"),
            "strict": tool.get("strict") is True}


def _reasoning(reasoning: dict[str, Any] | None) -> dict[str, Any] | None:
    if reasoning is None:
        return None
    summary = reasoning.get("summary") or reasoning.get("generate_summary")
    return {"effort": reasoning.get("effort"), "summary": summary}


def _text(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """`text` with its format's every field: a json_schema format is always enforced by the grammar (strict)."""
    if text is None:
        return None
    answer_format = text.get("format") or {"type": "text"}
    if isinstance(answer_format, dict) and answer_format.get("type") == "json_schema":
        answer_format = {**answer_format, "description": answer_format.get("description"), "strict": True}
    return {**text, "format": answer_format, "verbosity": text.get("verbosity", "medium")}


def _fits(field: str, value: Any) -> bool:
    if field not in Response.model_fields:
        return isinstance(value, _BEYOND_THE_SDK.get(field, ()))
    try:
        _adapter(field).validate_python(value)
        return True
    except ValidationError:
        return False


def _valid_tool(tool: dict[str, Any]) -> bool:
    try:
        _TOOL.validate_python(tool)
        return True
    except ValidationError:
        return False
