"""Ingestion: files added to vector stores are read, chunked (in the work pool) and embedded in the background, a few
at a time, by the process that holds each one's lease. A process renews its leases while it lives; a file whose lease
runs out (its process died, or restarted) is claimed by the next process that looks, so that no file stays
`in_progress`: it completes or fails."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from server.file_data import FileError
from server.attachments.work_pool import WorkPool, WorkTooCostly
from server.retrieval.chunking import file_chunks
from server.retrieval.embeddings import Embeddings
from server.retrieval.index import VectorIndex
from server.retrieval.vector_stores import StoreFile
from server.retrieval.project_files import ProjectFiles

logger = logging.getLogger(__name__)
MAX_INGESTED_BYTES = 64 * 1024 * 1024  # the largest file read into a store (its text and chunks are held at once)


@dataclass
class Ingestion:
    """This process's share of ingestion: the files it holds leases on, `concurrency` of them ingested at once."""

    index: VectorIndex
    embeddings: Embeddings
    pool: WorkPool
    files: Callable[[str], ProjectFiles]  # a project's uploaded files
    worker: str  # this process, as leases name it
    lease_seconds: float = 30.0
    concurrency: int = 2
    clock: Callable[[], float] = time.time
    _running: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)
    _turns: asyncio.Semaphore | None = None
    _loop: asyncio.Task[None] | None = None

    def lease_until(self) -> float:
        return self.clock() + self.lease_seconds

    def start(self) -> None:
        """Claim what the processes before left in progress, then keep leases renewed and claim expired ones."""
        self._loop = asyncio.create_task(self._claiming())

    async def stop(self) -> None:
        tasks = [task for task in (self._loop, *self._running.values()) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def ingest(self, files: list[StoreFile]) -> None:
        """Ingest files this process was just leased (added by a request it served)."""
        for file in files:
            key = (file.vector_store_id, file.file_id)
            running = self._running.get(key)
            if running is not None:
                running.cancel()  # added again: the newer addition is ingested
            self._running[key] = asyncio.create_task(self._ingest(file))

    async def _claiming(self) -> None:
        resume = True  # the first claim takes this process's own files too: it left them before a restart
        while True:
            try:
                claimed = await self.index.claim(self.worker, self.clock(), self.lease_until(), resume)
                self.ingest([file for file in claimed if (file.vector_store_id, file.file_id) not in self._running])
                resume = False
            except Exception:
                logger.exception("claiming vector store files failed; trying again")
            await asyncio.sleep(self.lease_seconds / 3)

    async def _ingest(self, file: StoreFile) -> None:
        key = (file.vector_store_id, file.file_id)
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.concurrency)
        try:
            async with self._turns:
                await self._ingest_now(file)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("ingesting %s into %s failed", file.file_id, file.vector_store_id)
            await self.index.fail_file(file, "server_error", f"The file could not be ingested: {exc}")
        finally:
            if self._running.get(key) is asyncio.current_task():
                del self._running[key]

    async def _ingest_now(self, file: StoreFile) -> None:
        found = await self.files(file.project).file_content(file.file_id, MAX_INGESTED_BYTES)
        if found is None:
            await self.index.fail_file(file, "invalid_file", f"The file {file.file_id} no longer exists.")
            return
        record, data = found
        if data is None:
            await self.index.fail_file(file, "invalid_file", f"The file is larger than this server ingests "
                                       f"({MAX_INGESTED_BYTES // (1024 * 1024)} MiB).")
            return
        model = self.embeddings.model
        try:
            chunks = await self.pool.run(file_chunks, data, record.filename, file.chunking, model.path, model.window)
        except FileError as exc:
            await self.index.fail_file(file, "unsupported_file", f"The file cannot be ingested: {exc}.")
            return
        except WorkTooCostly as exc:
            await self.index.fail_file(file, "invalid_file", f"Reading the file took more {exc.kind} than this "
                                       "server allows.")
            return
        if not chunks:
            await self.index.fail_file(file, "invalid_file", "The file has no text to search.")
            return
        vectors = await self.embeddings.chunk_vectors(chunks)
        await self.index.finish_file(file, chunks, vectors)
