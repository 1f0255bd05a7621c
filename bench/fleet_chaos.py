"""Agent sessions on a fleet while a chaos loop kills, stops and cuts off its workers: what the clients see.

    .venv/bin/python bench/fleet_chaos.py [--sessions 4] [--quiet-seconds 90] [--chaos-seconds 240] [--out bench/results]

Two vLLM scale-out workers of the bundled model (the CPU build), each behind a fault proxy (tests/fault_proxy.py),
and `responses-server --fleet` over the two proxies. The same workload runs twice in one session: quiet, then with a
chaos loop that faults one worker at a time (never both: one of two stays up), in turn:
- SIGKILL the worker, then start it again (a crashed pod, restarted);
- SIGSTOP it for 15 s, then SIGCONT (a hung machine: connections open, nothing answers);
- a black hole in its proxy for 15 s (a node cut off without a reset);
- resets of every connection to it (a network blip);
- 503 answers to its generate requests for 15 s (a router or worker with no room).
Each session is a Codex-like agent: chained turns (`previous_response_id`) or stateless ones (the history sent
again), 64 unconstrained output tokens a turn, streamed. Reported per phase: turns, streams lost (`response.failed`),
5xx answers, time to first token (p50, p99), and from the gateway's own metrics the streams resumed or restarted on a
peer, the retries and the ejections. Writes fleet_chaos.json and fleet_chaos.png (time to first token over time,
with each fault marked).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fleet import fleet_file, paragraph, vllm_worker  # noqa: E402
from bench.servers import Server  # noqa: E402
from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model  # noqa: E402
from tests.fault_proxy import FaultProxy, fault_proxy  # noqa: E402

OUTPUT_TOKENS = 64
PORTS = {"w0": 8831, "w1": 8832, "gateway": 8835}
FAULT_SECONDS = 15.0


async def turn(client: httpx.AsyncClient, url: str, body: dict[str, Any], started_at: float) -> dict[str, Any]:
    """One streamed turn: its HTTP status, terminal event, output and time to its first output delta."""
    started, first, final, status = time.perf_counter(), None, {}, 0
    try:
        async with client.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}) as reply:
            status = reply.status_code
            if status == 200:
                async for line in reply.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    event = json.loads(line[5:])
                    if first is None and event["type"].endswith(".delta"):
                        first = time.perf_counter() - started
                    if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                        final = event["response"]
    except httpx.HTTPError as exc:
        final = {"status": f"transport: {exc.__class__.__name__}"}
    text = "".join(part.get("text", "") for item in final.get("output", []) if item.get("type") == "message"
                   for part in item.get("content", []))
    return {"at": round(time.perf_counter() - started_at, 2), "http": status, "status": final.get("status"),
            "id": final.get("id"), "text": text, "ttft": round(first, 3) if first is not None else None}


async def agent(client: httpx.AsyncClient, url: str, name: str, stateless: bool, until: float,
                started_at: float) -> list[dict[str, Any]]:
    """Turns until `until` (time.perf_counter()): a new session whenever one has had 4 turns."""
    rows: list[dict[str, Any]] = []
    session = 0
    while time.perf_counter() < until:
        history: list[dict[str, Any]] = []
        previous = None
        for number in range(1, 5):
            if time.perf_counter() >= until:
                break
            message = {"role": "user", "content": paragraph(f"{name}-{session}", number)}
            body: dict[str, Any] = {"model": BUNDLED_MODEL_NAME, "temperature": 0, "max_output_tokens": OUTPUT_TOKENS}
            if stateless:
                history.append(message)
                body.update(input=history, store=False)
            else:
                body.update(input=[message], **({"previous_response_id": previous} if previous else {}))
            row = await turn(client, url, body, started_at)
            rows.append({"session": f"{name}-{session}", **row})
            if row["status"] not in ("completed", "incomplete"):
                break  # a lost turn ends its session, as an agent would start over
            previous = row["id"]
            if stateless:
                history.append({"role": "assistant", "content": row["text"]})
        session += 1
    return rows


async def workload(url: str, sessions: int, seconds: float) -> list[dict[str, Any]]:
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=600) as client:
        agents = [agent(client, url, f"{kind}{n}-{int(started)}", kind == "s", started + seconds, started)
                  for n in range(sessions // 2 or 1) for kind in ("c", "s")]
        return [row for rows in await asyncio.gather(*agents) for row in rows]


class Worker:
    """One vLLM worker process behind its fault proxy."""

    def __init__(self, name: str, model: Path, logs: Path, proxy: FaultProxy) -> None:
        self.name, self.model, self.logs, self.proxy = name, model, logs, proxy
        self.server: Server | None = None

    def start(self) -> None:
        self.server = vllm_worker(self.model, BUNDLED_MODEL_NAME, PORTS[self.name], self.logs / f"{self.name}.log")

    def family(self) -> list[int]:
        assert self.server is not None
        process = self.server.process
        return [process.pid] + [child.pid for child in psutil.Process(process.pid).children(recursive=True)]

    def signal(self, number: int) -> None:
        for pid in self.family():
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.server is not None:
            self.signal(signal.SIGCONT)
            self.server.__exit__()


async def chaos(workers: list[Worker], until: float, started_at: float) -> list[dict[str, Any]]:
    """One fault at a time on one worker, in turn, until `until`; each fault noted with its start and end."""
    faults = ["kill", "stop", "black_hole", "reset", "status_503"]
    done: list[dict[str, Any]] = []
    step = 0
    rng = random.Random(7)
    while time.perf_counter() < until - FAULT_SECONDS:
        worker, kind = workers[step % 2], faults[step % len(faults)]
        begun = time.perf_counter() - started_at
        if kind == "kill":
            worker.signal(signal.SIGKILL)
            await asyncio.sleep(2)
            await asyncio.to_thread(worker.start)  # restarted, healthy again (its engine loads: tens of seconds)
        elif kind == "stop":
            worker.signal(signal.SIGSTOP)
            await asyncio.sleep(FAULT_SECONDS)
            worker.signal(signal.SIGCONT)
        elif kind == "reset":
            worker.proxy.set("reset")
            await asyncio.sleep(0.5)
            worker.proxy.set("pass")
        else:
            worker.proxy.set(kind)
            await asyncio.sleep(FAULT_SECONDS)
            worker.proxy.set("pass")
        done.append({"fault": kind, "worker": worker.name, "from": round(begun, 1),
                     "to": round(time.perf_counter() - started_at, 1)})
        step += 1
        await asyncio.sleep(5 + rng.random() * 5)  # between faults: the fleet settles
    return done


def gateway_counters(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    counters: dict[str, float] = {}
    for name, labels, value in re.findall(r"^(responses_server_engine_(?:retries|streams_moved|worker_ejections)"
                                          r"_total)\{([^}]*)\} (\S+)$", text, re.M):
        key = name.removeprefix("responses_server_engine_").removesuffix("_total")
        detail = re.findall(r'(?:reason|outcome)="([^"]+)"', labels)
        name = f"{key}:{detail[0]}" if detail else key
        counters[name] = counters.get(name, 0.0) + float(value)
    return counters


def summary(rows: list[dict[str, Any]], before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    ttfts = sorted(row["ttft"] for row in rows if row["ttft"] is not None)
    return {
        "turns": len(rows),
        "lost": sum(row["status"] not in ("completed", "incomplete") for row in rows),
        "http_5xx": sum(row["http"] >= 500 for row in rows),
        "ttft_p50": round(statistics.median(ttfts), 3) if ttfts else None,
        "ttft_p99": round(ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))], 3) if ttfts else None,
        "gateway": {key: after[key] - before.get(key, 0.0) for key in after if after[key] - before.get(key, 0.0)},
    }


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    options.add_argument("--sessions", type=int, default=4)
    options.add_argument("--quiet-seconds", type=float, default=90)
    options.add_argument("--chaos-seconds", type=float, default=240)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    model = ensure_bundled_model()
    logs = Path(tempfile.mkdtemp(prefix="bench-fleet-chaos-"))
    print(f"[chaos] logs in {logs}", file=sys.stderr)
    os.environ.update(VLLM_CPU_KVCACHE_SPACE="2", RESPONSES_SERVER_DATA=str(logs / "data"))
    with ExitStack() as stack:
        proxies = [stack.enter_context(contextmanager(fault_proxy)(PORTS[name])) for name in ("w0", "w1")]
        workers = [Worker(name, model, logs, proxy) for name, proxy in zip(("w0", "w1"), proxies)]
        for worker in workers:
            stack.callback(worker.stop)
            worker.start()
        path = logs / "fleet.toml"
        fleet_file(path, BUNDLED_MODEL_NAME, model, [proxy.url for proxy in proxies])
        path.write_text("health_seconds = 0.5\nidle_seconds = 20\n" + path.read_text())
        gateway = stack.enter_context(Server([sys.executable, "-m", "server", "--fleet", str(path), "--port",
                                              str(PORTS["gateway"])], PORTS["gateway"],
                                             logs / "gateway.log"))
        url = f"http://127.0.0.1:{gateway.port}"
        asyncio.run(workload(url, 2, 20))  # warm: templates, connections, caches
        results: dict[str, Any] = {"sessions": args.sessions, "output_tokens": OUTPUT_TOKENS}
        before = gateway_counters(url)
        quiet = asyncio.run(workload(url, args.sessions, args.quiet_seconds))
        middle = gateway_counters(url)
        results["quiet"] = {"seconds": args.quiet_seconds, **summary(quiet, before, middle), "rows": quiet}

        async def chaotic() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            started = time.perf_counter()
            faults = asyncio.create_task(chaos(workers, started + args.chaos_seconds, started))
            rows = await workload(url, args.sessions, args.chaos_seconds)
            return rows, await faults

        rows, faults = asyncio.run(chaotic())
        results["chaos"] = {"seconds": args.chaos_seconds, **summary(rows, middle, gateway_counters(url)),
                            "faults": faults, "rows": rows}
        quiet_p99, chaos_p99 = results["quiet"]["ttft_p99"], results["chaos"]["ttft_p99"]
        results["ttft_p99_ratio"] = round(chaos_p99 / quiet_p99, 2) if quiet_p99 and chaos_p99 else None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fleet_chaos.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "fleet_chaos.png")
    for phase in ("quiet", "chaos"):
        shown = {key: value for key, value in results[phase].items() if key not in ("rows", "faults")}
        print(phase, json.dumps(shown))
    print("faults", json.dumps(results["chaos"]["faults"]))
    print("p99 time to first token, chaos against quiet:", results["ttft_p99_ratio"])


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True, gridspec_kw={"width_ratios": [
        results["quiet"]["seconds"], results["chaos"]["seconds"]]})
    colors = {"kill": "#d62728", "stop": "#9467bd", "black_hole": "#7f7f7f", "reset": "#ff7f0e",
              "status_503": "#2ca02c"}
    for axis, phase in zip(axes, ("quiet", "chaos")):
        rows = results[phase]["rows"]
        good = [(row["at"], row["ttft"]) for row in rows if row["ttft"] is not None]
        lost = [row["at"] for row in rows if row["status"] not in ("completed", "incomplete")]
        axis.scatter([at for at, _ in good], [ttft for _, ttft in good], s=10, color="#1f77b4", label="a turn")
        for at in lost:
            axis.axvline(at, color="black", linestyle=":", linewidth=1)
        for fault in results[phase].get("faults", []):
            axis.axvspan(fault["from"], max(fault["to"], fault["from"] + 1), alpha=0.2, color=colors[fault["fault"]],
                         label=f"{fault['fault']}")
        summary_text = (f"{results[phase]['turns']} turns, {results[phase]['lost']} lost, "
                        f"{results[phase]['http_5xx']} 5xx, p99 {results[phase]['ttft_p99']} s")
        axis.set_title(f"{phase}: {summary_text}", fontsize=9)
        axis.set_xlabel("seconds")
    axes[0].set_ylabel("time to first token (s)")
    handles, labels = axes[1].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes[1].legend(unique.values(), unique.keys(), fontsize=8, loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
