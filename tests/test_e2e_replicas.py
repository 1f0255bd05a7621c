"""End to end: two server processes on the real CPU engine share one real PostgreSQL database. A response created
on A is read, chained, followed live and cancelled on B; A aborts the cancelled engine request."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tests.sse import events_of, parse_frames
from tests.test_e2e import MODEL, RunningServer
from conformance.contract import validate_events

pytestmark = pytest.mark.e2e
COUNT = {"input": "Count from 1 to 300, separated by commas.", "temperature": 0}


@pytest.fixture(scope="module")
def replicas(postgres: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, RunningServer]]:
    store = postgres.new_database()
    logs = tmp_path_factory.mktemp("replicas")
    servers = [RunningServer(["--store", store, "--replica-id", name, "--max-model-len", "2048"],
                             logs / f"{name}.log", data_dir=logs / name) for name in ("a", "b")]
    yield servers[0], servers[1]
    for server in servers:
        server.stop()


def test_created_on_a_read_and_chained_on_b(replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    first = a.client.responses.create(model=MODEL, input="What is the capital of France?", temperature=0,
                                      max_output_tokens=32)
    assert b.client.responses.retrieve(first.id).output_text == first.output_text
    second = b.client.responses.create(model=MODEL, input="And of Italy?", previous_response_id=first.id,
                                       temperature=0, max_output_tokens=32)
    assert [i.type for i in a.client.responses.input_items.list(second.id).data] == ["message"]
    assert "Rome" in second.output_text or "rome" in second.output_text.lower()


def test_followed_live_on_b(replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    started = a.client.responses.create(model=MODEL, background=True, max_output_tokens=120, **COUNT)
    time.sleep(1.0)
    with httpx.stream("GET", f"{b.base_url}/responses/{started.id}", timeout=300,
                      params={"stream": "true"}) as response:
        arrivals: list[float] = []
        frames = []
        for line in response.iter_lines():
            frames.append(line)
            if line.startswith("data:"):
                arrivals.append(time.monotonic())
    events = events_of(parse_frames(frames + [""]))
    final = validate_events(events)
    assert final.status == "incomplete" and final.output_text.startswith("1")
    assert arrivals[-1] - arrivals[0] > 1.0  # live: deltas kept arriving as A generated them, not all at once
    assert a.client.responses.retrieve(started.id).output_text == final.output_text


def test_cancelled_on_b_aborts_on_a(replicas: tuple[RunningServer, RunningServer]) -> None:
    a, b = replicas
    started = a.client.responses.create(model=MODEL, background=True, max_output_tokens=1500, **COUNT)
    time.sleep(2)  # generating on A
    cancelled = b.client.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    assert a.client.responses.retrieve(started.id).status == "cancelled"
    deadline = time.monotonic() + 10
    while f"response {started.id} cancelled" not in a.log.read_text():
        assert time.monotonic() < deadline, "A did not abort its engine request"
        time.sleep(0.2)
    with httpx.stream("GET", f"{b.base_url}/responses/{started.id}", params={"stream": "true"}, timeout=60) as reply:
        replayed = events_of(parse_frames(reply.iter_lines()))
    validate_events(replayed)
    assert replayed[-1]["response"]["status"] == "cancelled"
