"""The check's scenarios: what any Responses endpoint must do, each a function of a transport that raises CheckFailed.

Where content matters, the request constrains it (a strict schema, a required call), so a model of random weights
passes as a real one does: the scenarios check the server, not the model's wisdom.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import jsonschema

from conformance.transports import Endpoint, Transport, WebSocketTransport, expect

CITY = {"type": "object", "additionalProperties": False, "required": ["city", "population"],
        "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"}}}
JSON_ANSWER = {"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}}


def _function(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "description": description, "strict": True, "parameters": {
        "type": "object", "additionalProperties": False, "required": ["city"],
        "properties": {"city": {"type": "string", "maxLength": 20}}}}


WEATHER = _function("get_weather", "The weather in a city.")
TIME = _function("get_time", "The local time in a city.")
# A long, fixed instruction, so that a chained turn has whole blocks of prompt for the prefix cache (OpenAI caches
# from 1,024 tokens on).
LONG_INSTRUCTIONS = "You are a careful assistant for travellers. " + " ".join(
    f"Rule {n}: answer briefly, name the city, and never invent a figure you were not given." for n in range(1, 90))


def _last(final: dict[str, Any], kind: str) -> dict[str, Any]:
    items = [item for item in final["output"] if item["type"] == kind]
    expect(bool(items), f"no {kind} item in the output: {[item['type'] for item in final['output']]}")
    return items[-1]


def _status(final: dict[str, Any], *allowed: str) -> None:
    expect(final["status"] in allowed, f"status {final['status']} (error: {final.get('error')}), wanted {allowed}")


def _call(final: dict[str, Any], *names: str, namespace: str | None = None) -> dict[str, Any]:
    _status(final, "completed")
    call = _last(final, "function_call")
    expect(call["name"] in names, f"called {call['name']}, wanted one of {names}")
    expect(call.get("namespace") == namespace, f"namespace {call.get('namespace')}, wanted {namespace}")
    arguments = json.loads(call["arguments"])
    jsonschema.validate(arguments, WEATHER["parameters"])
    return call


def text(t: Transport) -> None:
    final = t.create({"input": "Say hello.", "max_output_tokens": 64})
    _status(final, "completed", "incomplete")
    expect(bool(final["output"]), "no output")


def json_schema(t: Transport) -> None:
    final = t.create({"input": "Name a city and its population.", "text": JSON_ANSWER, "max_output_tokens": 400})
    _status(final, "completed")
    message = _last(final, "message")
    expect(message.get("phase") in (None, "final_answer"), f"the answer's phase is {message.get('phase')}")
    answer = message["content"][0]["text"]
    try:
        jsonschema.validate(json.loads(answer), CITY)
    except (ValueError, jsonschema.ValidationError) as exc:
        raise AssertionError(f"the answer is not JSON of the schema: {answer[:200]!r} ({exc})") from exc


def json_object(t: Transport) -> None:
    """JSON mode: any JSON object, which closes within the budget even when the model samples freely."""
    final = t.create({"input": "Describe Paris as JSON.", "text": {"format": {"type": "json_object"}},
                      "temperature": 1.0, "max_output_tokens": 120})
    _status(final, "completed")
    answer = _last(final, "message")["content"][0]["text"]
    try:
        parsed = json.loads(answer)
    except ValueError as exc:
        raise AssertionError(f"the answer is not JSON: {answer[:200]!r} ({exc})") from exc
    expect(isinstance(parsed, dict), f"the answer is JSON but not an object: {answer[:200]!r}")


def tool_required(t: Transport) -> None:
    _call(t.create({"input": "Weather in Paris?", "tools": [WEATHER, TIME], "tool_choice": "required",
                    "max_output_tokens": 400}), "get_weather", "get_time")


def tool_named(t: Transport) -> None:
    final = t.create({"input": "Weather in Paris?", "tools": [WEATHER, TIME],
                      "tool_choice": {"type": "function", "name": "get_time"}, "max_output_tokens": 400})
    _call(final, "get_time")


def allowed_tools(t: Transport) -> None:
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]}
    final = t.create({"input": "Weather in Paris?", "tools": [WEATHER, TIME], "tool_choice": choice,
                      "max_output_tokens": 400})
    _call(final, "get_weather")


def tool_after_json(t: Transport) -> None:
    """Structured answers and tool calls mixed, as agents do (xgrammar's cache once mixed up their grammars)."""
    json_schema(t)
    tool_named(t)


def json_after_tool(t: Transport) -> None:
    tool_named(t)
    json_schema(t)


def namespace_tool(t: Transport) -> None:
    """Codex's namespaces: a named group of function tools; the call names its namespace."""
    shell = {"type": "namespace", "name": "weather", "description": "Weather tools.", "tools": [WEATHER]}
    final = t.create({"input": "Weather in Paris?", "tools": [shell], "tool_choice": "required",
                      "max_output_tokens": 400})
    _call(final, "get_weather", namespace="weather")


def custom_tool(t: Transport) -> None:
    """A freeform (custom) tool, as Codex's apply_patch: the call is a custom_tool_call with a string input."""
    tool = {"type": "custom", "name": "run", "description": "Runs one shell command."}
    final = t.create({"input": "Echo a word.", "tools": [tool], "tool_choice": "required", "max_output_tokens": 400})
    _status(final, "completed")
    call = _last(final, "custom_tool_call")
    expect(call["name"] == "run", f"called {call['name']}")
    expect(isinstance(call["input"], str), f"input {call['input']!r}")


def max_output_tokens(t: Transport) -> None:
    final = t.create({"input": "Write a long story about a dragon.", "max_output_tokens": 16})
    _status(final, "incomplete")
    expect(final["incomplete_details"] == {"reason": "max_output_tokens"}, f"{final['incomplete_details']}")
    expect(final["output"][-1]["status"] == "incomplete", "the cut item is not incomplete")
    expect(final["usage"]["output_tokens"] <= 16, f"{final['usage']['output_tokens']} output tokens")


def reasoning_effort(t: Transport) -> None:
    final = t.create({"input": "Say hello.", "reasoning": {"effort": "low"}, "max_output_tokens": 64})
    _status(final, "completed", "incomplete")
    expect((final["reasoning"] or {}).get("effort") == "low", f"reasoning echoed as {final['reasoning']}")


def store_false(t: Transport) -> None:
    final = t.create({"input": "Say hello.", "store": False, "max_output_tokens": 16})
    expect(final["store"] is False, "store: false is echoed as true")


def stateless_chain(t: Transport) -> None:
    """Codex's way: store false, reasoning sealed, the whole output sent back as the next turn's input."""
    first_input = [{"role": "user", "content": "Name a city."}]
    body = {"store": False, "include": ["reasoning.encrypted_content"], "text": JSON_ANSWER,
            "instructions": LONG_INSTRUCTIONS, "max_output_tokens": 400}
    first = t.create({**body, "input": first_input})
    _status(first, "completed")
    for item in first["output"]:
        if item["type"] == "reasoning":
            expect(bool(item.get("encrypted_content")), "a reasoning item without encrypted_content")
    second_input = [*first_input, *first["output"], {"role": "user", "content": "And another?"}]
    second = t.create({**body, "input": second_input})
    _status(second, "completed")


def cached_chain(t: Transport) -> None:
    """A chained turn finds its prefix in the engine's cache."""
    body = {"instructions": LONG_INSTRUCTIONS, "max_output_tokens": 32}
    turns = [{**body, "input": "Name a city."}, {**body, "input": "And another?", "previous_response_id": "PREVIOUS"}]
    if isinstance(t, WebSocketTransport):
        first, second = t.turns(turns)
    else:
        first = t.create(turns[0])
        second = t.create({**turns[1], "previous_response_id": first["id"]})
    _status(second, "completed", "incomplete")
    cached = second["usage"]["input_tokens_details"]["cached_tokens"]
    expect(cached > 0, f"no cached tokens on the chained turn ({second['usage']['input_tokens']} input tokens)")


def warmup_then_turn(t: Transport) -> None:
    """WebSocket mode's `generate: false`: the prompt is prepared, and the next turn finds it cached."""
    expect(isinstance(t, WebSocketTransport), "WebSocket only")
    assert isinstance(t, WebSocketTransport)
    body = {"instructions": LONG_INSTRUCTIONS, "input": "Name a city.", "max_output_tokens": 32}
    warm, turn = t.turns([{**body, "generate": False},
                          {**body, "input": "And another?", "previous_response_id": "PREVIOUS"}])
    expect(warm["output"] == [], "a warm-up produced output")
    expect(turn["usage"]["input_tokens_details"]["cached_tokens"] > 0, "the turn after a warm-up found no cache")


def background_cancel(t: Transport, endpoint: Endpoint) -> None:
    started = endpoint.post("/responses", endpoint.request({"input": "Write a long story.", "background": True,
                                                             "max_output_tokens": 2000}))
    expect(started.status_code == 200, f"status {started.status_code}: {started.text[:300]}")
    response_id = started.json()["id"]
    cancelled = endpoint.post(f"/responses/{response_id}/cancel", {})
    expect(cancelled.status_code == 200, f"cancel: status {cancelled.status_code}: {cancelled.text[:300]}")
    final = endpoint.get(f"/responses/{response_id}")
    expect(final["status"] in ("cancelled", "completed", "incomplete"), f"status {final['status']} after cancel")


Scenario = Callable[..., None]
# name -> (function, transports it runs on: None for all)
SCENARIOS: dict[str, tuple[Scenario, tuple[str, ...] | None]] = {
    "text": (text, None),
    "json_schema": (json_schema, None),
    "json_object": (json_object, None),
    "tool_required": (tool_required, None),
    "tool_named": (tool_named, None),
    "allowed_tools": (allowed_tools, None),
    "tool_after_json": (tool_after_json, None),
    "json_after_tool": (json_after_tool, None),
    "namespace_tool": (namespace_tool, None),
    "custom_tool": (custom_tool, None),
    "max_output_tokens": (max_output_tokens, None),
    "reasoning_effort": (reasoning_effort, None),
    "store_false": (store_false, None),
    "stateless_chain": (stateless_chain, None),
    "cached_chain": (cached_chain, None),
    "warmup_then_turn": (warmup_then_turn, ("websocket",)),
    "background_cancel": (background_cancel, ("http",)),
}
