"""Fixtures: the bundled model's tokenizer, and the real app served by uvicorn in a thread."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import uvicorn


@pytest.fixture(scope="session")
def bundled_model() -> Path:
    from server.bundled_model import ensure_bundled_model

    return ensure_bundled_model()


@pytest.fixture(scope="session")
def tokenizer(bundled_model: Path) -> Any:
    from server.engine.vllm_engine import load_tokenizer

    return load_tokenizer(str(bundled_model))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Run the app on a real socket (uvicorn in a thread); yields the base URL ending in /v1."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
