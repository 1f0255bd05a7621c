"""Uploaded files in the shared database, their content in parts (so every replica serves them): every call names the
project, and sees only its live files (server/retrieval/project_files.py is how requests call them)."""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Iterable

from server.retrieval.files import StoredFile
from server.store.database import Database, Order, Session

_COLUMNS = "id, project, filename, purpose, bytes, created_at, expires_at"
_LIVE = "project = ? AND (expires_at IS NULL OR expires_at > ?)"  # a project's files now (parameters: project, now)


@dataclass
class FileRecords:
    """The uploaded files in `database`."""

    database: Database

    async def save_file(self, record: StoredFile, parts: Iterable[bytes]) -> None:
        """Store the file's record and its content, part by part, in one transaction (`parts` read as written)."""
        def write(db: Session) -> None:
            db.execute(f"INSERT INTO files ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", astuple(record))
            for position, data in enumerate(parts):
                db.execute("INSERT INTO file_parts (file_id, position, data) VALUES (?, ?, ?)",
                           (record.id, position, data))

        await self.database.run("save_file", write)

    async def get_file(self, file_id: str, project: str, now: int) -> StoredFile | None:
        row = await self.database.run("get_file", lambda db: db.execute(
            f"SELECT {_COLUMNS} FROM files WHERE id = ? AND {_LIVE}", (file_id, project, now)).fetchone())
        return StoredFile(*row) if row else None

    async def list_files(self, project: str, now: int, purpose: str | None, after: str | None, limit: int,
                         order: Order) -> tuple[list[StoredFile], bool]:
        """A page of the project's live files, newest first (or oldest), after the file `after`."""
        direction, compare = ("DESC", "<") if order == "desc" else ("ASC", ">")
        where, parameters = _LIVE, [project, now]
        if purpose is not None:
            where, parameters = where + " AND purpose = ?", [*parameters, purpose]
        if after is not None:
            where += f" AND (created_at, id) {compare} (SELECT created_at, id FROM files WHERE id = ? AND project = ?)"
            parameters += [after, project]
        sql = (f"SELECT {_COLUMNS} FROM files WHERE {where} ORDER BY created_at {direction}, id {direction} "
               "LIMIT ?")
        rows = await self.database.run("list_files", lambda db: db.execute(sql, (*parameters, limit + 1)).fetchall())
        return [StoredFile(*row) for row in rows[:limit]], len(rows) > limit

    async def file_part(self, file_id: str, project: str, position: int) -> bytes | None:
        """The file's content part at `position` (None: past its end, or not the project's)."""
        row = await self.database.run("file_part", lambda db: db.execute(
            "SELECT data FROM file_parts WHERE file_id = ? AND position = ? AND file_id IN "
            "(SELECT id FROM files WHERE id = ? AND project = ?)", (file_id, position, file_id, project)).fetchone())
        return bytes(row[0]) if row else None

    async def delete_file(self, file_id: str, project: str) -> bool:
        return await self.database.run("delete_file", lambda db: db.execute(
            "DELETE FROM files WHERE id = ? AND project = ?", (file_id, project)).rowcount > 0)
