"""The fleet gateway's CPU per short turn: this checkout's gateway beside another revision's, over one vLLM worker.

    .venv/bin/python bench/gateway_turns.py --baseline GIT-REV [--rounds 3] [--turns 12] [--out bench/results]

Two gateways (`--fleet`), one of `GIT-REV` (a temporary git worktree) and one of this checkout, each with its own
store, over the same vLLM scale-out worker of the bundled model. The turn is `bench/turn_cost.py`'s (about 300
words with a unique tail, 16 output tokens at temperature 0, one after another), JSON and streamed, stored; the arms
alternate in every round, who goes first too. The figure is turn_cost's: the CPU of the gateway's process per turn,
less its idle CPU over as long. Writes gateway_turns.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fleet import fleet_file  # noqa: E402
from bench.servers import ENGINE_FLAGS, Server  # noqa: E402
from bench.turn_cost import Arms, measure  # noqa: E402
from bench.worktrees import worktree  # noqa: E402

WORKER, BASELINE, THIS = 8751, 8752, 8753


def gateway(tree: Path, port: int, fleet: Path, scratch: Path) -> Server:
    return Server([sys.executable, "-m", "server", "--port", str(port), "--fleet", str(fleet), "--store",
                   f"sqlite:///{scratch / f'{port}.db'}"], port, scratch / f"gateway-{port}.log", cwd=tree)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--baseline", required=True, help="the git revision to compare with")
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--turns", type=int, default=12, help="turns per arm per round")
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model

    model = ensure_bundled_model()
    worker = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
              "--served-model-name", BUNDLED_MODEL_NAME, "--port", str(WORKER), "--enable-scale-out",
              "--enable-prompt-tokens-details", *ENGINE_FLAGS]
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as directory, worktree(args.baseline) as baseline:
        scratch = Path(directory)
        fleet = fleet_file(scratch / "fleet.toml", BUNDLED_MODEL_NAME, model, [f"http://127.0.0.1:{WORKER}"])
        with Server(worker, WORKER, scratch / "worker.log"), \
                gateway(baseline, BASELINE, fleet, scratch) as first, gateway(ROOT, THIS, fleet, scratch) as second:
            arms = Arms(BUNDLED_MODEL_NAME)
            table: dict[str, tuple[Callable[[int], None], int]] = {}
            for who, server in (("baseline", first), ("this", second)):
                client = httpx.Client(base_url=f"http://127.0.0.1:{server.port}/v1", timeout=300)
                table[f"{who}, JSON"] = (lambda n, c=client: arms.json_stored(n, c), server.process.pid)
                table[f"{who}, streamed"] = (lambda n, c=client: arms.sse_stored(n, c), server.process.pid)
            for send, _ in table.values():  # warm-up
                for n in range(3):
                    send(90_000 + n)
            names = list(table)
            for number in range(args.rounds):
                order = names if number % 2 == 0 else names[2:] + names[:2]
                for name in order:
                    send, pid = table[name]
                    first_turn = 1000 * number + 100 * names.index(name)
                    figures.setdefault(name, []).append(measure(send, pid, first_turn, args.turns) * 1000)
                print(f"round {number + 1}: " + ", ".join(f"{name} {figures[name][-1]:.1f} ms" for name in names),
                      flush=True)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    report = {"baseline": args.baseline, "turns_per_arm_per_round": args.turns,
              "cpu_ms_per_turn": {name: {"median": medians[name], "rounds": values} for name, values in figures.items()},
              "this_against_baseline": {kind: medians[f"this, {kind}"] / medians[f"baseline, {kind}"]
                                        for kind in ("JSON", "streamed")}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gateway_turns.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report["this_against_baseline"], indent=1))


if __name__ == "__main__":
    main()
