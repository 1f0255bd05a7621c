"""One project's batches: the only way routes, the console and runners read or change them, each call within the
project."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from server.batches.batch import COMPLETION_WINDOWS, ENDPOINTS, Batch, new_batch_id
from server.batches.records import BatchRecords, Result
from server.errors import NotFound, RequestError
from server.retrieval.project_files import ProjectFiles
from server.retrieval.vector_stores import checked_metadata
from server.store.database import Order


@dataclass(frozen=True)
class ProjectBatches:
    """The batches as `project` sees them: its own only."""

    records: BatchRecords
    files: ProjectFiles
    project: str

    async def create(self, body: dict[str, Any], api_key_id: str | None) -> Batch:
        """A new batch, validating, from `POST /v1/batches`'s body (RequestError naming a bad field)."""
        endpoint, window = body.get("endpoint"), body.get("completion_window")
        if endpoint not in ENDPOINTS:
            raise RequestError(f"endpoint must be one of: {', '.join(ENDPOINTS)} (the batch endpoints this server "
                               "serves).", param="endpoint", code="invalid_value")
        if window not in COMPLETION_WINDOWS:
            raise RequestError("completion_window must be '24h'.", param="completion_window", code="invalid_value")
        file_id = body.get("input_file_id")
        if not isinstance(file_id, str):
            raise RequestError("input_file_id is required.", param="input_file_id")
        found = await self.files.get_file(file_id)
        if found is None:
            raise NotFound(f"No such File object: {file_id}", param="input_file_id")
        if found.purpose != "batch":
            raise RequestError(f"The input file must have purpose 'batch', not '{found.purpose}'.",
                               param="input_file_id", code="invalid_value")
        batch = Batch(new_batch_id(), self.project, api_key_id, endpoint, file_id, window, int(time.time()),
                      metadata=checked_metadata(body.get("metadata")))
        await self.records.create(batch)
        return batch

    async def get(self, batch_id: str) -> Batch | None:
        return await self.records.get(batch_id, self.project)

    async def list(self, after: str | None, limit: int, order: Order = "desc") -> tuple[list[Batch], bool]:
        return await self.records.list(self.project, after, limit, order)

    async def cancel(self, batch_id: str) -> Batch | None:
        return await self.records.cancel(batch_id, self.project, int(time.time()))

    async def save(self, owner: str, batch: Batch) -> bool:
        return await self.records.save(owner, replace(batch, project=self.project))

    async def add_result(self, owner: str, batch: Batch, result: Result) -> bool:
        if batch.project != self.project:
            return False
        return await self.records.add_result(owner, batch.id, result)

    async def done_lines(self, batch: Batch) -> set[int]:
        return await self.records.done_lines(batch.id) if batch.project == self.project else set()

    async def results_page(self, batch: Batch, after: int) -> list[Result]:
        return await self.records.results_page(batch.id, after) if batch.project == self.project else []
