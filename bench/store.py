"""Benchmark: the SQLite store's write latency per response, alone and under 32 concurrent writers; and with
`--stored N`, at N stored responses with retention by count on (the keeper deleting half of them in batches as the
server does, meanwhile) against retention off.

    .venv/bin/python bench/store.py [--responses 256] [--events 300] [--stored 50000]

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

from server.runs.background import BackgroundRuns  # noqa: E402
from server.responses.records import RetentionPolicy, StoredResponse  # noqa: E402
from server.records import open_records  # noqa: E402
from server.responses.response_records import ResponseRecords  # noqa: E402


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


async def timed_save(store: ResponseRecords, record: StoredResponse, log: list[str]) -> float:
    start = time.perf_counter()
    await store.save(record, events=log)
    return time.perf_counter() - start


async def run(responses: int, events: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as directory:
        records = open_records(f"sqlite:///{Path(directory) / 'bench.db'}", RetentionPolicy(), Path("unused"))
        assert records is not None
        store = records.responses
        await timed_save(store, *make_record(-1, events))  # warm-up: schema and connection
        alone = [await timed_save(store, *make_record(n, events)) for n in range(32)]
        concurrent: list[float] = []
        for batch in range(32, 32 + responses, 32):
            concurrent += await asyncio.gather(*(timed_save(store, *make_record(n, events))
                                                 for n in range(batch, batch + 32)))
        await records.close()

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {"p50_ms": round(statistics.median(ordered) * 1e3, 2),
                "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1e3, 2)}

    single, loaded = summary(alone), summary(concurrent)
    return {"events per response": events, "alone": single, "32 concurrent writers": loaded,
            "p50 ratio concurrent/alone": round(loaded["p50_ms"] / single["p50_ms"], 2)}


def _prefill(path: Path, count: int) -> None:
    """`count` finished responses written straight into the file (the store's own schema, made by a first save)."""
    import sqlite3

    with sqlite3.connect(path) as db:
        db.executemany("INSERT INTO responses (id, created_at, status, response) VALUES (?, ?, 'completed', ?)",
                       ((f"old_{n}", n, '{"status": "completed"}') for n in range(count)))


async def with_retention(stored: int, saves: int, events: int) -> dict[str, object]:
    """Save latency at `stored` responses: retention off, then on (keeping half, so the keeper has half to delete
    while the saves run)."""
    out: dict[str, object] = {"stored": stored}
    for label, policy in (("retention off", RetentionPolicy()), ("retention on", RetentionPolicy(max_count=stored // 2))):
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "bench.db"
            records = open_records(f"sqlite:///{path}", policy, Path("unused"))
            assert records is not None
            store = records.responses
            await timed_save(store, *make_record(-1, events))
            _prefill(path, stored)
            keeper = BackgroundRuns(lease_seconds=0.3)  # a retention round every 0.1 s, as often as it can matter
            rounds = asyncio.ensure_future(_retention_rounds(keeper, store))
            times = [await timed_save(store, *make_record(n, events)) for n in range(saves)]
            rounds.cancel()
            await asyncio.gather(rounds, return_exceptions=True)
            await records.close()
        ordered = sorted(times)
        out[label] = {"p50_ms": round(statistics.median(ordered) * 1e3, 2),
                      "p99_ms": round(ordered[int(len(ordered) * 0.99) - 1] * 1e3, 2)}
    on, off = out["retention on"], out["retention off"]
    out["p50 ratio on/off"] = round(on["p50_ms"] / off["p50_ms"], 2)  # type: ignore[index]
    out["p99 ratio on/off"] = round(on["p99_ms"] / off["p99_ms"], 2)  # type: ignore[index]
    return out


async def _retention_rounds(keeper: BackgroundRuns, store: ResponseRecords) -> None:
    while True:
        await keeper._retain(store)
        await asyncio.sleep(keeper.lease_seconds / 3)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--responses", type=int, default=256)
    options.add_argument("--events", type=int, default=300)
    options.add_argument("--stored", type=int, default=0, help="also measure retention at this many stored responses")
    args = options.parse_args()
    report = asyncio.run(run(args.responses, args.events))
    if args.stored:
        report["retention"] = asyncio.run(with_retention(args.stored, args.responses, args.events))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
