"""A fleet that changes without a restart (server/models/fleet_watch.py, server/engine/discovery.py): the fleet file
read again on SIGHUP and when it changes, by a real gateway process over worker doubles; a name that resolves to
several addresses, one worker each, followed as its addresses change."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from conformance.contract import validate_events
from server.bundled_model import BUNDLED_MODEL_NAME
from server.engine.discovery import discover
from tests.conftest import free_port, serve_asgi
from tests.scale_out_worker import ScaleOutWorker
from tests.scripted_engine import ScriptedEngine, steps_from_tokens
from tests.servers import RunningServer
from tests.sse import events_of, parse_frames

SMALL, OTHER = BUNDLED_MODEL_NAME, "other"


def test_a_name_with_several_addresses_is_a_worker_each_and_one_with_one_stays_as_written() -> None:
    hosts = {"workers.ns.svc": ["worker-0.workers.ns.svc.cluster.local", "10.0.0.6"], "router": ["10.0.0.9"]}

    async def resolver(host: str, port: int) -> list[str]:
        if host not in hosts:
            raise OSError("no such host")
        return hosts[host]

    found = asyncio.run(discover(["http://workers.ns.svc:8000", "http://router:9000", "http://10.1.1.1:8000",
                                  "http://gone:8000"], resolver))
    assert found == ["http://worker-0.workers.ns.svc.cluster.local:8000", "http://10.0.0.6:8000",
                     "http://router:9000", "http://10.1.1.1:8000", "http://gone:8000"]


def test_the_system_resolver_finds_a_names_address() -> None:
    assert asyncio.run(__import__("server.engine.discovery", fromlist=["resolve"]).resolve("localhost", 80)) in (
        ["127.0.0.1"], ["::1"])


def _answer(tokenizer: Any, text: str) -> list[Any]:
    return steps_from_tokens(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id], cuts=[2])


def _fleet_file(path: Path, bundled: Path, models: dict[str, list[str]]) -> None:
    text = "health_seconds = 0.3\n"
    for name, engines in models.items():
        text += f'\n[[models]]\nname = "{name}"\npath = "{bundled}"\nengines = {json.dumps(engines)}\n'
    path.write_text(text)


def _until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {seconds} s: {what}")
        time.sleep(0.2)


def _stream(base_url: str, model: str) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{base_url}/responses", json={"model": model, "input": "hi", "stream": True},
                      timeout=60) as response:
        assert response.status_code == 200, response.read()
        return events_of(parse_frames(response.iter_lines()))


def _listed(base_url: str) -> list[str]:
    return [model["id"] for model in httpx.get(f"{base_url}/models", timeout=10).json()["data"]]


def test_a_gateway_reads_its_fleet_file_again_on_sighup_and_when_it_changes(
        bundled_model: Path, tokenizer: Any, tmp_path: Path) -> None:
    """Workers replaced and a model added on SIGHUP; a model removed when the file changes (no signal); a file that
    cannot be served is logged and the fleet stays as it was. No restart, and every stream completes."""
    with ExitStack() as stack:
        engines = {name: ScriptedEngine(tokenizer=tokenizer, scripts=[_answer(tokenizer, f"From {name}.")])
                   for name in ("a", "b", "c")}
        workers = {"a": ScaleOutWorker(engines["a"], SMALL), "b": ScaleOutWorker(engines["b"], SMALL),
                   "c": ScaleOutWorker(engines["c"], OTHER)}
        urls = {name: f"http://127.0.0.1:{stack.enter_context(serve_asgi(worker))}" for name, worker in workers.items()}
        fleet = tmp_path / "fleet.toml"
        _fleet_file(fleet, bundled_model, {SMALL: [urls["a"]]})
        gateway = RunningServer(["--fleet", str(fleet)], tmp_path / "gateway.log")
        stack.callback(gateway.stop)
        assert validate_events(_stream(gateway.base_url, SMALL)).output_text == "From a."
        _fleet_file(fleet, bundled_model, {SMALL: [urls["b"]], OTHER: [urls["c"]]})
        os.utime(fleet, (time.time() - 60, time.time() - 60))  # an older time: only the signal tells it
        gateway.process.send_signal(signal.SIGHUP)
        _until(lambda: _listed(gateway.base_url) == [SMALL, OTHER], "the model added")
        _until(lambda: validate_events(_stream(gateway.base_url, SMALL)).output_text == "From b.",
               "the workers replaced")
        assert validate_events(_stream(gateway.base_url, OTHER)).output_text == "From c."
        fleet.write_text("[[models]]\nname = 'broken'\n")  # no path, no engines
        time.sleep(3)
        assert _listed(gateway.base_url) == [SMALL, OTHER]  # as it was
        assert "cannot be served; the fleet stays as it was" in gateway.log.read_text()
        _fleet_file(fleet, bundled_model, {SMALL: [urls["b"]]})
        _until(lambda: _listed(gateway.base_url) == [SMALL], "the model removed")
        gone = httpx.post(f"{gateway.base_url}/responses", json={"model": OTHER, "input": "hi"}, timeout=30)
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"


def test_a_names_addresses_become_workers_and_are_followed_as_they_change(
        bundled_model: Path, tokenizer: Any, tmp_path: Path) -> None:
    """A headless Service's name resolving to the addresses of its ready pods: each address a worker, a pod that
    joins takes its share of the keys, one that leaves gives its own back (rendezvous: the others' stay)."""
    from server.http.app import create_app
    from server.launch import _fleet_start
    from server.config import ServerConfig
    from server.models.fleet_file import read_fleet_file
    from server.models.fleet_watch import FleetWatch
    from server.runs.context import ServingContext, start_model
    from tests.conftest import serve_in_thread
    from tests.stores import sqlite_records

    port = free_port()
    hosts = ["127.0.0.2", "127.0.0.3"]
    ready = [hosts[0]]  # the Service's ready pods

    async def resolver(host: str, _: int) -> list[str]:
        assert host == "workers.test"
        return list(ready) + (["127.0.0.9"] if len(ready) == 1 else [])  # one address alone stays a name: add one

    with ExitStack() as stack:
        engine = ScriptedEngine(tokenizer=tokenizer, scripts=[_answer(tokenizer, "Found.")])
        doubles = {host: ScaleOutWorker(engine, SMALL) for host in hosts}
        for host, worker in doubles.items():
            stack.enter_context(serve_asgi(worker, host=host, port=port))
        fleet_path = tmp_path / "fleet.toml"
        _fleet_file(fleet_path, bundled_model, {SMALL: [f"http://workers.test:{port}"]})
        fleet = read_fleet_file(fleet_path)
        watch_holder: list[FleetWatch] = []
        start = _fleet_start(fleet.models[0], fleet, 1 << 26, urls=[f"http://{hosts[0]}:{port}"])
        context = ServingContext(config=ServerConfig(served_model_name=SMALL), model_starts=(start,),
                                 records=sqlite_records(tmp_path / "r.db"))
        context.fleet_watch = FleetWatch(fleet_path, fleet, context,
                                         lambda model, declared, urls: _fleet_start(model, declared, 1 << 26, urls=urls),
                                         start_model, discover_seconds=0.3, resolver=resolver)
        watch_holder.append(context.fleet_watch)
        base_url = stack.enter_context(serve_in_thread(create_app(context)))

        def workers() -> list[str]:
            return [worker.url for worker in context.model(SMALL).workers.workers]

        _until(lambda: workers() == [f"http://{hosts[0]}:{port}", f"http://127.0.0.9:{port}"], "discovered")

        def spread() -> dict[str, int]:
            sent = {host: len(worker.bodies) for host, worker in doubles.items()}
            for n in range(12):
                body = {"model": SMALL, "input": "hi", "prompt_cache_key": f"k{n}", "store": False}
                assert httpx.post(f"{base_url}/responses", json=body, timeout=60).json()["status"] == "completed"
            return {host: len(worker.bodies) - sent[host] for host, worker in doubles.items()}

        assert spread()[hosts[0]] == 12  # the one up (the other address refuses: down, its keys go to the first)
        ready.append(hosts[1])
        _until(lambda: len(workers()) == 2 and all(worker.in_rotation
                                                    for worker in context.model(SMALL).workers.workers),
               "the second pod in rotation")
        both = spread()
        assert both[hosts[0]] > 0 and both[hosts[1]] > 0 and sum(both.values()) == 12
