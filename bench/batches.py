"""A batch beside interactive agents on one engine: the agents' time to first token with the batch running against
without it, and the batch's throughput against the engine's idle capacity.

    .venv/bin/python bench/batches.py [--sessions 2] [--turns 5] [--window 45] [--rounds 2] [--out bench/results]

One server of the bundled model with vLLM's `--scheduling-policy priority`. Each round runs three arms in rotating
order: `agents` (--sessions agents at once, --turns streamed turns each: about 250 new tokens and 16 output tokens a
turn, a second's thought between turns), `batch` (a batch of `/v1/responses` lines of 32 output tokens, measured for
--window seconds once it runs, then cancelled) and `both` (the batch running, then the agents' turns beside it; the
batch measured over the agents' time). A batch's rate is the lines it completed in the window times its mean output
tokens per line; the engine's idle capacity in `both` is the batch's rate alone times the share of the time no
agent's turn was running. Prints the ratios; writes batches.json to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import io
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

PORT = 8724
LINE_TOKENS = 32
BATCH_LINES = 400  # more than any window runs: the batch is cancelled when measured


def words(tag: str) -> str:
    """About 250 tokens, the turn's own."""
    return " ".join(f"Fact {n} of {tag}: the build step {n} reads module_{n}.py and writes artifact_{n}."
                    for n in range(10))


async def first_token(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[float, int]:
    """Seconds to the first output text delta, and the turn's output tokens."""
    started, seconds, tokens = time.perf_counter(), None, 0
    async with client.stream("POST", "/responses", json={**body, "stream": True}) as answer:
        answer.raise_for_status()
        async for line in answer.aiter_lines():
            if seconds is None and line.startswith("data: ") and '"response.output_text.delta"' in line:
                seconds = time.perf_counter() - started
            if line.startswith("data: ") and ('"response.completed"' in line or '"response.incomplete"' in line):
                tokens = json.loads(line[6:])["response"]["usage"]["output_tokens"]
    if seconds is None:
        raise RuntimeError("the stream ended without a text delta")
    return seconds, tokens


async def agents(client: httpx.AsyncClient, model: str, sessions: int, turns: int, tag: str) -> dict[str, Any]:
    busy: list[tuple[float, float]] = []  # each turn's (start, end)

    async def session(index: int) -> list[tuple[float, int]]:
        done = []
        for turn in range(turns):
            began = time.perf_counter()
            done.append(await first_token(client, {
                "model": model, "input": f"{words(f'{tag}-{index}-{turn}')} Summarize in one sentence.",
                "max_output_tokens": 16, "temperature": 0, "store": False}))
            busy.append((began, time.perf_counter()))
            await asyncio.sleep(1.0)
        return done

    started = time.perf_counter()
    results = [turn for turns_of in await asyncio.gather(*(session(n) for n in range(sessions))) for turn in turns_of]
    seconds = time.perf_counter() - started
    return {"first_token_seconds": [ttft for ttft, _ in results], "seconds": seconds,
            "tokens_per_second": sum(tokens for _, tokens in results) / seconds,
            "idle_share": 1 - covered(busy) / seconds}


def covered(intervals: list[tuple[float, float]]) -> float:
    """Seconds within any of the intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


async def start_batch(client: httpx.AsyncClient, model: str, tag: str) -> str:
    lines = "".join(json.dumps({"custom_id": f"{tag}-{n}", "method": "POST", "url": "/v1/responses", "body": {
        "model": model, "input": f"Write a story about {tag} number {n}.", "max_output_tokens": LINE_TOKENS,
        "store": False}}) + "\n" for n in range(BATCH_LINES))
    uploaded = await client.post("/files", files={"file": ("lines.jsonl", io.BytesIO(lines.encode()))},
                                 data={"purpose": "batch"})
    uploaded.raise_for_status()
    made = await client.post("/batches", json={"input_file_id": uploaded.json()["id"], "endpoint": "/v1/responses",
                                               "completion_window": "24h"})
    made.raise_for_status()
    batch_id = made.json()["id"]
    while (await completed(client, batch_id)) < 2:  # running, its first lines done
        await asyncio.sleep(0.2)
    return batch_id


async def completed(client: httpx.AsyncClient, batch_id: str) -> int:
    batch = (await client.get(f"/batches/{batch_id}")).json()
    return batch["request_counts"]["completed"]


async def stop_batch(client: httpx.AsyncClient, batch_id: str) -> float:
    """Cancel it and wait until it has ended; its mean output tokens per completed line."""
    await client.post(f"/batches/{batch_id}/cancel")
    while (batch := (await client.get(f"/batches/{batch_id}")).json())["status"] != "cancelled":
        await asyncio.sleep(0.5)
    return (batch["usage"] or {}).get("output_tokens", 0) / max(1, batch["request_counts"]["completed"])


async def arm(name: str, model: str, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{PORT}/v1", timeout=600) as client:
        if name == "agents":
            return await agents(client, model, args.sessions, args.turns, tag)
        batch_id = await start_batch(client, model, tag)
        before, started = await completed(client, batch_id), time.perf_counter()
        result: dict[str, Any] = {}
        if name == "both":
            result = await agents(client, model, args.sessions, args.turns, tag)
        else:
            await asyncio.sleep(args.window)
        lines, seconds = await completed(client, batch_id) - before, time.perf_counter() - started
        per_line = await stop_batch(client, batch_id)
        return {**result, "batch_lines": lines, "batch_seconds": seconds,
                "batch_tokens_per_second": lines * per_line / seconds}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--sessions", type=int, default=2)
    options.add_argument("--turns", type=int, default=5)
    options.add_argument("--window", type=float, default=45.0)
    options.add_argument("--rounds", type=int, default=2)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    options.add_argument("--name", default="batches", help="the results' name: NAME.json")
    options.add_argument("--server-args", default="", help="more flags for the server (e.g. '--batch-yield-above 1')")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from server.bundled_model import BUNDLED_MODEL_NAME

    command = [sys.executable, "-m", "server", "--port", str(PORT), *ENGINE_FLAGS, "--scheduling-policy", "priority",
               *args.server_args.split()]
    names, rounds = ["agents", "batch", "both"], []
    with Server(command, PORT, args.out / f"{args.name}.log"):
        asyncio.run(arm("agents", BUNDLED_MODEL_NAME, argparse.Namespace(sessions=1, turns=1), "warm"))
        for index in range(args.rounds):
            order = names[index % len(names):] + names[:index % len(names)]
            results = {name: asyncio.run(arm(name, BUNDLED_MODEL_NAME, args, f"r{index}{name}")) for name in order}
            rounds.append(results)
            print(f"round {index + 1}: " + json.dumps({name: {key: value for key, value in result.items()
                                                              if not isinstance(value, list)}
                                                       for name, result in results.items()}), flush=True)
    print(json.dumps(summarize(rounds, args), indent=1))


def summarize(rounds: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    alone = [ttft for result in rounds for ttft in result["agents"]["first_token_seconds"]]
    beside = [ttft for result in rounds for ttft in result["both"]["first_token_seconds"]]
    batch_alone = statistics.median(result["batch"]["batch_tokens_per_second"] for result in rounds)
    batch_beside = statistics.median(result["both"]["batch_tokens_per_second"] for result in rounds)
    agents_beside = statistics.median(result["both"]["tokens_per_second"] for result in rounds)
    idle_share = statistics.median(result["both"]["idle_share"] for result in rounds)
    idle = batch_alone * idle_share  # what the batch would get in the time no agent's turn runs
    summary = {
        "sessions": args.sessions, "turns": args.turns, "rounds": rounds,
        "agents_ttft_p50_alone_s": statistics.median(alone), "agents_ttft_p50_beside_batch_s": statistics.median(beside),
        "agents_ttft_p90_alone_s": sorted(alone)[int(0.9 * (len(alone) - 1))],
        "agents_ttft_p90_beside_batch_s": sorted(beside)[int(0.9 * (len(beside) - 1))],
        "batch_tokens_per_second_alone": batch_alone, "batch_tokens_per_second_beside_agents": batch_beside,
        "agents_tokens_per_second_beside_batch": agents_beside, "idle_share_beside_batch": idle_share,
        "idle_capacity_tokens_per_second": idle,
    }
    summary["ttft_p50_ratio"] = summary["agents_ttft_p50_beside_batch_s"] / summary["agents_ttft_p50_alone_s"]
    summary["batch_share_of_idle"] = batch_beside / idle if idle > 0 else None
    summary["server_args"] = args.server_args
    (args.out / f"{args.name}.json").write_text(json.dumps(summary, indent=1))
    return {key: value for key, value in summary.items() if key != "rounds"}


if __name__ == "__main__":
    main()
