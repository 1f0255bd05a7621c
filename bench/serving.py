"""The serving benchmark users can rerun (`make bench`): our server, vLLM's built-in `/v1/responses` server and raw
AsyncLLM, in one run on one machine, with the same model, engine flags and chat-template prompts.

    .venv/bin/python bench/serving.py [--streams 1,8,32,64] [--max-tokens 64] [--out bench/results]

For each system and each number of concurrent streams it reports output tokens/s and time to first token (p50, p99),
and our ratios to both; then a multi-turn agent workload with tool calls on our server (previous_response_id, and
stateless resend of the whole conversation), with the prefix-cache hit ratio of each turn; then the per-token cost
of our parser, builder and SSE pipeline on one core. Writes serving.json and serving.png (matplotlib) in --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOPICS = ["Paris", "rivers", "bridges", "museums", "trains", "gardens", "markets", "music"]
ENGINE_FLAGS = ["--dtype", "float32", "--enforce-eager", "--gpu-memory-utilization", "0.3", "--max-model-len", "2048"]
START_TIMEOUT = 600


def prompt(n: int) -> str:
    """The n-th stream's question: a shared opening (as chat prompts have) and its own ending."""
    return f"Write a detailed essay about the history of {TOPICS[n % len(TOPICS)]}, part {n}."


@dataclass
class Wave:
    """One wave of concurrent streams: each stream's time to first token and output tokens, and the wall time."""

    streams: int
    ttfts: list[float]
    tokens: int
    seconds: float

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.ttfts)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return {"streams": self.streams, "tokens_per_s": round(self.tokens / self.seconds, 1),
                "ttft_p50_s": round(statistics.median(ordered), 3), "ttft_p99_s": round(p99, 3),
                "output_tokens": self.tokens}


async def wave(streams: int, one: Callable[[int], Awaitable[tuple[float, int]]]) -> Wave:
    started = time.perf_counter()
    results = await asyncio.gather(*(one(n) for n in range(streams)))
    return Wave(streams, [ttft for ttft, _ in results], sum(tokens for _, tokens in results),
                time.perf_counter() - started)


async def best_wave(streams: int, one: Callable[[int], Awaitable[tuple[float, int]]]) -> dict[str, float]:
    """A short wave (8 streams or fewer, seconds long) is run 3 times and the median by tokens/s kept: on a shared
    machine one short wave is mostly noise. Longer waves run once."""
    waves = [(await wave(streams, one)).summary() for _ in range(3 if streams <= 8 else 1)]
    return sorted(waves, key=lambda summary: summary["tokens_per_s"])[len(waves) // 2]


# -- the two HTTP servers -----------------------------------------------------------------------


class Server:
    """A server subprocess on a port, stopped on exit."""

    def __init__(self, command: list[str], port: int, log: Path) -> None:
        self.port = port
        self.process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                        env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{command[:4]} exited; see {log}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"{command[:4]} did not start; see {log}")

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *_: Any) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


async def responses_stream(client: httpx.AsyncClient, url: str, model: str, n: int, max_tokens: int) -> tuple[float, int]:
    """One streamed Responses request: (time to the first output delta, output tokens)."""
    body = {"model": model, "input": prompt(n), "stream": True, "temperature": 0, "max_output_tokens": max_tokens}
    started = time.perf_counter()
    first, tokens, deltas = None, None, 0
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if event["type"] == "response.output_text.delta":
                deltas += 1
                first = first or time.perf_counter()
            elif event["type"] in ("response.completed", "response.incomplete"):
                usage = event["response"].get("usage") or {}
                tokens = usage.get("output_tokens")
    return (first or time.perf_counter()) - started, tokens if tokens is not None else deltas


def http_waves(port: int, model: str, counts: list[int], max_tokens: int) -> list[dict[str, float]]:
    async def run() -> list[dict[str, float]]:
        limits = httpx.Limits(max_connections=max(counts) + 4)
        async with httpx.AsyncClient(timeout=900, limits=limits) as client:
            url = f"http://127.0.0.1:{port}/v1/responses"
            await responses_stream(client, url, model, 0, 8)  # warm-up
            return [await best_wave(count, lambda n: responses_stream(client, url, model, n, max_tokens))
                    for count in counts]

    return asyncio.run(run())


# -- raw AsyncLLM -------------------------------------------------------------------------------


def raw_waves(model_dir: str, counts: list[int], max_tokens: int) -> list[dict[str, float]]:
    """The same prompts through the model's chat template, straight into AsyncLLM (no HTTP, no parsing)."""
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    async def run() -> list[dict[str, float]]:
        llm = AsyncLLM.from_engine_args(AsyncEngineArgs(
            model=model_dir, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.3, max_model_len=2048))
        tokenizer = llm.get_tokenizer()
        counter = iter(range(1 << 30))

        async def one(n: int, tokens_wanted: int = max_tokens) -> tuple[float, int]:
            text = tokenizer.apply_chat_template([{"role": "user", "content": prompt(n)}], add_generation_prompt=True,
                                                 tokenize=False)
            ids = tokenizer.encode(text, add_special_tokens=False)
            params = SamplingParams(max_tokens=tokens_wanted, temperature=0, output_kind=RequestOutputKind.DELTA)
            started, first, count = time.perf_counter(), None, 0
            async for out in llm.generate({"prompt_token_ids": ids}, params, f"bench-{next(counter)}"):
                count += len(out.outputs[0].token_ids)
                first = first or (time.perf_counter() if count else None)
            return (first or time.perf_counter()) - started, count

        try:
            await one(0, 8)  # warm-up
            return [await best_wave(count, one) for count in counts]
        finally:
            llm.shutdown()

    return asyncio.run(run())


# -- the agent workload -------------------------------------------------------------------------

TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file of the project.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
FILE = "def handler(request):\n" + "".join(f"    step_{n} = transform(request, {n})\n" for n in range(12))


def agent_turns(port: int, model: str, turns: int, stateless: bool) -> list[dict[str, Any]]:
    """A coding agent's loop: each turn the model must call read_file, the client answers with the file; per turn,
    the prompt's length, how much of it the prefix cache held, and the time to the response."""
    url = f"http://127.0.0.1:{port}/v1/responses"
    session = "stateless" if stateless else "chained"  # each mode its own conversation: no cache shared between them
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Session {session}: find the bug in the handler. "
                                      "Read files as needed."}]
    previous: str | None = None
    rows = []
    with httpx.Client(timeout=600) as client:
        for turn in range(1, turns + 1):
            body: dict[str, Any] = {"model": model, "tools": TOOLS, "tool_choice": "required", "temperature": 0,
                                    "max_output_tokens": 48, "input": history}
            if stateless:
                body["store"] = False
            elif previous:
                body["previous_response_id"] = previous
            started = time.perf_counter()
            reply = client.post(url, json=body)
            seconds = time.perf_counter() - started
            if reply.status_code != 200:
                rows.append({"turn": turn, "error": reply.json()["error"]["message"]})
                break
            response = reply.json()
            usage = response["usage"]
            cached = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
            rows.append({"turn": turn, "input_tokens": usage["input_tokens"], "cached_tokens": cached,
                         "prefix_cache_hit_ratio": round(cached / usage["input_tokens"], 3),
                         "seconds": round(seconds, 3)})
            calls = [item for item in response["output"] if item["type"] == "function_call"]
            outputs = [{"type": "function_call_output", "call_id": call["call_id"], "output": FILE} for call in calls]
            if stateless:
                history = history + response["output"] + outputs
            else:
                history, previous = outputs, response["id"]
    return rows


# -- report -------------------------------------------------------------------------------------


def table(results: dict[str, list[dict[str, float]]]) -> str:
    lines = ["| streams | ours tok/s | vLLM's server tok/s | raw AsyncLLM tok/s | ours / vLLM's | ours / raw "
             "| our TTFT p50 / p99 | vLLM's TTFT p50 / p99 | raw TTFT p50 / p99 |", "|" + "---|" * 9]
    for ours, theirs, raw in zip(results["ours"], results["vllm"], results["raw"]):
        lines.append(
            f"| {ours['streams']} | {ours['tokens_per_s']} | {theirs['tokens_per_s']} | {raw['tokens_per_s']} "
            f"| {ours['tokens_per_s'] / theirs['tokens_per_s']:.2f} | {ours['tokens_per_s'] / raw['tokens_per_s']:.2f} "
            f"| {ours['ttft_p50_s']} / {ours['ttft_p99_s']} s | {theirs['ttft_p50_s']} / {theirs['ttft_p99_s']} s "
            f"| {raw['ttft_p50_s']} / {raw['ttft_p99_s']} s |")
    return "\n".join(lines)


def plot(results: dict[str, list[dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"ours": "responses-server", "vllm": "vLLM's /v1/responses", "raw": "raw AsyncLLM"}
    figure, (throughput, ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    for system, rows in results.items():
        streams = [row["streams"] for row in rows]
        throughput.plot(streams, [row["tokens_per_s"] for row in rows], marker="o", label=labels[system])
        ttft.plot(streams, [row["ttft_p50_s"] for row in rows], marker="o", label=f"{labels[system]} p50")
        ttft.plot(streams, [row["ttft_p99_s"] for row in rows], marker="x", linestyle=":",
                  color=ttft.lines[-1].get_color(), label=f"{labels[system]} p99")
    for axes, title, unit in ((throughput, "Output throughput", "tokens/s"), (ttft, "Time to first token", "s")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(streams, [str(count) for count in streams])
        axes.set_xlabel("concurrent streams")
        axes.set_ylabel(unit)
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    figure.suptitle("SmolLM2-135M-Instruct on the CPU build of vLLM (2 cores), one run", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--streams", default="1,8,32,64", help="concurrent streams per wave, comma-separated")
    options.add_argument("--max-tokens", type=int, default=64)
    options.add_argument("--agent-turns", type=int, default=6)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    options.add_argument("--parts", default="waves,agent,stability,pipeline",
                         help="what to run (comma-separated): waves (the three systems), agent, stability (render "
                         "stability across agent turns, bench/render_stability.py), pipeline")
    args = options.parse_args()
    counts = [int(n) for n in args.streams.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)

    from bench.pipeline import measure
    from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model

    model_dir, name = str(ensure_bundled_model()), BUNDLED_MODEL_NAME
    python = sys.executable
    results: dict[str, list[dict[str, float]]] = {}
    report: dict[str, Any] = {"model": name, "engine_flags": ENGINE_FLAGS, "max_output_tokens": args.max_tokens,
                              "machine": {"cpus": os.cpu_count()}}
    parts = set(args.parts.split(","))
    if "waves" in parts:
        print(f"[bench] our server at {counts} streams ...", file=sys.stderr, flush=True)
        with Server([python, "-m", "server", "--port", "8701", "--store", "none", *ENGINE_FLAGS],
                    8701, args.out / "ours.log"):
            results["ours"] = http_waves(8701, name, counts, args.max_tokens)
        print("[bench] vLLM's built-in server ...", file=sys.stderr, flush=True)
        with Server([python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--served-model-name",
                     name, "--port", "8702", *ENGINE_FLAGS], 8702, args.out / "vllm.log"):
            results["vllm"] = http_waves(8702, name, counts, args.max_tokens)
        print("[bench] raw AsyncLLM ...", file=sys.stderr, flush=True)
        results["raw"] = raw_waves(model_dir, counts, args.max_tokens)
        (args.out / "waves.partial.json").write_text(json.dumps(results))  # kept if a later part fails
    if "agent" in parts:
        print("[bench] agent workload on our server ...", file=sys.stderr, flush=True)
        with Server([python, "-m", "server", "--port", "8703", "--store", f"sqlite:///{args.out / 'agent.db'}",
                     *ENGINE_FLAGS], 8703, args.out / "agent.log"):
            report["agent"] = {"previous_response_id": agent_turns(8703, name, args.agent_turns, stateless=False),
                               "stateless_resend": agent_turns(8703, name, args.agent_turns, stateless=True)}
        (args.out / "agent.db").unlink(missing_ok=True)
    if "stability" in parts:
        print("[bench] render stability across agent turns ...", file=sys.stderr, flush=True)
        from bench import render_stability

        report["render_stability"] = render_stability.measure(args.agent_turns, args.out)
    if "pipeline" in parts:
        print("[bench] pipeline cost per token ...", file=sys.stderr, flush=True)
        report["pipeline"] = measure()
    if "waves" not in parts:
        print(json.dumps(report, indent=2))
        return
    report["waves"] = results
    report["ratios"] = [{"streams": o["streams"], "ours/vllm tok/s": round(o["tokens_per_s"] / v["tokens_per_s"], 3),
                         "ours/raw tok/s": round(o["tokens_per_s"] / r["tokens_per_s"], 3),
                         "ours/raw ttft p50": round(o["ttft_p50_s"] / r["ttft_p50_s"], 3)}
                        for o, v, r in zip(results["ours"], results["vllm"], results["raw"])]
    (args.out / "serving.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(results, args.out / "serving.png")
    print(table(results))
    for mode, rows in report.get("agent", {}).items():
        print(f"\nagent, {mode}: " + ", ".join(
            f"turn {r['turn']}: {r['cached_tokens']}/{r['input_tokens']} cached ({r['prefix_cache_hit_ratio']:.0%}), "
            f"{r['seconds']} s" if "error" not in r else f"turn {r['turn']}: {r['error']}" for r in rows))
    for label, modes in report.get("render_stability", {}).items():
        for mode, shares in modes.items():
            print(f"\nrender stability, {label}, {mode}: " + ", ".join(f"{share:.1%}" for share in shares))
    if "pipeline" in report:
        print(f"\npipeline: {json.dumps(report['pipeline'])}")
    (args.out / "waves.partial.json").unlink(missing_ok=True)
    print(f"wrote {args.out / 'serving.json'} and {args.out / 'serving.png'}")


if __name__ == "__main__":
    main()
