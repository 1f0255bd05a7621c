"""What a long history costs the server's event loop: a replayed server (no engine cost) takes a stateless turn of a
coding agent whose input is 181 items (~180k tokens of the bundled tokenizer), while /health is polled every 5 ms.
Reported: the time to `response.created` for that turn and for a 7-item one (their ratio), and the longest /health
waited meanwhile (what every other stream on the process stalls for). Run: python bench/history_cost.py."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model  # noqa: E402
from server.engine.recording import Recording  # noqa: E402
from tests.servers import RunningServer  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "history_cost.json"
ROUNDS = 5
OUTPUT = "row {n}: " + "the handler reads the request and transforms it; " * 40


def history(calls: int) -> list[dict[str, Any]]:
    """A Codex-like stateless input: the task, then `calls` tool calls with their outputs (~1k tokens each)."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Find the bug in the handler."}]
    for n in range(calls):
        items += [{"type": "function_call", "call_id": f"call_{n}", "name": "shell",
                   "arguments": json.dumps({"command": ["cat", f"file_{n}.py"]})},
                  {"type": "function_call_output", "call_id": f"call_{n}", "output": OUTPUT.format(n=n) * 4}]
    return items


def time_to_created(base_url: str, items: list[dict[str, Any]]) -> float:
    body = {"model": BUNDLED_MODEL_NAME, "input": items, "store": False, "stream": True, "max_output_tokens": 8}
    started = time.perf_counter()
    created = None
    with httpx.stream("POST", f"{base_url}/responses", json=body, timeout=600) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():  # read to the end: the next request starts on an idle server
            if created is None and line.startswith("data:") and '"response.created"' in line:
                created = time.perf_counter() - started
    assert created is not None
    return created


def longest_health_wait(base_url: str, during: Any) -> tuple[float, Any]:
    """Runs `during()` while /health is polled every 5 ms; the longest single poll, and what `during` returned."""
    waits: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=60) as client:
            while not done.is_set():
                started = time.perf_counter()
                client.get(base_url.removesuffix("/v1") + "/health")
                waits.append(time.perf_counter() - started)
                time.sleep(0.005)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        result = during()
    finally:
        done.set()
        poller.join()
    return max(waits), result


def main() -> None:
    model = ensure_bundled_model()
    with tempfile.TemporaryDirectory() as directory:
        recording = Path(directory) / "one.jsonl"
        recording.write_text(Recording([], [[28, 29]], "stop").to_json() + "\n")
        server = RunningServer(["--model", str(model), "--served-model-name", BUNDLED_MODEL_NAME,
                                "--replay-engine-output", str(recording), "--max-model-len", "262144"],
                               Path(directory) / "server.log")
        try:
            small, big = history(3), history(90)
            time_to_created(server.base_url, small)  # warm
            tokens = {name: httpx.post(f"{server.base_url}/responses/input_tokens", timeout=600, json={
                "model": BUNDLED_MODEL_NAME, "input": items}).json()["input_tokens"]
                for name, items in (("small", small), ("big", big))}
            rows = []
            for _ in range(ROUNDS):
                short = time_to_created(server.base_url, small)
                wait, long = longest_health_wait(server.base_url, lambda: time_to_created(server.base_url, big))
                rows.append({"small_s": short, "big_s": long, "health_wait_s": wait})
        finally:
            server.stop()
    summary = {"items": {"small": len(small), "big": len(big)}, "tokens": tokens, "rounds": rows,
               "median_small_s": statistics.median(r["small_s"] for r in rows),
               "median_big_s": statistics.median(r["big_s"] for r in rows),
               "median_health_wait_s": statistics.median(r["health_wait_s"] for r in rows)}
    summary["big_over_small"] = summary["median_big_s"] / summary["median_small_s"]
    RESULTS.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({key: value for key, value in summary.items() if key != "rounds"}, indent=1))


if __name__ == "__main__":
    main()
