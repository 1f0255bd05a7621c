"""Benchmark: the API process's CPU per output token on the harmony path (the tiny gpt-oss) beside the chat-template
path (the bundled model), with real engine output, in one run.

    .venv/bin/python bench/paths.py [--rounds 4] [--streams 1,8] [--max-tokens 256] [--out bench/results]

Both servers run at once (ours, `--store none`, half the usual KV cache each) and take turns, wave by wave. Every
request asks for a strict JSON answer with one long string (400 to 600 characters), so that the random-weights gpt-oss writes well-formed
harmony (reasoning bounded by the grammar, then the answer) and the bundled model writes the same shape. The API
process's CPU time (psutil; the engine core's processes are not counted) over a wave, divided by the wave's output
tokens, is the per-token cost of HTTP, the parser, the builder and SSE on each path. Writes paths.json in --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.servers import Server  # noqa: E402

STORY = {"type": "object", "additionalProperties": False, "required": ["story"],
         "properties": {"story": {"type": "string", "minLength": 400, "maxLength": 600}}}  # both paths write as long
ENGINE_FLAGS = ["--max-model-len", "2048", "--gpu-memory-utilization", "0.15", "--store", "none"]


def tiny_gpt_oss() -> Path:
    from server.bundled_model import cache_dir
    from tests.tiny_gpt_oss import TINY_GPT_OSS_NAME, ensure_tiny_gpt_oss

    return ensure_tiny_gpt_oss(cache_dir() / "models" / TINY_GPT_OSS_NAME)


async def one(client: httpx.AsyncClient, model: str, n: int, max_tokens: int) -> int:
    """One streamed request; its output tokens."""
    body = {"model": model, "input": f"Tell story number {n}.", "stream": True, "max_output_tokens": max_tokens,
            "text": {"format": {"type": "json_schema", "name": "story", "schema": STORY, "strict": True}}}
    async with client.stream("POST", "/responses", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:") and ('"response.completed"' in line or '"response.incomplete"' in line):
                return int(json.loads(line[5:])["response"]["usage"]["output_tokens"])
    return 0


async def wave(port: int, model: str, streams: int, max_tokens: int, api: psutil.Process) -> tuple[float, int]:
    """(API CPU seconds, output tokens) of one wave of `streams` concurrent requests."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1", timeout=600) as client:
        before = api.cpu_times()
        tokens = await asyncio.gather(*(one(client, model, n, max_tokens) for n in range(streams)))
        after = api.cpu_times()
    return (after.user + after.system) - (before.user + before.system), sum(tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--streams", default="1,8")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    paths = {"chat": ([], "SmolLM2-135M-Instruct", 8431), "harmony": (["--model", str(tiny_gpt_oss()),
                                                                       "--served-model-name", "gpt-oss"], "gpt-oss", 8432)}
    command = [sys.executable, "-m", "server", *ENGINE_FLAGS]
    logs = args.out / "logs"
    logs.mkdir(exist_ok=True)
    with Server([*command, *paths["chat"][0], "--port", "8431"], 8431, logs / "paths-chat.log") as chat, \
            Server([*command, *paths["harmony"][0], "--port", "8432"], 8432, logs / "paths-harmony.log",
                   ) as harmony:
        servers = {"chat": chat, "harmony": harmony}
        per_token: dict[str, dict[int, list[float]]] = {name: {} for name in servers}
        tokens_of: dict[str, dict[int, list[int]]] = {name: {} for name in servers}
        for round_index in range(args.rounds):
            for streams in (int(s) for s in args.streams.split(",")):
                order = list(servers) if round_index % 2 == 0 else list(reversed(servers))
                for name in order:
                    _, model, port = paths[name]
                    cpu, tokens = asyncio.run(wave(port, model, streams, args.max_tokens,
                                                   psutil.Process(servers[name].process.pid)))
                    per_token[name].setdefault(streams, []).append(cpu / max(tokens, 1) * 1e6)
                    tokens_of[name].setdefault(streams, []).append(tokens // streams)
    result = {name: {streams: round(statistics.median(values), 1) for streams, values in by_streams.items()}
              for name, by_streams in per_token.items()}
    lengths = {name: {streams: round(statistics.median(values)) for streams, values in by_streams.items()}
               for name, by_streams in tokens_of.items()}
    print(f"{'streams':>7} {'chat µs/token':>14} {'harmony µs/token':>17} {'harmony/chat':>13} {'tokens/request':>16}")
    for streams in result["chat"]:
        chat_cost, harmony_cost = result["chat"][streams], result["harmony"][streams]
        print(f"{streams:>7} {chat_cost:>14.1f} {harmony_cost:>17.1f} {harmony_cost / chat_cost:>13.2f} "
              f"{lengths['chat'][streams]:>7} / {lengths['harmony'][streams]:<7}")
    (args.out / "paths.json").write_text(json.dumps({"api_cpu_us_per_output_token": result, "output_tokens_per_request": lengths, "rounds": args.rounds,
                                                     "max_tokens": args.max_tokens}, indent=2) + "\n")


if __name__ == "__main__":
    main()
