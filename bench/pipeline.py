"""The frontend's cost per generated token on one core, on both model paths, as one stream pays it between engine
steps (one token per step, the costliest grouping):
- chat template: incremental detokenizer, reasoning and Hermes parsers, response builder, SSE encoding, over a
  synthetic output (reasoning, then text);
- harmony: the harmony parser (which decodes its own content), builder and SSE encoding, over a synthetic gpt-oss
  output (long analysis, then a tool call).

    .venv/bin/python bench/pipeline.py [--tokens 10000] [--repeats 5] [--baseline GIT-REV] [--rounds 3]

Prints microseconds per token at --tokens and at a tenth of it for each path (the best of the repeats: on a shared
machine noise only adds), their ratio (1.0: the per-token work does not grow with the output), and harmony's cost
beside the chat path's. With --baseline, the same measurement of that revision's code (a temporary git worktree)
alternates with this tree's, each in a fresh process pinned to one core, --rounds times.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if "--tree" in sys.argv:  # measuring another revision's code: its packages first
    sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1])
sys.path.insert(1, str(ROOT))


def synthetic_ids(tokenizer: Any, tokens: int) -> list[int]:
    text = "<think>" + "reasoning goes on " * (tokens // 6) + "</think>" + "the answer is long " * (tokens // 4)
    return tokenizer.encode(text, add_special_tokens=False)[:tokens]


def synthetic_harmony_ids(tokens: int) -> list[int]:
    """`tokens` tokens of gpt-oss output after `<|start|>assistant`: analysis, then a get_weather call."""
    from server.paths.harmony import harmony_encoding

    encoding = harmony_encoding()

    def encode(text: str) -> list[int]:
        return list(encoding.encode(text, allowed_special="all"))

    call = (encode("<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                   "<|message|>") + encode('{"city": "Paris", "unit": "celsius"}') + encode("<|call|>"))
    head = encode("<|channel|>analysis<|message|>")
    body = encode("the user asks about the weather so I think about it " * (tokens // 10 + 1))
    return head + body[:max(tokens - len(head) - len(call), 1)] + call


def wire(frame: Any) -> bytes:
    """The bytes sse-starlette sends for a frame (an older build returned ServerSentEvent objects: baselines)."""
    return frame if isinstance(frame, bytes) else frame.encode()


def _finished() -> Any:
    try:
        from streaming.outcome import Finished
    except ImportError:  # a baseline revision from before the outcome vocabulary moved to streaming/
        from parsers.deltas import Finished  # type: ignore[attr-defined,no-redef]
    return Finished("stop")


def one_stream(tokenizer: Any, ids: list[int]) -> float:
    """Seconds per token for one chat-template stream of `ids`."""
    from parsers.chat import ChatParser
    from parsers.decoder import IncrementalDecoder
    from parsers.hermes import HermesToolParser
    from parsers.reasoning import ThinkingParser
    from parsers.tools import ToolTable

    decoder = IncrementalDecoder(tokenizer)
    parser = ChatParser(ThinkingParser(in_reasoning=False), HermesToolParser(ToolTable()))
    return _timed(ids, parser, decoder)


def harmony_stream(ids: list[int]) -> float:
    """Seconds per token for one harmony stream of `ids`."""
    from parsers.harmony import HarmonyParser
    from parsers.tools import ToolSpec, ToolTable
    from server.paths.harmony import harmony_encoding

    parser = HarmonyParser(harmony_encoding(), tools=ToolTable((ToolSpec("get_weather"),)))
    return _timed(ids, parser, None)


def _timed(ids: list[int], parser: Any, decoder: Any) -> float:
    from streaming.builder import ResponseBuilder
    from streaming.sse import encode_event, event_json

    builder = ResponseBuilder({"model": "m"})
    start = time.perf_counter()
    for event in builder.start():
        wire(encode_event(event, event_json(event)))
    for token_id in ids:
        if decoder is not None:
            text_piece, ends = decoder.decode_step([token_id])
            deltas = parser.feed([token_id], text_piece, ends)
        else:
            deltas = parser.feed([token_id])
        for event in builder.feed(deltas):
            wire(encode_event(event, event_json(event)))
    for event in builder.feed(parser.finish()) + builder.finish(_finished()):
        wire(encode_event(event, event_json(event)))
    return (time.perf_counter() - start) / len(ids)


def decoding_only(tokenizer: Any, ids: list[int]) -> float:
    """Seconds per token of the incremental detokenizer alone, as `one_stream` calls it."""
    from parsers.decoder import IncrementalDecoder

    decoder = IncrementalDecoder(tokenizer)
    start = time.perf_counter()
    for token_id in ids:
        decoder.decode_step([token_id])
    return (time.perf_counter() - start) / len(ids)


def measure(tokens: int = 10000, repeats: int = 5) -> dict[str, float]:
    from server.bundled_model import ensure_bundled_model
    from server.engine.vllm_engine import load_tokenizer

    tokenizer = load_tokenizer(str(ensure_bundled_model()))
    short_ids, long_ids = synthetic_ids(tokenizer, tokens // 10), synthetic_ids(tokenizer, tokens)
    harmony_short, harmony_long = synthetic_harmony_ids(tokens // 10), synthetic_harmony_ids(tokens)
    one_stream(tokenizer, short_ids)  # warm-up: pydantic validators, tokenizer caches
    harmony_stream(harmony_short)
    short = min(one_stream(tokenizer, short_ids) for _ in range(repeats))
    long = min(one_stream(tokenizer, long_ids) for _ in range(repeats))
    decoding = min(decoding_only(tokenizer, long_ids) for _ in range(repeats))
    h_short = min(harmony_stream(harmony_short) for _ in range(repeats))
    h_long = min(harmony_stream(harmony_long) for _ in range(repeats))
    pipeline = long - decoding
    small, large = tokens // 10, tokens
    return {
        "chat_us_per_token_with_detokenizer": round(long * 1e6, 2),
        f"chat_us_per_token_at_{small}": round(short * 1e6, 2),
        "detokenizer_us_per_token": round(decoding * 1e6, 2),
        "pipeline_us_per_token": round(pipeline * 1e6, 2), "pipeline_tokens_per_s": round(1 / pipeline),
        f"chat_ratio_{large}_to_{small}": round(long / short, 3),
        "harmony_us_per_token": round(h_long * 1e6, 2),
        f"harmony_us_per_token_at_{small}": round(h_short * 1e6, 2),
        f"harmony_ratio_{large}_to_{small}": round(h_long / h_short, 3),
        "harmony_minus_chat_us_per_token": round((h_long - long) * 1e6, 2),
    }


def in_process(tree: Path, tokens: int, repeats: int) -> dict[str, Any]:
    """`measure` in a fresh process (pinned to one core where possible) on the code in `tree`."""
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    output = subprocess.run([*pin, sys.executable, __file__, "--tree", str(tree), "--tokens", str(tokens), "--repeats",
                             str(repeats)], check=True, capture_output=True, text=True).stdout
    return json.loads(output)


def against_baseline(revision: str, tokens: int, repeats: int, rounds: int) -> dict[str, object]:
    from bench.worktrees import worktree

    with worktree(revision) as baseline_tree:
        runs = [(in_process(baseline_tree, tokens, repeats), in_process(ROOT, tokens, repeats)) for _ in range(rounds)]
    out: dict[str, object] = {"baseline": revision, "rounds": rounds}
    for key in ("pipeline_us_per_token", "harmony_us_per_token"):
        before = min(b[key] for b, _ in runs if key in b) if any(key in b for b, _ in runs) else None
        after = min(a[key] for _, a in runs)
        out[key] = {"before": before, "after": after,
                    "before/after": round(before / after, 2) if before is not None else None}
    out["runs"] = [{"before": b, "after": a} for b, a in runs]
    return out


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--tokens", type=int, default=10000)
    options.add_argument("--repeats", type=int, default=5)
    options.add_argument("--baseline", default=None, metavar="GIT-REV")
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.baseline:
        print(json.dumps(against_baseline(args.baseline, args.tokens, args.repeats, args.rounds), indent=2))
    else:
        print(json.dumps(measure(args.tokens, args.repeats), indent=2))


if __name__ == "__main__":
    main()
