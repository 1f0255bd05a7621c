"""End to end: `--api-server-count 2` on the real CPU engine (the package's server). Two API processes share the port
and one engine core; a response made through one is read, chained, followed and cancelled through the other;
`/metrics` sums both; SIGTERM drains both (last in the package: it stops the server)."""

from __future__ import annotations

import re
import signal
import threading
import time
from typing import Any

import psutil
import pytest

from conformance.contract import validate_events
from tests.servers import MODEL, UNPENALIZED, RunningServer, sdk, through
from tests.sse import events_of, parse_frames

pytestmark = pytest.mark.e2e
# Asked with no frequency penalty (the bundled model's serving default): counting repeats its commas to the end.
COUNT = {"input": "Count from 1 to 300, separated by commas.", "temperature": 0}


def engine_cores(server: RunningServer) -> list[psutil.Process]:
    children = psutil.Process(server.process.pid).children(recursive=True)
    return [child for child in children if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name()]


def test_both_processes_answer_in_front_of_one_engine_core(live: RunningServer) -> None:
    seen = {str(process) for process in (0, 1) if through(live, process)}
    assert seen == {"0", "1"}
    assert len(engine_cores(live)) == 1
    for process in (0, 1):
        reply = sdk(through(live, process)).responses.create(model=MODEL, input="Say hi.", max_output_tokens=8)
        assert reply.status in ("completed", "incomplete") and reply.usage and reply.usage.output_tokens > 0


def test_created_through_one_read_and_chained_through_the_other(live: RunningServer) -> None:
    zero, one = sdk(through(live, 0)), sdk(through(live, 1))
    first = zero.responses.create(model=MODEL, input="What is the capital of France?", temperature=0,
                                  max_output_tokens=32)
    assert one.responses.retrieve(first.id).output_text == first.output_text
    second = one.responses.create(model=MODEL, input="And of Italy?", previous_response_id=first.id, temperature=0,
                                  max_output_tokens=32)
    assert [item.type for item in zero.responses.input_items.list(second.id).data] == ["message"]
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # history included


def test_followed_and_cancelled_through_the_other(live: RunningServer) -> None:
    zero, one = through(live, 0), through(live, 1)
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
    while f"response {started.id} cancelled" not in live.log.read_text():
        assert time.monotonic() < deadline, "process 0 did not abort its engine request"
        time.sleep(0.2)


def _sample(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_sum_both_processes(live: RunningServer) -> None:
    zero, one = through(live, 0), through(live, 1)
    name = "responses_server_responses_total"
    metrics = f"http://127.0.0.1:{live.port}/metrics"  # same origin: the same kept-alive connection
    before = _sample(zero.get(metrics).text, name, mode="json")
    for client in (zero, one, one):
        sdk(client).responses.create(model=MODEL, input="Say hi.", max_output_tokens=4)
    for client in (zero, one):  # either process reports the sum
        assert _sample(client.get(metrics).text, name, mode="json") == before + 3


def test_sigterm_drains_both_processes_then_exits_zero(live: RunningServer) -> None:
    streams: dict[int, list[dict[str, Any]]] = {}

    def stream(process: int) -> None:
        client = through(live, process)
        body = {"model": MODEL, "stream": True, "max_output_tokens": 120, **COUNT, **UNPENALIZED}
        with client.stream("POST", "/responses", json=body) as reply:
            streams[process] = events_of(parse_frames(reply.iter_lines()))
        client.close()

    threads = [threading.Thread(target=stream, args=(process,)) for process in (0, 1)]
    for thread in threads:
        thread.start()
    time.sleep(3)  # both streaming
    cores = engine_cores(live)
    live.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=120)
    assert live.process.wait(timeout=120) == 0
    for process in (0, 1):
        final = validate_events(streams[process])  # one terminal event each, never a cut stream
        assert final.status in ("incomplete", "completed"), final.status
    assert not [core for core in cores if core.is_running() and core.status() != psutil.STATUS_ZOMBIE]
    assert re.search(r"shutting down: \d+ response\(s\) running", live.log.read_text())
