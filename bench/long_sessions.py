"""What a turn of a long agent session costs the server, against the session's length, before and after incremental
prompts (issue 42), measured in one run.

A replayed server (no engine cost) serves K concurrent agent sessions, each growing by ~5k tokens a turn (a tool call
and its output: pseudo-code) to ~150k tokens: chained over WebSocket (`previous_response_id`, only new items sent)
and stateless over HTTP (the whole history each turn, one `prompt_cache_key` per session). The sessions move in
lockstep; for each round, the server process's CPU time divided by K is the per-turn CPU at that length, beside the
median time from the request to `response.created`.

Then, while a long stream runs on the same process, fresh ~180k-token turns (nothing known about them) are
prepared: the slowest gap between two of the stream's events, and the longest /health waited, during each.

Both server trees run in this one run: the tree before issue 42's incremental prompts (`--before`, a commit,
checked out in a temporary worktree) and this one. Reported as ratios: per-turn CPU at the last round over the
first, for each tree and mode. Run: python bench/long_sessions.py [--sessions K] [--turns N] [--before REV]."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model  # noqa: E402
from server.engine.recording import Recording  # noqa: E402
from bench.worktrees import worktree  # noqa: E402
from tests.conftest import free_port  # noqa: E402

RESULTS = Path(__file__).parent / "results"
BEFORE = "090d31e"  # the last commit before incremental prompts
LINE = "    value_{a} = compute_{b}(item_{c}, limit={d})  # step {e} of the handler's loop\n"
WATCH_TOKENS = 60_000  # the long stream's length: it outlasts the fresh turns prepared meanwhile


def tool_output(rng: random.Random, lines: int) -> str:
    return "".join(LINE.format(a=rng.randrange(10**4), b=rng.randrange(10**3), c=rng.randrange(10**4),
                               d=rng.randrange(100), e=rng.randrange(10**5)) for _ in range(lines))


def turn_items(rng: random.Random, session: int, turn: int, lines: int) -> list[dict[str, Any]]:
    """What one agent turn adds: a shell call and its output (~`lines` * 38 tokens)."""
    call = f"call_{session}_{turn}"
    return [{"type": "function_call", "call_id": call, "name": "shell",
             "arguments": json.dumps({"command": ["cat", f"src/module_{turn}.py"]})},
            {"type": "function_call_output", "call_id": call, "output": tool_output(rng, lines)}]


TOOLS = [{"type": "function", "name": "shell", "description": "Runs a shell command.",
          "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                         "required": ["command"]}}]
FIRST = [{"role": "user", "content": "Find the bug in the request handler and fix it."}]


class Server:
    """`python -m server` from a source tree, replaying one recording, with its process for CPU readings."""

    def __init__(self, tree: Path, recording: Path, log: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "server", "--port", str(self.port), "--model", str(ensure_bundled_model()),
                "--served-model-name", BUNDLED_MODEL_NAME, "--replay-engine-output", str(recording),
                "--max-model-len", "262144"]
        env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "RESPONSES_SERVER_DATA": str(log.parent / "data"),
               "HOME": str(Path.home())}
        self.process = subprocess.Popen(args, cwd=tree, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError(log.read_text()[-3000:])

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def stream_turn(base_url: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """A streamed turn over HTTP: the time to `response.created`, and the final response."""
    content = json.dumps({"model": BUNDLED_MODEL_NAME, "stream": True, **body}).encode()  # before the clock starts
    started = time.perf_counter()
    created = None
    final: dict[str, Any] = {}
    with httpx.stream("POST", f"{base_url}/v1/responses", timeout=600, content=content,
                      headers={"content-type": "application/json"}) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if event["type"] == "response.created":
                created = time.perf_counter() - started
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                final = event["response"]
    assert created is not None and final, "the stream ended without its events"
    return created, final


class StatelessSession:
    """An agent over HTTP: the whole history every turn, store false, one prompt_cache_key."""

    def __init__(self, base_url: str, session: int) -> None:
        self.base_url, self.session = base_url, session
        self.history: list[dict[str, Any]] = list(FIRST)

    def turn(self, added: list[dict[str, Any]]) -> tuple[float, int]:
        self.history += added
        created, final = stream_turn(self.base_url, {
            "input": self.history, "tools": TOOLS, "store": False, "max_output_tokens": 4,
            "prompt_cache_key": f"session-{self.session}"})
        self.history += [item for item in final["output"] if item["type"] == "message"]
        return created, final["usage"]["input_tokens"]

    def close(self) -> None:
        return None


class ChainedSession:
    """An agent over WebSocket: each turn sends only its new items after `previous_response_id`, store false."""

    def __init__(self, base_url: str, session: int) -> None:
        from websockets.sync.client import connect

        self.socket = connect(base_url.replace("http://", "ws://") + "/v1/responses", max_size=None)
        self.previous: str | None = None

    def turn(self, added: list[dict[str, Any]]) -> tuple[float, int]:
        body = {"type": "response.create", "model": BUNDLED_MODEL_NAME, "input": added, "tools": TOOLS,
                "store": False, "max_output_tokens": 4}
        if self.previous is None:
            body["input"] = FIRST + added
        else:
            body["previous_response_id"] = self.previous
        started = time.perf_counter()
        self.socket.send(json.dumps(body))
        created = None
        while True:
            event = json.loads(self.socket.recv(timeout=600))
            if event["type"] == "error":
                raise RuntimeError(event)
            if event["type"] == "response.created":
                created = time.perf_counter() - started
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                self.previous = event["response"]["id"]
                assert created is not None
                return created, event["response"]["usage"]["input_tokens"]

    def close(self) -> None:
        self.socket.close()


def run_sessions(server: Server, make: Callable[[str, int], Any], sessions: int, turns: int,
                 lines: int) -> list[dict[str, Any]]:
    """K sessions in lockstep, `turns` rounds: per round, the server's CPU per turn and the median time to
    `response.created`, at the round's history length."""
    warm = make(server.base_url, sessions)  # the server's first turn (templates compiled, caches filled) is not one
    warm.turn(turn_items(random.Random(-1), sessions, 0, lines))
    warm.close()
    clients = [make(server.base_url, session) for session in range(sessions)]
    rngs = [random.Random(session) for session in range(sessions)]
    rounds = []
    try:
        for turn in range(turns):
            added = [turn_items(rngs[s], s, turn, lines) for s in range(sessions)]
            results: list[tuple[float, int]] = [(0.0, 0)] * sessions

            def play(index: int) -> None:
                results[index] = clients[index].turn(added[index])

            cpu = server.cpu_seconds()
            threads = [threading.Thread(target=play, args=(index,)) for index in range(sessions)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            spent = server.cpu_seconds() - cpu
            rounds.append({"turn": turn, "history_tokens": int(statistics.median(r[1] for r in results)),
                           "cpu_per_turn_s": spent / sessions,
                           "time_to_created_s": statistics.median(r[0] for r in results)})
    finally:
        for client in clients:
            client.close()
    return rounds


def watch(base_url: str, out: Path) -> None:
    """In a process of its own (the bench's threads would hold it up with their own work): a long stream, started
    again whenever it ends, and /health polled every 5 ms; each event's arrival and each poll's wait, on the clock
    processes share, a line each."""
    lines = out.open("w", buffering=1)

    def poll() -> None:
        with httpx.Client(timeout=60) as health:
            while True:
                started = time.monotonic()
                health.get(f"{base_url}/health")
                lines.write(f"health {started} {time.monotonic() - started}\n")
                time.sleep(0.005)

    threading.Thread(target=poll, daemon=True).start()
    while True:
        with httpx.stream("POST", f"{base_url}/v1/responses", timeout=600, json={
                "model": BUNDLED_MODEL_NAME, "input": "Count.", "stream": True, "store": False,
                "max_output_tokens": WATCH_TOKENS}) as reply:
            for line in reply.iter_lines():
                if line.startswith("data:"):
                    lines.write(f"event {time.monotonic()}\n")


@contextmanager
def watched(base_url: str, out: Path) -> Iterator[Callable[[float, float], tuple[list[float], list[float]]]]:
    """The watcher running; yields what it saw between two moments: the stream's event arrivals, the /health
    waits."""
    watcher = subprocess.Popen([sys.executable, __file__, "--watch", base_url, str(out)])

    def seen(start: float, end: float) -> tuple[list[float], list[float]]:
        rows = [line.split() for line in out.read_text().splitlines()[:-1]]
        events = [float(row[1]) for row in rows if row[0] == "event" and start <= float(row[1]) <= end]
        waits = [float(row[2]) for row in rows if row[0] == "health" and start <= float(row[1]) <= end]
        return events, waits

    try:
        while not out.exists() or out.read_text().count("event") < 100:
            time.sleep(0.05)
        yield seen
    finally:
        watcher.kill()
        watcher.wait()


def fresh_turn_stalls(server: Server, rounds: int, calls: int, lines: int, out: Path) -> list[dict[str, float]]:
    """Fresh long turns (a new session each, nothing known) prepared while a stream runs and /health is polled:
    the stream's slowest gap between two events and the longest /health wait during each."""
    rows = []
    with watched(server.base_url, out) as seen:
        for round_ in range(rounds):
            rng = random.Random(1000 + round_)
            history = list(FIRST) + [item for turn in range(calls) for item in turn_items(rng, 99, turn, lines)]
            body = json.dumps({"model": BUNDLED_MODEL_NAME, "input": history, "tools": TOOLS, "store": False,
                               "stream": True, "max_output_tokens": 4}).encode()  # before the clock starts
            started = time.monotonic()
            created = tokens = None
            with httpx.stream("POST", f"{server.base_url}/v1/responses", content=body, timeout=600,
                              headers={"content-type": "application/json"}) as reply:
                for line in reply.iter_lines():
                    if created is None and '"response.created"' in line:
                        created = time.monotonic() - started
                    if '"response.completed"' in line or '"response.incomplete"' in line:
                        tokens = json.loads(line[5:])["response"]["usage"]["input_tokens"]
            assert created is not None and tokens is not None
            time.sleep(0.2)  # the watcher's lines of the window are written
            events, waits = seen(started, started + created)
            gaps = [b - a for a, b in zip(events, events[1:])]
            rows.append({"history_tokens": tokens, "time_to_created_s": created,
                         "slowest_stream_gap_s": max(gaps, default=created), "stream_events_meanwhile": len(events),
                         "longest_health_wait_s": max(waits, default=0.0)})
    return rows


def measure(tree: Path, directory: Path, sessions: int, turns: int, lines: int) -> dict[str, Any]:
    recording = directory / "replay.jsonl"
    recording.write_text(Recording([], [[28]] * WATCH_TOKENS, "stop").to_json() + "\n")
    result: dict[str, Any] = {}
    for mode, make in (("stateless_http", StatelessSession), ("chained_websocket", ChainedSession)):
        server = Server(tree, recording, directory / f"{mode}.log")
        try:
            result[mode] = run_sessions(server, make, sessions, turns, lines)
        finally:
            server.stop()
    server = Server(tree, recording, directory / "fresh.log")
    try:
        result["fresh_turns"] = fresh_turn_stalls(server, 3, turns + 6, lines, directory / "watched.txt")
    finally:
        server.stop()
    return result


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """Per-turn CPU over the last three rounds against the first three (medians: CPU time is read in 10 ms ticks),
    and the time to response.created likewise; the fresh turns' medians."""
    out: dict[str, Any] = {}
    for mode in ("stateless_http", "chained_websocket"):
        first, last = result[mode][:3], result[mode][-3:]

        def median(rounds: list[dict[str, Any]], key: str) -> float:
            return statistics.median(r[key] for r in rounds)

        out[mode] = {"tokens": [median(first, "history_tokens"), median(last, "history_tokens")],
                     "cpu_per_turn_ms": [round(1e3 * median(first, "cpu_per_turn_s"), 1),
                                         round(1e3 * median(last, "cpu_per_turn_s"), 1)],
                     "cpu_last_over_first": round(median(last, "cpu_per_turn_s") / median(first, "cpu_per_turn_s"), 2),
                     "time_to_created_ms": [round(1e3 * median(first, "time_to_created_s"), 1),
                                            round(1e3 * median(last, "time_to_created_s"), 1)]}
    fresh = result["fresh_turns"]
    out["fresh_turns"] = {key: round(1e3 * statistics.median(row[key] for row in fresh), 1)
                          for key in ("time_to_created_s", "slowest_stream_gap_s", "longest_health_wait_s")}
    out["fresh_turns"]["history_tokens"] = fresh[0]["history_tokens"]
    return out


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, key, label in ((axes[0], "cpu_per_turn_s", "server CPU per turn (ms)"),
                             (axes[1], "time_to_created_s", "request to response.created (ms)")):
        for tree, style in (("before", "--"), ("after", "-")):
            for mode, colour in (("stateless_http", "tab:blue"), ("chained_websocket", "tab:orange")):
                rounds = results[tree][mode]
                axis.plot([r["history_tokens"] / 1000 for r in rounds], [1e3 * r[key] for r in rounds], style,
                          color=colour, label=f"{mode.replace('_', ' ')}, {tree}")
        axis.set_xlabel("history (thousand tokens)")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle("A turn of a long agent session: the server's cost against the history's length")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--lines", type=int, default=130, help="lines of tool output a turn adds (~38 tokens each)")
    parser.add_argument("--before", default=BEFORE, help="the tree to compare with (a git revision; '' for none)")
    parser.add_argument("--watch", nargs=2, metavar=("URL", "FILE"), help=argparse.SUPPRESS)  # the watcher process
    args = parser.parse_args()
    if args.watch:
        return watch(args.watch[0], Path(args.watch[1]))
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as directory:
        if args.before:
            with worktree(args.before) as tree:
                (Path(directory) / "before").mkdir()
                results["before"] = measure(tree, Path(directory) / "before", args.sessions, args.turns, args.lines)
        (Path(directory) / "after").mkdir()
        results["after"] = measure(ROOT, Path(directory) / "after", args.sessions, args.turns, args.lines)
    report = {"sessions": args.sessions, "turns": args.turns, "before": args.before,
              "summary": {tree: summary(result) for tree, result in results.items()}, "runs": results}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "long_sessions.json").write_text(json.dumps(report, indent=1) + "\n")
    if "before" in results:
        plot(results, RESULTS / "long_sessions.png")
    print(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
