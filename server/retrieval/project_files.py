"""One project's uploaded files: the only way requests read or change them, each call within the project."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Iterable

from server.attachments.files import LoadFile
from server.file_data import MAX_FILE_BYTES, FileError
from server.retrieval.file_records import FileRecords
from server.retrieval.files import StoredFile
from server.store.database import Order


@dataclass(frozen=True)
class ProjectFiles:
    """The uploaded files as `project` sees them: its own, not expired."""

    records: FileRecords
    project: str

    async def save_file(self, record: StoredFile, parts: Iterable[bytes]) -> None:
        await self.records.save_file(replace(record, project=self.project), parts)

    async def get_file(self, file_id: str) -> StoredFile | None:
        return await self.records.get_file(file_id, self.project, int(time.time()))

    async def list_files(self, purpose: str | None, after: str | None, limit: int,
                         order: Order) -> tuple[list[StoredFile], bool]:
        return await self.records.list_files(self.project, int(time.time()), purpose, after, limit, order)

    async def file_part(self, file_id: str, position: int) -> bytes | None:
        return await self.records.file_part(file_id, self.project, position)

    async def file_content(self, file_id: str, max_bytes: int) -> tuple[StoredFile, bytes | None] | None:
        """The file and its content, read a part at a time (None content: larger than `max_bytes`)."""
        record = await self.get_file(file_id)
        if record is None or record.bytes > max_bytes:
            return (record, None) if record is not None else None
        parts, position = [], 0
        while (part := await self.file_part(file_id, position)) is not None:
            parts.append(part)
            position += 1
        return record, b"".join(parts)

    async def delete_file(self, file_id: str) -> bool:
        return await self.records.delete_file(file_id, self.project)

    def loader(self) -> LoadFile:
        """How a request's `input_file` parts read uploaded files: within the size the server reads for a prompt."""
        async def load(file_id: str) -> tuple[str, bytes] | None:
            found = await self.file_content(file_id, MAX_FILE_BYTES)
            if found is None:
                return None
            record, data = found
            if data is None:
                raise FileError(f"the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB, the most this "
                                "server reads into a prompt")
            return record.filename, data

        return load
