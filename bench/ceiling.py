"""The frontend's ceiling (`make bench`, or on its own): the real HTTP server on an engine that costs nothing.

    .venv/bin/python bench/ceiling.py [--streams 1,64,256] [--tokens 1000] [--processes 1,2] [--profile]
    .venv/bin/python bench/ceiling.py --baseline GIT-REV [--rounds 3] [--streams 256]

The server replays recorded output (`--replay-engine-output`: one token a step, no delay) on the chat template
(the bundled model's tokenizer) and on harmony (gpt-oss output: reasoning, then a tool call), with 1 and with 2 API
processes (`--api-server-count`). Waves of 1, 64 and 256 concurrent SSE streams each read a whole response over a
plain socket (the load generator parses nothing but the end). Per wave:
- the server's CPU time per streamed token, over all its processes (read from /proc: the load generator, on the
  same cores, does not count), and what that is in tokens/s per core;
- the tokens/s the clients received (bounded by the load generator too on this 2-core machine);
- the event loop's lag, p99, from the server's own histogram (`responses_server_event_loop_lag_seconds`);
- at the largest wave, the time to the first byte of a new request while the streams run (median of 5).
With --baseline, the largest wave of that revision's server and of this one's, alternated in each round on both
paths: their server CPU per token, median and every round.
With --profile, py-spy samples one API process under one more wave of the largest size (not a measured one)
and the samples are split by layer and by function.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.servers import Server  # noqa: E402
from bench.worktrees import worktree  # noqa: E402

PORT = 8720
MIN_TOKENS_PER_WAVE = 100_000  # smaller waves are repeated up to this many tokens
_OUTPUT_TOKENS = re.compile(rb'"output_tokens":\s*(\d+)')


# -- recorded output ----------------------------------------------------------------------------


def chat_ids(tokens: int) -> list[int]:
    from server.bundled_model import ensure_bundled_model
    from server.engine.vllm_engine import load_tokenizer

    tokenizer = load_tokenizer(str(ensure_bundled_model()))
    return tokenizer.encode("the answer is long and it goes on " * (tokens // 5 + 1), add_special_tokens=False)[:tokens]


def write_replay(path: Path, ids: list[int], per_step: int = 1) -> Path:
    """A recording of `ids` in steps of `per_step` tokens (one: what a GPU gives each stream per step, unless the
    frontend falls behind and vLLM merges a stream's steps)."""
    from server.engine.recording import Recording

    steps = [ids[start:start + per_step] for start in range(0, len(ids), per_step)]
    path.write_text(Recording([], steps, "stop").to_json() + "\n")
    return path


# -- the load ---------------------------------------------------------------------------------


def request_bytes(model: str) -> bytes:
    body = json.dumps({"model": model, "input": "Go on.", "stream": True}).encode()
    return (b"POST /v1/responses HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


async def one_stream(port: int, request: bytes) -> tuple[float, int, float]:
    """(seconds to the first byte, output tokens the final event reports, when it ended); reads the whole response."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.perf_counter()
    writer.write(request)
    first, tail = None, b""
    while chunk := await reader.read(1 << 16):
        first = first or time.perf_counter()
        tail = (tail + chunk)[-8192:]
    writer.close()
    if b"response.completed" not in tail:
        raise RuntimeError(f"a stream did not complete: {tail[-300:]!r}")
    found = _OUTPUT_TOKENS.findall(tail)
    return (first or time.perf_counter()) - started, int(found[-1]) if found else 0, time.perf_counter()


async def first_byte(port: int, request: bytes) -> float:
    """Seconds to the first byte of a new request (then it hangs up, which cancels it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.perf_counter()
    writer.write(request)
    await reader.read(1)
    seconds = time.perf_counter() - started
    writer.close()
    return seconds


async def wave(port: int, request: bytes, streams: int, rounds: int, probes: int) -> dict[str, Any]:
    """`rounds` waves of `streams` concurrent streams, one after another; with `probes`, new requests are timed to
    their first byte while the first wave runs."""
    tokens, seconds, ttfbs = 0, 0.0, []
    for index in range(rounds):
        started = time.perf_counter()
        tasks = [asyncio.create_task(one_stream(port, request)) for _ in range(streams)]
        if probes and index == 0:
            await asyncio.sleep(1.0)  # every stream under way
            for _ in range(probes):
                ttfbs.append(await first_byte(port, request))
                await asyncio.sleep(0.2)
        results = await asyncio.gather(*tasks)
        tokens += sum(count for _, count, _ in results)
        seconds += max(ended for _, _, ended in results) - started
    out = {"streams": streams, "rounds": rounds, "tokens": tokens, "received_tokens_per_s": round(tokens / seconds)}
    if ttfbs:
        out["new_request_ttfb_ms_p50"] = round(statistics.median(ttfbs) * 1000, 1)
        out["new_request_ttfb_ms_max"] = round(max(ttfbs) * 1000, 1)
    return out


# -- what the server spent --------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of the server and every process under it."""
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    total = 0.0
    for process in family:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def lag_buckets(port: int) -> dict[float, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("responses_server_event_loop_lag_seconds_bucket"):
            bound = re.search(r'le="([^"]+)"', line).group(1)  # type: ignore[union-attr]
            upper = float("inf") if bound == "+Inf" else float(bound)
            buckets[upper] = buckets.get(upper, 0.0) + float(line.rsplit(" ", 1)[1])  # summed over processes
    return buckets


def lag_p99_ms(before: dict[float, float], after: dict[float, float]) -> float | None:
    """The upper bound of the histogram bucket holding the 99th percentile of the samples taken in between."""
    moved = {bound: after[bound] - before.get(bound, 0.0) for bound in sorted(after)}
    total = moved.get(float("inf"), 0.0)
    if not total:
        return None
    bound = next(bound for bound, count in moved.items() if count >= 0.99 * total)
    return bound * 1000


# -- the profile ------------------------------------------------------------------------------

LAYERS = (  # (layer, how the file paths of its frames start), as py-spy names them
    ("our pipeline: parsers, builder, event JSON", ("parsers/", "streaming/", "openai_harmony", "tokenizers")),
    ("our server: runs, routes, SSE response, store", ("server/",)),
    ("sse-starlette", ("sse_starlette/",)),
    ("starlette, fastapi, anyio", ("starlette/", "fastapi/", "anyio/")),
    ("uvicorn's protocol, incl. its socket writes", ("uvicorn/", "h11/", "httptools")),
    ("asyncio's loop and sockets", ("asyncio/", "selectors.py", "socket.py", "uvloop")),
)
_FILE = re.compile(r"\(([^:)]+)")


def profile_layers(collapsed: str) -> dict[str, float]:
    """The share of samples per layer. A sample counts for its innermost frame of a known layer: work in generic
    libraries (json, pydantic, logging) counts for the layer that called it, and a C call (a socket write) for the
    Python frame that made it."""
    counts: Counter[str] = Counter()
    for frames, number in _stacks(collapsed):
        counts[_layer(frames)] += number
    total = sum(counts.values()) or 1
    return {layer: round(count / total, 3) for layer, count in counts.most_common()}


def hottest_functions(collapsed: str, count: int = 12) -> dict[str, float]:
    """The share of samples per innermost function (its own time, with the C calls it makes), the largest first."""
    counts: Counter[str] = Counter()
    for frames, number in _stacks(collapsed):
        counts[re.sub(r":\d+\)", ")", frames[-1])] += number
    total = sum(counts.values()) or 1
    return {function: round(samples / total, 3) for function, samples in counts.most_common(count)}


def _stacks(collapsed: str) -> Iterator[tuple[list[str], int]]:
    """(frames, root first; how many samples) of each line py-spy's raw format writes."""
    for line in collapsed.splitlines():
        stack, _, number = line.rpartition(" ")
        if stack and number.isdigit():
            yield stack.split(";"), int(number)


def _layer(frames: list[str]) -> str:
    for frame in reversed(frames):  # py-spy writes the root first
        found = _FILE.search(frame)
        path = found.group(1) if found else ""
        for name, starts in LAYERS:
            if path.startswith(starts):
                return name
    return "other"


def api_process_pid(server_pid: int) -> int:
    """The process that serves HTTP: the server itself, or its first API process (spawned by multiprocessing; not
    its resource tracker)."""
    children = [child for child in psutil.Process(server_pid).children() if "spawn_main" in
                " ".join(child.cmdline())]
    return children[0].pid if children else server_pid


def profile_wave(server_pid: int, port: int, request: bytes, count: int, tokens: int,
                 profile_to: Path) -> dict[str, Any]:
    """py-spy's samples of one more wave, by layer and by function. The sampler stops the process to read each
    stack (--nonblocking reads stacks torn by the running process), which costs it CPU: so this wave is not the
    measured one."""
    py_spy = str(Path(sys.executable).parent / "py-spy")
    spy = subprocess.Popen([py_spy, "record", "--pid", str(api_process_pid(server_pid)), "--rate", "200", "--format",
                            "raw", "-o", str(profile_to)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    asyncio.run(wave(port, request, count, max(1, MIN_TOKENS_PER_WAVE // (count * tokens)), 0))
    spy.send_signal(signal.SIGINT)
    spy.wait(timeout=60)
    if not profile_to.exists():
        return {}
    return {"profile": profile_layers(profile_to.read_text()), "hottest": hottest_functions(profile_to.read_text())}


# -- one configuration --------------------------------------------------------------------------


def run_case(flags: list[str], model: str, counts: list[int], tokens: int, processes: int, log: Path,
             profile_to: Path | None, tree: Path = ROOT) -> list[dict[str, Any]]:
    """Waves of `counts` streams on the server of `tree` (this checkout, or a baseline's worktree)."""
    several = ["--api-server-count", str(processes)] if processes > 1 else []
    command = [sys.executable, "-m", "server", "--port", str(PORT), *several, *flags]
    request = request_bytes(model)
    rows = []
    with Server(command, PORT, log, cwd=tree) as server:
        asyncio.run(wave(PORT, request, 4, 1, 0))  # warm-up
        for count in counts:
            lag_before, cpu_before = lag_buckets(PORT), cpu_seconds(server.process.pid)
            rounds = max(1, MIN_TOKENS_PER_WAVE // (count * tokens))  # CPU time is read in 10 ms ticks
            row = asyncio.run(wave(PORT, request, count, rounds, 5 if count == max(counts) else 0))
            cpu = cpu_seconds(server.process.pid) - cpu_before
            row["lag_p99_ms"] = lag_p99_ms(lag_before, lag_buckets(PORT))
            row["server_cpu_us_per_token"] = round(cpu / row["tokens"] * 1e6, 1)
            row["tokens_per_s_per_core"] = round(row["tokens"] / cpu) if cpu else None
            if profile_to is not None and count == max(counts):
                row.update(profile_wave(server.process.pid, PORT, request, count, tokens, profile_to))
            rows.append(row)
    return rows


def replays(tokens: int) -> dict[str, tuple[list[int], list[str], str]]:
    """Per path: the recorded token ids, the server's flags and the model name a request gives."""
    from bench.pipeline import synthetic_harmony_ids
    from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model

    model = ["--model", str(ensure_bundled_model()), "--served-model-name", BUNDLED_MODEL_NAME]
    return {"chat template": (chat_ids(tokens), model, BUNDLED_MODEL_NAME),
            "harmony": (synthetic_harmony_ids(tokens), ["--harmony"], "gpt-oss")}


def measure(counts: list[int], tokens: int, process_counts: list[int], profile: bool, out: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"tokens_per_stream": tokens, "cpus": psutil.cpu_count()}
    with tempfile.TemporaryDirectory() as scratch:
        replays_ = replays(tokens)
        cases = [(label, processes, 1, counts) for label in replays_ for processes in process_counts]
        cases += [(label, 1, 4, [max(counts)]) for label in replays_]  # splits per-token from per-event costs
        for label, processes, per_step, waves in cases:
            ids, flags, name = replays_[label]
            replay = write_replay(Path(scratch) / f"{label[0]}{per_step}.jsonl", ids, per_step)
            store = f"sqlite:///{Path(scratch) / f'{label[0]}{processes}{per_step}.db'}"
            case = f"{label}, N={processes}" + (f", {per_step} tokens a step" if per_step > 1 else "")
            profile_to = (out / f"ceiling-{label.split()[0]}-{processes}.txt"
                          if profile and per_step == 1 else None)
            print(f"[ceiling] {case}, {waves} streams ...", file=sys.stderr, flush=True)
            results[case] = run_case([*flags, "--replay-engine-output", str(replay), "--store", store], name, waves,
                                     tokens, processes, out / "ceiling.log", profile_to)
    return results


def against_baseline(revision: str, rounds: int, count: int, tokens: int, out: Path) -> dict[str, Any]:
    """The server CPU per token at `count` streams (one token a step, one API process) of `revision` (a temporary
    git worktree) and of this checkout, alternated in each round on each path; who goes first alternates too."""
    figures: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as scratch, worktree(revision) as baseline:
        paths = {label: (write_replay(Path(scratch) / f"{label[0]}.jsonl", ids), flags, name)
                 for label, (ids, flags, name) in replays(tokens).items()}
        for number in range(rounds):
            order = [("baseline", baseline), ("this", ROOT)][::1 if number % 2 == 0 else -1]
            for label, (replay, flags, name) in paths.items():
                for who, tree in order:
                    print(f"[ceiling] round {number + 1}, {label}, {who} ...", file=sys.stderr, flush=True)
                    store = f"sqlite:///{Path(scratch) / f'{who}-{label[0]}-{number}.db'}"
                    row = run_case([*flags, "--replay-engine-output", str(replay), "--store", store], name,
                                   [count], tokens, 1, out / "ceiling.log", None, tree)[0]
                    figures.setdefault(label, {}).setdefault(who, []).append(row["server_cpu_us_per_token"])
    return {"baseline": revision, "streams": count, "server_cpu_us_per_token": {
        label: {who: {"median": statistics.median(values), "rounds": values} for who, values in by_tree.items()}
        for label, by_tree in figures.items()}}


def table(results: dict[str, Any]) -> str:
    lines = ["| case | streams | server CPU µs/token | tokens/s per core | received tokens/s | loop lag p99 "
             "| new request TTFB p50 / max |", "|" + "---|" * 7]
    for case, rows in results.items():
        if not isinstance(rows, list):
            continue
        for row in rows:
            ttfb = (f"{row['new_request_ttfb_ms_p50']} / {row['new_request_ttfb_ms_max']} ms"
                    if "new_request_ttfb_ms_p50" in row else "")
            lag = f"≤ {row['lag_p99_ms']:g} ms" if row["lag_p99_ms"] is not None else "n/a"
            lines.append(f"| {case} | {row['streams']} | {row['server_cpu_us_per_token']} "
                         f"| {row['tokens_per_s_per_core']} | {row['received_tokens_per_s']} | {lag} | {ttfb} |")
    return "\n".join(lines)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--streams", default="1,64,256")
    options.add_argument("--tokens", type=int, default=1000)
    options.add_argument("--processes", default="1,2")
    options.add_argument("--profile", action="store_true")
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    options.add_argument("--baseline", default=None, metavar="GIT-REV")
    options.add_argument("--rounds", type=int, default=3)
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.baseline:
        print(json.dumps(against_baseline(args.baseline, args.rounds, max(int(n) for n in args.streams.split(",")),
                                          args.tokens, args.out), indent=2))
        return
    results = measure([int(n) for n in args.streams.split(",")], args.tokens,
                      [int(n) for n in args.processes.split(",")], args.profile, args.out)
    (args.out / "ceiling.json").write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    for case, rows in results.items():
        for row in rows if isinstance(rows, list) else []:
            if row.get("profile"):
                print(f"\nprofile, {case}, {row['streams']} streams: {json.dumps(row['profile'])}")
                print(f"hottest functions: {json.dumps(row['hottest'])}")


if __name__ == "__main__":
    main()
