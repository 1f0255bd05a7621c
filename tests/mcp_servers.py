"""Real MCP servers for the tests, written with the official `mcp` package and served by uvicorn on free ports:
a calculator, a tool that fails, a local-corpus search and a Python runner (in a subprocess); gpt-oss's browser
tools; and a gate that holds a call until the test opens it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import anyio
import pytest

from tests.conftest import serve_asgi

CANCELLED_WAITS: list[float] = []  # the `wait` calls that were cut short (their client went away)
CORPUS = {
    "paris": "Paris is the capital of France; about 2.1 million people live there.",
    "vllm": "vLLM is a fast engine for serving large language models, with paged attention and a prefix cache.",
    "harmony": "Harmony is the chat format gpt-oss models were trained on: channels, recipients and tool calls.",
}


def tools_server() -> Any:
    """An MCP server with a calculator, a failing tool, a corpus search and a Python runner."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer("test-tools")
    read_only = ToolAnnotations(readOnlyHint=True)

    @server.tool(description="Add two integers.", annotations=read_only)
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Always fails, for tests of failing tools.")
    def explode(reason: str) -> str:
        raise ValueError(f"exploded: {reason}")

    @server.tool(description="Search a small local corpus; returns the matching passages.", annotations=read_only)
    def search(query: str) -> str:
        words = query.lower().split()
        hits = [text for key, text in CORPUS.items() if any(word in key or word in text.lower() for word in words)]
        return "\n".join(hits) or "no results"

    @server.tool(description="Wait this many seconds, then say so (for tests of calls in flight).")
    async def wait(seconds: float) -> str:
        try:
            await anyio.sleep(seconds)
        except BaseException:
            CANCELLED_WAITS.append(seconds)
            raise
        return f"waited {seconds} s"

    @server.tool(description="Run Python code in a subprocess and return what it printed.")
    def python(code: str) -> str:
        done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=10)
        return done.stdout + done.stderr

    return server


@dataclass
class RecordingApp:
    """An ASGI app that keeps the headers of every HTTP request it forwards and the JSON-RPC methods their bodies
    ask for (to check what reached the server)."""

    app: Any
    headers: list[dict[str, str]] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.headers.append({key.decode().lower(): value.decode() for key, value in scope["headers"]})
        body = bytearray()

        async def recorded() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    self.methods.extend(_methods(bytes(body)))
            return message

        await self.app(scope, recorded, send)


def _methods(body: bytes) -> list[str]:
    """The JSON-RPC methods of a request body (one message, or a batch)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return []
    messages = parsed if isinstance(parsed, list) else [parsed]
    return [message["method"] for message in messages if isinstance(message, dict) and "method" in message]


@dataclass
class RunningMcp:
    """A served MCP server: its URL (streamable HTTP, or SSE), and the headers its requests carried."""

    url: str
    recorder: RecordingApp

    def listings(self) -> int:
        """The `tools/list` requests the server has received."""
        return self.recorder.methods.count("tools/list")

    def authorizations(self) -> list[str]:
        return [headers["authorization"] for headers in self.recorder.headers if "authorization" in headers]


@contextmanager
def serve_mcp(transport: str = "streamable-http") -> Iterator[RunningMcp]:
    """The tools server on a free port, in a thread, until the block ends."""
    server = tools_server()
    app = server.sse_app() if transport == "sse" else server.streamable_http_app(stateless_http=True)
    recorder = RecordingApp(app)
    path = "/sse" if transport == "sse" else "/mcp"
    with serve_asgi(recorder) as port:
        yield RunningMcp(f"http://127.0.0.1:{port}{path}", recorder)


PAGES = {"https://docs.example/harmony": "Harmony has channels: analysis, commentary and final.\nRecipients name tools."}


def browser_server() -> Any:
    """An MCP server with gpt-oss's browser tools (search, open, find) over the local corpus."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("test-browser")

    @server.tool(description="Search the corpus.")
    def search(query: str, topn: int = 10) -> str:
        words = query.lower().split()
        hits = [f"【{index}†{key}】 {text}" for index, (key, text) in enumerate(CORPUS.items())
                if any(word in key or word in text.lower() for word in words)]
        return "\n".join(hits[:topn]) or "no results"

    @server.tool(description="Open a page by URL.")
    def open(id: Any = -1, cursor: int = -1, loc: int = -1) -> str:  # noqa: A002 - the browser tool's own names
        return PAGES.get(str(id), f"no page {id!r}")

    @server.tool(description="Find a pattern in the last page.")
    def find(pattern: str, cursor: int = -1) -> str:
        lines = [line for text in PAGES.values() for line in text.splitlines() if pattern in line]
        return "\n".join(lines) or "no match"

    return server


@contextmanager
def serve_browser() -> Iterator[RunningMcp]:
    """The browser server on a free port, until the block ends."""
    recorder = RecordingApp(browser_server().streamable_http_app(stateless_http=True))
    with serve_asgi(recorder) as port:
        yield RunningMcp(f"http://127.0.0.1:{port}/mcp", recorder)


def gate_server(gate: threading.Event) -> Any:
    """An MCP server whose one tool, `hold`, answers only once the test sets `gate` (at most two minutes): a call,
    and the response making it, stay in progress for as long as a test needs them to."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("gate")

    @server.tool(description="Wait until the gate opens.")
    async def hold() -> str:
        opened = await anyio.to_thread.run_sync(gate.wait, 120)
        return "opened" if opened else "still closed"

    return server


@contextmanager
def serve_gate(gate: threading.Event) -> Iterator[RunningMcp]:
    """The gate server on a free port, until the block ends."""
    recorder = RecordingApp(gate_server(gate).streamable_http_app(stateless_http=True))
    with serve_asgi(recorder) as port:
        yield RunningMcp(f"http://127.0.0.1:{port}/mcp", recorder)


@pytest.fixture(scope="module")
def mcp() -> Iterator[RunningMcp]:
    """The tools server, for a test module (import the fixture)."""
    with serve_mcp() as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[RunningMcp]:
    """The browser server, for a test module (import the fixture)."""
    with serve_browser() as running:
        yield running
