"""The wire format as the Open Responses spec and the API have it: every field present with its default, integer
timestamps, settings echoed as applied, `phase` on assistant messages, the server's default output cap."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest

from parsers.deltas import ItemEnded, OutputText, ToolCallArguments, ToolCallStarted
from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from streaming.ids import counting_ids
from streaming.outcome import Finished
from streaming.response import DEFAULTS
from tests.conftest import serve_in_thread
from tests.helpers import build_events
from conformance.openresponses import check_response
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.sse import events_of, parse_frames, sse_lines
from conformance.contract import validate_events

MODEL = "test-model"
CAP = 7


@pytest.fixture(scope="module")
def served(tokenizer: Any) -> Iterator[tuple[ScriptedEngine, str]]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(tokenizer.encode("Paris.",
                                                                                             add_special_tokens=False), cuts=[1])])
    config = ServerConfig(served_model_name=MODEL, default_max_output_tokens=CAP)
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield engine, base_url


def _post(base_url: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{base_url}/responses", json={"model": MODEL, "input": "hi", **body}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _stream(base_url: str, **body: Any) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{base_url}/responses", json={"model": MODEL, "input": "hi", "stream": True, **body},
                      timeout=30) as response:
        return events_of(parse_frames(response.iter_lines()))


def test_every_field_is_present_in_bodies_and_snapshots(served: tuple[ScriptedEngine, str]) -> None:
    _, base_url = served
    events = _stream(base_url)
    validate_events(events)
    snapshots = [event["response"] for event in events if "response" in event]
    for response in [*snapshots, _post(base_url)]:
        assert set(DEFAULTS) <= set(response), set(DEFAULTS) - set(response)
        assert type(response["created_at"]) is int
        check_response(response)
    assert snapshots[0]["usage"] is None and snapshots[0]["completed_at"] is None
    assert type(snapshots[-1]["completed_at"]) is int and snapshots[-1]["usage"] is not None
    raw = [line for line in _raw_lines(base_url) if line.startswith("data: ")]
    assert '"created_at":' in raw[0] and '.0,' not in raw[0].split('"created_at":')[1][:16]


def test_text_with_unicode_line_separators_stays_inside_its_data_line(served: tuple[ScriptedEngine, str]) -> None:
    """JSON leaves U+2028 and U+0085 unescaped, and SSE splits lines at CR and LF only; but a `str.splitlines`
    reader (httpx's `iter_lines`: the fuzzer's, `responses-server check`'s, many a client's) splits at them too, so
    the frames escape them: either reader gets the frame whole."""
    _, base_url = served
    instructions = "one\u2028two\u0085three"
    with httpx.stream("POST", f"{base_url}/responses", timeout=30, json={
            "model": MODEL, "input": "hi", "stream": True, "instructions": instructions}) as response:
        body = response.read()
    events = events_of(parse_frames(sse_lines(body)))
    validate_events(events)
    assert events[0]["response"]["instructions"] == instructions
    assert events_of(parse_frames(body.decode().splitlines())) == events


def _raw_lines(base_url: str) -> list[str]:
    with httpx.stream("POST", f"{base_url}/responses", json={"model": MODEL, "input": "hi", "stream": True},
                      timeout=30) as response:
        return list(response.iter_lines())


def test_settings_are_echoed_as_applied(served: tuple[ScriptedEngine, str]) -> None:
    engine, base_url = served
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    body = _post(base_url, tools=[tool], presence_penalty=0.5, frequency_penalty=-0.25,
                 reasoning={"effort": "low"}, safety_identifier="user-1", text={"verbosity": "low"})
    assert body["tools"] == [{**tool, "description": None, "strict": False}]
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, -0.25)
    assert (engine.requests[-1].sampling.presence_penalty, engine.requests[-1].sampling.frequency_penalty) == (0.5, -0.25)
    assert body["reasoning"] == {"effort": "low", "summary": None}
    assert body["text"] == {"format": {"type": "text"}, "verbosity": "low"}
    assert body["safety_identifier"] == "user-1"
    assert _post(base_url, tools=[{**tool, "strict": True}])["tools"][0]["strict"] is True


def test_the_default_output_cap_applies_when_the_request_sets_none(served: tuple[ScriptedEngine, str]) -> None:
    engine, base_url = served
    assert _post(base_url)["max_output_tokens"] == CAP
    assert engine.requests[-1].sampling.max_tokens == CAP
    assert _post(base_url, max_output_tokens=3)["max_output_tokens"] == 3
    assert engine.requests[-1].sampling.max_tokens == 3


def test_a_seed_reaches_the_engine(served: tuple[ScriptedEngine, str]) -> None:
    """vLLM's `seed` (not OpenAI's): the tests' random-weight models sample the same tokens every run."""
    engine, base_url = served
    _post(base_url, seed=1234)
    assert engine.requests[-1].sampling.seed == 1234
    _post(base_url)
    assert engine.requests[-1].sampling.seed is None
    response = httpx.post(f"{base_url}/responses", json={"model": MODEL, "input": "hi", "seed": -1}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "seed"


def test_the_servers_sampling_defaults_sit_between_the_request_and_the_model(tokenizer: Any) -> None:
    """--sampling-defaults (the bundled model's frequency penalty): over the model's generation_config.json, under
    the request's own fields, and echoed as applied; a grammar's output is sampled without their penalties."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(tokenizer.encode("Paris."), cuts=[1])],
                            sampling_defaults={"temperature": 0.2, "top_p": 0.9})
    config = ServerConfig(served_model_name=MODEL, sampling_defaults={"frequency_penalty": 0.5, "top_p": 0.8})
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        body = _post(base_url)
        applied = engine.requests[-1].sampling
        assert (applied.temperature, applied.top_p, applied.frequency_penalty) == (0.2, 0.8, 0.5)
        assert (body["temperature"], body["top_p"], body["frequency_penalty"]) == (0.2, 0.8, 0.5)
        body = _post(base_url, frequency_penalty=0, top_p=1.0)
        assert (engine.requests[-1].sampling.frequency_penalty, engine.requests[-1].sampling.top_p) == (0, 1.0)
        assert (body["frequency_penalty"], body["top_p"]) == (0, 1.0)
        _post(base_url, text={"format": {"type": "json_object"}})  # JSON repeats its punctuation: no default penalty
        assert (engine.requests[-1].sampling.frequency_penalty, engine.requests[-1].sampling.top_p) == (None, 0.8)


def test_out_of_range_penalties_are_a_400(served: tuple[ScriptedEngine, str]) -> None:
    _, base_url = served
    response = httpx.post(f"{base_url}/responses", json={"model": MODEL, "input": "hi", "presence_penalty": 3},
                          timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "presence_penalty"


def _phases(events: list[dict[str, Any]]) -> list[str | None]:
    final = events[-1]["response"]["output"]
    return [item.get("phase") for item in final if item["type"] == "message"]


def test_a_message_before_a_tool_call_is_commentary_and_the_last_one_the_answer() -> None:
    preamble = [OutputText("Let me look."), ToolCallStarted("get_weather", call_id="c1"), ToolCallArguments("{}"),
                ItemEnded(), OutputText("Sunny.")]
    events = build_events(preamble, Finished("stop"))
    validate_events(events)
    assert _phases(events) == ["commentary", "final_answer"]
    added = [e["item"] for e in events if e["type"] == "response.output_item.added" and e["item"]["type"] == "message"]
    assert all("phase" not in item for item in added)  # known only when the message ends


def test_a_parser_that_knows_the_phase_is_believed() -> None:
    events = build_events([OutputText("Checking."), ItemEnded(phase="commentary")], Finished("stop"))
    assert _phases(events) == ["commentary"]
    events = build_events([OutputText("Done.")], Finished("length"))
    assert _phases(events) == ["final_answer"]
    assert json.loads(json.dumps(events))[-1]["response"]["output"][0]["status"] == "incomplete"
