"""An error injected at each step of a response's run, on SSE, JSON and WebSocket: whatever fails after
`response.created`, the client gets exactly one terminal event, the store keeps what the client was told, and
the response holds no place under the concurrency limit afterwards."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from websockets.sync.client import connect as ws_connect

from parsers.chat import ChatParser
from parsers.decoder import IncrementalDecoder
from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.records import open_records
from server.responses.records import RetentionPolicy
from streaming.builder import ResponseBuilder
from streaming.event_types import TERMINAL_EVENTS
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.sse import events_of, parse_frames

MODEL = "m"
COMPACTING = {"context_management": [{"type": "compaction", "compact_threshold": 1000}],
              "input": [{"role": "user", "content": "word " * 1200}]}


class Injected(RuntimeError):
    """The error a test puts into a step of the run."""


def _failing_on(call: int, original: Callable[..., Any]) -> Callable[..., Any]:
    """`original`, raising Injected on its `call`-th call (1-based) in this test."""
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == call:
            raise Injected("injected")
        return original(*args, **kwargs)

    return wrapper


# step -> (how to inject it, the request's extra fields)
STEPS: dict[str, tuple[Callable[[pytest.MonkeyPatch, ScriptedEngine], None], dict[str, Any]]] = {
    "compaction": (lambda patch, _: patch.setattr("server.history.compaction.seal_compaction",
                                                  _failing_on(1, lambda *a: None)), COMPACTING),
    "engine start": (lambda _, engine: engine.scripts.__setitem__(0, [Injected("engine")]), {}),
    "engine mid-stream": (lambda _, engine: engine.scripts.__setitem__(0, engine.scripts[0][:2] + [Injected("x")]),
                          {}),
    "decoder": (lambda patch, _: patch.setattr(IncrementalDecoder, "decode_step",
                                               _failing_on(2, IncrementalDecoder.decode_step)), {}),
    "parser feed": (lambda patch, _: patch.setattr(ChatParser, "feed", _failing_on(2, ChatParser.feed)), {}),
    "parser finish": (lambda patch, _: patch.setattr(ChatParser, "finish", _failing_on(1, ChatParser.finish)), {}),
    "builder feed": (lambda patch, _: patch.setattr(ResponseBuilder, "feed", _failing_on(2, ResponseBuilder.feed)),
                     {}),
    "builder finish": (lambda patch, _: patch.setattr(ResponseBuilder, "finish",
                                                      _failing_on(1, ResponseBuilder.finish)), {}),
    "store save": (lambda patch, _: None, {}),  # patched on the test's own store, below
}


@pytest.fixture(scope="module")
def served(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ServingContext]]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    store = open_records(f"sqlite:///{tmp_path_factory.mktemp('store') / 'responses.db'}", RetentionPolicy(),
                       Path("unused"))
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             ids=counting_ids(), records=store)
    with serve_in_thread(create_app(context)) as base_url:
        yield base_url, context


def _answer(tokenizer: Any) -> list[Any]:
    ids = tokenizer.encode("The answer is forty-two.", add_special_tokens=False) + [tokenizer.eos_token_id]
    return steps_from_tokens(ids, cuts=[1, 2, 3, 4])


def _events(base_url: str, transport: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The events a client is told (for JSON: the response as its terminal event)."""
    if transport == "sse":
        with httpx.stream("POST", f"{base_url}/responses", json={**body, "stream": True}, timeout=60) as answer:
            assert answer.status_code == 200, answer.read()
            return events_of(parse_frames(answer.iter_lines()))
    if transport == "json":
        answer = httpx.post(f"{base_url}/responses", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        response = answer.json()
        return [{"type": f"response.{response['status']}", "response": response}]
    with ws_connect(base_url.replace("http://", "ws://") + "/responses") as socket:
        socket.send(json.dumps({"type": "response.create", **body}))
        events = []
        while not events or events[-1]["type"] not in (*TERMINAL_EVENTS, "error"):
            events.append(json.loads(socket.recv(timeout=60)))
        return events


@pytest.mark.parametrize("transport", ["sse", "json", "websocket"])
@pytest.mark.parametrize("step", list(STEPS))
def test_an_error_at_any_step_ends_the_response_once_as_stored(served: tuple[str, ServingContext], tokenizer: Any,
                                                               monkeypatch: pytest.MonkeyPatch, step: str,
                                                               transport: str) -> None:
    base_url, context = served
    engine = context.engine
    assert isinstance(engine, ScriptedEngine)
    engine.scripts, engine.first = [_answer(tokenizer)], len(engine.requests)
    inject, fields = STEPS[step]
    inject(monkeypatch, engine)
    if step == "store save":
        assert context.records is not None
        monkeypatch.setattr(context.records.responses, "save", _failing_on(1, context.records.responses.save))
    events = _events(base_url, transport, {"model": MODEL, "input": "What is the answer?", **fields})
    terminal = [event for event in events if event["type"] in TERMINAL_EVENTS]
    assert len(terminal) == 1 and events[-1] is terminal[0], [event["type"] for event in events]
    told = terminal[0]["response"]
    if transport == "sse":
        assert [event["sequence_number"] for event in events] == list(range(len(events)))
    monkeypatch.undo()  # the store reads as it is now
    stored = httpx.get(f"{base_url}/responses/{told['id']}", timeout=30)
    for _ in range(300):  # a save that failed is tried again in the background (the first after 0.1 s)
        if stored.status_code != 404:
            break
        time.sleep(0.1)
        stored = httpx.get(f"{base_url}/responses/{told['id']}", timeout=30)
    assert stored.status_code == 200, stored.text
    assert stored.json()["status"] == told["status"] and stored.json()["output"] == told["output"]
    assert context.admission.active == 0

