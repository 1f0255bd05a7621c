"""Real vLLM scale-out workers for end-to-end fleet tests: `python -m vllm.entrypoints.openai.api_server --model DIR
--served-model-name NAME --enable-scale-out` on the CPU build (the `vllm` console script fails on the CPU build's
package metadata), and vllm-router in front of some of them."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import free_port
from tests.servers import kill_process_tree

START_TIMEOUT = 600
CPU_FLAGS = ("--dtype", "float32", "--enforce-eager")  # as the server's own CPU defaults (server/engine/vllm_engine.py)
# vLLM 0.32's CPU build kills its engine core when a seeded request's prompt is split across steps (chunked prefill
# rewinds the request's generator: "CPU Generator does not use offset"); whole prompts in one step avoid it.
WHOLE_PROMPTS = ("--no-enable-chunked-prefill", "--max-num-batched-tokens")


class VllmWorker:
    """One worker process; `kill()` stops it as a crashed machine would, `start()` brings it back on its port."""

    def __init__(self, model: Path, name: str, log: Path, max_model_len: int, env: dict[str, str] | None = None) -> None:
        self.model, self.name, self.log, self.max_model_len = model, name, log, max_model_len
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_CPU_KVCACHE_SPACE": "2", **(env or {})}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "VllmWorker":
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
             "--served-model-name", self.name, "--enable-scale-out", "--enable-prompt-tokens-details",
             "--max-model-len", str(self.max_model_len), "--port", str(self.port), *CPU_FLAGS,
             *WHOLE_PROMPTS, str(self.max_model_len), "--disable-uvicorn-access-log"],
            stdout=self.log.open("a"), stderr=subprocess.STDOUT, env=self.env)
        return self

    def wait_healthy(self) -> "VllmWorker":
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited:\n{self.log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"worker {self.name} did not become healthy:\n{self.log.read_text()[-4000:]}")

    def metric(self, name: str) -> float:
        """A counter or gauge of the worker's /metrics, summed over its labels."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(float(value) for value in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})?\s+(\S+)$", text, re.M))

    def kill(self) -> None:
        """SIGKILL the worker and its engine processes."""
        assert self.process is not None
        kill_process_tree(self.process)

    def pause(self, stopped: bool) -> None:
        """SIGSTOP the worker and its engine processes (a hung machine: connections open, nothing answers), or
        SIGCONT them."""
        import psutil

        assert self.process is not None
        family = [self.process.pid] + [child.pid for child in psutil.Process(self.process.pid).children(recursive=True)]
        for pid in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP if stopped else signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()


class VllmRouter:
    """vllm-router (vLLM's Rust router, from PyPI) in front of `workers`, with the given policy."""

    def __init__(self, workers: list[str], log: Path, policy: str = "round_robin") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        binary = Path(sys.executable).parent / "vllm-router"
        self.process = subprocess.Popen([str(binary), "--host", "127.0.0.1", "--port", str(self.port), "--policy",
                                         policy, "--worker-urls", *workers],
                                        stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"vllm-router did not start:\n{log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
