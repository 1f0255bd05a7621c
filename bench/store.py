"""Benchmark: the SQLite store's write latency per response, alone and under 32 concurrent writers.

    .venv/bin/python bench/store.py [--responses 256] [--events 300]

Each response carries a realistic event log (created, in_progress, `--events` deltas, the terminal
response). The baseline is the same write with no other writer, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from server.store.interface import StoredResponse  # noqa: E402
from server.store.sqlite import SqliteStore  # noqa: E402


def make_record(n: int, events: int) -> tuple[StoredResponse, list[str]]:
    response_id = f"resp_{n:06d}"
    text = "word " * events
    response = {"id": response_id, "object": "response", "status": "completed", "output": [
        {"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}]}
    log = [json.dumps({"type": "response.output_text.delta", "sequence_number": i, "delta": "word ",
                       "item_id": f"msg_{n}", "output_index": 0, "content_index": 0, "logprobs": []})
           for i in range(events)]
    items = [{"id": f"msg_in_{n}", "type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "question"}]}]
    return StoredResponse(response_id, time.time(), "completed", response, items), log


async def timed_save(store: SqliteStore, record: StoredResponse, log: list[str]) -> float:
    start = time.perf_counter()
    await store.save(record, events=log)
    return time.perf_counter() - start


async def run(responses: int, events: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteStore(Path(directory) / "bench.db")
        await timed_save(store, *make_record(-1, events))  # warm-up: schema and connection
        alone = [await timed_save(store, *make_record(n, events)) for n in range(32)]
        concurrent: list[float] = []
        for batch in range(32, 32 + responses, 32):
            concurrent += await asyncio.gather(*(timed_save(store, *make_record(n, events))
                                                 for n in range(batch, batch + 32)))
        await store.close()

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {"p50_ms": round(statistics.median(ordered) * 1e3, 2),
                "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1e3, 2)}

    single, loaded = summary(alone), summary(concurrent)
    return {"events per response": events, "alone": single, "32 concurrent writers": loaded,
            "p50 ratio concurrent/alone": round(loaded["p50_ms"] / single["p50_ms"], 2)}


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--responses", type=int, default=256)
    options.add_argument("--events", type=int, default=300)
    args = options.parse_args()
    print(json.dumps(asyncio.run(run(args.responses, args.events)), indent=2))


if __name__ == "__main__":
    main()
