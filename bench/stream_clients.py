"""The client CPU per token of reading a vLLM scale-out worker's token stream, with httpx and with aiohttp.

    .venv/bin/python bench/stream_clients.py [--requests 10] [--tokens 128]

One worker of the bundled model (`--enable-scale-out`, the CPU flags of bench/fleet.py); each client reads the same
streams one after another (`POST /inference/v1/generate`, `ignore_eos`, so every request streams `--tokens` tokens),
parses each `data:` payload as the gateway does, and this process's CPU time (time.process_time) is divided by the
tokens. The arms alternate, twice each; the ratio is aiohttp's over httpx's in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fleet import vllm_worker  # noqa: E402
from server.engine.scale_out import sse_payloads  # noqa: E402

PORT = 8817


def body(n: int, tokens: int) -> dict[str, Any]:
    return {"token_ids": list(range(1, 300)), "request_id": f"bench-{n}", "stream": True,
            "sampling_params": {"max_tokens": tokens, "min_tokens": tokens, "ignore_eos": True, "detokenize": False},
            "stream_options": {"include_usage": True}}


def tokens_of(payload: str) -> int:
    if payload == "[DONE]":
        return 0
    choices = json.loads(payload)["choices"]
    return len(choices[0]["token_ids"]) if choices else 0


async def with_httpx(url: str, requests: int, tokens: int) -> int:
    counted = 0
    async with httpx.AsyncClient(timeout=None) as client:
        for n in range(requests):
            async with client.stream("POST", url, json=body(n, tokens)) as answer:
                async for line in answer.aiter_lines():
                    if line.startswith("data: "):
                        counted += tokens_of(line[6:])
    return counted


async def with_aiohttp(url: str, requests: int, tokens: int) -> int:
    """As the gateway reads a worker's stream (server/engine/scale_out.py's `sse_payloads`)."""
    counted = 0
    async with aiohttp.ClientSession() as session:
        for n in range(requests):
            async with session.post(url, json=body(n, tokens)) as answer:
                async for payload in sse_payloads(answer.content.iter_any()):
                    counted += tokens_of(payload)
    return counted


def measure(arm: Callable[[str, int, int], Awaitable[int]], url: str, requests: int, tokens: int) -> float:
    started = time.process_time()
    counted = asyncio.run(arm(url, requests, tokens))
    return (time.process_time() - started) / max(1, counted) * 1e6


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--requests", type=int, default=10)
    options.add_argument("--tokens", type=int, default=128)
    args = options.parse_args()
    from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model

    log = Path(tempfile.mkdtemp(prefix="bench-clients-")) / "worker.log"
    url = f"http://127.0.0.1:{PORT}/inference/v1/generate"
    results: dict[str, list[float]] = {"httpx": [], "aiohttp": []}
    with vllm_worker(ensure_bundled_model(), BUNDLED_MODEL_NAME, PORT, log):
        for _ in range(2):
            for name, arm in (("httpx", with_httpx), ("aiohttp", with_aiohttp)):
                results[name].append(measure(arm, url, args.requests, args.tokens))
    for name, figures in results.items():
        print(f"{name}: {', '.join(f'{figure:.0f}' for figure in figures)} µs of client CPU per token")
    print(f"aiohttp / httpx: {sum(results['aiohttp']) / sum(results['httpx']):.2f}")


if __name__ == "__main__":
    main()
