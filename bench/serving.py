"""Benchmark: the server against vLLM's AsyncLLM called directly, on the bundled model, in the same run.

    .venv/bin/python bench/serving.py [--requests 5] [--max-tokens 128]

Reports start-up time, time to first token and decode tokens/s for both, and the server's ratios to
the engine baseline (1.00 = no overhead), plus the builder/parser cost per token at two output lengths
(a ratio near 1.0 means the per-token work does not grow with output length).
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
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPT = "Write a detailed essay about the history of Paris, its rivers, bridges and museums."


async def engine_baseline(model: str, requests: int, max_tokens: int) -> dict[str, float]:
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    started = time.perf_counter()
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(
        model=model, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.3, disable_log_stats=True))
    startup = time.perf_counter() - started
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True,
                                           tokenize=False)
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    ttfts, rates = [], []
    for n in range(requests):
        params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True,
                                output_kind=RequestOutputKind.DELTA)
        t0 = time.perf_counter()
        first, count = None, 0
        async for out in llm.generate({"prompt_token_ids": ids}, params, f"bench-{n}"):
            count += len(out.outputs[0].token_ids)
            if first is None and count:
                first = time.perf_counter()
        end = time.perf_counter()
        assert first is not None
        ttfts.append(first - t0)
        rates.append((count - 1) / (end - first))
    llm.shutdown()
    return {"startup_s": startup, "ttft_s": statistics.median(ttfts), "tokens_per_s": statistics.median(rates)}


def server_run(requests: int, max_tokens: int) -> dict[str, float]:
    port = 8765
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "server", "--port", str(port), "--store", "none"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        startup = time.perf_counter() - started
        ttfts, rates = [], []
        body = {"model": "SmolLM2-135M-Instruct", "input": PROMPT, "stream": True, "temperature": 0,
                "max_output_tokens": max_tokens}
        client = httpx.Client(timeout=600)  # one client, as SDK users have: no per-request client set-up
        for _ in range(requests):
            t0 = time.perf_counter()
            first = None
            with client.stream("POST", f"http://127.0.0.1:{port}/v1/responses", json=body) as response:
                for line in response.iter_lines():
                    if first is None and line.startswith("event: response.output_text.delta"):
                        first = time.perf_counter()
                    if line.startswith("data: ") and '"type":"response.' in line and (
                            '"response.completed"' in line or '"response.incomplete"' in line):
                        usage = json.loads(line[6:])["response"]["usage"]
            end = time.perf_counter()
            assert first is not None
            ttfts.append(first - t0)
            rates.append((usage["output_tokens"] - 1) / (end - first))
        client.close()
        return {"startup_s": startup, "ttft_s": statistics.median(ttfts), "tokens_per_s": statistics.median(rates)}
    finally:
        process.terminate()
        process.wait(timeout=60)


def pipeline_cost_per_token(tokens: int) -> float:
    """Seconds per token for decoder + parser + builder + SSE encoding over a synthetic output."""
    from parsers.chat import ChatParser
    from parsers.decoder import IncrementalDecoder
    from parsers.deltas import Finished
    from parsers.hermes import HermesToolParser
    from parsers.reasoning import ThinkingParser
    from parsers.tools import ToolTable
    from server.bundled_model import ensure_bundled_model
    from server.engine.vllm_engine import load_tokenizer
    from streaming.builder import ResponseBuilder
    from streaming.sse import encode_event

    tokenizer = load_tokenizer(str(ensure_bundled_model()))
    text = "<think>" + "reasoning goes on " * (tokens // 6) + "</think>" + "the answer is long " * (tokens // 8)
    ids = tokenizer.encode(text, add_special_tokens=False)[:tokens]
    decoder = IncrementalDecoder(tokenizer)
    parser = ChatParser(ThinkingParser(in_reasoning=False), HermesToolParser(ToolTable()))
    builder = ResponseBuilder({"model": "m"})
    start = time.perf_counter()
    for event in builder.start():
        encode_event(event).encode()
    for token_id in ids:
        text_piece, ends = decoder.decode_step([token_id])
        for event in builder.feed(parser.feed([token_id], text_piece, ends)):
            encode_event(event).encode()
    for event in builder.feed(parser.finish()) + builder.finish(Finished("stop")):
        encode_event(event).encode()
    return (time.perf_counter() - start) / len(ids)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--requests", type=int, default=5)
    options.add_argument("--max-tokens", type=int, default=128)
    args = options.parse_args()
    from server.bundled_model import ensure_bundled_model

    model = str(ensure_bundled_model())
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    engine = asyncio.run(engine_baseline(model, args.requests, args.max_tokens))
    server = server_run(args.requests, args.max_tokens)
    pipeline_cost_per_token(200)  # warm-up: first use builds pydantic validators and tokenizer caches
    short, long = pipeline_cost_per_token(500), pipeline_cost_per_token(5000)
    print(json.dumps({
        "engine (AsyncLLM direct)": engine,
        "responses-server (SSE over HTTP)": server,
        "ratios server/engine": {key: round(server[key] / engine[key], 3) for key in engine},
        "pipeline us/token at 500 and 5000 tokens": [round(short * 1e6, 1), round(long * 1e6, 1)],
        "pipeline cost ratio 5000/500 (1.0 = linear)": round(long / short, 3),
    }, indent=2))


if __name__ == "__main__":
    main()
