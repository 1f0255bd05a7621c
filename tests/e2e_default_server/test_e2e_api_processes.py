"""End to end: `--api-server-count 2` on the real CPU engine. Two API processes share the port and one engine core;
a response made through one is read, chained, followed and cancelled through the other; `/metrics` sums both;
SIGTERM drains both."""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import psutil
import pytest
from openai import OpenAI

from tests.sse import events_of, parse_frames
from tests.servers import MODEL, UNPENALIZED, RunningServer
from conformance.contract import validate_events

pytestmark = pytest.mark.e2e
# Asked with no frequency penalty (the bundled model's serving default): counting repeats its commas to the end.
COUNT = {"input": "Count from 1 to 300, separated by commas.", "temperature": 0}
HEADER = "responses-server-process"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    logs = tmp_path_factory.mktemp("api-processes")
    running = RunningServer(["--api-server-count", "2", "--max-model-len", "2048"], logs / "server.log")
    yield running
    running.stop()


def through(server: RunningServer, process: int) -> httpx.Client:
    """A client whose kept-alive connection was accepted by API process `process` (new connections land on either;
    one process may still be starting when the other answers /health)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        client = httpx.Client(base_url=server.base_url, timeout=300, limits=httpx.Limits(max_connections=1))
        if client.get("/models").headers[HEADER] == str(process):
            return client
        client.close()
        time.sleep(0.05)
    raise AssertionError(f"no connection reached API process {process}")


def sdk(client: httpx.Client) -> OpenAI:
    return OpenAI(base_url=str(client.base_url), api_key="unused", max_retries=0, http_client=client)


def engine_cores(server: RunningServer) -> list[psutil.Process]:
    children = psutil.Process(server.process.pid).children(recursive=True)
    return [child for child in children if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name()]


def test_both_processes_answer_in_front_of_one_engine_core(server: RunningServer) -> None:
    seen = {str(process) for process in (0, 1) if through(server, process)}
    assert seen == {"0", "1"}
    assert len(engine_cores(server)) == 1
    for process in (0, 1):
        reply = sdk(through(server, process)).responses.create(model=MODEL, input="Say hi.", max_output_tokens=8)
        assert reply.status in ("completed", "incomplete") and reply.usage and reply.usage.output_tokens > 0


def test_created_through_one_read_and_chained_through_the_other(server: RunningServer) -> None:
    zero, one = sdk(through(server, 0)), sdk(through(server, 1))
    first = zero.responses.create(model=MODEL, input="What is the capital of France?", temperature=0,
                                  max_output_tokens=32)
    assert one.responses.retrieve(first.id).output_text == first.output_text
    second = one.responses.create(model=MODEL, input="And of Italy?", previous_response_id=first.id, temperature=0,
                                  max_output_tokens=32)
    assert [item.type for item in zero.responses.input_items.list(second.id).data] == ["message"]
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # history included


def test_followed_and_cancelled_through_the_other(server: RunningServer) -> None:
    zero, one = through(server, 0), through(server, 1)
    followed = sdk(zero).responses.create(model=MODEL, background=True, max_output_tokens=60, **COUNT,
                                        extra_body=UNPENALIZED)
    with one.stream("GET", f"/responses/{followed.id}", params={"stream": "true"}) as reply:
        final = validate_events(events_of(parse_frames(reply.iter_lines())))
    assert final.status == "incomplete" and final.output_text.startswith("1")

    started = sdk(zero).responses.create(model=MODEL, background=True, max_output_tokens=1500, **COUNT,
                                        extra_body=UNPENALIZED)
    time.sleep(2)  # generating in process 0
    assert sdk(one).responses.cancel(started.id).status == "cancelled"
    assert sdk(zero).responses.retrieve(started.id).status == "cancelled"
    deadline = time.monotonic() + 20
    while f"response {started.id} cancelled" not in server.log.read_text():
        assert time.monotonic() < deadline, "process 0 did not abort its engine request"
        time.sleep(0.2)


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_sum_both_processes(server: RunningServer) -> None:
    zero, one = through(server, 0), through(server, 1)
    name = "responses_server_responses_total"
    metrics = f"http://127.0.0.1:{server.port}/metrics"  # same origin: the same kept-alive connection
    before = _sample(zero.get(metrics).text, name, mode="json")
    for client in (zero, one, one):
        sdk(client).responses.create(model=MODEL, input="Say hi.", max_output_tokens=4)
    for client in (zero, one):  # either process reports the sum
        assert _sample(client.get(metrics).text, name, mode="json") == before + 3


def test_sigterm_drains_both_processes_then_exits_zero(server: RunningServer) -> None:
    streams: dict[int, list[dict[str, Any]]] = {}

    def stream(process: int) -> None:
        client = through(server, process)
        body = {"model": MODEL, "stream": True, "max_output_tokens": 120, **COUNT, **UNPENALIZED}
        with client.stream("POST", "/responses", json=body) as reply:
            streams[process] = events_of(parse_frames(reply.iter_lines()))
        client.close()

    threads = [threading.Thread(target=stream, args=(process,)) for process in (0, 1)]
    for thread in threads:
        thread.start()
    time.sleep(3)  # both streaming
    cores = engine_cores(server)
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=120)
    assert server.process.wait(timeout=120) == 0
    for process in (0, 1):
        final = validate_events(streams[process])  # one terminal event each, never a cut stream
        assert final.status in ("incomplete", "completed"), final.status
    assert not [core for core in cores if core.is_running() and core.status() != psutil.STATUS_ZOMBIE]
    assert re.search(r"shutting down: \d+ response\(s\) running", server.log.read_text())
