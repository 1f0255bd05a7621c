"""Benchmark: the cost of grammar-constrained decoding, against unconstrained decoding in the same run.

    .venv/bin/python bench/constraints.py [--rounds 5] [--base-url URL]

Starts the server on the bundled model (or uses --base-url), then runs rounds of four streamed requests, one of
each kind in turn so that drift hits all kinds alike. The kinds come in pairs with the same prompt, one free and
one constrained: a question answered as free text or under a `text.format` json_schema; and the same question
with two function tools under `tool_choice: "auto"` (the model writes freely) or `"required"` (a grammar).
Reports per kind the median time to the first output event and the output tokens per second over the whole
request, and each constrained kind's ratio to its free twin.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CITY = {"type": "object", "additionalProperties": False, "required": ["name", "country", "population", "rivers"],
        "properties": {"name": {"type": "string"}, "country": {"type": "string"}, "population": {"type": "integer"},
                       "rivers": {"type": "array", "items": {"type": "string"}}}}
TOOLS = [
    {"type": "function", "name": "get_weather", "strict": True, "description": "Weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                    "required": ["city", "unit"], "additionalProperties": False}},
    {"type": "function", "name": "get_time", "strict": True, "description": "Time in a timezone",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"],
                    "additionalProperties": False}},
]
QUESTION = "Describe Paris: its name, country, population and rivers."
WEATHER = "What is the weather in Paris?"
KINDS: dict[str, dict[str, Any]] = {
    "free text": {"input": QUESTION},
    "json_schema": {"input": QUESTION,
                    "text": {"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}}},
    "tools, auto": {"input": WEATHER, "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": False},
    "tools, required": {"input": WEATHER, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
}
BASELINE = {"json_schema": "free text", "tools, required": "tools, auto"}


def timed_stream(client: httpx.Client, body: dict[str, Any]) -> tuple[float, float, int]:
    """Time to the first output event, output tokens/s over the whole request, and the output token count."""
    started = time.perf_counter()
    first = end = None
    usage = 0
    with client.stream("POST", "/responses", json={"stream": True, "store": False, "temperature": 0,
                                                    "max_output_tokens": 96, **body}) as response:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if first is None and event["type"] not in ("response.created", "response.in_progress"):
                first = time.perf_counter()
            if event["type"] in ("response.completed", "response.incomplete"):
                end = time.perf_counter()
                usage = event["response"]["usage"]["output_tokens"]
    assert first is not None and end is not None, "the stream produced no output or no terminal event"
    return first - started, usage / (end - started), usage


def start_server(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-m", "server", "--port", str(port), "--max-model-len", "2048",
                                "--store", "none"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(1)
    process.kill()
    raise RuntimeError("the server did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base-url", default=None, help="a running server (default: start one on port 8123)")
    args = parser.parse_args()
    process = None if args.base_url else start_server(8123)
    base_url = args.base_url or "http://127.0.0.1:8123/v1"
    try:
        with httpx.Client(base_url=base_url, timeout=600) as client:
            for body in KINDS.values():  # warm-up: the first grammar compile, the prefix cache
                timed_stream(client, body)
            results: dict[str, list[tuple[float, float, int]]] = {kind: [] for kind in KINDS}
            for _ in range(args.rounds):
                for kind, body in KINDS.items():
                    results[kind].append(timed_stream(client, body))
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=60)
    report(results)


def report(results: dict[str, list[tuple[float, float, int]]]) -> None:
    medians = {kind: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
                      statistics.median(r[2] for r in runs)) for kind, runs in results.items()}
    print(f"{'kind':<18} {'first event ms':>14} {'tok/s':>7} {'tokens':>6} {'first ratio':>11} {'tok/s ratio':>11}")
    for kind, (first, rate, tokens) in medians.items():
        base_first, base_rate, _ = medians[BASELINE.get(kind, kind)]
        print(f"{kind:<18} {first * 1000:>14.1f} {rate:>7.1f} {tokens:>6.0f} {first / base_first:>11.2f} "
              f"{rate / base_rate:>11.2f}")


if __name__ == "__main__":
    main()
