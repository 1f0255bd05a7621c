"""A benchmarked server: a subprocess on a port, healthy before it is used and stopped on exit; and the engine flags
every benchmark gives it (the bundled model on this CPU)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

ENGINE_FLAGS = ["--dtype", "float32", "--enforce-eager", "--gpu-memory-utilization", "0.3", "--max-model-len", "2048"]
START_TIMEOUT = 600


class Server:
    """A server subprocess on a port, stopped on exit."""

    def __init__(self, command: list[str], port: int, log: Path, cwd: Path | None = None) -> None:
        self.port = port
        self.process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=cwd,
                                        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{command[:4]} exited; see {log}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"{command[:4]} did not start; see {log}")

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *_: Any) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within a minute."""
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
