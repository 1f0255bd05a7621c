"""End to end: SIGTERM to the real server process while responses run: it stops accepting, lets short
responses finish, ends long ones with response.failed (never a cut stream), saves them, and exits 0.

It stops the package's server, so it is the package's last module (modules run in the order of their names)."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import asyncio

import httpx
import pytest

from server.http.graceful import SHUTDOWN_REASON
from tests.stores import sqlite_records
from tests.e2e_one_server.conftest import SHUTDOWN_TIMEOUT
from tests.servers import MODEL, RunningServer
from conformance.contract import validate_events

pytestmark = pytest.mark.e2e
# Greedy, the bundled model writes this story until max_output_tokens stops it (counting "to 2000" stopped at 20,
# 122 tokens, which a fast machine finished within the shutdown timeout).
# No frequency penalty (the bundled model's serving default), so the story runs as long as it always did.
LONG = {"input": "Write a very long story about a dragon.", "temperature": 0, "max_output_tokens": 1900,
        "frequency_penalty": 0}


def stream_into(server: RunningServer, body: dict[str, Any], events: list[dict[str, Any]],
                started: threading.Event) -> None:
    with httpx.stream("POST", f"{server.base_url}/responses", json={"model": MODEL, "stream": True, **body},
                      timeout=300) as response:
        for line in response.iter_lines():  # read as it arrives: the test acts on the first delta
            if line.startswith("data:"):
                events.append(json.loads(line[len("data:"):]))
                if events[-1]["type"] == "response.output_text.delta":
                    started.set()


def socket_into(server: RunningServer, body: dict[str, Any], events: list[Any], started: threading.Event) -> None:
    """A long response over a WebSocket; `events` gets its events, then the close code the server ended with."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(server.base_url.replace("http://", "ws://") + "/responses") as socket:
        socket.send(json.dumps({"type": "response.create", "model": MODEL, **body}))
        try:
            while True:
                events.append(json.loads(socket.recv(timeout=300)))
                if events[-1]["type"] == "response.output_text.delta":
                    started.set()
        except ConnectionClosed as closed:
            events.append(closed.rcvd.code if closed.rcvd else None)


def test_sigterm_drains_then_fails_what_is_left_and_exits_zero(server: RunningServer) -> None:
    logged_before = len(server.log.read_text())
    long_events: list[dict[str, Any]] = []
    short_events: list[dict[str, Any]] = []
    long_started, short_started = threading.Event(), threading.Event()
    long_thread = threading.Thread(target=stream_into, args=(server, LONG, long_events, long_started))
    long_thread.start()
    assert long_started.wait(120)
    background = httpx.post(f"{server.base_url}/responses", timeout=60,
                            json={"model": MODEL, "background": True, **LONG}).json()
    short_thread = threading.Thread(target=stream_into, args=(
        server, {"input": "Say hi.", "max_output_tokens": 8}, short_events, short_started))
    short_thread.start()
    assert short_started.wait(120)
    socket_events: list[Any] = []
    socket_started = threading.Event()
    socket_thread = threading.Thread(target=socket_into, args=(server, LONG, socket_events, socket_started))
    socket_thread.start()
    assert socket_started.wait(120)

    sent = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    time.sleep(1)
    with pytest.raises(httpx.ConnectError):  # no longer accepting
        httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=5)
    short_thread.join(60)
    long_thread.join(60)
    socket_thread.join(60)
    assert server.process.wait(timeout=60) == 0
    took = time.monotonic() - sent
    log = server.log.read_text()[logged_before:]  # what the server wrote from this test on

    short = validate_events(short_events)
    assert short.status in ("completed", "incomplete")  # it ended on its own (8 tokens) within the timeout
    failed = validate_events(long_events)  # a whole stream: one terminal event, every item closed
    assert long_events[-1]["type"] == "response.failed" and failed.error.message == SHUTDOWN_REASON
    assert socket_events[-1] == 1001  # the socket closed as "going away", after its response's terminal event
    on_socket = validate_events(socket_events[:-1])
    assert on_socket.status == "failed" and on_socket.error.message == SHUTDOWN_REASON
    assert SHUTDOWN_TIMEOUT <= took < SHUTDOWN_TIMEOUT + 20, log[-2000:]
    assert "Traceback" not in log, log[-4000:]

    async def stored() -> dict[str, str]:
        stored = sqlite_records(server.data_dir / "responses.db")
        store = stored.responses
        try:
            records = {key: await store.get(value, "default") for key, value in
                       {"long": failed.id, "background": background["id"], "short": short_events[-1]["response"]["id"]}.items()}
            return {key: record.status if record else "missing" for key, record in records.items()}
        finally:
            await stored.close()

    assert asyncio.run(stored()) == {"long": "failed", "background": "failed", "short": short.status}
