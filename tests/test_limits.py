"""Limits, each with OpenAI's error body: request body size (413), responses at once (429 with Retry-After),
and a client that stops reading (the send timeout ends its stream)."""

from __future__ import annotations

import asyncio
import logging
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Iterator

import httpx
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.http.event_stream import event_stream
from streaming.ids import counting_ids
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL, Harness, answer_tokens


@pytest.fixture(scope="module")
def limited(tokenizer: Any) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    config = ServerConfig(served_model_name=MODEL, max_body_bytes=4096, max_concurrent_requests=1)
    with serve_in_thread(create_app(ServingContext(config=config, engine_factory=lambda: engine))) as base_url:
        yield Harness(engine, base_url)


def test_a_body_over_the_limit_is_a_413_declared_or_not(limited: Harness) -> None:
    big = json.dumps({"model": MODEL, "input": "x" * 5000}).encode()
    declared = httpx.post(f"{limited.base_url}/responses", content=big, timeout=30,
                          headers={"content-type": "application/json"})
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for start in range(0, len(big), 1000):
            yield big[start:start + 1000]

    chunked = httpx.post(f"{limited.base_url}/responses", content=chunks(), timeout=30,
                         headers={"content-type": "application/json"})
    assert chunked.status_code == 413 and chunked.json()["error"]["type"] == "invalid_request_error"


def test_past_the_cap_a_request_is_a_429_and_the_place_comes_back(limited: Harness, tokenizer: Any) -> None:
    limited.engine.step_delay = 0.05
    limited.play(steps_from_tokens(answer_tokens(tokenizer) * 4, cuts=list(range(1, 200))))
    try:
        with httpx.stream("POST", f"{limited.base_url}/responses", timeout=30,
                          json={"model": MODEL, "input": "long", "stream": True}) as first:
            lines = first.iter_lines()  # kept: a dropped iterator closes the response
            next(lines)  # the first response is running
            refused = limited.post(input="second")
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        # the first client went away: its place is released once its run has ended
        deadline = time.monotonic() + 5
        limited.engine.step_delay = 0.0
        limited.play(steps_from_tokens(answer_tokens(tokenizer, "ok"), cuts=[]))
        while (status := limited.post(input="third").status_code) == 429 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == 200
        assert limited.post(input="fourth").status_code == 200  # and a finished run releases it too
        assert limited.post(input="bad", temperature=9).status_code == 400  # a refused request takes no place
        assert limited.post(input="fifth").status_code == 200
    finally:
        limited.engine.step_delay = 0.0


def test_a_client_that_stops_reading_has_its_stream_ended(caplog: pytest.LogCaptureFixture) -> None:
    """sse-starlette's send timeout, through our EventStream: no exception escapes, and the frames' generator
    is closed (which is what aborts a run's engine request)."""
    closed = threading.Event()

    async def frames() -> AsyncIterator[str]:
        try:
            while True:
                yield "data"
                await asyncio.sleep(0)
        finally:
            closed.set()

    async def scenario() -> None:
        config = ServerConfig(served_model_name=MODEL, send_timeout_seconds=0.2, keepalive_seconds=0)
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)
            if len(sent) > 3:
                await asyncio.sleep(3600)  # the client stopped reading

        async def receive() -> Any:
            await asyncio.sleep(3600)

        scope = {"type": "http", "method": "POST", "path": "/v1/responses", "headers": []}
        await asyncio.wait_for(event_stream(frames(), config)(scope, receive, send), timeout=10)

    with caplog.at_level(logging.INFO, logger="server.http.event_stream"):
        asyncio.run(scenario())
    assert closed.is_set()
    assert "the client stopped reading for 0.2s" in caplog.text  # ended by the send timeout, not the guard's


def test_a_lone_surrogate_is_a_400_and_a_pair_is_text(limited: Harness, tokenizer: Any) -> None:
    """Found by `make fuzz`: tokenizers cannot encode a lone surrogate, which was a 500."""
    for stream in ("false", "true"):
        body = '{"model": "%s", "stream": %s, "input": "bad \\ud800 half"}' % (MODEL, stream)
        response = httpx.post(f"{limited.base_url}/responses", content=body, timeout=30,
                              headers={"content-type": "application/json"})
        assert response.status_code == 400 and "surrogate" in response.json()["error"]["message"]
    limited.play(steps_from_tokens(answer_tokens(tokenizer, "ok"), cuts=[]))
    pair = httpx.post(f"{limited.base_url}/responses", timeout=30, headers={"content-type": "application/json"},
                      content='{"model": "%s", "input": "smile \\ud83d\\ude00"}' % MODEL)
    assert pair.status_code == 200


def test_past_the_cap_a_request_waits_for_a_place_when_the_server_lets_it(tokenizer: Any) -> None:
    """`--admission-wait`: a request past the cap waits (up to the wait) for a running one to end, then runs: Codex
    treats a 429 as the end of its thread, so a busy server should make it wait rather than refuse it."""
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(answer_tokens(tokenizer), list(range(1, 40)))],
                            step_delay=0.05)
    config = ServerConfig(served_model_name=MODEL, max_concurrent_requests=1, admission_wait_seconds=20)
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids())
    with serve_in_thread(create_app(context)) as base_url:
        waiting = Harness(engine, base_url)
        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(lambda n: waiting.post(input=f"request {n}"), range(3)))
        assert [answer.status_code for answer in answers] == [200, 200, 200], [a.text[:200] for a in answers]
        assert all(answer.json()["status"] == "completed" for answer in answers)
    config = ServerConfig(served_model_name=MODEL, max_concurrent_requests=1, admission_wait_seconds=0.3)
    context = ServingContext(config=config, engine_factory=lambda: engine, ids=counting_ids())
    engine.step_delay = 0.2  # each answer takes seconds: a wait of 0.3 s ends in a 429
    with serve_in_thread(create_app(context)) as base_url:
        waiting = Harness(engine, base_url)
        with ThreadPoolExecutor(2) as pool:
            statuses = sorted(answer.status_code for answer in pool.map(lambda n: waiting.post(input=f"r{n}"), range(2)))
        assert statuses == [200, 429]


def test_a_background_response_past_the_cap_is_queued_until_its_turn(tokenizer: Any, tmp_path: Any) -> None:
    """Past the cap a background response is not refused: it is created `queued` (`response.queued`, and so it
    reads), and goes `in_progress` once a place is free, then completes; one cancelled while queued ends there."""
    import openai

    from conformance.contract import validate_events
    from tests.stores import sqlite_records

    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[steps_from_tokens(answer_tokens(tokenizer), list(range(1, 40)))],
                            step_delay=0.05)
    config = ServerConfig(served_model_name=MODEL, max_concurrent_requests=1, admission_wait_seconds=0.1)
    context = ServingContext(config=config, engine_factory=lambda: engine, records=sqlite_records(tmp_path / "r.db"))
    with serve_in_thread(create_app(context)) as base_url:
        client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
        with httpx.stream("POST", f"{base_url}/responses", timeout=30,
                          json={"model": MODEL, "input": "long", "stream": True}) as first:
            lines = first.iter_lines()
            next(lines)  # the first response holds the one place
            queued = client.responses.create(model=MODEL, input="later", background=True)
            cancelled = client.responses.create(model=MODEL, input="never", background=True)
            assert queued.status == cancelled.status == "queued"
            assert client.responses.retrieve(queued.id).status == "queued"
            assert client.responses.cancel(cancelled.id).status == "cancelled"
            for _ in lines:
                pass
        events = []
        with client.responses.retrieve(queued.id, stream=True, starting_after=-1) as followed:  # type: ignore[call-overload]
            events = [event.model_dump(mode="json", exclude_unset=True) for event in followed]
        assert [event["type"] for event in events[:3]] == ["response.created", "response.queued", "response.in_progress"]
        assert validate_events(events).status == "completed"
        with client.responses.retrieve(cancelled.id, stream=True, starting_after=-1) as followed:  # type: ignore[call-overload]
            ended = [event.model_dump(mode="json", exclude_unset=True) for event in followed]
        assert [event["type"] for event in ended] == ["response.created", "response.queued", "response.failed"]
        assert validate_events(ended).status == "cancelled"
