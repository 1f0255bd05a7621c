"""Real MCP servers for the tests, written with the official `mcp` package and served by uvicorn on free ports:
a calculator, a tool that fails, a local-corpus search and a Python runner (in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import uvicorn

from tests.conftest import free_port

CORPUS = {
    "paris": "Paris is the capital of France; about 2.1 million people live there.",
    "vllm": "vLLM is a fast engine for serving large language models, with paged attention and a prefix cache.",
    "harmony": "Harmony is the chat format gpt-oss models were trained on: channels, recipients and tool calls.",
}


def tools_server() -> Any:
    """An MCP server with a calculator, a failing tool, a corpus search and a Python runner."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("test-tools")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Always fails, for tests of failing tools.")
    def explode(reason: str) -> str:
        raise ValueError(f"exploded: {reason}")

    @server.tool(description="Search a small local corpus; returns the matching passages.")
    def search(query: str) -> str:
        words = query.lower().split()
        hits = [text for key, text in CORPUS.items() if any(word in key or word in text.lower() for word in words)]
        return "\n".join(hits) or "no results"

    @server.tool(description="Run Python code in a subprocess and return what it printed.")
    def python(code: str) -> str:
        done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=10)
        return done.stdout + done.stderr

    return server


@dataclass
class RecordingApp:
    """An ASGI app that keeps the headers of every HTTP request it forwards (to check what reached the server)."""

    app: Any
    headers: list[dict[str, str]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.headers.append({key.decode().lower(): value.decode() for key, value in scope["headers"]})
        await self.app(scope, receive, send)


@dataclass
class RunningMcp:
    """A served MCP server: its URL (streamable HTTP, or SSE), and the headers its requests carried."""

    url: str
    recorder: RecordingApp

    def authorizations(self) -> list[str]:
        return [headers["authorization"] for headers in self.recorder.headers if "authorization" in headers]


@contextmanager
def serve_mcp(transport: str = "streamable-http") -> Iterator[RunningMcp]:
    """The tools server on a free port, in a thread, until the block ends."""
    server = tools_server()
    app = server.sse_app() if transport == "sse" else server.streamable_http_app(stateless_http=True)
    recorder = RecordingApp(app)
    port = free_port()
    uvicorn_server = uvicorn.Server(uvicorn.Config(recorder, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uvicorn_server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MCP test server did not start")
        time.sleep(0.02)
    path = "/sse" if transport == "sse" else "/mcp"
    try:
        yield RunningMcp(f"http://127.0.0.1:{port}{path}", recorder)
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=10)
