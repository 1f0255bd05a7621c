"""The serving benchmark users can rerun (`make bench`): our server, vLLM's built-in `/v1/responses` server
and raw AsyncLLM, in one run on one machine, with the same model, engine flags and chat-template prompts.

    .venv/bin/python bench/serving.py [--streams 1,8,32,64] [--rounds 6] [--max-tokens 64] [--wave-tokens 512]
        [--versus vllm|ours] [--out bench/results]

The three systems run side by side (each with half the usual KV cache) in alternating rounds: in each round, at
each concurrency, one wave on ours, one on vLLM's server, one on raw AsyncLLM (over six rounds, each system runs
first, second and third twice, and before each other one three times). A wave asking for fewer than --wave-tokens
output tokens, as 1 stream of 64 does, is repeated until it has asked for that many and measured as one, the three
systems' repeats taking turns. Per concurrency it reports the median tokens/s and time to first token
of each, and the median over rounds of ours/vLLM's and ours/raw with their spread (the lowest and highest round,
and the medians of the odd and of the even rounds). Then a multi-turn agent workload with tool calls on our server
(previous_response_id, and stateless resend of the whole conversation), with the prefix-cache hit ratio of each
turn; render stability across those turns (bench/render_stability.py); the frontend's ceiling on an engine that
costs nothing (bench/ceiling.py); and the per-token cost of our parser, builder and SSE pipeline on one core.
Writes serving.json and serving.png (matplotlib) in --out. With --versus ours, the second HTTP server is another
instance of ours (an A/A control): its ratios are what this machine alone does to two identical servers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.agent_workload import agent_turns  # noqa: E402
from bench.servers import ENGINE_FLAGS, Server  # noqa: E402

TOPICS = ["Paris", "rivers", "bridges", "museums", "trains", "gardens", "markets", "music"]
# The waves keep three engines up at once (ours, vLLM's server, raw AsyncLLM): each gets half the KV cache.
WAVE_MEMORY = 0.15
WAVE_FLAGS = [str(WAVE_MEMORY) if flag == "0.3" else flag for flag in ENGINE_FLAGS]
WAVE_TOKENS = 512  # a wave asking for fewer output tokens is repeated until it has asked for this many


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

    def add(self, other: "Wave") -> None:
        """Count another wave of the same size in with this one, as if they had run back to back."""
        self.ttfts += other.ttfts
        self.tokens += other.tokens
        self.seconds += other.seconds

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.ttfts)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return {"streams": self.streams, "tokens_per_s": round(self.tokens / self.seconds, 1),
                "ttft_p50_s": round(statistics.median(ordered), 3), "ttft_p99_s": round(p99, 3),
                "output_tokens": self.tokens}


async def wave(streams: int, one: Callable[[int], Awaitable[tuple[float, int]]]) -> Wave:
    """`streams` concurrent streams, measured as one wave."""
    started = time.perf_counter()
    results = await asyncio.gather(*(one(n) for n in range(streams)))
    return Wave(streams, [ttft for ttft, _ in results], sum(count for _, count in results),
                time.perf_counter() - started)


def repeats(streams: int, max_tokens: int, min_tokens: int) -> int:
    """How many times a wave runs so that it asks for at least `min_tokens`: a wave of one 64-token stream lasts
    about 4 s here, and one slow engine step moves it by several percent. The systems' repeats interleave (ours,
    vLLM's, raw, ours, ...), so the machine's drift over the half-minute they take together weighs on each alike."""
    return max(1, -(-min_tokens // (streams * max_tokens)))


# -- the two HTTP servers -----------------------------------------------------------------------


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


SYSTEMS = ("ours", "vllm", "raw")  # "vllm" is the second HTTP server: vLLM's, or with --versus ours, ours again
# What the second HTTP server is: vLLM's own, or another instance of ours (an A/A control: identical servers, so
# its ratios show how far this machine alone moves two servers apart).
SECOND = {"vllm": "vLLM's /v1/responses", "ours": "ours again (A/A)"}
# The order of the systems in each round, cycling: over six rounds each system runs first, second and third twice,
# and each runs before each other one three times (a Williams design), so a drift within a round (the machine slowing
# or speeding up as a round goes on) weighs on the three alike. Rotating one order gave ours the last place in two
# of five rounds and vLLM's server in one.
ORDERS = (("ours", "vllm", "raw"), ("vllm", "raw", "ours"), ("raw", "ours", "vllm"),
          ("ours", "raw", "vllm"), ("raw", "vllm", "ours"), ("vllm", "ours", "raw"))


async def alternating_rounds(ports: dict[str, int], model_dir: str, model: str, counts: list[int], rounds: int,
                             max_tokens: int, frontends: dict[str, int] | None = None,
                             min_tokens: int = WAVE_TOKENS) -> list[dict[str, Any]]:
    """`rounds` rounds; in each, at each concurrency, one wave on each system in turn (ours, vLLM's server, raw
    AsyncLLM, in the round's order from ORDERS), so that whatever else loads the machine weighs on the three alike.
    Returns one row per round and concurrency: {"streams": n, "round": r,
    system: wave summary}. `frontends` names the API server process of each HTTP system (its pid): the CPU it spent
    per output token is reported too (its engine core is another process). A wave that would ask for fewer than
    `min_tokens` output tokens is repeated until it does, the systems taking turns (see `repeats`)."""
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=model_dir, dtype="float32", enforce_eager=True,
                                                    gpu_memory_utilization=WAVE_MEMORY, max_model_len=2048))
    tokenizer = llm.get_tokenizer()
    counter = iter(range(1 << 30))

    async def raw(n: int, tokens_wanted: int = max_tokens) -> tuple[float, int]:
        """The same prompt through the chat template, straight into AsyncLLM (no HTTP, no parsing)."""
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt(n)}], add_generation_prompt=True,
                                             tokenize=False)
        ids = tokenizer.encode(text, add_special_tokens=False)
        params = SamplingParams(max_tokens=tokens_wanted, temperature=0, output_kind=RequestOutputKind.DELTA)
        started, first, count = time.perf_counter(), None, 0
        async for out in llm.generate({"prompt_token_ids": ids}, params, f"bench-{next(counter)}"):
            count += len(out.outputs[0].token_ids)
            first = first or (time.perf_counter() if count else None)
        return (first or time.perf_counter()) - started, count

    limits = httpx.Limits(max_connections=max(counts) + 4)
    try:
        async with httpx.AsyncClient(timeout=900, limits=limits) as client:
            def over_http(system: str) -> Callable[[int], Awaitable[tuple[float, int]]]:
                url = f"http://127.0.0.1:{ports[system]}/v1/responses"
                return lambda n: responses_stream(client, url, model, n, max_tokens)

            ones = {"ours": over_http("ours"), "vllm": over_http("vllm"), "raw": raw}
            for system in SYSTEMS:  # warm-up
                await wave(2, ones[system])
            rows, pids = [], frontends or {}
            for index in range(rounds):
                for count in counts:
                    order = ORDERS[index % len(ORDERS)]
                    waves = {system: Wave(count, [], 0, 0.0) for system in order}
                    used = {system: 0.0 for system in order}
                    for _ in range(repeats(count, max_tokens, min_tokens)):  # the systems' repeats interleave
                        for system in order:
                            spent = _cpu_seconds(pids.get(system))
                            waves[system].add(await wave(count, ones[system]))
                            used[system] += (_cpu_seconds(pids.get(system)) or 0.0) - (spent or 0.0)
                    row: dict[str, Any] = {"round": index + 1, "streams": count}
                    for system in SYSTEMS:
                        row[system] = waves[system].summary()
                        if system in pids:
                            row[system]["frontend_cpu_us_per_token"] = round(
                                used[system] / max(row[system]["output_tokens"], 1) * 1e6)
                    rows.append(row)
                    print(f"[bench] round {index + 1}, {count} streams: " + ", ".join(
                        f"{system} {row[system]['tokens_per_s']} tok/s" for system in SYSTEMS),
                        file=sys.stderr, flush=True)
            return rows
    finally:
        llm.shutdown()


def _cpu_seconds(pid: int | None) -> float | None:
    """User plus system CPU of one process (not its children), or None without a pid."""
    if pid is None:
        return None
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def ratios(rows: list[dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    """Per concurrency: the median over rounds of ours/vLLM's and ours/raw tokens/s, their spread (lowest and
    highest round), and the medians of the odd and of the even rounds (how far half the rounds moves the median)."""
    out = []
    for count in counts:
        mine = [row for row in rows if row["streams"] == count]
        entry: dict[str, Any] = {"streams": count, "rounds": len(mine)}
        for other in ("vllm", "raw"):
            values = [row["ours"]["tokens_per_s"] / row[other]["tokens_per_s"] for row in mine]
            entry[f"ours/{other}"] = {
                "median": round(statistics.median(values), 3), "low": round(min(values), 3),
                "high": round(max(values), 3),
                "odd rounds": round(statistics.median(values[0::2]), 3),
                "even rounds": round(statistics.median(values[1::2]), 3) if len(values) > 1 else None}
        for system in ("ours", "vllm"):
            spent = [row[system]["frontend_cpu_us_per_token"] for row in mine if "frontend_cpu_us_per_token" in row[system]]
            if spent:
                entry[f"{system} frontend CPU us/token median"] = statistics.median(spent)
        for system in SYSTEMS:
            entry[f"{system} tok/s median"] = round(statistics.median(row[system]["tokens_per_s"] for row in mine), 1)
            entry[f"{system} ttft p50 median"] = round(statistics.median(row[system]["ttft_p50_s"] for row in mine), 3)
        out.append(entry)
    return out


# -- report -------------------------------------------------------------------------------------


def table(summary: list[dict[str, Any]], versus: str = "vllm") -> str:
    """The waves' summary as a Markdown table; `versus` names what the second HTTP server was (see SECOND)."""
    second = SECOND[versus]
    lines = [f"| streams | rounds | ours tok/s | {second} tok/s | raw AsyncLLM tok/s | ours / {second}, median (low-high) "
             f"| ours / raw, median (low-high) | TTFT p50: ours / {second} / raw | API process CPU per token: ours / "
             f"{second} |", "|" + "---|" * 9]
    for entry in summary:
        spread = {other: entry[f"ours/{other}"] for other in ("vllm", "raw")}
        lines.append(
            f"| {entry['streams']} | {entry['rounds']} | {entry['ours tok/s median']} | {entry['vllm tok/s median']} "
            f"| {entry['raw tok/s median']} "
            + "".join(f"| {r['median']:.2f} ({r['low']:.2f}-{r['high']:.2f}) " for r in spread.values())
            + f"| {entry['ours ttft p50 median']} / {entry['vllm ttft p50 median']} / {entry['raw ttft p50 median']} s "
            f"| {entry.get('ours frontend CPU us/token median')} / {entry.get('vllm frontend CPU us/token median')} µs |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], summary: list[dict[str, Any]], path: Path, versus: str = "vllm") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"ours": "responses-server", "vllm": SECOND[versus], "raw": "raw AsyncLLM"}
    streams = [entry["streams"] for entry in summary]
    figure, (throughput, ratio) = plt.subplots(1, 2, figsize=(11, 4.2))
    for system in SYSTEMS:
        by_count = [[row[system]["tokens_per_s"] for row in rows if row["streams"] == count] for count in streams]
        medians = [statistics.median(values) for values in by_count]
        throughput.errorbar(streams, medians, yerr=[[m - min(v) for m, v in zip(medians, by_count)],
                                                    [max(v) - m for m, v in zip(medians, by_count)]],
                            marker="o", capsize=3, label=labels[system])
    for other in ("vllm", "raw"):
        medians = [entry[f"ours/{other}"]["median"] for entry in summary]
        ratio.errorbar(streams, medians, yerr=[[m - entry[f"ours/{other}"]["low"] for m, entry in zip(medians, summary)],
                                               [entry[f"ours/{other}"]["high"] - m for m, entry in zip(medians, summary)]],
                       marker="o", capsize=3, label=f"ours / {labels[other]}")
    ratio.axhline(1.0, color="grey", linewidth=0.8)
    for axes, title, unit in ((throughput, "Output throughput (median, low-high)", "tokens/s"),
                              (ratio, "Ratio of tokens/s (median over rounds, low-high)", "ratio")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(streams, [str(count) for count in streams])
        axes.set_xlabel("concurrent streams")
        axes.set_ylabel(unit)
        axes.set_title(title, fontsize=9)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    rounds = summary[0]["rounds"] if summary else 0
    figure.suptitle(f"SmolLM2-135M-Instruct on the CPU build of vLLM (2 cores), {rounds} alternating rounds",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--streams", default="1,8,32,64", help="concurrent streams per wave, comma-separated")
    options.add_argument("--max-tokens", type=int, default=64)
    options.add_argument("--rounds", type=int, default=len(ORDERS), help="alternating rounds of the three systems "
                         f"(a multiple of {len(ORDERS)} puts each in each place equally often)")
    options.add_argument("--wave-tokens", type=int, default=WAVE_TOKENS, help="a wave asking for fewer output "
                         "tokens than this (streams x max tokens) is repeated until it has asked for this many, the "
                         "systems taking turns")
    options.add_argument("--versus", choices=sorted(SECOND), default="vllm", help="the second HTTP server in the "
                         "waves: vLLM's built-in one, or another instance of ours (an A/A control: the ratios of two "
                         "identical servers, the noise floor of this machine)")
    options.add_argument("--agent-turns", type=int, default=6)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    options.add_argument("--parts", default="waves,agent,stability,ceiling,pipeline",
                         help="what to run (comma-separated): waves (the three systems), agent, stability (render "
                         "stability across agent turns, bench/render_stability.py), ceiling (the frontend on an engine "
                         "that costs nothing, bench/ceiling.py), pipeline")
    args = options.parse_args()
    counts = [int(n) for n in args.streams.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)

    from bench.pipeline import measure
    from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model

    model_dir, name = str(ensure_bundled_model()), BUNDLED_MODEL_NAME
    python = sys.executable
    report: dict[str, Any] = {"model": name, "engine_flags": ENGINE_FLAGS, "max_output_tokens": args.max_tokens,
                              "wave_tokens": args.wave_tokens,
                              "machine": {"cpus": os.cpu_count()}}
    parts = set(args.parts.split(","))
    if "waves" in parts:
        print(f"[bench] {args.rounds} alternating rounds at {counts} streams: our server, {SECOND[args.versus]}, raw "
              "AsyncLLM ...",
              file=sys.stderr, flush=True)
        ours = [python, "-m", "server", "--port", "8701", "--store", "none", *WAVE_FLAGS]
        theirs = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--served-model-name",
                  name, "--port", "8702", *WAVE_FLAGS]
        if args.versus == "ours":
            theirs = [python, "-m", "server", "--port", "8702", "--store", "none", *WAVE_FLAGS]
        report["versus"] = args.versus
        with Server(ours, 8701, args.out / "ours.log") as mine, Server(theirs, 8702, args.out / "vllm.log") as other:
            rows = asyncio.run(alternating_rounds({"ours": 8701, "vllm": 8702}, model_dir, name, counts, args.rounds,
                                                  args.max_tokens, {"ours": mine.process.pid,
                                                                    "vllm": other.process.pid}, args.wave_tokens))
        (args.out / "waves.partial.json").write_text(json.dumps(rows))  # kept if a later part fails
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
    if "ceiling" in parts:
        print("[bench] the frontend's ceiling ...", file=sys.stderr, flush=True)
        from bench import ceiling

        report["ceiling"] = ceiling.measure([1, 64, 256], 1000, [1, 2], profile=True, out=args.out)
    if "pipeline" in parts:
        print("[bench] pipeline cost per token ...", file=sys.stderr, flush=True)
        report["pipeline"] = measure()
    if "waves" in parts:
        report["rounds"] = rows
        report["ratios"] = ratios(rows, counts)
        plot(rows, report["ratios"], args.out / "serving.png", args.versus)
        print(table(report["ratios"], args.versus))
    (args.out / "serving.json").write_text(json.dumps(report, indent=2) + "\n")
    for mode, agent_rows in report.get("agent", {}).items():
        print(f"\nagent, {mode}: " + ", ".join(
            f"turn {r['turn']}: {r['cached_tokens']}/{r['input_tokens']} cached ({r['prefix_cache_hit_ratio']:.0%}), "
            f"{r['seconds']} s" if "error" not in r else f"turn {r['turn']}: {r['error']}" for r in agent_rows))
    for label, modes in report.get("render_stability", {}).items():
        for mode, shares in modes.items():
            print(f"\nrender stability, {label}, {mode}: " + ", ".join(f"{share:.1%}" for share in shares))
    if "ceiling" in report:
        print("\n" + ceiling.table(report["ceiling"]))
    if "pipeline" in report:
        print(f"\npipeline: {json.dumps(report['pipeline'])}")
    (args.out / "waves.partial.json").unlink(missing_ok=True)
    print(f"wrote {args.out / 'serving.json'}" + (f" and {args.out / 'serving.png'}" if "waves" in parts else ""))


if __name__ == "__main__":
    main()
