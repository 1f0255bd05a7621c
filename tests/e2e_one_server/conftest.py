"""One server of the bundled model for every module here, started once (about a minute on this CPU): a 2,048-token
context, its engine output recorded, the MCP test servers (tests/mcp_servers.py) registered as its tool servers, and
a short shutdown timeout. The package's last module (test_shutdown.py) stops it with SIGTERM."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.mcp_servers import RunningMcp, serve_browser, serve_mcp
from tests.servers import RunningServer

CONTEXT = 2048
SHUTDOWN_TIMEOUT = 4  # what a SIGTERM lets running responses finish in


@pytest.fixture(scope="package")
def mcp() -> Iterator[RunningMcp]:
    """The tools server (tests/mcp_servers.py), registered as `registered` and as the python tool server."""
    with serve_mcp() as running:
        yield running


@pytest.fixture(scope="package")
def browser() -> Iterator[RunningMcp]:
    """The browser tool server."""
    with serve_browser() as running:
        yield running


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory, mcp: RunningMcp, browser: RunningMcp) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("logs") / "server.log"
    running = RunningServer(["--max-model-len", str(CONTEXT), "--shutdown-timeout", str(SHUTDOWN_TIMEOUT), "--record-engine-output", str(log.parent / "engine.jsonl"),
                             "--allowed-mcp-domains", "127.0.0.1", "--tool-server", f"browser={browser.url}",
                             "--tool-server", f"python={mcp.url}", "--mcp-server", f"registered={mcp.url}"], log)
    yield running
    running.stop()
