"""The retrieval index's interface: vector stores, their files and batches, the chunks ingested, and the two searches
(by vector, by keyword) that a hybrid search fuses. Every call names the project: a store, file or chunk of another
project is not found, and a search never reaches one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, Sequence

from server.retrieval.chunking import Chunk
from server.retrieval.filters import Filter
from server.retrieval.vector_stores import ErrorCode, FileBatch, FileStatus, SearchHit, StoreFile, VectorStore

Order = Literal["asc", "desc"]


@dataclass(frozen=True)
class FilesQuery:
    """A page of a store's files: of one batch, of one status, after a file id, in an order."""

    batch_id: str | None = None
    status: FileStatus | None = None
    after: str | None = None
    limit: int = 20
    order: Order = "desc"


@dataclass(frozen=True)
class Ranked:
    """A chunk found by one search, by its id, with that search's score (higher is better)."""

    chunk_id: int
    score: float


class VectorIndex(Protocol):
    """Where vector stores live: SQLite (sqlite-vec and FTS5) or PostgreSQL."""

    async def ready(self) -> None:
        """Open the index's connection now (before other work shares its database file)."""

    async def create_store(self, store: VectorStore) -> None: ...

    async def get_store(self, store_id: str, project: str) -> VectorStore | None:
        """The store with its file counts and usage (None: not the project's)."""

    async def list_stores(self, project: str, after: str | None, limit: int,
                          order: Order) -> tuple[list[VectorStore], bool]: ...

    async def update_store(self, store_id: str, project: str, changes: dict[str, Any]) -> bool:
        """Set `name`, `metadata`, `expires_after_days` or `last_active_at` (False: not the project's store)."""

    async def delete_store(self, store_id: str, project: str) -> bool: ...

    async def add_files(self, files: Sequence[StoreFile], batch: FileBatch | None, worker: str,
                        lease_until: float) -> None:
        """Add (or add again) files in progress, leased to `worker`, with their batch."""

    async def get_file(self, store_id: str, file_id: str, project: str) -> StoreFile | None: ...

    async def list_files(self, store_id: str, project: str, query: FilesQuery) -> tuple[list[StoreFile], bool]: ...

    async def file_chunks(self, store_id: str, file_id: str, project: str) -> list[tuple[str, dict[str, Any]]]:
        """The file's chunks in order: each one's text and place (`Chunk.attributes`)."""

    async def update_attributes(self, store_id: str, file_id: str, project: str,
                                attributes: dict[str, Any]) -> bool: ...

    async def delete_file(self, store_id: str, file_id: str, project: str) -> bool:
        """Remove the file and its chunks from the store (the uploaded file stays)."""

    async def get_batch(self, batch_id: str, store_id: str, project: str) -> FileBatch | None: ...

    async def cancel_batch(self, batch_id: str, store_id: str, project: str) -> bool:
        """Mark the batch cancelled and its files still in progress cancelled."""

    async def claim(self, worker: str, now: float, lease_until: float, resume: bool = False) -> list[StoreFile]:
        """Files in progress whose lease has run out (their process died): leased to `worker` now, and returned for
        it to ingest; the leases `worker` holds are renewed. `resume` (a process's first claim): its own files are
        claimed too, whatever their lease (this process before a restart, under the same name, left them)."""

    async def finish_file(self, file: StoreFile, chunks: Sequence[Chunk], vectors: Sequence[bytes]) -> bool:
        """Store the file's chunks and mark it completed, unless it is no longer in progress (cancelled, deleted):
        then nothing is stored (False)."""

    async def fail_file(self, file: StoreFile, code: ErrorCode, message: str) -> None: ...

    async def vector_search(self, project: str, store_ids: Sequence[str], vector: bytes, where: Filter | None,
                            limit: int) -> list[Ranked]:
        """The chunks nearest `vector` (score: cosine similarity), among the completed files matching `where`."""

    async def keyword_search(self, project: str, store_ids: Sequence[str], words: Sequence[str],
                             where: Filter | None, limit: int) -> list[Ranked]:
        """The chunks best matching any of `words` by BM25 (score: higher is better), among the same files."""

    async def hits(self, project: str, ranked: Sequence[tuple[int, float]]) -> list[SearchHit]:
        """The results for chunks by id, with their scores, in the given order."""

    async def close(self) -> None: ...
