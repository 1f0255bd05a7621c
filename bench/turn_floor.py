"""What a short turn cannot cost less than with the parts it runs on: the floors under `bench/turn_cost.py`'s figures.

    .venv/bin/python bench/turn_floor.py [--turns 16] [--rounds 3] [--out bench/results]

Measured in one run, each as the CPU time of the process that serves it (from /proc's schedstat, its idle CPU
subtracted, as `bench/turn_cost.py` measures):
- the HTTP stack: a FastAPI app doing nothing, on uvicorn as ours runs it (uvloop, httptools, the access log),
  answering a turn's JSON body (read, parsed) with a response's worth of JSON; streaming 256 small SSE events in one
  response, back to back (CPU per event; uvloop writes what one loop turn sent in one system call); the same with a
  loop turn between events (as bench/ceiling.py's replay engine steps: each event its own write); and 64 events, one
  every 2 ms, as a live engine's steps bring them (each its own wake-up from the poll and its own write);
- a thread hand-off (`asyncio.to_thread` of nothing, on uvloop), which the render, the store and vLLM's input
  processing each take once a turn;
- vLLM's engine client per engine step: its own `vllm serve`, `POST /v1/chat/completions` at 1 and at 16 output
  tokens, JSON and streamed, alternating in rounds; a step's cost is the slope, the rest the request's own;
- the engine client as ours drives it and nothing else of ours: a process with our `VllmEngine` (AsyncLLM, our
  stat logger), generating the turn's prompt (token ids, rendered once) as a JSON answer asks (its output whole) at
  1 and at 16 tokens: per request and per step, with no HTTP, no rendering, no store.
Writes turn_floor.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.servers import Server  # noqa: E402
from bench.turn_cost import FLAGS, VLLM, measure, question  # noqa: E402

EMPTY = 8734  # the FastAPI app that does nothing
EVENTS = 256  # per streamed response of the empty app (back to back: uvloop writes a loop turn's sends at once)
PACED, PACE = 64, 0.002  # per paced response: one event every 2 ms, each written alone
REPLY = {"id": "resp_" + "0" * 48, "object": "response", "status": "completed", "model": "m",
         "output": [{"type": "message", "id": "msg_" + "0" * 48, "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": "A short answer of sixteen tokens or so, as a turn's.",
                                  "annotations": []}]}],
         "usage": {"input_tokens": 400, "output_tokens": 16, "total_tokens": 416}, "padding": "x" * 900}


def empty_app() -> Any:
    """The HTTP stack's floor: FastAPI routes that read a body and answer, doing nothing else."""
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/answer")
    async def answer(request: Request) -> JSONResponse:
        await request.json()
        return JSONResponse(REPLY)

    @app.post("/v1/events")
    async def events(request: Request) -> StreamingResponse:
        """Back to back: uvloop writes what one loop turn sent in one system call."""
        await request.json()
        return StreamingResponse(_frames(EVENTS, None), media_type="text/event-stream")

    @app.post("/v1/turned-events")
    async def turned_events(request: Request) -> StreamingResponse:
        """A loop turn between events, as the replay engine of bench/ceiling.py gives one: each event its own write."""
        await request.json()
        return StreamingResponse(_frames(EVENTS, 0), media_type="text/event-stream")

    @app.post("/v1/paced-events")
    async def paced_events(request: Request) -> StreamingResponse:
        """One event a wake-up from the poll, as a live engine's step brings one."""
        await request.json()
        return StreamingResponse(_frames(PACED, PACE), media_type="text/event-stream")

    return app


async def _frames(count: int, pause: float | None) -> AsyncIterator[str]:
    """`count` delta events, `pause` seconds apart (None: no await between them)."""
    for n in range(count):
        if pause is not None:
            await asyncio.sleep(pause)
        yield f'event: response.output_text.delta\ndata: {{"type":"response.output_text.delta","n":{n}}}\n\n'


def serve_empty(port: int) -> None:
    import uvicorn

    uvicorn.run(empty_app(), host="127.0.0.1", port=port, log_level="info")


def handoff_us(calls: int = 3000) -> float:
    """CPU µs of one `asyncio.to_thread` of nothing on uvloop, as ours runs (both threads, the process's CPU)."""
    import uvloop

    async def hand_off() -> float:
        await asyncio.to_thread(int)  # the pool's thread exists
        start = time.process_time()
        for _ in range(calls):
            await asyncio.to_thread(int)
        return (time.process_time() - start) / calls * 1e6

    return uvloop.run(hand_off())


def client_floor(rounds: int, turns: int) -> dict[str, float]:
    """CPU ms per request of our VllmEngine alone (this process, the engine core not counted: a child), at 1 and 16
    output tokens in alternating batches, and the engine steps each took."""
    import uvloop

    from server.bundled_model import ensure_bundled_model
    from server.engine.interface import EngineRequest, SamplingSettings
    from server.engine.vllm_engine import VllmEngine, engine_args, new_argument_parser, add_engine_arguments

    parser = new_argument_parser()
    add_engine_arguments(parser)
    args = engine_args(parser.parse_args(["--model", str(ensure_bundled_model()), *FLAGS]))

    async def run() -> dict[str, float]:
        engine = VllmEngine.start(args)
        tokenizer = engine.tokenizer

        def prompt(n: int) -> list[int]:
            text = tokenizer.apply_chat_template([{"role": "user", "content": question(n)}], tokenize=False,
                                                 add_generation_prompt=True)
            return list(tokenizer.encode(text, add_special_tokens=False))

        async def turn(n: int, token_ids: list[int], tokens: int) -> int:
            request = EngineRequest(f"floor-{tokens}-{n}", token_ids, SamplingSettings(max_tokens=tokens,
                                    temperature=0.0), whole_output=True)
            steps = 0
            async for step in engine.generate(request):
                steps += len(step.token_ids)
            return steps

        async def batch(first: int, tokens: int) -> tuple[float, float]:
            """CPU ms per request over `turns` requests (the prompts rendered before), and output tokens each."""
            prompts = {n: prompt(n) for n in range(first, first + turns)}
            start = time.process_time(), time.monotonic()
            await asyncio.sleep(2)
            idle = (time.process_time() - start[0]) / (time.monotonic() - start[1])
            begun, steps = (time.process_time(), time.monotonic()), 0
            for n, token_ids in prompts.items():
                steps += await turn(n, token_ids, tokens)
            spent = time.process_time() - begun[0] - idle * (time.monotonic() - begun[1])
            return spent / turns * 1000, steps / turns

        for tokens in (1, 16):
            await turn(99_000 + tokens, prompt(99_000 + tokens), tokens)
        runs: dict[int, list[tuple[float, float]]] = {1: [], 16: []}
        for index in range(rounds):
            for tokens in ((1, 16) if index % 2 == 0 else (16, 1)):
                runs[tokens].append(await batch(300_000 + 1000 * index + tokens, tokens))
        await engine.shutdown()
        one, sixteen = (statistics.median(cost for cost, _ in runs[k]) for k in (1, 16))
        steps = {k: statistics.median(count for _, count in runs[k]) for k in (1, 16)}
        return {"client_1_token_ms": one, "client_16_tokens_ms": sixteen, "client_steps_16": steps[16],
                "client_step_us": (sixteen - one) / (steps[16] - steps[1]) * 1000}

    return uvloop.run(run())


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--turns", type=int, default=16)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = options.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model

    model_dir = str(ensure_bundled_model())
    empty = [sys.executable, str(Path(__file__).resolve()), "--serve-empty", str(EMPTY)]
    theirs = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--served-model-name",
              BUNDLED_MODEL_NAME, "--port", str(VLLM), *FLAGS]
    results: dict[str, list[float]] = {}
    with Server(empty, EMPTY, args.out / "turn_floor-empty.log") as bare, \
            Server(theirs, VLLM, args.out / "turn_floor-vllm.log") as other:
        plain = httpx.Client(base_url=f"http://127.0.0.1:{EMPTY}/v1", timeout=300)
        vllm = httpx.Client(base_url=f"http://127.0.0.1:{VLLM}/v1", timeout=300)
        body = {"model": BUNDLED_MODEL_NAME, "input": question(0), "max_output_tokens": 16, "temperature": 0}

        def chat(tokens: int, stream: bool) -> Callable[[int], None]:
            def send(n: int) -> None:
                request = {"model": BUNDLED_MODEL_NAME, "max_tokens": tokens, "min_tokens": tokens, "temperature": 0,
                           "stream": stream, "messages": [{"role": "user", "content": question(n)}]}
                with vllm.stream("POST", "/chat/completions", json=request) as answer:
                    answer.raise_for_status()
                    for _ in answer.iter_bytes():
                        pass
            return send

        def streamed(route: str) -> Callable[[int], None]:
            def send(n: int) -> None:
                with plain.stream("POST", route, json=body) as answer:
                    for _ in answer.iter_bytes():
                        pass
            return send

        arms = {"empty app, JSON turn": (lambda n: plain.post("/answer", json=body).raise_for_status(), bare, 10),
                f"empty app, {EVENTS} SSE events": (streamed("/events"), bare, 1),
                f"empty app, {EVENTS} SSE events a loop turn apart": (streamed("/turned-events"), bare, 1),
                f"empty app, {PACED} paced SSE events": (streamed("/paced-events"), bare, 1),
                **{f"vLLM chat, {tokens} token{'s' if tokens > 1 else ''}{', streamed' if stream else ''}":
                   (chat(tokens, stream), other, 1) for tokens in (1, 16) for stream in (False, True)}}
        for send, _, _ in arms.values():
            for n in range(3):
                send(90_000 + n)
        names = list(arms)
        for index in range(args.rounds):
            for name in names[index % len(names):] + names[:index % len(names)]:
                send, server, scale = arms[name]
                results.setdefault(name, []).append(1000 * measure(
                    send, server.process.pid, 1000 * index + 100 * names.index(name), args.turns * scale))
            print(f"round {index + 1}: " + ", ".join(f"{name} {results[name][-1]:.2f} ms" for name in names),
                  flush=True)
    median = {name: statistics.median(values) for name, values in results.items()}
    floor = client_floor(args.rounds, args.turns)
    report = {
        "cpu_ms": results, "median_ms": median,
        "http_json_turn_ms": median["empty app, JSON turn"],
        "http_sse_event_us": median[f"empty app, {EVENTS} SSE events"] / EVENTS * 1000,
        "http_turned_sse_event_us": median[f"empty app, {EVENTS} SSE events a loop turn apart"] / EVENTS * 1000,
        "http_paced_sse_event_us": median[f"empty app, {PACED} paced SSE events"] / PACED * 1000,
        "thread_handoff_us": handoff_us(),
        "vllm_step_us": (median["vLLM chat, 16 tokens"] - median["vLLM chat, 1 token"]) / 15 * 1000,
        "vllm_streamed_step_us": (median["vLLM chat, 16 tokens, streamed"]
                                  - median["vLLM chat, 1 token, streamed"]) / 15 * 1000,
        **floor,
    }
    (args.out / "turn_floor.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({key: value for key, value in report.items() if key != "cpu_ms"}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-empty":
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        serve_empty(int(sys.argv[2]))
    else:
        main()
