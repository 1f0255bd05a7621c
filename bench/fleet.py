"""The same agent workload on the embedded engine, on a gateway over two vLLM scale-out workers, and on SGLang's gateway.

    .venv/bin/python bench/fleet.py [--sessions 4] [--turns 4] [--rounds 3] [--out bench/results]

Arms, all running at once and measured in turn, round after round (a quiet minute or a busy one falls on every arm
alike), the bundled model on every engine, the same CPU flags:
- `embedded`: `responses-server` with its engine in its process (one engine: the cache ceiling);
- `fleet, rendezvous`: `responses-server --fleet` over two workers (`vllm ... --enable-scale-out`), each turn on the
  worker its conversation hashes to;
- `fleet, round robin`: the same gateway with one engine URL, vllm-router (`--policy round_robin`) in front of the
  same two workers: a turn lands on either;
- `smg`: SGLang's gateway (`smg launch --backend vllm`, PyPI `smg`) over two vLLM gRPC workers of the same model
  (`vllm.entrypoints.launchers.grpc_server`, with `smg-grpc-servicer`), `--policy cache_aware`, its own Responses API;
  its rounds come after the others' (its workers are other engines).
Each arm runs K chained sessions (`previous_response_id`) and K stateless ones (history sent again, `prompt_cache_key`)
at once, T turns each, each turn adding a paragraph of its own (no arm finds another's cache). Per arm: time to the
first output delta; the gateway process's own CPU seconds (psutil: user + system, the engine processes not counted)
per streamed output token; the cached share of turn 2+'s prompt tokens, from the engines' own prefix-cache counters
(`vllm:prefix_cache_hits_total / queries_total`, summed over the arm's workers). CPU per token is the arm's summed
CPU over its summed tokens, and against the embedded server's in each round. Writes fleet.json and fleet.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import Server, stop_process  # noqa: E402

# Whole prompts in one step: vLLM 0.32's CPU build kills its engine core when a seeded request's prompt is split
# (tests/vllm_workers.py); every arm's engine gets the same.
CPU = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "4096", "--no-enable-chunked-prefill",
       "--max-num-batched-tokens", "4096"]
OUTPUT_TOKENS = 16
PORTS = {"embedded": 8811, "w1": 8812, "w2": 8813, "router": 8814, "g1": 8815, "g2": 8816, "fleet": 8818,
         "routed": 8819, "smg": 8820, "unbounded": 8821}


def paragraph(session: str, turn: int) -> str:
    """About 250 tokens a turn, the session's own."""
    facts = " ".join(f"Fact {n} of {session}, turn {turn}: the build step {n} reads module_{n}.py and writes "
                     f"artifact_{n}." for n in range(10))
    return f"{facts} Summarize turn {turn} in one sentence."


async def turn_of(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed turn: its output tokens and the time to its first output delta."""
    started, first, final = time.perf_counter(), None, {}
    async with client.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if first is None and event["type"].endswith(".delta"):
                first = time.perf_counter() - started
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                final = event["response"]
    text = "".join(part.get("text", "") for item in final.get("output", []) if item.get("type") == "message"
                   for part in item.get("content", []))
    usage = final.get("usage") or {}
    return {"id": final.get("id"), "text": text, "status": final.get("status"),
            "output_tokens": usage.get("output_tokens", 0), "input_tokens": usage.get("input_tokens", 0),
            "cached_tokens": (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
            "ttft": first if first is not None else time.perf_counter() - started}


async def session(client: httpx.AsyncClient, url: str, model: str, name: str, turns: int,
                  stateless: bool, output_tokens: int = OUTPUT_TOKENS, keyed: bool = True) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    previous, rows = None, []
    for turn in range(1, turns + 1):
        message = {"role": "user", "content": paragraph(name, turn)}
        body: dict[str, Any] = {"model": model, "temperature": 0, "max_output_tokens": output_tokens}
        if stateless:
            history.append(message)
            body.update(input=history, store=False, **({"prompt_cache_key": name} if keyed else {}))
        else:
            body.update(input=[message], **({"previous_response_id": previous} if previous else {}))
        row = await turn_of(client, url, body)
        previous = row.pop("id")
        if stateless:
            history.append({"role": "assistant", "content": row.pop("text")})
        rows.append({"turn": turn, "kind": "stateless" if stateless else "chained", **row})
    return rows


def cache_counters(ports: list[int]) -> tuple[float, float]:
    """vLLM's prefix-cache queries and hits (tokens), summed over the arm's engines."""
    from prometheus_client.parser import text_string_to_metric_families

    queries = hits = 0.0
    for port in ports:
        for family in text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text):
            for sample in family.samples:
                if sample.name == "vllm:prefix_cache_queries_total":
                    queries += sample.value
                elif sample.name == "vllm:prefix_cache_hits_total":
                    hits += sample.value
    return queries, hits


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


async def run_arm(arm: str, url: str, model: str, gateway_pid: int, engine_ports: list[int], sessions: int,
                  turns: int, output_tokens: int = OUTPUT_TOKENS, tag: str = "", keyed: bool = True) -> dict[str, Any]:
    """The workload once on one arm (its sessions named with `tag`: no round finds another's cache): per turn its
    TTFT; the gateway's CPU per output token; the engines' prefix-cache counts."""
    queries_before, hits_before = cache_counters(engine_ports)
    cpu_before = cpu_seconds(gateway_pid)
    async with httpx.AsyncClient(timeout=600) as client:
        runs = [session(client, url, model, f"{arm.replace(' ', '_')}{tag}-{kind}{n}", turns, kind == "s",
                        output_tokens, keyed)
                for n in range(sessions) for kind in ("c", "s")]
        rows = [row for rows in await asyncio.gather(*runs) for row in rows]
    cpu = cpu_seconds(gateway_pid) - cpu_before
    queries, hits = (after - before for after, before in zip(cache_counters(engine_ports),
                                                              (queries_before, hits_before)))
    tokens = sum(row["output_tokens"] for row in rows)
    return {"arm": arm, "turns": rows, "output_tokens": tokens, "gateway_cpu_seconds": round(cpu, 3),
            "cpu_us_per_token": round(cpu / max(1, tokens) * 1e6, 1), "cache_queries": queries, "cache_hits": hits,
            "failed": sum(row["status"] not in ("completed", "incomplete") for row in rows)}


async def _warm(url: str, model: str) -> str | None:
    async with httpx.AsyncClient(timeout=600) as client:
        return (await turn_of(client, url, {"model": model, "input": "Hello", "max_output_tokens": 4}))["status"]


def vllm_worker(model: Path, name: str, port: int, log: Path, grpc: bool = False) -> Server:
    module = "vllm.entrypoints.launchers.grpc_server" if grpc else "vllm.entrypoints.openai.api_server"
    flags = ["--host", "127.0.0.1"] if grpc else ["--enable-scale-out", "--enable-prompt-tokens-details",
                                                  "--disable-uvicorn-access-log"]
    command = [sys.executable, "-m", module, "--model", str(model), "--served-model-name", name, "--port", str(port),
               *CPU, *flags]
    if grpc:  # no HTTP /health: wait for the gRPC port, then for its Prometheus port (the servicer's)
        return _grpc_worker(command, port, log)
    return Server(command, port, log)


def _grpc_worker(command: list[str], port: int, log: Path) -> Any:
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the gRPC worker exited; see {log}")
        if any(conn.laddr.port == port and conn.status == "LISTEN" for conn in psutil.net_connections("tcp")):
            break
        time.sleep(1)
    return _Process(process)


class _Process:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def __enter__(self) -> "_Process":
        return self

    def __exit__(self, *_: Any) -> None:
        stop_process(self.process)


def fleet_file(path: Path, name: str, model: Path, engines: list[str]) -> Path:
    path.write_text(f'[[models]]\nname = "{name}"\npath = "{model}"\n'
                    f'engines = {json.dumps(engines)}\n')
    return path


@dataclass(frozen=True)
class Arm:
    """One gateway measured: its URL, its process (whose CPU is counted) and its engines' metrics ports."""

    name: str
    url: str
    pid: int
    engine_ports: list[int]


def measure_rounds(arms: list[Arm], model: str, rounds: int, sessions: int, turns: int, output_tokens: int,
                   block: str = "scale-out", keyed: bool = True) -> list[dict[str, Any]]:
    """Each arm warmed once, then the workload on every arm in turn, `rounds` times: each round's rows (arms
    measured in one `block` share their rounds)."""
    for arm in arms:
        asyncio.run(_warm(arm.url, model))
    rows = []
    for number in range(rounds):
        for arm in arms:
            print(f"[fleet] round {number + 1}/{rounds}: {arm.name} ...", file=sys.stderr, flush=True)
            row = asyncio.run(run_arm(arm.name, arm.url, model, arm.pid, arm.engine_ports, sessions, turns,
                                      output_tokens, tag=f"r{number}", keyed=keyed))
            rows.append({"block": block, "round": number + 1, **row})
    return rows


def summary(rows: list[dict[str, Any]], baseline: str = "embedded") -> list[dict[str, Any]]:
    """Per arm, over its rounds: CPU per token from the summed CPU and tokens, the cached shares from the summed
    counts, TTFT over every turn; and its CPU per token against the baseline's, in each round and over all."""
    arms: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        arms.setdefault(row["arm"], []).append(row)
    base = {(row["block"], row["round"]): row["cpu_us_per_token"] for row in arms.get(baseline, [])}
    result = []
    for arm, runs in arms.items():
        tokens = sum(run["output_tokens"] for run in runs)
        cpu = sum(run["gateway_cpu_seconds"] for run in runs)
        later = [turn for run in runs for turn in run["turns"] if turn["turn"] > 1]
        ttfts = sorted(turn["ttft"] for turn in later)
        queries = sum(run["cache_queries"] for run in runs)
        result.append({
            "arm": arm, "rounds": len(runs), "output_tokens": tokens, "gateway_cpu_seconds": round(cpu, 3),
            "cpu_us_per_token": round(cpu / max(1, tokens) * 1e6, 1),
            "cpu_us_per_token_by_round": [run["cpu_us_per_token"] for run in runs],
            "ratio_to_embedded_by_round": [round(run["cpu_us_per_token"] / base[run["block"], run["round"]], 3)
                                           for run in runs if base.get((run["block"], run["round"]))],
            "cached_share": round(sum(run["cache_hits"] for run in runs) / queries, 4) if queries else None,
            "usage_cached_share": round(sum(turn["cached_tokens"] for turn in later)
                                        / max(1, sum(turn["input_tokens"] for turn in later)), 4),
            "ttft_p50": round(statistics.median(ttfts), 3), "ttft_p95": round(ttfts[int(0.95 * (len(ttfts) - 1))], 3),
            "failed": sum(run["failed"] for run in runs)})
    embedded = next((row for row in result if row["arm"] == baseline), None)
    smg = next((row for row in result if row["arm"] == "smg"), None)
    for row in result:
        row["ratio_to_embedded"] = (round(row["cpu_us_per_token"] / embedded["cpu_us_per_token"], 3)
                                    if embedded else None)
        row["ratio_to_smg"] = round(row["cpu_us_per_token"] / smg["cpu_us_per_token"], 3) if smg else None
    return result


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--sessions", type=int, default=4)
    options.add_argument("--turns", type=int, default=4)
    options.add_argument("--rounds", type=int, default=3, help="times the workload runs on each arm, interleaved")
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    options.add_argument("--no-smg", action="store_true", help="leave SGLang's gateway out")
    options.add_argument("--output-tokens", type=int, default=OUTPUT_TOKENS, help="each turn's max_output_tokens")
    options.add_argument("--name", default="fleet", help="the results' name: NAME.json and NAME.png")
    options.add_argument("--no-keys", action="store_true", help="stateless sessions send no prompt_cache_key (as "
                         "Codex may): each finds its prefix by its leading items, or not")
    options.add_argument("--unbounded", action="store_true", help="one more arm: the rendezvous gateway with no "
                         "load bound (load_bound = 0), beside the default bound")
    args = options.parse_args()
    from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model

    model, name = ensure_bundled_model(), BUNDLED_MODEL_NAME
    logs = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    os.environ.update(VLLM_CPU_KVCACHE_SPACE="2", RESPONSES_SERVER_DATA=str(logs / "data"))
    workers = [f"http://127.0.0.1:{PORTS[worker]}" for worker in ("w1", "w2")]
    with ExitStack() as running:
        def serve(arm: str, port: str, flags: list[str], engine_ports: list[int]) -> Arm:
            command = [sys.executable, "-m", "server", "--port", str(PORTS[port]), *flags]
            server = running.enter_context(Server(command, PORTS[port], logs / f"{port}.log"))
            return Arm(arm, f"http://127.0.0.1:{PORTS[port]}", server.process.pid, engine_ports)

        embedded = serve("embedded", "embedded", ["--model", str(model), "--served-model-name", name, *CPU],
                         [PORTS["embedded"]])
        for worker in ("w1", "w2"):
            running.enter_context(vllm_worker(model, name, PORTS[worker], logs / f"{worker}.log"))
        fleet = fleet_file(logs / "fleet.toml", name, model, workers)
        rendezvous = serve("fleet, rendezvous", "fleet", ["--fleet", str(fleet)], [PORTS["w1"], PORTS["w2"]])
        running.enter_context(_Process(subprocess.Popen(
            [str(Path(sys.executable).parent / "vllm-router"), "--host", "127.0.0.1", "--port", str(PORTS["router"]),
             "--policy", "round_robin", "--worker-urls", *workers],
            stdout=(logs / "router.log").open("w"), stderr=subprocess.STDOUT)))
        time.sleep(3)
        routed = fleet_file(logs / "routed.toml", name, model, [f"http://127.0.0.1:{PORTS['router']}"])
        round_robin = serve("fleet, round robin", "routed", ["--fleet", str(routed)], [PORTS["w1"], PORTS["w2"]])
        arms = [embedded, rendezvous, round_robin]
        if args.unbounded:
            unbounded = logs / "unbounded.toml"
            unbounded.write_text("load_bound = 0\n" + fleet.read_text())
            arms.append(serve("fleet, rendezvous, no load bound", "unbounded", ["--fleet", str(unbounded)],
                              [PORTS["w1"], PORTS["w2"]]))
        rows = measure_rounds(arms, name, args.rounds, args.sessions, args.turns, args.output_tokens,
                              keyed=not args.no_keys)
    if not args.no_smg:
        rows += smg_rounds(model, name, logs, args)
    results = summary(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps({"arms": results, "rounds": rows}, indent=1) + "\n")
    print(table(results))
    plot(results, args.out / f"{args.name}.png")


def smg_rounds(model: Path, name: str, logs: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """SGLang's gateway over two vLLM gRPC workers (their Prometheus counters on --prometheus-port are vLLM's),
    as many rounds as the other arms, after them (its workers are other processes)."""
    grpc_ports = [PORTS["g1"], PORTS["g2"]]
    with vllm_worker(model, name, grpc_ports[0], logs / "g1.log", grpc=True), \
            vllm_worker(model, name, grpc_ports[1], logs / "g2.log", grpc=True):
        command = [str(Path(sys.executable).parent / "smg"), "launch", "--backend", "vllm", "--host", "127.0.0.1",
                   "--port", str(PORTS["smg"]), "--policy", "cache_aware", "--model-path", str(model),
                   "--worker-urls", *[f"grpc://127.0.0.1:{port}" for port in grpc_ports]]
        with Server(command, PORTS["smg"], logs / "smg.log") as smg:
            arm = Arm("smg", f"http://127.0.0.1:{PORTS['smg']}", smg.process.pid, [])
            return measure_rounds([arm], name, args.rounds, args.sessions, args.turns, args.output_tokens, "smg")


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| arm | rounds | output tokens | gateway CPU per token | against embedded (by round) | against smg | "
             "cached share, turns 2+ (usage) | engines' prefix-cache hit ratio, all turns | TTFT p50, turns 2+ | "
             "TTFT p95 | failed |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in results:
        share = f"{row['cached_share']:.1%}" if row["cached_share"] is not None else "n/a"
        by_round = ", ".join(f"{ratio:.2f}" for ratio in row["ratio_to_embedded_by_round"]) or "measured apart"
        to_smg = f"{row['ratio_to_smg']:.2f}x" if row["ratio_to_smg"] else "n/a"
        lines.append(f"| {row['arm']} | {row['rounds']} | {row['output_tokens']} | {row['cpu_us_per_token']} µs | "
                     f"{row['ratio_to_embedded']:.2f}x ({by_round}) | {to_smg} | {row['usage_cached_share']:.1%} | "
                     f"{share} | {row['ttft_p50']} s | {row['ttft_p95']} s | {row['failed']} |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (cpu, share) = plt.subplots(1, 2, figsize=(11, 4))
    arms = [row["arm"] for row in results]
    cpu.bar(arms, [row["cpu_us_per_token"] for row in results])
    cpu.set_title("Gateway CPU per streamed output token (µs)", fontsize=9)
    share.bar(arms, [row["usage_cached_share"] for row in results])
    share.set_title("Cached share of turns 2+'s prompt tokens (usage)", fontsize=9)
    for axes in (cpu, share):
        axes.tick_params(axis="x", labelsize=7, rotation=15)
        axes.grid(alpha=0.3, axis="y")
    figure.suptitle("The same agent workload, SmolLM2-135M on the CPU build of vLLM", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
