"""End to end: WebSocket mode on the real CPU engine with the bundled model, through the SDK's `responses.connect()`
(sync and async; the compaction case also through a raw socket): chained turns with store false, a warm-up, lanes, steering, errors, and automatic
compaction on HTTP and on the socket, with what the model was shown checked through the engine's recording."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any, Iterator

import pytest
from openai import AsyncOpenAI, OpenAI

from server.engine.recording import Recording, read_recordings
from tests.servers import MODEL, RunningServer
from tests.test_websocket import SERVER_EVENT, Socket, checked
from conformance.contract import validate_events

pytestmark = pytest.mark.e2e
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
WEATHER = {"type": "function", "name": "get_weather", "description": "Get the weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}}


class SdkSocket(Socket):
    """The SDK's own connection (`client.responses.connect()`), read as dicts like the raw socket of the unit tests:
    events go out through `conn.send`, and come back parsed by the SDK into its `ResponsesServerEvent` models."""

    def __init__(self, server: RunningServer) -> None:
        client = OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        self.manager = client.responses.connect()
        self.conn = self.manager.enter()

    def send(self, event: Any) -> None:
        self.conn.send(event)

    def recv(self, timeout: float = 300) -> dict[str, Any]:
        return self.conn.recv().to_dict()

    def close(self) -> None:
        self.conn.close()


@pytest.fixture()
def sdk_socket(server: RunningServer) -> Iterator[SdkSocket]:
    socket = SdkSocket(server)
    yield socket
    socket.close()


def recordings(server: RunningServer) -> list[Recording]:
    """What the engine ran so far (the server records each request, from its first)."""
    path = server.log.parent / "engine.jsonl"
    return read_recordings(path) if path.exists() else []


def prompt_with(server: RunningServer, tokenizer: Any, text: str) -> str:
    """The last prompt the engine ran that holds `text`."""
    prompts = [tokenizer.decode(r.prompt_token_ids) for r in recordings(server)]
    return [prompt for prompt in prompts if text in prompt][-1]


def sdk_events(conn: Any) -> list[dict[str, Any]]:
    """One response's events as the SDK's connection parsed them, as dicts, checked against the SDK and the spec."""
    events = []
    for event in conn:
        events.append(event.to_dict())
        if event.type in TERMINAL:
            return checked(events)
    raise AssertionError("the connection closed before the terminal event")


def test_sdk_two_turns_chained_with_store_false(server: RunningServer) -> None:
    client = OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input="My name is Ada. Say hello.", store=False, temperature=0,
                             max_output_tokens=24)
        first = validate_events(sdk_events(conn))
        conn.response.create(model=MODEL, input="What is my name?", store=False, temperature=0,
                             max_output_tokens=24, previous_response_id=first.id)
        second = validate_events(sdk_events(conn))
    assert first.status in ("completed", "incomplete") and second.previous_response_id == first.id
    turn1, turn2 = recordings(server)[-2:]
    grown = turn1.prompt_token_ids + [token for step in turn1.steps for token in step]
    assert turn2.prompt_token_ids[:len(grown)] == grown  # turn 2 extends turn 1's prompt and output, token for token


def test_async_sdk_warm_up_then_a_turn(server: RunningServer, tokenizer: Any) -> None:
    """Codex's start-up warm-up (`generate: false` with its instructions and tools): no output, but the engine has
    computed the prompt, so the turn chained to it finds that prefix in the engine's cache."""
    before = len(recordings(server))
    instructions = f"You are pirate {secrets.token_hex(8)}. " + "Answer like a pirate of the Caribbean. " * 40

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        async with client.responses.connect() as conn:
            await conn.response.create(model=MODEL, instructions=instructions, tools=[WEATHER], store=False,
                                       input="Ahoy.", generate=False)
            warm = await _async_events(conn)
            await conn.response.create(model=MODEL, instructions=instructions, tools=[WEATHER], store=False,
                                       input="Who are you?", max_output_tokens=16,
                                       previous_response_id=warm[-1]["response"]["id"])
            return warm, await _async_events(conn)

    warm, turn = asyncio.run(run())
    warmed, answered = validate_events(warm), validate_events(turn)
    assert warmed.status == "completed" and warmed.output == [] and warmed.usage.output_tokens == 0
    assert warmed.usage.input_tokens > 256 and warmed.usage.input_tokens_details.cached_tokens == 0  # a new prefix
    assert answered.status in ("completed", "incomplete")
    assert answered.usage.input_tokens_details.cached_tokens >= 256  # what the warm-up computed (128-token blocks)
    assert len(recordings(server)) == before + 1  # the warm-up generated nothing: only the turn is recorded
    assert "Ahoy." in prompt_with(server, tokenizer, "Who are you?")


async def _async_events(conn: Any) -> list[dict[str, Any]]:
    events = []
    async for event in conn:
        events.append(event.to_dict())
        if event.type in TERMINAL:
            return checked(events)
    raise AssertionError("the connection closed before the terminal event")


def test_two_lanes_run_at_once_and_one_lane_runs_in_order(server: RunningServer, sdk_socket: SdkSocket) -> None:
    socket = sdk_socket
    body = {"type": "response.create", "model": MODEL, "temperature": 0, "max_output_tokens": 32}
    socket.send({**body, "input": "Name three colors.", "stream_id": "a"})
    socket.send({**body, "input": "Name three animals.", "stream_id": "b"})
    socket.send({**body, "input": "Name three fruits.", "stream_id": "a"})  # waits for the first on lane a
    order: list[tuple[str, str]] = []
    lanes: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    while sum(kind in TERMINAL for _, kind in order) < 3:
        event = socket.recv(timeout=300)
        order.append((event["stream_id"], event["type"]))
        lanes[event["stream_id"]].append(event)
    created = [i for i, (_, kind) in enumerate(order) if kind == "response.created"]
    ended = [i for i, (_, kind) in enumerate(order) if kind in TERMINAL]
    assert created[1] < ended[0]  # lane b started before the first response ended
    a_first = lanes["a"][:[e["type"] for e in lanes["a"]].index(next(k for k in TERMINAL if k in [
        e["type"] for e in lanes["a"]])) + 1]
    for events in (a_first, lanes["a"][len(a_first):], lanes["b"]):
        assert validate_events(checked(events)).status in ("completed", "incomplete")


def test_a_steer_stops_the_response_and_the_successor_reads_it(server: RunningServer, sdk_socket: SdkSocket, tokenizer: Any) -> None:
    socket = sdk_socket
    socket.send({"type": "response.create", "model": MODEL, "store": False, "temperature": 0, "frequency_penalty": 0,
                 "max_output_tokens": 200, "input": "Count from 1 to 100, separated by commas."})
    events = [socket.recv(timeout=300)]
    while events[-1]["type"] != "response.output_text.delta":
        events.append(socket.recv(timeout=300))
    target = events[0]["response"]["id"]
    socket.send({"type": "response.steer", "previous_response_id": target,
                 "input": "Stop counting. Reply with the word BANANA."})
    while len([e for e in events if e["type"] in TERMINAL]) < 2:
        events.append(socket.recv(timeout=300))
    steer_events = [e for e in events if e["type"].startswith("response.steer")]
    assert [e["type"] for e in steer_events] == ["response.steer.accepted"]
    SERVER_EVENT.validate_python(steer_events[0])
    responses = [e for e in events if not e["type"].startswith("response.steer")]
    cut = [i for i, e in enumerate(responses) if e["type"] in TERMINAL][0] + 1
    steered, successor = validate_events(checked(responses[:cut])), validate_events(checked(responses[cut:]))
    assert steered.status == "incomplete" and steered.incomplete_details.reason == "steered"
    assert steered.usage.output_tokens < 200
    assert successor.previous_response_id == target and successor.max_output_tokens == 200  # inherited
    prompt = prompt_with(server, tokenizer, "Reply with the word BANANA.")
    assert prompt.index("Count from 1 to 100") < prompt.index(steered.output_text) < prompt.index("BANANA")


def test_a_steer_during_a_tool_call_waits_for_the_tool_output(server: RunningServer, sdk_socket: SdkSocket, tokenizer: Any) -> None:
    socket = sdk_socket
    socket.send({"type": "response.create", "model": MODEL, "store": False, "input": "Weather in Paris?",
                 "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}})
    events = [socket.recv(timeout=300)]
    while not (events[-1]["type"] == "response.output_item.added" and events[-1]["item"]["type"] == "function_call"):
        events.append(socket.recv(timeout=300))
    target = events[0]["response"]["id"]
    socket.send({"type": "response.steer", "previous_response_id": target, "input": "Also tell me a joke."})
    while events[-1]["type"] != "response.steer.pending":
        events.append(socket.recv(timeout=300))
    responses = [e for e in events if not e["type"].startswith("response.steer")]
    done = validate_events(checked(responses))
    assert done.status == "completed"
    [call] = [item for item in done.output if item.type == "function_call"]
    assert "city" in json.loads(call.arguments)  # whole: the steer did not cut it
    pending = events[-1]
    SERVER_EVENT.validate_python(pending)
    assert pending["required_input"] == [{"type": "function_call_output", "call_id": call.call_id,
                                          "name": "get_weather"}]
    socket.send({"type": "response.create", "model": MODEL, "store": False, "previous_response_id": target,
                 "tools": [WEATHER], "max_output_tokens": 24,
                 "input": [{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21C"}]})
    assert validate_events(checked(socket.until_terminal(timeout=300))).status in ("completed", "incomplete")
    prompt = prompt_with(server, tokenizer, "Sunny, 21C")
    assert "Also tell me a joke." in prompt and "Weather in Paris?" in prompt


def test_errors_arrive_as_error_events_and_the_socket_goes_on(server: RunningServer, sdk_socket: SdkSocket) -> None:
    socket = sdk_socket
    socket.send({"type": "response.create", "model": MODEL, "input": [{"role": "wizard", "content": "x"}]})
    bad = socket.recv()
    socket.send({"type": "response.create", "model": MODEL, "input": "hi", "previous_response_id": "resp_gone"})
    unknown = socket.recv()
    for error, status in ((bad, 400), (unknown, 404)):
        SERVER_EVENT.validate_python(error)
        assert error["type"] == "error" and error["status"] == status
    assert unknown["error"]["code"] == "previous_response_not_found"
    socket.send({"type": "response.create", "model": MODEL, "input": "Say hi.", "max_output_tokens": 8})
    assert validate_events(checked(socket.until_terminal(timeout=300))).status in ("completed", "incomplete")


def long_history(turns: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for turn in range(turns):
        items += [{"role": "user", "content": f"Tell me fact number {turn} about Lyon."},
                  {"role": "assistant", "content": f"Fact {turn}: " + "Lyon has two rivers and old traboules. " * 8}]
    return items + [{"role": "user", "content": "Which city were we talking about?"}]


COMPACTION = [{"type": "compaction", "compact_threshold": 1000}]


def check_compacted(server: RunningServer, tokenizer: Any, final: Any) -> str:
    """The response began with a compaction item and was answered from it: the answer's prompt holds the summary and
    not the history it replaced. Gives the summary's heading as the answer prompt shows it."""
    assert [item.type for item in final.output][:1] == ["compaction"] and final.status in ("completed", "incomplete")
    answer = prompt_with(server, tokenizer, "Summary of the conversation so far:")
    assert "Fact 3:" not in answer and "Which city were we talking about?" in answer
    return answer


def test_context_management_compacts_over_http(server: RunningServer, tokenizer: Any) -> None:
    events = server.raw_stream(input=long_history(11), context_management=COMPACTION, max_output_tokens=16)
    final = validate_events(events)
    check_compacted(server, tokenizer, final)
    assert events[2]["type"] == "response.output_item.added" and events[2]["item"]["type"] == "compaction"


def test_context_management_compacts_on_the_socket_and_the_next_turn_continues(server: RunningServer,
                                                                              tokenizer: Any) -> None:
    socket = Socket(server.base_url)
    socket.send({"type": "response.create", "model": MODEL, "store": False, "input": long_history(11),
                 "context_management": COMPACTION, "max_output_tokens": 16})
    first = validate_events(checked(socket.until_terminal(timeout=600)))
    check_compacted(server, tokenizer, first)
    socket.send({"type": "response.create", "model": MODEL, "store": False, "input": "And its rivers?",
                 "previous_response_id": first.id, "max_output_tokens": 16})
    assert validate_events(checked(socket.until_terminal(timeout=300))).status in ("completed", "incomplete")
    later = prompt_with(server, tokenizer, "And its rivers?")
    assert "Summary of the conversation so far:" in later and "Fact 3:" not in later


def test_the_socket_is_in_the_log(server: RunningServer) -> None:
    assert '"WebSocket /v1/responses" [accepted]' in Path(server.log).read_text()
