"""The frontend's cost per generated token on one core: incremental decoder, parser, response builder and SSE
encoding over a synthetic output (reasoning, then text), as one stream pays it between engine steps.

    .venv/bin/python bench/pipeline.py [--tokens 5000] [--repeats 7] [--baseline GIT-REV] [--rounds 3]

Prints microseconds per token (the best of the repeats: on a shared machine noise only adds), split into the
incremental detokenizer (the tokenizers library's DecodeStream) and our parser + builder + SSE pipeline, tokens/s,
and the ratio of the cost at 10x the length (1.0: the per-token work does not grow with the output).
With --baseline, the same measurement of that revision's code (a temporary git worktree) alternates with this
tree's, each in a fresh process, --rounds times; the ratio to it is what to compare across machines.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
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


def wire(frame: Any) -> bytes:
    """The bytes sse-starlette sends for a frame (an older build returned ServerSentEvent objects: baselines)."""
    return frame if isinstance(frame, bytes) else frame.encode()


def one_stream(tokenizer: Any, ids: list[int]) -> float:
    """Seconds per token for one stream of `ids`, one token per engine step (the costliest grouping)."""
    from parsers.chat import ChatParser
    from parsers.decoder import IncrementalDecoder
    try:
        from streaming.outcome import Finished
    except ImportError:  # a baseline revision from before the outcome vocabulary moved to streaming/
        from parsers.deltas import Finished  # type: ignore[attr-defined,no-redef]
    from parsers.hermes import HermesToolParser
    from parsers.reasoning import ThinkingParser
    from parsers.tools import ToolTable
    from streaming.builder import ResponseBuilder
    from streaming.sse import encode_event, event_json

    decoder = IncrementalDecoder(tokenizer)
    parser = ChatParser(ThinkingParser(in_reasoning=False), HermesToolParser(ToolTable()))
    builder = ResponseBuilder({"model": "m"})
    start = time.perf_counter()
    for event in builder.start():
        wire(encode_event(event, event_json(event)))
    for token_id in ids:
        text_piece, ends = decoder.decode_step([token_id])
        for event in builder.feed(parser.feed([token_id], text_piece, ends)):
            wire(encode_event(event, event_json(event)))
    for event in builder.feed(parser.finish()) + builder.finish(Finished("stop")):
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


def measure(tokens: int = 5000, repeats: int = 7) -> dict[str, float]:
    from server.bundled_model import ensure_bundled_model
    from server.engine.vllm_engine import load_tokenizer

    tokenizer = load_tokenizer(str(ensure_bundled_model()))
    short_ids, long_ids = synthetic_ids(tokenizer, tokens // 10), synthetic_ids(tokenizer, tokens)
    one_stream(tokenizer, short_ids)  # warm-up: pydantic validators, tokenizer caches
    short = min(one_stream(tokenizer, short_ids) for _ in range(repeats))
    long = min(one_stream(tokenizer, long_ids) for _ in range(repeats))
    decoding = min(decoding_only(tokenizer, long_ids) for _ in range(repeats))
    pipeline = long - decoding
    return {"us_per_token_with_detokenizer": round(long * 1e6, 2), "detokenizer_us_per_token": round(decoding * 1e6, 2),
            "pipeline_us_per_token": round(pipeline * 1e6, 2), "pipeline_tokens_per_s": round(1 / pipeline),
            f"ratio {tokens} / {tokens // 10} tokens (1.0: no growth)": round(long / short, 3)}


def in_process(tree: Path, tokens: int, repeats: int) -> dict[str, float]:
    """`measure` in a fresh process (pinned to one core where possible) on the code in `tree`."""
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    output = subprocess.run([*pin, sys.executable, __file__, "--tree", str(tree), "--tokens", str(tokens), "--repeats",
                             str(repeats)], check=True, capture_output=True, text=True).stdout
    return json.loads(output)


def against_baseline(revision: str, tokens: int, repeats: int, rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as scratch:
        baseline_tree = Path(scratch) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(baseline_tree), revision],
                       check=True)
        try:
            runs = [(in_process(baseline_tree, tokens, repeats), in_process(ROOT, tokens, repeats))
                    for _ in range(rounds)]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline_tree)], check=True)
    key = "pipeline_us_per_token"
    before, after = min(b[key] for b, _ in runs), min(a[key] for _, a in runs)
    return {"baseline": revision, "rounds": rounds, "before": min((b for b, _ in runs), key=lambda b: b[key]),
            "after": min((a for _, a in runs), key=lambda a: a[key]), "pipeline before/after": round(before / after, 2)}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--tokens", type=int, default=5000)
    options.add_argument("--repeats", type=int, default=7)
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
