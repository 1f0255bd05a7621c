"""Prefix-cache affinity across replicas: an agent workload sent round-robin to two replicas sharing PostgreSQL.

    .venv/bin/python bench/affinity.py [--sessions 2] [--turns 4] [--rounds 2] [--out bench/results]

Two replicas of the bundled model (`--advertise-url`, one real PostgreSQL started for the run). Each round runs
three arms in a rotating order, each with fresh sessions (their text is their own, so no arm finds another's cache):
- `forwarding`: turns sent alternately to A and B, as a round-robin balancer would; the replicas forward each to its
  home;
- `no forwarding`: the same, but every request carries the hop marker, so it is served where it lands (what
  `--no-forwarding` does), on the same two replicas;
- `one replica`: every turn to A, served there: the ceiling.
Each arm runs K sessions of each kind at once: chained (`previous_response_id`) and stateless (the history sent
again, `store: false`, with a `prompt_cache_key`), T turns each, each turn adding a paragraph. Per turn: input and
cached tokens (`usage`), the time to the first output delta (streamed); per arm, vLLM's prefix cache counters of
both replicas. Writes affinity.json and affinity.png to --out and prints a table.
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
from server.http.forwarding import HOP_HEADER  # noqa: E402

PORTS = {"a": 8711, "b": 8712}
ARMS = ("forwarding", "no forwarding", "one replica")
OUTPUT_TOKENS = 16


def paragraph(session: str, turn: int) -> str:
    """About 250 tokens a turn, the session's own."""
    facts = " ".join(f"Fact {n} of {session}, turn {turn}: the build step {n} reads module_{n}.py and writes "
                     f"artifact_{n}." for n in range(10))
    return f"{facts} Summarize turn {turn} in one sentence."


def replicas_for(arm: str, turn: int) -> str:
    if arm == "one replica":
        return "a"
    return "a" if turn % 2 else "b"


async def turn_of(client: httpx.AsyncClient, arm: str, port: int, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed turn: usage and the time to the first output delta."""
    headers = {} if arm == "forwarding" else {HOP_HEADER: "bench"}
    started = time.perf_counter()
    first: float | None = None
    final: dict[str, Any] = {}
    async with client.stream("POST", f"http://127.0.0.1:{port}/v1/responses", headers=headers,
                             json={**body, "stream": True}) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if first is None and event["type"].endswith(".delta"):
                first = time.perf_counter() - started
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                final = event["response"]
    usage = final.get("usage") or {}
    return {"id": final.get("id"), "text": _text(final), "input_tokens": usage.get("input_tokens", 0),
            "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
            "ttft": round(first if first is not None else time.perf_counter() - started, 4)}


def _text(response: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for item in response.get("output", []) if item.get("type") == "message"
                   for part in item.get("content", []))


async def session(client: httpx.AsyncClient, model: str, arm: str, name: str, turns: int,
                  stateless: bool) -> list[dict[str, Any]]:
    """One agent's turns, chained or stateless with a prompt_cache_key."""
    history: list[dict[str, Any]] = []
    previous: str | None = None
    rows = []
    for turn in range(1, turns + 1):
        message = {"role": "user", "content": paragraph(name, turn)}
        body: dict[str, Any] = {"model": model, "temperature": 0, "max_output_tokens": OUTPUT_TOKENS}
        if stateless:
            history.append(message)
            body.update(input=history, store=False, prompt_cache_key=name)
        else:
            body.update(input=[message], previous_response_id=previous)
        row = await turn_of(client, arm, PORTS[replicas_for(arm, turn)], body)
        previous = row.pop("id")
        if stateless:
            history.append({"role": "assistant", "content": row["text"]})
        row.pop("text")
        rows.append({"turn": turn, "kind": "stateless" if stateless else "chained", **row})
    return rows


def cache_counters() -> tuple[float, float]:
    """vLLM's prefix cache queries and hits (tokens), summed over both replicas."""
    from prometheus_client.parser import text_string_to_metric_families

    queries = hits = 0.0
    for port in PORTS.values():
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "vllm:prefix_cache_queries_total":
                    queries += sample.value
                elif sample.name == "vllm:prefix_cache_hits_total":
                    hits += sample.value
    return queries, hits


async def run_arm(model: str, arm: str, round_number: int, sessions: int, turns: int) -> dict[str, Any]:
    before = cache_counters()
    async with httpx.AsyncClient(timeout=600) as client:
        runs = [session(client, model, arm, f"r{round_number}-{arm.replace(' ', '_')}-{kind}{n}", turns, kind == "s")
                for n in range(sessions) for kind in ("c", "s")]
        rows = [row for rows in await asyncio.gather(*runs) for row in rows]
    after = cache_counters()
    queries, hits = after[0] - before[0], after[1] - before[1]
    return {"arm": arm, "round": round_number, "turns": rows,
            "vllm_prefix_cache_hit_ratio": round(hits / queries, 4) if queries else None}


def summary(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per arm, over all rounds, turns 2 and later: the cached share of input tokens, TTFT p50 and p95."""
    out = {}
    for arm in ARMS:
        later = [row for result in results if result["arm"] == arm for row in result["turns"] if row["turn"] > 1]
        ttfts = sorted(row["ttft"] for row in later)
        vllm = [r["vllm_prefix_cache_hit_ratio"] for r in results if r["arm"] == arm
                and r["vllm_prefix_cache_hit_ratio"] is not None]
        out[arm] = {"turns": len(later),
                    "cached_share": round(sum(r["cached_tokens"] for r in later)
                                          / max(1, sum(r["input_tokens"] for r in later)), 4),
                    "vllm_hit_ratio": round(statistics.mean(vllm), 4) if vllm else None,
                    "ttft_p50": round(statistics.median(ttfts), 3),
                    "ttft_p95": round(ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))], 3)}
    return out


def table(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| arm | turns 2+ | cached share of input tokens | vLLM prefix cache hit ratio (all turns) | TTFT p50 | "
             "TTFT p95 |", "|---|---|---|---|---|---|"]
    for arm, row in rows.items():
        lines.append(f"| {arm} | {row['turns']} | {row['cached_share']:.1%} | "
                     f"{row['vllm_hit_ratio']:.1%} | {row['ttft_p50']} s | {row['ttft_p95']} s |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], turns: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (share, ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    for arm in ARMS:
        rows = [row for result in results if result["arm"] == arm for row in result["turns"]]
        by_turn = [[row for row in rows if row["turn"] == turn] for turn in range(1, turns + 1)]
        share.plot(range(1, turns + 1), [sum(r["cached_tokens"] for r in group) / max(1, sum(r["input_tokens"]
                                                                                            for r in group))
                                         for group in by_turn], marker="o", label=arm)
        ttft.plot(range(1, turns + 1), [statistics.median(r["ttft"] for r in group) for group in by_turn],
                  marker="o", label=arm)
    for axes, title, unit in ((share, "Cached share of input tokens, by turn", "share"),
                              (ttft, "Time to first token, median by turn", "seconds")):
        axes.set_xticks(range(1, turns + 1))
        axes.set_xlabel("turn")
        axes.set_ylabel(unit)
        axes.set_title(title, fontsize=9)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    figure.suptitle("Two replicas of SmolLM2-135M on the CPU build of vLLM, sharing PostgreSQL; turns sent "
                    "round-robin", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


async def rounds(model: str, count: int, sessions: int, turns: int) -> list[dict[str, Any]]:
    results = []
    for number in range(count):
        order = ARMS[number % len(ARMS):] + ARMS[:number % len(ARMS)]  # each arm in each place in turn
        for arm in order:
            print(f"[affinity] round {number + 1}/{count}: {arm} ...", file=sys.stderr, flush=True)
            results.append(await run_arm(model, arm, number, sessions, turns))
    return results


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--sessions", type=int, default=2, help="sessions of each kind (chained, stateless) per arm")
    options.add_argument("--turns", type=int, default=4)
    options.add_argument("--rounds", type=int, default=3, help="alternating rounds (3: each arm in each place once)")
    options.add_argument("--store", default=None, help="a PostgreSQL URL (default: a server started for the run)")
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from server.bundled_model import BUNDLED_MODEL_NAME
    from tests.postgres import PostgresServer

    postgres = PostgresServer().start() if args.store is None else None
    store = args.store or (postgres.new_database() if postgres else "")
    python = sys.executable
    try:
        with Server([python, "-m", "server", "--port", str(PORTS["a"]), "--store", store, "--replica-id", "a",
                     "--advertise-url", f"http://127.0.0.1:{PORTS['a']}", *ENGINE_FLAGS], PORTS["a"],
                    args.out / "affinity-a.log"), \
             Server([python, "-m", "server", "--port", str(PORTS["b"]), "--store", store, "--replica-id", "b",
                     "--advertise-url", f"http://127.0.0.1:{PORTS['b']}", *ENGINE_FLAGS], PORTS["b"],
                    args.out / "affinity-b.log"):
            time.sleep(3)  # a heartbeat or two: each replica sees the other
            results = asyncio.run(rounds(BUNDLED_MODEL_NAME, args.rounds, args.sessions, args.turns))
    finally:
        if postgres is not None:
            postgres.stop()
    report = {"sessions_per_kind": args.sessions, "turns": args.turns, "rounds": args.rounds,
              "engine_flags": ENGINE_FLAGS, "summary": summary(results), "results": results}
    (args.out / "affinity.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(results, args.turns, args.out / "affinity.png")
    print(table(report["summary"]))
    print(f"wrote {args.out / 'affinity.json'} and {args.out / 'affinity.png'}")


if __name__ == "__main__":
    main()
