"""The server's embedding model, as retrieval uses it: started the first time it is needed, a chunk's or a query's
vector pooled from its windows (a text longer than the model reads is embedded a window at a time, and the windows'
vectors averaged by their length: nothing is cut off), vectors kept as float32 bytes of unit length."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol, Sequence

import numpy as np

from server.errors import DependencyFailed
from server.retrieval.chunking import Chunk, query_prompts

logger = logging.getLogger(__name__)
BATCH_PROMPTS = 64  # prompts sent to the engine at once: bounds the memory of a large file's ingestion


class Embedder(Protocol):
    """An engine embedding token-id prompts (server/engine/vllm_embedder.py)."""

    model: str
    window: int
    dimensions: int

    async def embed(self, prompts: list[list[int]]) -> list[list[float]]: ...

    async def shutdown(self) -> None: ...


@dataclass(frozen=True)
class EmbeddingModel:
    """Which model embeds: the name stores remember, its checkpoint, the tokens it reads, its dimensions."""

    name: str
    path: str
    window: int
    dimensions: int


def embedding_model(name: str, path: str | Path, window: int | None) -> EmbeddingModel:
    """The model at `path` (a local checkpoint), its dimensions read from its config (a sentence-transformers
    Dense layer's output, else the hidden size), its window from `window` or its config."""
    path = Path(path)
    dense = path / "2_Dense" / "config.json"
    config = json.loads((dense if dense.is_file() else path / "config.json").read_text())
    dimensions = int(config.get("out_features") or config["hidden_size"])
    window = window or int(json.loads((path / "config.json").read_text()).get("max_position_embeddings", 512))
    return EmbeddingModel(name, str(path), window, dimensions)


@dataclass
class Embeddings:
    """The embedding engine of this process, started by `start` on first use (one start, however many ask)."""

    model: EmbeddingModel
    start: Callable[[], Awaitable[Embedder]]
    _engine: Embedder | None = None
    _starting: asyncio.Lock = field(default_factory=asyncio.Lock)
    _tokenizer: Any = None

    async def engine(self) -> Embedder:
        async with self._starting:
            if self._engine is None:
                try:
                    self._engine = await self.start()
                except Exception as exc:
                    logger.exception("the embedding model %s did not start", self.model.name)
                    raise DependencyFailed(f"The embedding model {self.model.name} could not start: {exc}") from exc
                if self._engine.dimensions != self.model.dimensions:
                    logger.warning("the embedding model %s embeds %d dimensions, its config says %d",
                                   self.model.name, self._engine.dimensions, self.model.dimensions)
        return self._engine

    async def chunk_vectors(self, chunks: Sequence[Chunk]) -> list[bytes]:
        """Each chunk's vector, its windows sent to the engine BATCH_PROMPTS at a time."""
        engine = await self.engine()
        prompts = [(index, list(prompt)) for index, chunk in enumerate(chunks) for prompt in chunk.prompts]
        vectors: list[list[float]] = []
        for start in range(0, len(prompts), BATCH_PROMPTS):
            vectors += await engine.embed([prompt for _, prompt in prompts[start:start + BATCH_PROMPTS]])
        pooled: list[list[tuple[int, list[float]]]] = [[] for _ in chunks]
        for (index, prompt), vector in zip(prompts, vectors):
            pooled[index].append((len(prompt), vector))
        return [pooled_vector(windows) for windows in pooled]

    async def query_vector(self, query: str) -> bytes:
        engine = await self.engine()
        tokenizer = await self.tokenizer()
        prompts = await asyncio.to_thread(query_prompts, query, tokenizer, engine.window)
        vectors = await engine.embed([list(prompt) for prompt in prompts])
        return pooled_vector([(len(prompt), vector) for prompt, vector in zip(prompts, vectors)])

    async def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, self.model.path)
        return self._tokenizer

    async def shutdown(self) -> None:
        if self._engine is not None:
            await self._engine.shutdown()


def pooled_vector(windows: Sequence[tuple[int, Sequence[float]]]) -> bytes:
    """One unit vector from the windows' (length, vector): their mean weighted by length, normalized; float32."""
    weights = np.array([length for length, _ in windows], dtype=np.float64)
    mean = (np.array([vector for _, vector in windows], dtype=np.float64) * weights[:, None]).sum(axis=0)
    norm = np.linalg.norm(mean)
    return (mean / norm if norm > 0 else mean).astype(np.float32).tobytes()
