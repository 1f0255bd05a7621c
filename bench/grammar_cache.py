"""Benchmark: what turning xgrammar's cache off costs a gpt-oss request (server/engine/vllm_engine.py says why it is).

    .venv/bin/python bench/grammar_cache.py [--turns 10]

An agent's turns on the harmony path, as vLLM's xgrammar backend compiles their grammars: each turn one structural
tag, alternating a required call (the same two tools every turn, as an agent sends them) and a strict JSON answer
(a new schema every turn). Compiled with vLLM's default cache (512 MB) and with the cache off (what the server
runs gpt-oss with), over the o200k_harmony vocabulary; prints the median compile time per kind and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.model_settings import ModelSettings  # noqa: E402
from server.constraints.rules import output_rules  # noqa: E402
from server.paths.harmony import HarmonyPath, harmony_encoding  # noqa: E402
from server.paths.tools import tool_definitions, tool_table  # noqa: E402
from server.requests import ResponsesRequest  # noqa: E402

TOOLS = [{"type": "function", "name": name, "strict": True, "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}
    for name in ("get_weather", "get_time")]


def tokenizer_info() -> Any:
    """xgrammar's view of o200k_harmony: every token's bytes, harmony's stop tokens."""
    import xgrammar

    encoding, vocab_size = harmony_encoding(), 201088
    vocab = []
    for token_id in range(vocab_size):
        try:
            vocab.append(encoding.decode([token_id]).encode())
        except Exception:  # ids without text
            vocab.append(b"")
    stops = list(encoding.stop_tokens_for_assistant_actions())
    return xgrammar.TokenizerInfo(vocab, xgrammar.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=stops)


def tags(turns: int) -> list[tuple[str, str]]:
    """(kind, structural tag) per turn: a call with the same tools, then a JSON answer with a schema of its own."""
    path = HarmonyPath(ModelSettings(name="gpt-oss"))
    out = []
    for turn in range(turns):
        if turn % 2 == 0:
            body: dict[str, Any] = {"tools": TOOLS, "tool_choice": "required"}
            kind = "call (same tools)"
        else:
            schema = {"type": "object", "properties": {f"field_{turn}": {"type": "integer"}},
                      "required": [f"field_{turn}"], "additionalProperties": False}
            body, kind = {"text": {"format": {"type": "json_schema", "name": "a", "schema": schema}}}, "json (new schema)"
        request = ResponsesRequest.model_validate({"model": "gpt-oss", "input": "x", **body})
        rules = output_rules(request, tool_table(request), tool_definitions(request), budget=512)
        out.append((kind, path.structural_tag(rules)))
    return out


def compile_times(info: Any, cache_mb: int, turns: list[tuple[str, str]]) -> dict[str, list[float]]:
    import xgrammar

    compiler = xgrammar.GrammarCompiler(info, max_threads=8, cache_enabled=True,
                                        cache_limit_bytes=cache_mb * 1024 * 1024)  # as vLLM's backend makes it
    times: dict[str, list[float]] = {}
    for kind, tag in turns:
        start = time.perf_counter()
        compiler.compile_structural_tag(tag)
        times.setdefault(kind, []).append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    info, turns = tokenizer_info(), tags(args.turns)
    cached, uncached = compile_times(info, 512, turns), compile_times(info, 0, turns)
    print(f"{'kind':<20} {'cache 512 MB (ms)':>18} {'cache off (ms)':>15} {'off/on':>7}")
    result = {}
    for kind in cached:
        on, off = statistics.median(cached[kind]), statistics.median(uncached[kind])
        first_on = cached[kind][0]
        print(f"{kind:<20} {on:>18.1f} {off:>15.1f} {off / on:>7.1f}   (first compile with the cache: {first_on:.1f})")
        result[kind] = {"cache_on_ms": on, "cache_off_ms": off, "first_with_cache_ms": first_on}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
