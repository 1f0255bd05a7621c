"""Service tiers on the real engine: interactive turns' time to first token alone, beside a flood of `flex` work, and
beside the same flood at the `default` tier.

    .venv/bin/python bench/tiers.py [--turns 8] [--flood 12] [--rounds 2] [--out bench/results]

One server of the bundled model with vLLM's `--scheduling-policy priority` and `--max-num-seqs 4` (so that a flood
waits for the engine, as a busy GPU's does). Each round runs three arms in rotating order: `quiet` (--turns
interactive turns, streamed one after another, 8 output tokens, no tier), `flex flood` (the same while --flood clients
send `service_tier: "flex"` requests of 64 output tokens back to back) and `default flood` (the flood without a
tier). Prints the interactive turns' median and p90 time to first token per arm, and their ratios to quiet; writes
tiers.json to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import ENGINE_FLAGS, Server  # noqa: E402

PORT = 8723
ARMS = {"quiet": None, "flex flood": "flex", "default flood": "default"}


async def first_token_seconds(client: httpx.AsyncClient, body: dict[str, Any]) -> float:
    """Seconds from the request to its first output text delta."""
    started, seconds = time.perf_counter(), None
    async with client.stream("POST", "/responses", json={**body, "stream": True}) as answer:
        answer.raise_for_status()
        async for line in answer.aiter_lines():  # read to the end: the turn is over when it ends
            if seconds is None and line.startswith("data: ") and '"response.output_text.delta"' in line:
                seconds = time.perf_counter() - started
    if seconds is None:
        raise RuntimeError("the stream ended without a text delta")
    return seconds


async def flood(client: httpx.AsyncClient, model: str, tier: str, stop: asyncio.Event, done: list[int]) -> None:
    while not stop.is_set():
        answer = await client.post("/responses", json={
            "model": model, "input": "Write a long story about the sea.", "max_output_tokens": 64,
            "service_tier": tier, "store": False})
        answer.raise_for_status()
        done.append(1)


async def arm(model: str, turns: int, flooders: int, tier: str | None) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=flooders + 4)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{PORT}/v1", timeout=600, limits=limits) as client:
        stop, done = asyncio.Event(), []
        tasks = [asyncio.create_task(flood(client, model, tier, stop, done)) for _ in range(flooders if tier else 0)]
        try:
            if tasks:
                await asyncio.sleep(3)  # the flood fills the engine first
            seconds = [await first_token_seconds(client, {
                "model": model, "input": f"Say one word about the number {index}.", "max_output_tokens": 8,
                "temperature": 0, "store": False}) for index in range(turns)]
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    ordered = sorted(seconds)
    return {"median": statistics.median(seconds), "p90": ordered[int(0.9 * (len(ordered) - 1))],
            "first_token_seconds": seconds, "flood_requests": len(done)}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--turns", type=int, default=8)
    options.add_argument("--flood", type=int, default=12)
    options.add_argument("--rounds", type=int, default=2)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from server.bundled_model import BUNDLED_MODEL_NAME

    command = [sys.executable, "-m", "server", "--port", str(PORT), *ENGINE_FLAGS,
               "--scheduling-policy", "priority", "--max-num-seqs", "4"]
    rounds = []
    with Server(command, PORT, args.out / "tiers.log"):
        asyncio.run(arm(BUNDLED_MODEL_NAME, 2, 0, None))  # warm-up
        names = list(ARMS)
        for index in range(args.rounds):
            order = names[index % len(names):] + names[:index % len(names)]
            results = {name: asyncio.run(arm(BUNDLED_MODEL_NAME, args.turns, args.flood, ARMS[name]))
                       for name in order}
            rounds.append(results)
            print(f"round {index + 1}: " + ", ".join(f"{name} p50 {results[name]['median'] * 1000:.0f} ms"
                                                     for name in names), flush=True)
    summary: dict[str, Any] = {"turns": args.turns, "flood": args.flood, "rounds": rounds}
    quiet = statistics.median(r["quiet"]["median"] for r in rounds)
    for name in names:
        median = statistics.median(r[name]["median"] for r in rounds)
        p90 = statistics.median(r[name]["p90"] for r in rounds)
        summary[name] = {"median_ms": median * 1000, "p90_ms": p90 * 1000, "median_vs_quiet": median / quiet}
        print(f"{name}: time to first token p50 {median * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms, "
              f"{median / quiet:.2f}x quiet")
    (args.out / "tiers.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
