"""End to end on the real CPU engine: a storm of 32 streams dropped after their first delta, then 64 streams at
once. Every stream keeps the contract, every dropped one aborts its engine request, the store keeps all."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from server.engine.recording import read_recordings
from tests.test_e2e import MODEL, RunningServer
from tests.validator import validate_events

pytestmark = pytest.mark.e2e
STORM, LOAD = 32, 64
PROMPT = "Write a short poem about the sea."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    logs = tmp_path_factory.mktemp("load")
    running = RunningServer(["--max-model-len", "2048", "--record-engine-output", str(logs / "engine.jsonl")],
                            logs / "server.log")
    yield running
    running.stop()


async def stream(client: httpx.AsyncClient, url: str, max_tokens: int, drop_after_first: bool = False,
                 ) -> tuple[float | None, list[dict[str, Any]]]:
    """(time to first output delta, the events read); with drop_after_first, the client goes away there."""
    events: list[dict[str, Any]] = []
    started = time.monotonic()
    first: float | None = None
    async with client.stream("POST", url, json={"model": MODEL, "input": PROMPT, "stream": True,
                                                "max_output_tokens": max_tokens}) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            events.append(json.loads(line[len("data:"):]))
            if events[-1]["type"] == "response.output_text.delta" and first is None:
                first = time.monotonic() - started
                if drop_after_first:
                    break
    return first, events


def ttfts(server: RunningServer, count: int, max_tokens: int = 16) -> list[float]:
    async def run() -> list[float]:
        async with httpx.AsyncClient(timeout=300) as client:
            return [(await stream(client, f"{server.base_url}/responses", max_tokens))[0] or 0.0 for _ in range(count)]

    return asyncio.run(run())


def test_a_storm_of_dropped_streams_leaves_the_engine_idle(server: RunningServer) -> None:
    ttfts(server, 1)  # warm
    idle = statistics.median(ttfts(server, 3))
    recordings = Path(server.log.parent / "engine.jsonl")
    before = len(read_recordings(recordings))

    async def storm() -> float:
        async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=STORM)) as client:
            results = await asyncio.gather(*(stream(client, f"{server.base_url}/responses", 512, True)
                                             for _ in range(STORM)))
        assert all(first is not None for first, _ in results)
        return time.monotonic()

    dropped_at = asyncio.run(storm())
    deadline = dropped_at + 2.0  # every engine request aborted within 2 s of the last client leaving
    while time.monotonic() < deadline and len(read_recordings(recordings)) < before + STORM:
        time.sleep(0.05)
    idle_after = time.monotonic() - dropped_at
    storm_lines = read_recordings(recordings)[before:]
    assert len(storm_lines) == STORM, f"{len(storm_lines)} of {STORM} engine requests ended within 2 s"
    assert all(r.finish_reason == "abort" and len(r.steps) < 512 for r in storm_lines)
    recovered = statistics.median(ttfts(server, 3))
    print(f"\ndisconnect storm: idle TTFT {idle:.3f}s, after the storm {recovered:.3f}s; "
          f"all {STORM} engine requests aborted {idle_after:.2f}s after the last client left")
    assert recovered <= 1.5 * idle + 0.25
    log = server.log.read_text()
    assert "Traceback" not in log and log.count("cancelled after") >= STORM  # one info line each


def test_64_streams_at_once_keep_the_contract_and_are_all_stored(server: RunningServer) -> None:
    async def load() -> tuple[list[tuple[float | None, list[dict[str, Any]]]], float]:
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=LOAD)) as client:
            started = time.monotonic()
            results = await asyncio.gather(*(stream(client, f"{server.base_url}/responses", 32) for _ in range(LOAD)))
            return results, time.monotonic() - started

    results, took = asyncio.run(load())
    finals = [validate_events(events) for _, events in results]  # every stream, whole and valid
    assert all(final.status in ("completed", "incomplete") for final in finals)
    for final in finals:
        stored = httpx.get(f"{server.base_url}/responses/{final.id}", timeout=30)
        assert stored.status_code == 200 and stored.json()["output"] == json.loads(final.to_json())["output"]
    first = sorted(f for f, _ in results if f is not None)
    tokens = sum(final.usage.output_tokens for final in finals if final.usage)
    p99 = first[min(len(first) - 1, int(0.99 * len(first)))]
    print(f"\n{LOAD} streams: TTFT p50 {statistics.median(first):.2f}s p99 {p99:.2f}s, "
          f"{tokens} output tokens in {took:.1f}s = {tokens / took:.1f} tok/s")
    assert len(first) == LOAD
