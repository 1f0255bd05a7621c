"""WebSocket mode on the real app and a real socket, with a scripted engine: the SDK's `responses.connect()`, lanes,
per-connection state, warm-ups, errors, auth, a closed socket, and the switch that turns it off."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Iterator

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI
from pydantic import TypeAdapter
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.connection_responses import MAX_LANES_KEPT
from server.runs.context import ServingContext
from tests.stores import sqlite_records
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from conformance.openresponses import check_event
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from conformance.contract import validate_events
from openai.types.responses import ResponsesServerEvent

MODEL = "test-model"
SERVER_EVENT = TypeAdapter(ResponsesServerEvent)


def tokens(tokenizer: Any, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


class Socket:
    """A raw WebSocket to the server (the `websockets` library, as the SDK uses it), reading JSON events."""

    def __init__(self, base_url: str, **options: Any) -> None:
        self.ws = ws_connect(base_url.replace("http://", "ws://") + "/responses", **options)

    def send(self, event: Any) -> None:
        self.ws.send(event if isinstance(event, (str, bytes)) else json.dumps(event))

    def recv(self, timeout: float = 30) -> dict[str, Any]:
        return json.loads(self.ws.recv(timeout=timeout))

    def until_terminal(self, stream_id: str | None = None, timeout: float = 30) -> list[dict[str, Any]]:
        """The events of one response (of one lane, when given), through its terminal event or an error."""
        events = []
        while True:
            event = self.recv(timeout)
            if stream_id is not None and event.get("stream_id") != stream_id:
                continue
            events.append(event)
            if event["type"] in ("response.completed", "response.incomplete", "response.failed", "error"):
                return events


def checked(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every event as the SDK parses it and as the spec has it (without the lane's `stream_id`, WebSocket-only)."""
    for event in events:
        SERVER_EVENT.validate_python(event)
        if event["type"] != "error":
            check_event({key: value for key, value in event.items() if key != "stream_id"})
    return events


class Served:
    def __init__(self, engine: ScriptedEngine, base_url: str) -> None:
        self.engine, self.base_url = engine, base_url
        self.client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)


@pytest.fixture()
def served(tokenizer: Any) -> Iterator[Served]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(tokens(tokenizer, "Hi there."), [2])])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        yield Served(engine, base_url)


def test_sdk_connect_two_turns_chained_with_store_false(served: Served, tokenizer: Any) -> None:
    served.engine.scripts = [steps_from_tokens(tokens(tokenizer, "Paris."), [1]),
                             steps_from_tokens(tokens(tokenizer, "About two million."), [1, 3])]
    with served.client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="Capital of France?", store=False)
        first = [event.to_dict() for event in _until_terminal(conn)]
        conn.response.create(model=MODEL, input="How many live there?", store=False,
                             previous_response_id=first[-1]["response"]["id"])
        second = [event.to_dict() for event in _until_terminal(conn)]
    assert validate_events(checked(first)).output_text == "Paris."
    assert validate_events(checked(second)).output_text == "About two million."
    # Turn 2's prompt extends turn 1's prompt and output, token for token.
    turn1, turn2 = served.engine.requests
    answered = tokenizer.encode("Paris.", add_special_tokens=False)
    assert turn2.prompt_token_ids[:len(turn1.prompt_token_ids)] == turn1.prompt_token_ids
    assert tokenizer.decode(turn2.prompt_token_ids).count("Capital of France?") == 1
    assert _contains(turn2.prompt_token_ids, answered)


def _until_terminal(conn: Any) -> list[Any]:
    events = []
    for event in conn:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("the connection closed before the terminal event")


def _contains(tokens: list[int], part: list[int]) -> bool:
    return any(tokens[i:i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def test_async_sdk_connect_warm_up_then_a_turn(served: Served, tokenizer: Any) -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        client = AsyncOpenAI(base_url=served.base_url, api_key="unused", max_retries=0)
        async with client.responses.connect() as conn:
            await conn.response.create(model=MODEL, input="You are terse.", store=False, generate=False)
            warm = await _async_until_terminal(conn)
            await conn.response.create(model=MODEL, input="Hello?", store=False,
                                       previous_response_id=warm[-1].response.id)
            return warm, await _async_until_terminal(conn)

    warm, turn = asyncio.run(run())
    warmed = validate_events(checked([event.to_dict() for event in warm]))
    assert warmed.status == "completed" and warmed.output == [] and warmed.usage.output_tokens == 0
    assert warmed.usage.input_tokens > 0
    assert validate_events(checked([event.to_dict() for event in turn])).output_text == "Hi there."
    (warm_up,), (answer,) = served.engine.prefilled, served.engine.requests  # the warm-up computed its prompt
    assert "You are terse." in served.engine.tokenizer.decode(warm_up.prompt_token_ids)
    assert warmed.usage.input_tokens == len(warm_up.prompt_token_ids)
    shared = next(i for i, (a, b) in enumerate(zip(warm_up.prompt_token_ids, answer.prompt_token_ids)) if a != b)
    assert "You are terse." in served.engine.tokenizer.decode(answer.prompt_token_ids[:shared])


async def _async_until_terminal(conn: Any) -> list[Any]:
    events = []
    async for event in conn:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    raise AssertionError("the connection closed before the terminal event")


def test_lanes_run_at_once_and_echo_their_stream_id(served: Served, tokenizer: Any) -> None:
    served.engine.step_delay = 0.05
    served.engine.scripts = [steps_from_tokens(tokens(tokenizer, "one two three four"), [1, 2, 3])]
    socket = Socket(served.base_url)
    for lane in ("a", "b"):
        socket.send({"type": "response.create", "model": MODEL, "input": f"lane {lane}", "stream_id": lane})
    events: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    order = []
    while len(order) < 2 or "response.completed" not in order[-1:] or order.count("response.completed") < 2:
        event = socket.recv()
        events[event["stream_id"]].append(event)
        order.append(event["type"])
    for lane in events.values():
        assert validate_events(checked(lane)).output_text == "one two three four"
    # Both ran at once: the second response was created before the first ended.
    assert order.index("response.completed") > [i for i, kind in enumerate(order) if kind == "response.created"][1]


def test_one_lane_runs_its_requests_in_order(served: Served, tokenizer: Any) -> None:
    served.engine.step_delay = 0.02
    served.engine.scripts = [steps_from_tokens(tokens(tokenizer, "first"), [1]),
                             steps_from_tokens(tokens(tokenizer, "second"), [1])]
    socket = Socket(served.base_url)
    socket.send({"type": "response.create", "model": MODEL, "input": "1", "stream_id": "x"})
    socket.send({"type": "response.create", "model": MODEL, "input": "2", "stream_id": "x"})
    first, second = socket.until_terminal(), socket.until_terminal()
    assert [e["sequence_number"] for e in first] == list(range(len(first)))  # not interleaved
    assert validate_events(checked(first)).output_text == "first"
    assert validate_events(checked(second)).output_text == "second"


def test_errors_are_events_and_the_socket_stays_open(served: Served) -> None:
    socket = Socket(served.base_url)
    cases = [
        ({"type": "response.create", "model": MODEL, "input": []}, 400, "input"),
        ({"type": "response.create", "model": MODEL, "input": "hi", "previous_response_id": "resp_nope"}, 404,
         "previous_response_id"),
        ({"type": "response.create", "model": "other", "input": "hi"}, 404, "model"),
        ({"type": "response.create", "model": MODEL, "input": "hi", "background": True}, 400, "background"),
        ({"type": "response.create", "model": MODEL, "input": "hi", "temperature": "hot"}, 400, "temperature"),
        ({"type": "session.update"}, 400, "type"),
        ("not json", 400, None),
        ([1, 2], 400, None),
        (b"\x00binary", 400, None),
    ]
    for event, status, param in cases:
        socket.send(event)
        error = socket.recv()
        assert error["type"] == "error" and error["status"] == status and error["error"]["param"] == param, error
        assert error["error"]["code"] and error["error"]["message"]
        SERVER_EVENT.validate_python(error)
    found = [e for e in cases if e[1] == 404][0]
    socket.send(found[0])
    assert socket.recv()["error"]["code"] == "previous_response_not_found"
    socket.send({"type": "response.create", "model": MODEL, "input": "still there?"})
    assert socket.until_terminal()[-1]["type"] == "response.completed"


def test_a_connection_keeps_each_lanes_latest_response_and_what_it_continues(served: Served) -> None:
    """As OpenAI keeps the most recent response on a connection: an hour-long connection holds its live chains, not
    every response it made. A chain keeps its ancestors (a turn may go back to one), a lane its own latest."""
    socket = Socket(served.base_url)

    def create(**fields: Any) -> dict[str, Any]:
        socket.send({"type": "response.create", "model": MODEL, "store": False, **fields})
        return socket.until_terminal(fields.get("stream_id"))[-1]

    first = create(input="one")["response"]["id"]
    second = create(input="two", previous_response_id=first)["response"]["id"]
    assert create(input="two again", previous_response_id=first)["type"] == "response.completed"  # an ancestor
    gone = create(input="back to two", previous_response_id=second)  # not behind the lane's latest any more
    assert gone["type"] == "error" and gone["error"]["code"] == "previous_response_not_found", gone
    on_b = create(input="on lane b", stream_id="b")["response"]["id"]
    latest = create(input="a new chain")["response"]["id"]  # the default lane's old chain is let go
    assert create(input="and on", previous_response_id=first)["error"]["code"] == "previous_response_not_found"
    on_b = create(input="b goes on", previous_response_id=on_b, stream_id="b")["response"]["id"]
    latest = create(input="still", previous_response_id=latest)["response"]["id"]
    for lane in range(MAX_LANES_KEPT - 1):  # one lane more than are kept: the one used longest ago (b) loses its own
        create(input="x", stream_id=f"lane-{lane}")
    assert create(input="b again", previous_response_id=on_b, stream_id="b")["error"]["code"] == \
        "previous_response_not_found"
    assert create(input="on and on", previous_response_id=latest)["type"] == "response.completed"


def test_a_full_lane_refuses_more(served: Served, tokenizer: Any) -> None:
    served.engine.step_delay = 0.2
    socket = Socket(served.base_url)
    for _ in range(10):
        socket.send({"type": "response.create", "model": MODEL, "input": "hi", "stream_id": "busy"})
    errors = []
    completed = 0
    while completed + len(errors) < 10:
        event = socket.recv()
        if event["type"] == "error":
            errors.append(event)
        completed += event["type"] == "response.completed"
    assert len(errors) == 1 and errors[0]["status"] == 429 and errors[0]["stream_id"] == "busy"
    assert errors[0]["error"]["code"] == "rate_limit_exceeded"


def test_a_closed_socket_aborts_its_engine_request(served: Served, tokenizer: Any) -> None:
    served.engine.step_delay = 0.1
    served.engine.scripts = [steps_from_tokens(tokens(tokenizer, "a b c d e f g h i j k l"), list(range(1, 12)))]
    socket = Socket(served.base_url)
    socket.send({"type": "response.create", "model": MODEL, "input": "go"})
    while socket.recv()["type"] != "response.output_text.delta":
        pass
    socket.ws.close()
    deadline = time.monotonic() + 10
    while not served.engine.aborted and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.engine.aborted == [served.engine.requests[0].request_id]


def test_the_upgrade_needs_the_api_key_and_can_be_switched_off(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(tokens(tokenizer, "ok"), [])])
    keyed = ServingContext(config=ServerConfig(served_model_name=MODEL, api_keys=("sk-right",)),
                           engine_factory=lambda: engine)
    with serve_in_thread(create_app(keyed)) as base_url:
        with pytest.raises(InvalidStatus) as refused:
            Socket(base_url, additional_headers={"Authorization": "Bearer sk-wrong"})
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
        socket = Socket(base_url, additional_headers={"Authorization": "Bearer sk-right"})
        socket.send({"type": "response.create", "model": MODEL, "input": "hi"})
        assert socket.until_terminal()[-1]["type"] == "response.completed"
    off = ServingContext(config=ServerConfig(served_model_name=MODEL, websocket=False), engine_factory=lambda: engine)
    with serve_in_thread(create_app(off)) as base_url:
        with pytest.raises(InvalidStatus) as refused:
            Socket(base_url)
        assert refused.value.response.status_code == 426
        assert httpx.post(f"{base_url}/responses", json={"model": MODEL, "input": "hi"}).status_code == 200


def test_the_connection_ends_at_its_time_limit_after_its_response(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(tokens(tokenizer, "a b c d"), [1, 2, 3])],
                            step_delay=0.3)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, websocket_max_seconds=0.5),
                             engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        socket = Socket(base_url)
        socket.send({"type": "response.create", "model": MODEL, "input": "hi"})
        assert socket.until_terminal()[-1]["type"] == "response.completed"  # it ran past the limit, whole
        error = socket.recv()
        assert error["type"] == "error" and error["error"]["code"] == "websocket_connection_limit_reached"
        SERVER_EVENT.validate_python(error)
        with pytest.raises(Exception):
            socket.recv(timeout=5)
        assert socket.ws.close_code == 1000


def test_stored_chains_and_socket_chains_meet(tokenizer: Any, tmp_path: Any) -> None:
    """A response made over HTTP and stored continues on the socket (the store is the fallback), and one made on
    the socket with store true is readable over HTTP."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(tokens(tokenizer, "Stored."), [])])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             records=sqlite_records(tmp_path / "responses.db"))
    with serve_in_thread(create_app(context)) as base_url:
        client = OpenAI(base_url=base_url, api_key="unused", max_retries=0)
        first = client.responses.create(model=MODEL, input="first")
        socket = Socket(base_url)
        socket.send({"type": "response.create", "model": MODEL, "input": "second", "previous_response_id": first.id})
        done = socket.until_terminal()[-1]
        assert done["type"] == "response.completed"
        assert "first" in tokenizer.decode(engine.requests[-1].prompt_token_ids)
        assert client.responses.retrieve(done["response"]["id"]).status == "completed"


WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def one_token_steps(tokenizer: Any, text: str) -> list[EngineStep]:
    ids = tokens(tokenizer, text)
    return steps_from_tokens(ids, list(range(1, len(ids))))


def test_a_steer_stops_the_response_and_its_successor_takes_the_input(served: Served, tokenizer: Any) -> None:
    served.engine.step_delay = 0.05
    served.engine.scripts = [one_token_steps(tokenizer, "Once upon a time there was a long story " * 4),
                             steps_from_tokens(tokens(tokenizer, "Il était une fois."), [2])]
    socket = Socket(served.base_url)
    socket.send({"type": "response.create", "model": MODEL, "input": "Tell a story.", "store": False,
                 "temperature": 0.5, "instructions": "Be brief."})
    events = [socket.recv()]
    while events[-1]["type"] != "response.output_text.delta":
        events.append(socket.recv())
    target = events[0]["response"]["id"]
    socket.send({"type": "response.steer", "previous_response_id": target, "input": "Tell it in French."})
    while events[-1]["type"] != "response.completed":
        events.append(socket.recv())
    kinds = [event["type"] for event in events]
    accepted = events[kinds.index("response.steer.accepted")]
    assert accepted["steer"]["previous_response_id"] == target and accepted["steer"]["id"].startswith("steer_")
    first = [e for e in events[:kinds.index("response.incomplete") + 1] if e is not accepted]
    steered = validate_events(checked(first))
    assert steered.status == "incomplete" and steered.incomplete_details.reason == "steered"
    assert served.engine.aborted == [served.engine.requests[0].request_id]
    successor = events[kinds.index("response.created", kinds.index("response.incomplete")):]
    done = validate_events(checked(successor))
    assert done.previous_response_id == target and done.output_text == "Il était une fois."
    assert done.temperature == 0.5 and done.instructions == "Be brief."  # inherited from the steered response
    prompt = tokenizer.decode(served.engine.requests[1].prompt_token_ids)
    assert steered.output_text.startswith("Once")
    assert prompt.index("Tell a story.") < prompt.index(steered.output_text) < prompt.index("Tell it in French.")
    SERVER_EVENT.validate_python(accepted)


def test_a_steer_during_a_tool_call_waits_for_its_output(served: Served, tokenizer: Any) -> None:
    served.engine.step_delay = 0.05
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    served.engine.scripts = [one_token_steps(tokenizer, call), steps_from_tokens(tokens(tokenizer, "Sunny."), [])]
    socket = Socket(served.base_url)
    socket.send({"type": "response.create", "model": MODEL, "input": "Weather in Paris?", "tools": [WEATHER_TOOL],
                 "store": False, "stream_id": "agent"})
    created = socket.recv()
    while socket.recv()["type"] != "response.function_call_arguments.delta":
        pass
    target = created["response"]["id"]
    socket.send({"type": "response.steer", "previous_response_id": target,
                 "input": [{"role": "user", "content": [{"type": "input_text", "text": "And in Berlin?"}]}]})
    events = []
    while not (events and events[-1]["type"] == "response.steer.pending"):
        events.append(socket.recv())
    kinds = [event["type"] for event in events]
    assert kinds.index("response.steer.accepted") < kinds.index("response.completed") < kinds.index(
        "response.steer.pending")
    assert all(event["stream_id"] == "agent" for event in events)
    completed = events[kinds.index("response.completed")]["response"]
    calls = [item for item in completed["output"] if item["type"] == "function_call"]
    assert [json.loads(c["arguments"]) for c in calls] == [{"city": "Paris"}]  # the call was not cut
    pending = events[-1]
    assert pending["required_input"] == [{"type": "function_call_output", "call_id": calls[0]["call_id"],
                                          "name": "get_weather"}]
    assert pending["reason"] == "waiting_for_required_input"
    SERVER_EVENT.validate_python(pending)
    socket.send({"type": "response.create", "model": MODEL, "store": False, "stream_id": "agent",
                 "previous_response_id": target, "tools": [WEATHER_TOOL],
                 "input": [{"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "18C"}]})
    assert validate_events(checked(socket.until_terminal())).output_text == "Sunny."
    prompt = tokenizer.decode(served.engine.requests[1].prompt_token_ids)
    assert "And in Berlin?" in prompt and "18C" in prompt and "Weather in Paris?" in prompt


def test_a_steer_sent_while_the_continuation_is_prepared_is_not_lost(served: Served, tokenizer: Any,
                                                                    monkeypatch: Any) -> None:
    """A steer of a response waiting for tool output, accepted while that output's continuation is being prepared
    (a store round trip, a fetch), steers the continuation: its input reaches a later prompt, or it fails, aloud."""
    import server.http.socket_session as socket_session

    served.engine.step_delay = 0.05
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    served.engine.scripts = [one_token_steps(tokenizer, call),
                             one_token_steps(tokenizer, "Sunny in Paris and in Berlin, all day long."),
                             steps_from_tokens(tokens(tokenizer, "Rome too."), [])]
    socket = Socket(served.base_url)
    socket.send({"type": "response.create", "model": MODEL, "input": "Weather in Paris?", "tools": [WEATHER_TOOL],
                 "store": False})
    target = socket.recv()["response"]["id"]
    while socket.recv()["type"] != "response.function_call_arguments.delta":
        pass
    socket.send({"type": "response.steer", "previous_response_id": target, "input": "And in Berlin?"})
    events = [socket.recv()]
    while events[-1]["type"] != "response.steer.pending":
        events.append(socket.recv())
    completed = next(event for event in events if event["type"] == "response.completed")["response"]
    call_id = completed["output"][-1]["call_id"]
    prepare = socket_session.prepare_stored_run

    async def slow_prepare(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.5)  # as a store round trip or an image fetch would take
        return await prepare(*args, **kwargs)

    monkeypatch.setattr(socket_session, "prepare_stored_run", slow_prepare)
    socket.send({"type": "response.create", "model": MODEL, "store": False, "previous_response_id": target,
                 "tools": [WEATHER_TOOL], "input": [{"type": "function_call_output", "call_id": call_id,
                                                     "output": "18C"}]})
    socket.send({"type": "response.steer", "previous_response_id": target, "input": "And in Rome?"})
    events = []
    while not any(event["type"] == "response.steer.failed" for event in events) and not (
            len([e for e in events if e["type"] in ("response.completed", "response.incomplete")]) == 2):
        events.append(socket.recv(timeout=10))
    failed = [event for event in events if event["type"] == "response.steer.failed"]
    prompts = [tokenizer.decode(request.prompt_token_ids) for request in served.engine.requests]
    assert failed or any("And in Rome?" in prompt for prompt in prompts), [e["type"] for e in events]


def test_steers_that_cannot_be_taken_fail_with_the_sdk_codes(served: Served, tokenizer: Any) -> None:
    socket = Socket(served.base_url)
    socket.send({"type": "response.steer", "previous_response_id": "resp_unknown", "input": "hi"})
    failed = socket.recv()
    assert failed["type"] == "response.steer.failed" and failed["error"]["code"] == "response_not_found"
    assert failed["steer"] == {"input": "hi", "previous_response_id": "resp_unknown"}
    SERVER_EVENT.validate_python(failed)
    socket.send({"type": "response.create", "model": MODEL, "input": "hi", "store": False})
    done = socket.until_terminal()[-1]["response"]["id"]
    socket.send({"type": "response.steer", "previous_response_id": done, "input": "more"})
    assert socket.recv()["error"]["code"] == "response_already_completed"
    for bad in ([{"role": "assistant", "content": "x"}], [], "", [{"role": "user", "content": "x", "id": "m"}],
                [{"type": "function_call_output", "call_id": "c", "output": "x"}]):
        socket.send({"type": "response.steer", "previous_response_id": done, "input": bad})
        refused = socket.recv()
        assert refused["type"] == "response.steer.failed" and refused["error"]["code"] == "invalid_input", bad


def test_context_management_compacts_on_the_socket_and_the_next_turn_continues_from_it(served: Served,
                                                                                      tokenizer: Any) -> None:
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Note {i}: " + "lorem ipsum " * 15}
               for i in range(40)]
    served.engine.scripts = [steps_from_tokens(tokens(tokenizer, "Forty notes of lorem ipsum."), [2]),
                             steps_from_tokens(tokens(tokenizer, "Noted."), []),
                             steps_from_tokens(tokens(tokenizer, "Still noted."), [])]
    socket = Socket(served.base_url)
    socket.send({"type": "response.create", "model": MODEL, "store": False, "input": history,
                 "context_management": [{"type": "compaction", "compact_threshold": 1000}]})
    first = validate_events(checked(socket.until_terminal()))
    assert [item.type for item in first.output] == ["compaction", "message"] and first.output_text == "Noted."
    socket.send({"type": "response.create", "model": MODEL, "store": False, "input": "And now?",
                 "previous_response_id": first.id})
    assert validate_events(checked(socket.until_terminal())).output_text == "Still noted."
    summary, answer, later = (tokenizer.decode(r.prompt_token_ids) for r in served.engine.requests)
    assert "Note 39:" in summary and "Note 39:" not in answer and "Forty notes of lorem ipsum." in answer
    assert "Note 39:" not in later and "Forty notes of lorem ipsum." in later and "Noted." in later
    assert later.index("Noted.") < later.index("And now?")
    # Turn 2's prompt extends turn 1's answer prompt and output, token for token.
    answered = served.engine.requests[1].prompt_token_ids + tokenizer.encode("Noted.", add_special_tokens=False)
    assert served.engine.requests[2].prompt_token_ids[:len(answered)] == answered


def test_the_concurrency_limit_answers_with_a_429_event(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[one_token_steps(tokenizer, "a b c d e f")], step_delay=0.1)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, max_concurrent_requests=1),
                             engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        socket = Socket(base_url)
        socket.send({"type": "response.create", "model": MODEL, "input": "one", "stream_id": "a"})
        assert socket.recv()["type"] == "response.created"
        socket.send({"type": "response.create", "model": MODEL, "input": "two", "stream_id": "b"})
        refused = socket.until_terminal(stream_id="b")[-1]
        assert refused["type"] == "error" and refused["status"] == 429 and refused["stream_id"] == "b"
        assert refused["error"]["code"] == "rate_limit_exceeded" and refused["error"]["headers"]["Retry-After"]
        SERVER_EVENT.validate_python(refused)
        assert socket.until_terminal(stream_id="a")[-1]["type"] == "response.completed"


def test_ping_pong_and_compression_come_with_the_socket(served: Served) -> None:
    socket = Socket(served.base_url)  # the websockets client offers permessage-deflate, as the SDK's does
    assert [type(ext).__name__ for ext in socket.ws.protocol.extensions] == ["PerMessageDeflate"]
    assert socket.ws.ping().wait(5)  # answered with a pong


def test_a_client_that_stops_reading_has_its_response_ended(tokenizer: Any) -> None:
    """As for SSE: a send that waits longer than --send-timeout ends the response (its engine request aborted) and
    the connection."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[one_token_steps(tokenizer, "word " * 200)],
                            step_delay=0.01)
    context = ServingContext(config=ServerConfig(served_model_name=MODEL, send_timeout_seconds=0.3),
                             engine_factory=lambda: engine)
    app = create_app(context)

    async def scenario() -> None:
        context.start()
        incoming: asyncio.Queue[Any] = asyncio.Queue()
        for message in ({"type": "websocket.connect"}, {"type": "websocket.receive", "text": json.dumps(
                {"type": "response.create", "model": MODEL, "input": "go"})}):
            incoming.put_nowait(message)
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)
            if len(sent) > 5:
                await asyncio.sleep(3600)  # the client stopped reading

        scope = {"type": "websocket", "path": "/v1/responses", "headers": [], "query_string": b"",
                 "extensions": {"websocket.http.response": {}}}
        await asyncio.wait_for(app(scope, incoming.get, send), timeout=10)

    asyncio.run(scenario())
    assert engine.aborted == [engine.requests[0].request_id]


def test_frames_that_are_no_json_object_are_400_events_as_http_bodies_are(served: Served) -> None:
    """Found by the WebSocket fuzz: nesting too deep for the JSON parser ended the connection."""
    socket = Socket(served.base_url)
    deep = '{"type": "response.create", "model": "%s", "input": "hi", "metadata": %s}' % (
        MODEL, "[" * 100_000 + "]" * 100_000)
    lone = '{"type": "response.create", "model": "%s", "input": "bad \\ud800 half"}' % MODEL
    for frame in (deep, lone):
        socket.send(frame)
        error = socket.recv()
        assert error["type"] == "error" and error["status"] == 400, error
    socket.send({"type": "response.create", "model": MODEL, "input": "still there?"})
    assert socket.until_terminal()[-1]["type"] == "response.completed"


def test_a_deflated_message_that_inflates_past_the_limit_is_refused_as_it_inflates(served: Served) -> None:
    """permessage-deflate: a message of a few KiB on the wire that inflates to 64 MiB is cut at the size limit
    while it is inflated (close 1009), never held whole; the server goes on answering."""
    import psutil
    from websockets.exceptions import ConnectionClosed

    before = psutil.Process().memory_info().rss
    socket = Socket(served.base_url, compression="deflate")
    event = '{"type": "response.create", "input": "' + "a" * (64 * 2**20) + '"}'
    try:
        socket.send(event)
        reply = socket.recv(timeout=30)
        assert reply["type"] == "error" and reply["status"] == 413, reply
    except ConnectionClosed as closed:
        assert closed.rcvd is not None and closed.rcvd.code == 1009, closed
    grown = psutil.Process().memory_info().rss - before
    assert grown < 200 * 2**20, f"the process grew by {grown / 2**20:.0f} MiB"  # the client's copy is 64 MiB
    assert httpx.get(served.base_url.removesuffix("/v1") + "/health", timeout=30).status_code == 200
