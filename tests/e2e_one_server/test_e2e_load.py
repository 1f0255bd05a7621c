"""End to end on the real CPU engine: a storm of 32 streams dropped after their first delta, then 64 streams at
once. Every stream keeps the contract, every dropped one aborts its engine request, the store keeps all."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.engine.recording import read_recordings
from tests.servers import MODEL, RunningServer
from conformance.contract import validate_events

pytestmark = pytest.mark.e2e
STORM, LOAD = 32, 64
WANTED = 512  # output tokens each stream of the storm asks for
PROMPT = "Write a short poem about the sea."


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


def engine_requests(server: RunningServer, state: str) -> float:
    """vLLM's gauge of the engine's requests in `state` ("running" or "waiting"), from the server's /metrics."""
    text = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f"vllm:num_requests_{state}{{"))


def test_a_storm_of_dropped_streams_leaves_the_engine_idle(server: RunningServer) -> None:
    ttfts(server, 1)  # warm
    recordings = Path(server.log.parent / "engine.jsonl")
    before = len(read_recordings(recordings))

    async def storm() -> None:
        async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=STORM)) as client:
            results = await asyncio.gather(*(stream(client, f"{server.base_url}/responses", WANTED, True)
                                             for _ in range(STORM)))
        assert all(first is not None for first, _ in results)

    asyncio.run(storm())
    deadline = time.monotonic() + 300  # a bound for a loaded machine; the counts below are the test
    while time.monotonic() < deadline and len(read_recordings(recordings)) < before + STORM:
        time.sleep(0.05)
    storm_lines = read_recordings(recordings)[before:]
    assert len(storm_lines) == STORM, f"{len(storm_lines)} of {STORM} engine requests ended"
    # each was aborted, long before the tokens it asked for: the client leaving cancelled it
    assert all(r.finish_reason == "abort" for r in storm_lines), [r.finish_reason for r in storm_lines]
    assert max(len(r.steps) for r in storm_lines) < WANTED // 4, [len(r.steps) for r in storm_lines]

    async def after() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=300) as client:
            return (await stream(client, f"{server.base_url}/responses", 16))[1]

    assert validate_events(asyncio.run(after())).status in ("completed", "incomplete")  # served as before
    # vLLM's gauges are set at each engine step (an abort makes none): the steps that answered the request above
    # ran it alone, so none of the storm's requests was left in the engine
    assert engine_requests(server, "running") <= 1 and engine_requests(server, "waiting") == 0
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
