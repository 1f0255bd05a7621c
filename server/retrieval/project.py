"""Retrieval as one project sees it: its vector stores, their files and batches, and searches over them. The project
is bound here once; nothing a route can call names another's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from server.errors import NotFound, RequestError
from server.retrieval.chunking import ChunkingStrategy
from server.retrieval.filters import Filter
from server.retrieval.index import FilesQuery, Order
from server.retrieval.search import Ranking
from server.retrieval.service import Retrieval
from server.retrieval.vector_stores import FileBatch, SearchHit, StoreFile, VectorStore, new_id
from server.retrieval.project_files import ProjectFiles

MAX_BATCH_FILES = 2000  # OpenAI's limit on one batch


@dataclass(frozen=True)
class FileToAdd:
    """A file a request adds to a store, with its attributes and chunking."""

    file_id: str
    attributes: dict[str, Any]
    chunking: ChunkingStrategy


@dataclass
class ProjectRetrieval:
    """One project's vector stores (server/retrieval/index.py's calls, with the project given)."""

    retrieval: Retrieval
    files: ProjectFiles  # the project's uploaded files
    clock: Callable[[], float]

    @property
    def project(self) -> str:
        return self.files.project

    async def create_store(self, name: str, description: str | None, metadata: dict[str, str],
                           expires_after_days: int | None) -> VectorStore:
        now, model = int(self.clock()), self.retrieval.embeddings.model
        store = VectorStore(new_id("vs"), self.project, name, description, metadata, model.name, model.dimensions,
                            now, now, expires_after_days)
        await self.retrieval.index.create_store(store)
        return store

    async def store(self, store_id: str) -> VectorStore:
        """The project's store (404 otherwise, or once expired)."""
        store = await self.retrieval.index.get_store(store_id, self.project)
        if store is None or store.expired(int(self.clock())):
            raise NotFound(f"No vector store found with id '{store_id}'.", param="vector_store_id")
        return store

    async def list_stores(self, after: str | None, limit: int, order: Order) -> tuple[list[VectorStore], bool]:
        return await self.retrieval.index.list_stores(self.project, after, limit, order)

    async def update_store(self, store_id: str, changes: dict[str, Any]) -> VectorStore:
        await self.store(store_id)
        await self.retrieval.index.update_store(store_id, self.project, changes)
        return await self.store(store_id)

    async def delete_store(self, store_id: str) -> None:
        if not await self.retrieval.index.delete_store(store_id, self.project):
            raise NotFound(f"No vector store found with id '{store_id}'.", param="vector_store_id")

    async def add_files(self, store: VectorStore, adding: Sequence[FileToAdd], batched: bool) -> tuple[list[StoreFile],
                                                                                                      FileBatch | None]:
        """Add files (each an uploaded file of the project: a 404 names one that is not) and start ingesting them."""
        now = int(self.clock())
        batch = FileBatch(new_id("vsfb"), store.id, self.project, now) if batched else None
        added = []
        for index, item in enumerate(adding):
            uploaded = await self.files.get_file(item.file_id)
            if uploaded is None:
                raise NotFound(f"No file found with id '{item.file_id}'.",
                               param=f"files[{index}].file_id" if batched else "file_id")
            added.append(StoreFile(store.id, item.file_id, self.project, uploaded.filename, "in_progress",
                                   item.attributes, item.chunking, now, batch.id if batch else None))
        ingestion = self.retrieval.ingestion
        await self.retrieval.index.add_files(added, batch, ingestion.worker, ingestion.lease_until())
        await self.retrieval.index.update_store(store.id, self.project, {"last_active_at": now})
        ingestion.ingest(added)
        return added, batch

    async def file(self, store_id: str, file_id: str) -> StoreFile:
        await self.store(store_id)
        found = await self.retrieval.index.get_file(store_id, file_id, self.project)
        if found is None:
            raise NotFound(f"No file found with id '{file_id}' in vector store '{store_id}'.", param="file_id")
        return found

    async def list_files(self, store_id: str, query: FilesQuery) -> tuple[list[StoreFile], bool]:
        await self.store(store_id)
        return await self.retrieval.index.list_files(store_id, self.project, query)

    async def file_text(self, store_id: str, file_id: str) -> str:
        """The text the store holds of a file: its chunks joined where they overlap (the document's text, as it was
        read)."""
        await self.file(store_id, file_id)
        text, end = "", 0
        for chunk, place in await self.retrieval.index.file_chunks(store_id, file_id, self.project):
            start = int(place["char_start"])
            text += (" " if text and start > end else "") + chunk[max(end - start, 0):]  # a gap is whitespace
            end = max(end, int(place["char_end"]))
        return text

    async def update_attributes(self, store_id: str, file_id: str, attributes: dict[str, Any]) -> StoreFile:
        await self.file(store_id, file_id)
        await self.retrieval.index.update_attributes(store_id, file_id, self.project, attributes)
        return await self.file(store_id, file_id)

    async def delete_file(self, store_id: str, file_id: str) -> None:
        await self.store(store_id)
        if not await self.retrieval.index.delete_file(store_id, file_id, self.project):
            raise NotFound(f"No file found with id '{file_id}' in vector store '{store_id}'.", param="file_id")

    async def batch(self, store_id: str, batch_id: str) -> FileBatch:
        await self.store(store_id)
        found = await self.retrieval.index.get_batch(batch_id, store_id, self.project)
        if found is None:
            raise NotFound(f"No file batch found with id '{batch_id}'.", param="batch_id")
        return found

    async def cancel_batch(self, store_id: str, batch_id: str) -> FileBatch:
        await self.batch(store_id, batch_id)
        await self.retrieval.index.cancel_batch(batch_id, store_id, self.project)
        return await self.batch(store_id, batch_id)

    async def searchable(self, store_ids: Sequence[str], param: str) -> list[VectorStore]:
        """The project's stores named, each searchable by this server's embedding model (404 for a store the project
        does not have, 400 for one embedded by another model or expired)."""
        stores = await self.retrieval.searcher.stores(self.project, store_ids, param)
        if any(store.expired(int(self.clock())) for store in stores):
            raise RequestError("A vector store searched has expired.", param=param)
        return stores

    async def search(self, store_ids: Sequence[str], queries: Sequence[str], where: Filter | None, limit: int,
                     rank: Ranking, param: str = "vector_store_id") -> list[SearchHit]:
        """The best chunks of the project's stores named (404 for a store it does not have)."""
        stores = await self.searchable(store_ids, param)
        hits = await self.retrieval.searcher.search(self.project, [store.id for store in stores], queries, where,
                                                    limit, rank)
        for store in stores:
            await self.retrieval.index.update_store(store.id, self.project, {"last_active_at": int(self.clock())})
        return hits
