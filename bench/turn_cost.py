"""What a short agent turn costs the API process: ours beside vLLM's own frontend, same model, same run.

    .venv/bin/python bench/turn_cost.py [--turns 24] [--rounds 4] [--saturation 64] [--profile] [--out bench/results]

A turn is a ~300-word input with a unique tail and 16 output tokens at temperature 0, sent one after another. Arms,
alternating batch by batch (`--turns` turns per arm per round): ours `POST /v1/responses` on its embedded engine as
JSON stored, streamed stored, JSON not stored, and the 20th turn of a chain (`previous_response_id`, each measured
turn a branch from the same 19th response); ours as a fleet gateway (`--fleet`) over one vLLM scale-out worker, JSON
and streamed; vLLM's own `POST /v1/chat/completions` (JSON and streamed) and `POST /v1/responses` (its `vllm serve`,
which is also the gateway's worker) on the same model with the same engine flags. Each arm's figure is the CPU time of the process that
listens (every thread's, from /proc's schedstat, in nanoseconds), its engine core not counted (a child process), over
its turns, less what the process spends idle in as long (measured before each batch). Then saturation: `--saturation`
turns from 16 clients at once on ours (JSON stored, embedded and gateway) and on vLLM's chat completions: turns a
second and CPU per turn. With --profile, py-spy records our process under the JSON stored arm (samples holding the
GIL: Python at work, not the loop waiting): a flame graph (turn_cost-profile.svg) and the CPU by phase (`--rounds 0`:
the profile alone). Writes turn_cost.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fleet import fleet_file  # noqa: E402
from bench.servers import ENGINE_FLAGS, Server  # noqa: E402

OURS, VLLM, GATEWAY = 8731, 8732, 8733
CLIENTS = 16  # at saturation
FLAGS = [str(0.15) if flag == "0.3" else flag for flag in ENGINE_FLAGS]  # two engines at once
SUBJECTS = ["rivers", "bridges", "museums", "trains", "gardens", "markets", "music", "harbours"]


def question(n: int) -> str:
    """About 300 words, shared by every turn but for its tail (as an agent's instructions and tool result are)."""
    body = " ".join(f"The {SUBJECTS[k % len(SUBJECTS)]} of district {k} were surveyed and found in good order."
                    for k in range(25))
    return f"{body} Now, in one short sentence, what is note number {n}?"


def cpu(pid: int) -> float:
    """The CPU seconds of the process's live threads (schedstat's run time: nanoseconds, not 10 ms ticks)."""
    total = 0
    for thread in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((thread / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass  # it ended between the listing and the read
    return total / 1e9


def idle_rate(pid: int, seconds: float = 2.0) -> float:
    """CPU seconds a second the process spends with no request (its periodic tasks, its engine client's polls)."""
    before, start = cpu(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu(pid) - before) / (time.monotonic() - start)


class Arms:
    """Each arm: one turn sent (its index n makes the tail unique)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.ours = httpx.Client(base_url=f"http://127.0.0.1:{OURS}/v1", timeout=300)
        self.vllm = httpx.Client(base_url=f"http://127.0.0.1:{VLLM}/v1", timeout=300)
        self.gateway = httpx.Client(base_url=f"http://127.0.0.1:{GATEWAY}/v1", timeout=300)
        self.chain_end: str | None = None

    def body(self, n: int, **more: Any) -> dict[str, Any]:
        return {"model": self.model, "input": question(n), "max_output_tokens": 16, "temperature": 0, **more}

    def json_stored(self, n: int, client: httpx.Client | None = None) -> None:
        (client or self.ours).post("/responses", json=self.body(n)).raise_for_status()

    def sse_stored(self, n: int, client: httpx.Client | None = None) -> None:
        with (client or self.ours).stream("POST", "/responses", json=self.body(n, stream=True)) as answer:
            answer.raise_for_status()
            for _ in answer.iter_bytes():
                pass

    def gateway_json(self, n: int) -> None:
        self.json_stored(n, self.gateway)

    def gateway_sse(self, n: int) -> None:
        self.sse_stored(n, self.gateway)

    def json_not_stored(self, n: int) -> None:
        self.ours.post("/responses", json=self.body(n, store=False)).raise_for_status()

    def chain_20th(self, n: int) -> None:
        if self.chain_end is None:
            previous = None
            for turn in range(19):
                answer = self.ours.post("/responses", json=self.body(10_000 + turn, previous_response_id=previous))
                previous = answer.raise_for_status().json()["id"]
            self.chain_end = previous
        self.ours.post("/responses", json={"model": self.model, "input": f"And note {n}?", "max_output_tokens": 16,
                                           "temperature": 0, "previous_response_id": self.chain_end}
                       ).raise_for_status()

    def vllm_chat(self, n: int) -> None:
        self.vllm.post("/chat/completions", json={"model": self.model, "max_tokens": 16, "temperature": 0,
                                                  "messages": [{"role": "user", "content": question(n)}]}
                       ).raise_for_status()

    def vllm_chat_streamed(self, n: int) -> None:
        with self.vllm.stream("POST", "/chat/completions", json={
                "model": self.model, "max_tokens": 16, "temperature": 0, "stream": True,
                "messages": [{"role": "user", "content": question(n)}]}) as answer:
            answer.raise_for_status()
            for _ in answer.iter_bytes():
                pass

    def vllm_responses(self, n: int) -> None:
        self.vllm.post("/responses", json=self.body(n)).raise_for_status()


def measure(send: Callable[[int], None], pid: int, first: int, turns: int) -> float:
    """CPU seconds of `pid` per turn over `turns` turns, less its idle CPU over as long."""
    idle = idle_rate(pid)
    before, start = cpu(pid), time.monotonic()
    for n in range(first, first + turns):
        send(n)
    return (cpu(pid) - before - idle * (time.monotonic() - start)) / turns


def saturate(send: Callable[[int], None], pid: int, first: int, turns: int) -> dict[str, float]:
    """`turns` turns from CLIENTS clients at once: turns a second, and CPU per turn of `pid`."""
    before, start = cpu(pid), time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as clients:
        list(clients.map(send, range(first, first + turns)))
    seconds = time.monotonic() - start
    return {"turns_per_second": turns / seconds, "cpu_ms_per_turn": (cpu(pid) - before) / turns * 1000}


def profile(arms: Arms, pid: int, out: Path, turns: int) -> dict[str, float]:
    """py-spy on our process while the JSON stored arm runs: the flame graph, and the share of samples by phase."""
    raw = out / "turn_cost-profile.txt"
    spies = [subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--rate",
                               "250", "--format", kind, "-o", str(path), "--nonblocking", "--gil"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for kind, path in (("raw", raw), ("flamegraph", out / "turn_cost-profile.svg"))]
    time.sleep(2)
    for n in range(50_000, 50_000 + turns):
        arms.json_stored(n)
    for spy in spies:
        spy.send_signal(2)
        spy.wait(timeout=60)
    shares = phases(raw.read_text())
    raw.unlink()
    return shares


PHASES = [  # (phase, a frame that marks it), the first that matches a stack names it
    ("read and validate the body", "_read_body"), ("history and prompt keys", "conversation_of"),
    ("render and tokenize", "render"), ("store: save", "save"), ("engine client (AsyncLLM output)", "vllm/"),
    ("events and JSON", "streaming/"), ("HTTP (uvicorn, starlette)", "uvicorn/"), ("HTTP (uvicorn, starlette)", "starlette/"),
    ("asyncio loop", "asyncio/"),
]


def phases(collapsed: str) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        name = next((phase for phase, mark in PHASES if mark in stack), "other")
        if "idle" in stack or "select" in stack.rsplit(";", 1)[-1]:
            name = "idle"
        counts[name] += int(count)
    busy = sum(count for name, count in counts.items() if name != "idle")
    return {name: count / busy for name, count in counts.most_common() if name != "idle"}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--turns", type=int, default=24)
    options.add_argument("--rounds", type=int, default=4)
    options.add_argument("--saturation", type=int, default=64, help="turns per arm at saturation (0: none)")
    options.add_argument("--profile", action="store_true")
    options.add_argument("--name", default="turn_cost")
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model

    model_dir = str(ensure_bundled_model())
    ours = [sys.executable, "-m", "server", "--port", str(OURS), "--store",
            f"sqlite:///{args.out / 'turn_cost.db'}", *FLAGS]
    theirs = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--served-model-name",
              BUNDLED_MODEL_NAME, "--port", str(VLLM), "--enable-scale-out", "--enable-prompt-tokens-details", *FLAGS]
    fleet = fleet_file(args.out / "turn_cost-fleet.toml", BUNDLED_MODEL_NAME, Path(model_dir),
                       [f"http://127.0.0.1:{VLLM}"])
    gateway = [sys.executable, "-m", "server", "--port", str(GATEWAY), "--fleet", str(fleet), "--store",
               f"sqlite:///{args.out / 'turn_cost-gateway.db'}"]
    results: dict[str, list[float]] = {}
    report: dict[str, Any] = {}
    with Server(ours, OURS, args.out / "turn_cost-ours.log") as mine, \
            Server(theirs, VLLM, args.out / "turn_cost-vllm.log") as other, \
            Server(gateway, GATEWAY, args.out / "turn_cost-gateway.log") as front:
        arms = Arms(BUNDLED_MODEL_NAME)
        pids = {"ours": mine.process.pid, "vllm": other.process.pid, "gateway": front.process.pid}
        table = {"ours, JSON stored": (arms.json_stored, "ours"), "ours, SSE stored": (arms.sse_stored, "ours"),
                 "ours, JSON not stored": (arms.json_not_stored, "ours"),
                 "ours, 20th turn of a chain": (arms.chain_20th, "ours"),
                 "ours, fleet gateway, JSON stored": (arms.gateway_json, "gateway"),
                 "ours, fleet gateway, SSE stored": (arms.gateway_sse, "gateway"),
                 "vLLM /v1/chat/completions": (arms.vllm_chat, "vllm"),
                 "vLLM /v1/chat/completions, streamed": (arms.vllm_chat_streamed, "vllm"),
                 "vLLM /v1/responses": (arms.vllm_responses, "vllm")}
        for send, _ in table.values():  # warm-up: each route's first request compiles and caches
            for n in range(3):
                send(90_000 + n)
        names = list(table)
        for index in range(args.rounds):
            order = names[index % len(names):] + names[:index % len(names)]
            for name in order:
                send, owner = table[name]
                results.setdefault(name, []).append(measure(send, pids[owner], 1000 * index + 100 * names.index(name),
                                                            args.turns))
            print(f"round {index + 1}: " + ", ".join(f"{name} {results[name][-1] * 1000:.1f} ms" for name in names),
                  flush=True)
        report.update({"turns_per_arm_per_round": args.turns, "rounds": args.rounds,
                       "cpu_ms_per_turn": {name: [value * 1000 for value in values] for name, values in results.items()}})
        if results:
            chat = statistics.median(results["vLLM /v1/chat/completions"])
            report["median_ms"] = {name: statistics.median(values) * 1000 for name, values in results.items()}
            report["against_vllm_chat"] = {name: statistics.median(values) / chat for name, values in results.items()}
        if args.saturation:
            report["saturation"] = {}
            for index, name in enumerate(("ours, JSON stored", "ours, fleet gateway, JSON stored",
                                          "vLLM /v1/chat/completions")):
                send, owner = table[name]
                report["saturation"][f"{name}, {CLIENTS} clients"] = saturate(send, pids[owner], 200_000 + 1000 * index,
                                                                             args.saturation)
            print(json.dumps(report["saturation"], indent=1), flush=True)
        if args.profile:
            report["profile_share_by_phase"] = profile(arms, pids["ours"], args.out, 4 * args.turns)
    for temporary in ("turn_cost.db", "turn_cost-gateway.db", "turn_cost-fleet.toml"):
        (args.out / temporary).unlink(missing_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1))
    for name in names if results else []:
        print(f"| {name} | {report['median_ms'][name]:.1f} ms | {report['against_vllm_chat'][name]:.2f}x |")
    if "profile_share_by_phase" in report:
        print(json.dumps(report["profile_share_by_phase"], indent=1))


if __name__ == "__main__":
    main()
