"""One server for every module here, as the README's serve command starts it (the bundled model, its default
window), with two API processes in front of the engine, its engine output recorded and a 5 s keepalive. Started
once (about a minute on this CPU); the package's last test, a SIGTERM drain, stops it."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.servers import RunningServer


@pytest.fixture(scope="package")
def recording_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("recording") / "engine-output.jsonl"


@pytest.fixture(scope="package")
def live(recording_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("logs") / "live.log"
    server = RunningServer(["--record-engine-output", str(recording_file), "--keepalive-interval", "5",
                            "--api-server-count", "2"], log)
    yield server
    server.stop()
