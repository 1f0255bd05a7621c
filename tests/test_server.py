"""The real FastAPI app on a real socket, with a scripted engine: SSE, SDK clients, errors, disconnects."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import contextmanager
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import OpenAI

from server.http.app import create_app
from server.runs import prepare
from server.runs.context import ServingContext
from server.config import ServerConfig
from server.engine.interface import EngineStep, StepLogprob
from server.history.sealing import Sealer
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scale_out_worker import engine_served
from tests.helpers import collapsed_types, without_volatile
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.sse import events_of, parse_frames
from conformance.contract import validate_events

MODEL = "test-model"
ANSWER = "The capital of France is Paris. Ça va? 日本 🎉"


def answer_tokens(tokenizer: Any, text: str = ANSWER) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


class Harness:
    """A served app whose engine plays `engine.scripts`; tests replace the scripts as they need."""

    def __init__(self, engine: ScriptedEngine, base_url: str) -> None:
        self.engine = engine
        self.base_url = base_url
        self.client = OpenAI(base_url=base_url, api_key="unused", _strict_response_validation=True, max_retries=0)

    def play(self, *scripts: Any) -> None:
        """The next request plays the first script, the one after it the second, and so on (cycling)."""
        self.engine.scripts, self.engine.first = list(scripts), len(self.engine.requests)

    def raw_stream(self, **body: Any) -> list[dict[str, Any]]:
        """POST with stream=true and parse the SSE body as curl users would."""
        with httpx.stream("POST", f"{self.base_url}/responses", json={"model": MODEL, "stream": True, **body},
                          timeout=30) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            return events_of(parse_frames(response.iter_lines()))

    def engine_aborted_last_request(self, within: float = 5.0) -> bool:
        request_id = self.engine.requests[-1].request_id
        deadline = time.monotonic() + within
        while request_id not in self.engine.aborted and time.monotonic() < deadline:
            time.sleep(0.05)
        return request_id in self.engine.aborted

    def post(self, **body: Any) -> httpx.Response:
        return httpx.post(f"{self.base_url}/responses", json={"model": MODEL, **body}, timeout=30)


SEALER = Sealer.ephemeral()  # the app's reasoning key, so tests can send back what it sealed


@contextmanager
def served_harness(tokenizer: Any, how: str) -> Iterator[Harness]:
    """The app on the scripted engine: in its process, or behind a scale-out worker (tests/scale_out_worker.py)
    that the server's remote engine drives over HTTP, as it drives vLLM's workers in a fleet."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    with engine_served(engine, how) as start_engine:
        context = ServingContext(config=ServerConfig(served_model_name=MODEL, keepalive_seconds=0.2),
                                 engine_factory=start_engine, ids=counting_ids(), sealer=SEALER)
        with serve_in_thread(create_app(context)) as base_url:
            yield Harness(engine, base_url)


@pytest.fixture(scope="module", params=["in_process", "scale_out"])
def harness(request: pytest.FixtureRequest, tokenizer: Any) -> Iterator[Harness]:
    """This module's tests run on both engines."""
    with served_harness(tokenizer, request.param) as served:
        yield served


@pytest.fixture(scope="module")
def in_process_harness(tokenizer: Any) -> Iterator[Harness]:
    """For modules that count the engine's requests and prefills (the scripted engine's own records): a remote
    engine's prefill is a generation of one token, which the scripted engine would count as a request."""
    with served_harness(tokenizer, "in_process") as served:
        yield served


def test_streamed_text_follows_the_contract(harness: Harness, tokenizer: Any) -> None:
    harness.play(steps_from_tokens(answer_tokens(tokenizer), cuts=[1, 2, 5, 9]))
    events = harness.raw_stream(input="What is the capital of France?")
    final = validate_events(events)
    assert final.status == "completed"
    assert final.output_text == ANSWER
    assert final.usage is not None and final.usage.output_tokens == len(answer_tokens(tokenizer))


def test_sdk_strict_stream_and_accumulator(harness: Harness, tokenizer: Any) -> None:
    harness.play(steps_from_tokens(answer_tokens(tokenizer), cuts=[3, 4]))
    streamed = list(harness.client.responses.create(model=MODEL, input="hi", stream=True))
    assert streamed[-1].type == "response.completed"
    with harness.client.responses.stream(model=MODEL, input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == ANSWER


def test_non_streaming_equals_the_folded_stream(harness: Harness, tokenizer: Any) -> None:
    harness.play(steps_from_tokens(answer_tokens(tokenizer), cuts=[2, 7]))
    streamed = harness.raw_stream(input="hi")[-1]["response"]
    body = harness.post(input="hi").json()
    assert without_volatile(body) == without_volatile(streamed)
    assert harness.client.responses.create(model=MODEL, input="hi").output_text == ANSWER


def test_only_a_json_answer_asks_for_its_output_whole(in_process_harness: Harness, tokenizer: Any) -> None:
    """Nothing reads a JSON answer before its end: its engine request asks for the output in one step (vLLM makes
    one output instead of one a step). A stream reads each step, and a run that a step may end early (a cap on
    tool calls) reads them all too."""
    harness = in_process_harness
    harness.play(steps_from_tokens(answer_tokens(tokenizer), cuts=[2, 7]))
    harness.raw_stream(input="hi")
    assert harness.post(input="hi").json()["output"][0]["content"][0]["text"] == ANSWER
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    assert harness.post(input="hi", tools=[tool], max_tool_calls=1).status_code == 200
    assert [request.whole_output for request in harness.engine.requests[-3:]] == [False, True, False]


def test_schema_work_leaves_the_loop_only_for_a_schema(in_process_harness: Harness, tokenizer: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's schema checks and its grammar run in a thread when it carries a schema (a tool's parameters, an
    answer's json_schema), and at once when it carries none: a hand-off to a thread costs more than checking nothing."""
    harness = in_process_harness
    on_loop: list[bool] = []

    def watched(work: Any) -> Any:
        def run(*args: Any) -> Any:
            on_loop.append(_loop_running())
            return work(*args)
        return run

    monkeypatch.setattr(prepare, "check_schemas", watched(prepare.check_schemas))
    monkeypatch.setattr(prepare, "_constraints", watched(prepare._constraints))
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    answer = {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object", "properties": {}}}}
    for more, expected in (({}, [True, True]), ({"tools": [tool]}, [False, False]), ({"text": answer}, [False, False])):
        on_loop.clear()
        harness.play(steps_from_tokens(answer_tokens(tokenizer), cuts=[2]))
        assert harness.post(input="hi", **more).status_code == 200
        assert on_loop == expected, more


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, 40), max_size=12))
def test_any_step_grouping_gives_the_same_events(harness: Harness, tokenizer: Any, cuts: list[int]) -> None:
    tokens = answer_tokens(tokenizer)
    harness.play(steps_from_tokens(tokens, cuts=[]))
    whole = harness.raw_stream(input="hi")
    harness.play(steps_from_tokens(tokens, cuts=cuts))
    chunked = harness.raw_stream(input="hi")
    validate_events(chunked)
    assert collapsed_types(chunked) == collapsed_types(whole)
    assert without_volatile(chunked[-1]["response"]) == without_volatile(whole[-1]["response"])
    assert all("\ufffd" not in e.get("delta", "") for e in chunked), "no replacement characters mid-stream"


def test_max_output_tokens_ends_incomplete(harness: Harness, tokenizer: Any) -> None:
    harness.play(steps_from_tokens(answer_tokens(tokenizer)[:3], cuts=[1, 2], finish="length"))
    events = harness.raw_stream(input="hi", max_output_tokens=3)
    final = validate_events(events)
    assert events[-1]["type"] == "response.incomplete"
    assert final.incomplete_details is not None and final.incomplete_details.reason == "max_output_tokens"
    assert final.output[-1].status == "incomplete"
    assert harness.engine.requests[-1].sampling.max_tokens == 3


def test_engine_failure_mid_stream_ends_failed(harness: Harness, tokenizer: Any) -> None:
    tokens = answer_tokens(tokenizer)
    harness.play(steps_from_tokens(tokens[:4], cuts=[2], finish=None) + [RuntimeError("engine died")])
    events = harness.raw_stream(input="hi")
    final = validate_events(events)
    assert events[-1]["type"] == "response.failed"
    assert final.error is not None and "engine died" not in final.error.message  # logged, not told
    assert final.output[-1].status == "incomplete"


def test_engine_failure_before_output_ends_failed(harness: Harness) -> None:
    harness.play(RuntimeError("no engine"))
    events = harness.raw_stream(input="hi")
    validate_events(events)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.failed"]


def test_client_disconnect_aborts_the_engine_request(harness: Harness, tokenizer: Any) -> None:
    harness.engine.step_delay = 0.05
    try:
        harness.play(steps_from_tokens(answer_tokens(tokenizer) * 20, cuts=list(range(1, 400))))
        with httpx.stream("POST", f"{harness.base_url}/responses",
                          json={"model": MODEL, "stream": True, "input": "hi"}, timeout=30) as response:
            lines = response.iter_lines()
            while "output_text.delta" not in next(lines):
                pass
        assert harness.engine_aborted_last_request()
    finally:
        harness.engine.step_delay = 0.0


def test_keepalive_comments_while_the_engine_is_silent(harness: Harness, tokenizer: Any) -> None:
    harness.engine.step_delay = 0.7  # a long prefill before the first token
    try:
        harness.play(steps_from_tokens(answer_tokens(tokenizer, "ok"), cuts=[]))
        with httpx.stream("POST", f"{harness.base_url}/responses",
                          json={"model": MODEL, "stream": True, "input": "hi"}, timeout=30) as response:
            frames = parse_frames(response.iter_lines())
        assert any(f.comment == "keep-alive" for f in frames)
        validate_events(events_of(frames))
    finally:
        harness.engine.step_delay = 0.0


def test_sse_frames_are_single_writes_with_matching_event_names(harness: Harness, tokenizer: Any) -> None:
    harness.play(steps_from_tokens(answer_tokens(tokenizer, "Hi"), cuts=[]))
    with httpx.stream("POST", f"{harness.base_url}/responses",
                      json={"model": MODEL, "stream": True, "input": "hi"}, timeout=30) as response:
        raw = response.read().decode()
    frames = [f for f in raw.split("\n\n") if f.strip() and not f.startswith(":")]
    for frame in frames:
        name, data = frame.split("\n")
        assert name == f"event: {json.loads(data[len('data: '):])['type']}"
    assert "[DONE]" not in raw


def test_logprobs_when_included(harness: Harness, tokenizer: Any) -> None:
    tokens = answer_tokens(tokenizer, "Paris")
    steps = [EngineStep([t], None, logprobs=[StepLogprob(t, -0.5, ((t + 1, -1.5),))]) for t in tokens]
    steps[-1] = EngineStep(steps[-1].token_ids, "stop", logprobs=steps[-1].logprobs)
    harness.play(steps)
    events = harness.raw_stream(input="hi", include=["message.output_text.logprobs"], top_logprobs=1)
    validate_events(events)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert all(d["logprobs"] and d["logprobs"][0]["logprob"] == -0.5 for d in deltas)
    assert len(deltas[0]["logprobs"][0]["top_logprobs"]) == 1
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert len(done["logprobs"]) == sum(len(d["logprobs"]) for d in deltas)
    assert harness.engine.requests[-1].sampling.logprobs == 1


def test_no_logprobs_unless_asked(harness: Harness, tokenizer: Any) -> None:
    harness.play(steps_from_tokens(answer_tokens(tokenizer, "Paris"), cuts=[]))
    events = harness.raw_stream(input="hi")
    assert all(e["logprobs"] == [] for e in events if e["type"] == "response.output_text.delta")
    assert harness.engine.requests[-1].sampling.logprobs is None


CODEX_REQUEST = {
    "model": MODEL, "stream": True, "store": False, "tool_choice": "auto", "parallel_tool_calls": True,
    "reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc",
    "client_metadata": {"x": "y"}, "instructions": "You are Codex.",
    "tools": [
        {"type": "function", "name": "shell", "description": "run", "strict": False,
         "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
        {"type": "namespace", "name": "mcp", "description": "tools", "tools": [
            {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}]},
        {"type": "custom", "name": "apply_patch", "description": "patch",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
        {"type": "web_search"},
    ],
    "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "encrypted_content": SEALER.seal("reasoning", {"text": "I will list the files."})},
        {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\": \"ls\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "ok"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "done", "annotations": []}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
    ],
}


def test_codex_shaped_request_is_accepted(harness: Harness, tokenizer: Any) -> None:
    harness.play(steps_from_tokens(answer_tokens(tokenizer, "Sure."), cuts=[]))
    with httpx.stream("POST", f"{harness.base_url}/responses", json=CODEX_REQUEST, timeout=30) as response:
        assert response.status_code == 200
        events = events_of(parse_frames(response.iter_lines()))
    final = validate_events(events)
    assert final.status == "completed"
    prompt = tokenizer.decode(harness.engine.requests[-1].prompt_token_ids)
    for text in ("You are Codex.", "rules", "list files", "a.txt", "thanks"):
        assert text in prompt
    assert {t.type for t in final.tools} >= {"function", "custom", "web_search"}


def test_agents_style_output_items_as_input(harness: Harness, tokenizer: Any) -> None:
    harness.play(steps_from_tokens(answer_tokens(tokenizer, "Again."), cuts=[]))
    first = harness.client.responses.create(model=MODEL, input="hi")
    history = [{"role": "user", "content": "hi"}] + [item.model_dump(exclude_none=True) for item in first.output]
    second = harness.client.responses.create(model=MODEL, input=history + [{"role": "user", "content": "more"}])
    assert second.status == "completed"


BAD_REQUESTS = [
    ("malformed json", b"{not json", 400, None),
    ("not an object", b"[1, 2]", 400, None),
    ("unknown item type", {"input": [{"type": "bogus"}]}, 400, "input[0].type"),
    ("message without content", {"input": [{"role": "user"}]}, 400, "input[0].content"),
    ("bad role", {"input": [{"role": "wizard", "content": "x"}]}, 400, "input[0].role"),
    ("temperature out of range", {"input": "x", "temperature": 7}, 400, "temperature"),
    ("zero max_output_tokens", {"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ("image input to a text model", {"input": [{"role": "user", "content": [{"type": "input_image",
                                                                            "image_url": "x"}]}]},
     400, "input[0].content[0]"),
    ("image in a tool output to a text model", {"input": [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "see"},
                                                                    {"type": "input_image", "image_url": "x"}]}]},
     400, "input[1].output[1]"),
    ("file input that is no data URL", {"input": [{"role": "user", "content": [{"type": "input_file",
                                                                               "file_data": "x"}]}]},
     400, "input[0].content[0]"),
    ("audio input", {"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
     400, "input[0].content[0].type"),
    ("empty input", {"input": []}, 400, "input"),
    ("unknown model", {"model": "gpt-9", "input": "x"}, 404, "model"),
    ("unknown previous response", {"input": "x", "previous_response_id": "resp_x"}, 404, "previous_response_id"),
    ("tool without type", {"input": "x", "tools": [{"name": "f"}]}, 400, "tools"),
    ("too long for the context", {"input": "word " * 9000}, 400, "input"),
]


@pytest.mark.parametrize(("body", "status", "param"), [c[1:] for c in BAD_REQUESTS], ids=[c[0] for c in BAD_REQUESTS])
def test_bad_input_is_a_clear_4xx(harness: Harness, body: Any, status: int, param: str | None) -> None:
    if isinstance(body, dict):
        body = json.dumps({"model": MODEL, "stream": True, **body}).encode()
    response = httpx.post(f"{harness.base_url}/responses", content=body,
                          headers={"content-type": "application/json"}, timeout=30)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param


def test_models_and_health(harness: Harness) -> None:
    assert httpx.get(f"{harness.base_url}/models").json()["data"][0]["id"] == MODEL
    assert harness.client.models.list().data[0].id == MODEL
    assert httpx.get(harness.base_url.removesuffix("/v1") + "/health").status_code == 200


def test_api_keys_guard_every_route_but_health(tokenizer: Any, tmp_path: Any) -> None:
    """Every entry of the route table, not a sample: no key or a wrong one is a 401 with OpenAI's error body; only
    the pages a browser loads before it has a key (the console's, the API reference) are open, and none is an API
    route."""
    from server.console.routes import OPEN_PAGES, OPEN_PREFIXES
    from tests.stores import sqlite_records

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(answer_tokens(tokenizer, "ok"), [])])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, api_keys=("first-key", "second-key")),
                             engine_factory=lambda: engine, records=sqlite_records(tmp_path / "r.db"))
    app = create_app(context)
    routes = [(method, route.path) for route in app.routes for method in sorted(getattr(route, "methods", ()))]
    assert len(routes) > 20
    with serve_in_thread(app) as base_url:
        root = base_url.removesuffix("/v1")
        for method, path in routes:
            url = root + path.replace("{", "").replace("}", "")  # any value for path parameters
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic first-key"}):
                response = httpx.request(method, url, headers=headers, json={}, timeout=30)
                if path == "/health":
                    assert response.status_code == 200
                    continue
                if path in OPEN_PAGES or path.startswith(OPEN_PREFIXES):
                    assert not path.startswith("/v1/") and response.status_code in (200, 307, 405), (method, path)
                    continue
                assert response.status_code == 401, (method, path, response.text)
                if method == "HEAD":
                    continue  # no body
                error = response.json()["error"]
                assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
        for key in ("first-key", "second-key"):
            client = OpenAI(base_url=base_url, api_key=key, _strict_response_validation=True, max_retries=0)
            assert client.responses.create(model=MODEL, input="x").output_text == "ok"
            assert client.conversations.create().id


def test_api_keys_come_from_the_flag_and_a_file(tmp_path: Any) -> None:
    from server.http.auth import api_keys

    key_file = tmp_path / "keys"
    key_file.write_text("# rotated in March\nthird\n\n fourth \n")
    assert api_keys("first, second", key_file) == ("first", "second", "third", "fourth")
    assert api_keys(None, None) == ()


def test_non_streaming_client_that_goes_away_aborts(harness: Harness, tokenizer: Any) -> None:
    harness.engine.step_delay = 0.05
    try:
        harness.play(steps_from_tokens(answer_tokens(tokenizer) * 20, cuts=list(range(1, 400))))
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{harness.base_url}/responses", json={"model": MODEL, "input": "hi"}, timeout=0.5)
        assert harness.engine_aborted_last_request()
    finally:
        harness.engine.step_delay = 0.0


def test_every_answer_carries_a_request_id(harness: Harness, tokenizer: Any) -> None:
    """`x-request-id`, as OpenAI sends it: what a user quotes when something went wrong (Codex logs it)."""
    harness.play(steps_from_tokens(answer_tokens(tokenizer, "Hi."), cuts=[1]))
    answers = [harness.post(input="Hi"), harness.post(input=[{"type": "nonsense"}]),
               httpx.get(f"{harness.base_url}/responses/resp_missing", timeout=30), httpx.get(f"{harness.base_url}/models")]
    assert [answer.status_code for answer in answers] == [200, 400, 404, 200]
    ids = [answer.headers.get("x-request-id") or "" for answer in answers]
    assert all(request_id.startswith("req_") for request_id in ids) and len(set(ids)) == len(ids), ids
