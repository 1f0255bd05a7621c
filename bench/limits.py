"""A project at its limit does not slow another: project beta's latency alone, and while project alpha hammers the
server far past its requests-per-minute limit.

    .venv/bin/python bench/limits.py [--requests 24] [--hammers 8] [--rounds 3] [--out bench/results]

One server of the bundled model with a projects file: alpha may make 5 requests a minute, beta has no limit. Each
round runs two arms in alternating order: `alone` (beta sends --requests requests, one after another, 8 output
tokens each) and `alpha hammering` (the same, while --hammers clients send alpha's requests back to back, nearly
all refused with a 429). Prints beta's median latency per arm and their ratio, alpha's answers by status, and writes
limits.json to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
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

PORT = 8721
KEYS = {"alpha": "bench-alpha-key-0123456789abcdef", "beta": "bench-beta-key-0123456789abcdef"}


def projects_file(path: Path) -> Path:
    keys = "".join(f'[[keys]]\nname = "{name}"\nproject = "{name}"\n'
                   f'sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"\n' for name, key in KEYS.items())
    path.write_text('[[projects]]\nname = "alpha"\nrequests_per_minute = 5\n' + keys)
    return path


async def beta_latencies(client: httpx.AsyncClient, model: str, requests: int) -> list[float]:
    latencies = []
    for index in range(requests):
        started = time.perf_counter()
        answer = await client.post("/responses", headers={"Authorization": f"Bearer {KEYS['beta']}"}, json={
            "model": model, "input": f"Say one word about the number {index}.", "max_output_tokens": 8,
            "temperature": 0})
        answer.raise_for_status()
        latencies.append(time.perf_counter() - started)
    return latencies


async def hammer(client: httpx.AsyncClient, model: str, stop: asyncio.Event, statuses: list[int]) -> None:
    while not stop.is_set():
        answer = await client.post("/responses", headers={"Authorization": f"Bearer {KEYS['alpha']}"}, json={
            "model": model, "input": "Say one word.", "max_output_tokens": 8})
        statuses.append(answer.status_code)


async def arm(model: str, requests: int, hammers: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{PORT}/v1", timeout=600) as client:
        stop, statuses = asyncio.Event(), []
        tasks = [asyncio.create_task(hammer(client, model, stop, statuses)) for _ in range(hammers)]
        try:
            latencies = await beta_latencies(client, model, requests)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    return {"median": statistics.median(latencies), "latencies": latencies,
            "alpha": {str(code): statuses.count(code) for code in sorted(set(statuses))}}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--requests", type=int, default=24)
    options.add_argument("--hammers", type=int, default=8)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from server.bundled_model import BUNDLED_MODEL_NAME

    command = [sys.executable, "-m", "server", "--port", str(PORT), "--projects-file",
               str(projects_file(args.out / "limits-projects.toml")), *ENGINE_FLAGS]
    rounds = []
    with Server(command, PORT, args.out / "limits.log"):
        asyncio.run(arm(BUNDLED_MODEL_NAME, 4, 0))  # warm-up
        for index in range(args.rounds):
            order = [0, args.hammers] if index % 2 == 0 else [args.hammers, 0]
            results = {hammers: asyncio.run(arm(BUNDLED_MODEL_NAME, args.requests, hammers)) for hammers in order}
            rounds.append({"alone": results[0], "alpha hammering": results[args.hammers]})
    alone = statistics.median(r["alone"]["median"] for r in rounds)
    hammered = statistics.median(r["alpha hammering"]["median"] for r in rounds)
    summary = {"beta median alone (s)": alone, "beta median, alpha hammering (s)": hammered,
               "ratio": hammered / alone, "alpha answers": [r["alpha hammering"]["alpha"] for r in rounds],
               "rounds": rounds}
    (args.out / "limits.json").write_text(json.dumps(summary, indent=1))
    print(f"beta p50 alone {alone * 1000:.1f} ms; with alpha hammering {hammered * 1000:.1f} ms; "
          f"ratio {hammered / alone:.3f}; alpha's answers per round: {summary['alpha answers']}")


if __name__ == "__main__":
    main()
