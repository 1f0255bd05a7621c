"""`--api-server-count 2` on a replay (no engine core, each process replays on its own), as the frontend-ceiling
benchmark runs it: both processes answer on one port, share the store and the metrics, and stop on SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil

from server.engine.recording import Recording
from tests.servers import RunningServer, through
from tests.test_harmony import CALLS_WITH_PREAMBLE, TOOLS


def test_two_api_processes_replaying_share_the_port_the_store_and_the_metrics(tmp_path: Path) -> None:
    recording = tmp_path / "gpt-oss.jsonl"
    recording.write_text(Recording([], [CALLS_WITH_PREAMBLE], "stop").to_json() + "\n")
    server = RunningServer(["--harmony", "--replay-engine-output", str(recording), "--api-server-count", "2"],
                           tmp_path / "server.log")
    try:
        zero, one = through(server, 0), through(server, 1)
        made = zero.post("/responses", json={"model": "gpt-oss", "input": "weather?", "tools": TOOLS}).json()
        assert [item["type"] for item in made["output"]][-1] == "function_call"
        assert one.get(f"/responses/{made['id']}").json()["output"] == made["output"]
        metrics = f"http://127.0.0.1:{server.port}/metrics"
        counted = [line for line in one.get(metrics).text.splitlines()
                   if line.startswith("responses_server_responses_total{") and 'mode="json"' in line]
        assert counted and float(counted[0].rsplit(" ", 1)[1]) == 1.0  # made in process 0, read from process 1
        processes = [child for child in psutil.Process(server.process.pid).children()
                     if "spawn_main" in " ".join(child.cmdline())]  # not multiprocessing's resource tracker
        assert len(processes) == 2
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0
        assert not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        server.stop()
