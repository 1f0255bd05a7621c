"""`/metrics`: our series move with what the server did (requests by status, terminal types, TTFT, tokens, active
streams, store latency, disconnects, 4xx by code), in Prometheus' exposition format; the API key does not cover it
unless asked."""

from __future__ import annotations

import time
from typing import Any, Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.test_server import MODEL, Harness
from tests.test_store import open_url, say, slow

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base_url: str, **headers: str) -> Samples:
    response = httpx.get(base_url.removesuffix("/v1") + "/metrics", headers=headers, timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def measured(tokenizer: Any, tmp_path: Any) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    config = ServerConfig(served_model_name=MODEL, api_keys=("sk-test",))
    context = ServingContext(config=config, engine_factory=lambda: engine,
                             records=open_url(f"sqlite:///{tmp_path / 'r.db'}"))
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def test_series_move_with_what_the_server_did(measured: Harness, tokenizer: Any) -> None:
    key = {"Authorization": "Bearer sk-test"}
    before = scrape(measured.base_url)  # no key needed
    measured.play(say(tokenizer, "Paris is the capital."))
    with httpx.stream("POST", f"{measured.base_url}/responses", headers=key, timeout=30,
                      json={"model": MODEL, "input": "x", "stream": True}) as response:
        assert [line for line in response.iter_lines() if "response.completed" in line]
    measured.play(steps_from_tokens(tokenizer.encode("Rome is", add_special_tokens=False), cuts=[1], finish="length"))
    assert httpx.post(f"{measured.base_url}/responses", headers=key, timeout=30,
                      json={"model": MODEL, "input": "y", "max_output_tokens": 2}).json()["status"] == "incomplete"
    assert httpx.post(f"{measured.base_url}/responses", headers=key, json={"model": MODEL}).status_code == 400
    assert httpx.post(f"{measured.base_url}/responses", json={"model": MODEL, "input": "x"}).status_code == 401

    slow(measured, tokenizer, words=200, delay=0.05)  # a client that goes away mid-stream
    open_streams: list[float] = []
    with httpx.stream("POST", f"{measured.base_url}/responses", headers=key, timeout=30,
                      json={"model": MODEL, "input": "x", "stream": True}) as response:
        for line in response.iter_lines():
            if "output_text.delta" in line:
                open_streams.append(value(scrape(measured.base_url), "responses_server_active_streams"))
                break
    assert measured.engine_aborted_last_request()
    time.sleep(0.2)
    after = scrape(measured.base_url)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("responses_server_responses_total", status="completed", mode="stream") == 1
    assert moved("responses_server_responses_total", status="incomplete", mode="json") == 1
    assert moved("responses_server_client_disconnects_total") == 1
    assert moved("responses_server_client_errors_total", status="400", code="invalid_request_error") == 1
    assert moved("responses_server_client_errors_total", status="401", code="invalid_api_key") == 1
    assert moved("responses_server_http_requests_total", method="POST", route="/v1/responses", status="200") == 3
    assert moved("responses_server_http_requests_total", method="POST", route="unmatched", status="401") == 1  # refused before routing
    assert moved("responses_server_time_to_first_token_seconds_count") == 3
    assert moved("responses_server_response_duration_seconds_count") == 2
    assert moved("responses_server_output_tokens_total") >= len(tokenizer.encode("Paris is the capital.")) + 1
    assert open_streams == [1.0] and value(after, "responses_server_active_streams") == 0
    assert moved("responses_server_store_operation_seconds_count", backend="sqlite", operation="save") == 2


def test_the_key_can_be_required(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    config = ServerConfig(served_model_name=MODEL, api_keys=("sk-test",), metrics_need_key=True)
    with serve_in_thread(create_app(ServingContext(config=config, engine_factory=lambda: engine))) as base_url:
        root = base_url.removesuffix("/v1")
        assert httpx.get(f"{root}/metrics").status_code == 401
        assert scrape(base_url, Authorization="Bearer sk-test")


def test_websocket_connections_and_events_are_counted(measured: Harness, tokenizer: Any) -> None:
    from tests.test_websocket import Socket

    before = scrape(measured.base_url)
    measured.play(say(tokenizer, "Hello there."))
    socket = Socket(measured.base_url, additional_headers={"Authorization": "Bearer sk-test"})
    socket.send({"type": "response.create", "model": MODEL, "input": "hi"})
    sent = socket.until_terminal()
    socket.send({"type": "nonsense"})
    assert socket.recv()["type"] == "error"
    during = scrape(measured.base_url)
    socket.ws.close()
    time.sleep(0.3)
    after = scrape(measured.base_url)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert value(during, "responses_server_websocket_connections") == 1
    assert value(after, "responses_server_websocket_connections") == 0
    assert moved("responses_server_websocket_events_total", direction="in", type="response.create") == 1
    assert moved("responses_server_websocket_events_total", direction="in", type="unknown") == 1
    assert moved("responses_server_websocket_events_total", direction="out", type="error") == 1
    assert moved("responses_server_websocket_events_total", direction="out",
                 type="response.output_text.delta") == sum(e["type"] == "response.output_text.delta" for e in sent)
    assert moved("responses_server_responses_total", status="completed", mode="websocket") == 1
    assert moved("responses_server_client_errors_total", status="400", code="unknown_event") == 1


def test_the_event_loop_lag_is_measured_while_the_loop_is_blocked() -> None:
    """A loop blocked for 0.3 s shows a lag of at least that (a loaded machine can only add to it)."""
    import asyncio

    from server.metrics import EVENT_LOOP_LAG, watch_event_loop_lag

    def observed() -> tuple[float, float]:
        samples = {s.name: s.value for m in EVENT_LOOP_LAG.collect() for s in m.samples if not s.labels}
        return samples["responses_server_event_loop_lag_seconds_count"], samples[
            "responses_server_event_loop_lag_seconds_sum"]

    async def block_while_watched() -> None:
        watcher = asyncio.create_task(watch_event_loop_lag(interval=0.01))
        await asyncio.sleep(0.05)
        time.sleep(0.3)
        await asyncio.sleep(0.05)
        watcher.cancel()

    count, total = observed()
    asyncio.run(block_while_watched())
    later_count, later_total = observed()
    assert later_count > count and later_total - total >= 0.29


def test_the_served_app_reports_its_event_loop_lag(measured: Harness) -> None:
    time.sleep(0.3)
    assert value(scrape(measured.base_url), "responses_server_event_loop_lag_seconds_count") > 0
