"""Retrieval quality and scale of vector stores (issue 44), on the real embedding model (all-MiniLM-L6-v2 on vLLM's
pooling runner) and the real SQLite index, through the server's own chunking, embedding, index and search.

Quality: the corpus is the Python language reference's topics that ship in every CPython (`pydoc_data.topics`, 78
documents). Two query sets, each with one relevant document, built from that text: every section heading (the
heading taken out of the indexed text: a title finds its section), and every section's first sentence (taken out
too: a paraphrase-free but unseen passage finds its document). Recall@5 and nDCG@10 over documents (a document's
chunks count once, at its best rank), for vector search alone, keyword search alone, and hybrid (reciprocal rank
fusion of both, the default).

Scale (`--chunks N`): about N chunks of 100 tokens (the corpus's sentences shuffled into files, static chunking of 100
tokens without overlap) ingested into one store; ingestion throughput, then search latency p50 and p95 of each mode.

The embedding engine here may use every core (VLLM_CPU_NUM_OF_RESERVED_CPU=0, set below unless given: nothing else
runs); in the server, vLLM keeps one core for the API process. Run: python bench/retrieval.py [--chunks N]; writes
bench/results/retrieval.json."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")

from server.engine.vllm_embedder import VllmEmbedder  # noqa: E402
from server.retrieval.chunking import ChunkingStrategy, document_chunks, _tokenizer  # noqa: E402
from server.retrieval.embedding_model import BUNDLED_EMBEDDING_MODEL, ensure_embedding_model, window_tokens  # noqa: E402
from server.retrieval.embeddings import Embeddings, embedding_model  # noqa: E402
from server.retrieval.search import Ranking, Searcher  # noqa: E402
from server.records import MIGRATIONS  # noqa: E402
from server.retrieval.sqlite_index import SqliteIndex  # noqa: E402
from server.retrieval.vector_stores import StoreFile, VectorStore  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "retrieval.json"
MODES = {"vector": Ranking(text_weight=0.0), "keyword": Ranking(embedding_weight=0.0), "hybrid": Ranking()}
PROJECT = "bench"
_HEADING = re.compile(r"^(?P<title>[^\n]+)\n(?P<rule>[*=\-^]{3,})\n", re.MULTILINE)
_SENTENCE = re.compile(r"(?s)^(.{40,400}?[.!?])(\s|$)")


def corpus() -> tuple[dict[str, str], list[tuple[str, str, str]]]:
    """The documents (name -> indexed text) and the queries (set, query, relevant document's name)."""
    from pydoc_data.topics import topics

    documents: dict[str, str] = {}
    queries: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for name, text in sorted(topics.items()):
        if text in seen:
            continue
        seen.add(text)
        indexed = text
        for match in _HEADING.finditer(text):
            title = match.group("title").strip()
            if len(title.split()) >= 2:
                queries.append(("heading", title, name))
                indexed = indexed.replace(match.group(0), "\n", 1)
            after = text[match.end():].lstrip()
            sentence = _SENTENCE.match(after)
            if sentence and len(sentence.group(1).split()) >= 8 and "::=" not in sentence.group(1):
                first = sentence.group(1)
                queries.append(("sentence", " ".join(first.split()), name))
                indexed = indexed.replace(first, "", 1)
        documents[name] = indexed
    return documents, queries


async def start(model_path: Path) -> tuple[Embeddings, VllmEmbedder]:
    model = embedding_model(BUNDLED_EMBEDDING_MODEL, model_path, window_tokens(model_path))
    engine = await VllmEmbedder.start(model.path, model.name, model.window)

    async def started() -> VllmEmbedder:
        return engine

    return Embeddings(model, started), engine


async def ingest(index: SqliteIndex, embeddings: Embeddings, documents: dict[str, str],
                 strategy: ChunkingStrategy) -> tuple[str, dict[str, float]]:
    """One store holding the documents; the seconds and counts of its ingestion."""
    model = embeddings.model
    store = VectorStore(f"vs_bench{int(time.time())}", PROJECT, "bench", None, {}, model.name, model.dimensions,
                        0, int(time.time()))
    await index.create_store(store)
    tokenizer = _tokenizer(model.path)
    started, chunk_count, tokens = time.perf_counter(), 0, 0
    for name, text in documents.items():
        file = StoreFile(store.id, name, PROJECT, name, "in_progress", {}, strategy, 0)
        await index.add_files([file], None, "bench", time.time() + 3600)
        chunks = document_chunks([text], False, strategy, tokenizer, model.window)
        vectors = await embeddings.chunk_vectors(chunks)
        await index.finish_file(file, chunks, vectors)
        chunk_count += len(chunks)
        tokens += sum(chunk.tokens[1] - chunk.tokens[0] for chunk in chunks)
        if len(documents) > 20 and chunk_count // 5000 != (chunk_count - len(chunks)) // 5000:
            print(f"{chunk_count} chunks in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    return store.id, {"seconds": seconds, "chunks": chunk_count, "tokens": tokens,
                      "chunks_per_second": chunk_count / seconds, "tokens_per_second": tokens / seconds}


async def quality(index: SqliteIndex, embeddings: Embeddings) -> dict[str, Any]:
    documents, queries = corpus()
    store, ingestion = await ingest(index, embeddings, documents, ChunkingStrategy())
    searcher = Searcher(index, embeddings)
    scores: dict[str, dict[str, list[tuple[float, float]]]] = {mode: {} for mode in MODES}
    for mode, ranking in MODES.items():
        for kind, query, relevant in queries:
            hits = await searcher.search(PROJECT, [store], [query], None, 50, ranking)
            ranked = list(dict.fromkeys(hit.file_id for hit in hits))
            rank = ranked.index(relevant) + 1 if relevant in ranked else None
            recall = 1.0 if rank is not None and rank <= 5 else 0.0
            ndcg = 1.0 / math.log2(rank + 1) if rank is not None and rank <= 10 else 0.0
            scores[mode].setdefault(kind, []).append((recall, ndcg))
            scores[mode].setdefault("all", []).append((recall, ndcg))
    table = {mode: {kind: {"recall@5": round(statistics.mean(r for r, _ in pairs), 3),
                           "ndcg@10": round(statistics.mean(n for _, n in pairs), 3), "queries": len(pairs)}
                    for kind, pairs in kinds.items()} for mode, kinds in scores.items()}
    return {"documents": len(documents), "ingestion": ingestion, "metrics": table}


async def scale(index: SqliteIndex, embeddings: Embeddings, chunks: int) -> dict[str, Any]:
    """`chunks` chunks of 100 tokens in one store: ingestion throughput, then search latency by mode."""
    documents, queries = corpus()
    sentences = [s.strip() for text in documents.values() for s in re.split(r"(?<=[.!?])\s+", text) if len(s) > 20]
    rng = random.Random(0)
    per_file, files, made = 100, {}, 0
    while made < chunks:
        words: list[str] = []
        while len(words) < per_file * 52:  # ~1.9 word pieces a word in this text: `per_file` chunks of 100 tokens
            words += rng.choice(sentences).split()
        files[f"part{len(files):05d}.txt"] = " ".join(words)
        made += per_file
    store, ingestion = await ingest(index, embeddings, files, ChunkingStrategy("static", 100, 0))
    searcher = Searcher(index, embeddings)
    latency = {}
    picked = rng.sample([query for _, query, _ in queries], 40)
    for mode, ranking in MODES.items():
        seconds = []
        for query in picked:
            started = time.perf_counter()
            await searcher.search(PROJECT, [store], [query], None, 10, ranking)
            seconds.append(time.perf_counter() - started)
        seconds.sort()
        latency[mode] = {"p50_ms": round(1000 * statistics.median(seconds), 1),
                         "p95_ms": round(1000 * seconds[int(0.95 * (len(seconds) - 1))], 1)}
    return {"ingestion": ingestion, "search": latency}


async def main(chunks: int | None) -> None:
    embeddings, engine = await start(ensure_embedding_model())
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    try:
        with tempfile.TemporaryDirectory() as folder:
            index = SqliteIndex(Path(folder) / "bench.db", MIGRATIONS)
            if chunks is None:
                results["quality"] = await quality(index, embeddings)
            else:
                results["scale"] = await scale(index, embeddings, chunks)
            await index.close()
    finally:
        await engine.shutdown()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=None, help="measure scale with this many chunks instead")
    asyncio.run(main(parser.parse_args().chunks))
