"""A `python -m server` subprocess on the real CPU engine for end-to-end tests, and the bundled model's names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import httpx
import psutil
from openai import OpenAI

from conformance.openresponses import httpx_spec_hook
from server.bundled_model import BUNDLED_MODEL_NAME
from tests.conftest import free_port
from tests.sse import events_of, parse_frames

MODEL = BUNDLED_MODEL_NAME
QUESTION = "What is the capital of France?"
# For a long, repetitive answer (counting, a story to cut): the bundled model's default frequency penalty ends such
# answers early. A body field the SDK takes only as extra_body.
UNPENALIZED = {"frequency_penalty": 0}
START_TIMEOUT = 600
# The engine's KV cache, in GiB, for servers the tests start: vLLM's CPU build otherwise takes about a quarter of
# the machine's memory for each (5.7 GiB on 24), and the replica and chaos tests run two or three at once.
TEST_KV_CACHE = {"VLLM_CPU_KVCACHE_SPACE": "3"}
PROCESS_HEADER = "responses-server-process"  # which API process answered


class RunningServer:
    """A `python -m server` subprocess and the clients that talk to it."""

    def __init__(self, args: list[str], log: Path, data_dir: Path | None = None,
                 env: dict[str, str] | None = None, advertise: bool = False) -> None:
        """`env` is added to the server's environment; `advertise`: it tells the other replicas its address."""
        self.log = log
        self.data_dir = data_dir or log.parent / "data"
        for _ in range(3):  # a port picked free can be taken meanwhile (vLLM binds ports of its own)
            self.port = free_port()
            self.base_url = f"http://127.0.0.1:{self.port}/v1"
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "RESPONSES_SERVER_DATA": str(self.data_dir), **TEST_KV_CACHE,
                   **(env or {})}
            advertised = ["--advertise-url", f"http://127.0.0.1:{self.port}"] if advertise else []
            self.process = subprocess.Popen(
                [sys.executable, "-m", "server", "--port", str(self.port), *advertised, *args],
                stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
            )
            if self._wait_until_healthy():
                break
        else:
            raise RuntimeError(f"server could not bind a port:\n{self.log.read_text()[-4000:]}")
        checked = httpx.Client(timeout=300, event_hooks={"response": [httpx_spec_hook]})  # and the spec's schema
        self.client = OpenAI(base_url=self.base_url, api_key="unused", _strict_response_validation=True,
                             max_retries=0, timeout=300, http_client=checked)

    def _wait_until_healthy(self) -> bool:
        """True once healthy; False if the port was taken; raises on any other failure."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.log.read_text()
                if "address already in use" in output:
                    return False
                raise RuntimeError(f"server exited:\n{output[-4000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"server did not become healthy:\n{self.log.read_text()[-4000:]}")

    def raw_stream(self, **body: Any) -> list[dict[str, Any]]:
        with httpx.stream("POST", f"{self.base_url}/responses", json={"model": MODEL, "stream": True, **body},
                          timeout=300) as response:
            assert response.status_code == 200, response.read()
            return events_of(parse_frames(response.iter_lines()))

    def kill(self) -> None:
        """SIGKILL the server and its engine processes, as a crashed machine would stop them (killed alone, the
        server's main process leaves vLLM's engine core and worker running, with their memory)."""
        kill_process_tree(self.process)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def kill_process_tree(process: subprocess.Popen[Any]) -> None:
    """SIGKILL a process and its children (vLLM's engine core and workers), then reap it."""
    family = [process.pid] + [child.pid for child in psutil.Process(process.pid).children(recursive=True)]
    for pid in family:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(30)


def start_together(*starts: Callable[[], RunningServer]) -> list[RunningServer]:
    """Servers started at once, each in a thread (a start waits on its engine's processes, each busy on one core):
    all of them, or an error once those that did start are stopped."""
    with ThreadPoolExecutor(len(starts)) as pool:
        futures = [pool.submit(start) for start in starts]
    started = [future.result() for future in futures if future.exception() is None]
    failures = [future.exception() for future in futures if future.exception() is not None]
    if failures:
        for server in started:
            server.stop()
        raise failures[0]  # type: ignore[misc]
    return started


def through(server: RunningServer, process: int) -> httpx.Client:
    """A client whose kept-alive connection was accepted by API process `process` (new connections land on either;
    one process may still be starting when the other answers /health)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        client = httpx.Client(base_url=server.base_url, timeout=300, limits=httpx.Limits(max_connections=1))
        if client.get("/models").headers[PROCESS_HEADER] == str(process):
            return client
        client.close()
        time.sleep(0.05)
    raise AssertionError(f"no connection reached API process {process}")


def sdk(client: httpx.Client) -> OpenAI:
    return OpenAI(base_url=str(client.base_url), api_key="unused", max_retries=0, http_client=client)


def replayed_server(tmp_path: Path, name: str, lease_seconds: int) -> RunningServer:
    """A server whose chat model is replayed (one recorded answer for every request), on `tmp_path`'s data
    directory: started again under another name, it is the same store, as a restarted server is."""
    from server.engine.recording import Recording

    recording = tmp_path / "answer.jsonl"
    recording.write_text(Recording([], [[2]], "stop").to_json() + "\n")
    return RunningServer(["--replay-engine-output", str(recording), "--lease-seconds", str(lease_seconds)],
                         tmp_path / f"{name}.log", data_dir=tmp_path / "data")
