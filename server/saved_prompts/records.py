"""Reusable prompts in the shared database: every version of each, every call within one project."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server.saved_prompts.prompt import SavedPrompt
from server.store.database import Database, Order, Session

_COLUMNS = "id, version, project, instructions, input, created_at"


@dataclass
class PromptRecords:
    """The prompts in `database`."""

    database: Database

    async def add(self, prompt: SavedPrompt) -> SavedPrompt | None:
        """Store `prompt` as its id's next version (the first: 1), unless the id is another project's: then None."""
        def write(db: Session) -> SavedPrompt | None:
            owners = {project for (project,) in db.execute(
                "SELECT DISTINCT project FROM prompts WHERE id = ?", (prompt.id,)).fetchall()}
            if owners - {prompt.project}:
                return None
            (last,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM prompts WHERE id = ?",
                                 (prompt.id,)).fetchone()
            stored = SavedPrompt(prompt.id, int(last) + 1, prompt.project, prompt.instructions, prompt.input,
                                 prompt.created_at)
            db.execute(f"INSERT INTO prompts ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                       (stored.id, stored.version, stored.project, stored.instructions,
                        json.dumps(stored.input) if stored.input is not None else None, stored.created_at))
            return stored

        return await self.database.run("add_prompt", write)

    async def get(self, prompt_id: str, project: str, version: int | None) -> SavedPrompt | None:
        """The project's prompt at `version` (None: its latest)."""
        if version is None:
            sql = f"SELECT {_COLUMNS} FROM prompts WHERE id = ? AND project = ? ORDER BY version DESC LIMIT 1"
            parameters: tuple[Any, ...] = (prompt_id, project)
        else:
            sql = f"SELECT {_COLUMNS} FROM prompts WHERE id = ? AND project = ? AND version = ?"
            parameters = (prompt_id, project, version)
        row = await self.database.run("get_prompt", lambda db: db.execute(sql, parameters).fetchone())
        return _prompt(row) if row else None

    async def versions(self, prompt_id: str, project: str) -> list[SavedPrompt]:
        """Every version of the project's prompt, the first first."""
        rows = await self.database.run("prompt_versions", lambda db: db.execute(
            f"SELECT {_COLUMNS} FROM prompts WHERE id = ? AND project = ? ORDER BY version",
            (prompt_id, project)).fetchall())
        return [_prompt(row) for row in rows]

    async def latest(self, project: str, after: str | None, limit: int,
                     order: Order) -> tuple[list[SavedPrompt], bool]:
        """A page of the project's prompts (each at its latest version), by when they were first made, after the
        prompt `after`; and whether more follow."""
        direction, compare = ("DESC", "<") if order == "desc" else ("ASC", ">")
        first = "(SELECT MIN(created_at) FROM prompts f WHERE f.id = p.id)"
        where, parameters = ("p.project = ? AND p.version = (SELECT MAX(version) FROM prompts v WHERE v.id = p.id)",
                             [project])
        if after is not None:
            where += (f" AND ({first}, p.id) {compare} (SELECT MIN(created_at), id FROM prompts WHERE id = ? AND "
                      "project = ? GROUP BY id)")
            parameters += [after, project]
        sql = (f"SELECT {', '.join('p.' + c.strip() for c in _COLUMNS.split(','))} FROM prompts p WHERE {where} "
               f"ORDER BY {first} {direction}, p.id {direction} LIMIT ?")
        rows = await self.database.run("list_prompts", lambda db: db.execute(sql, (*parameters, limit + 1)).fetchall())
        return [_prompt(row) for row in rows[:limit]], len(rows) > limit


def _prompt(row: Any) -> SavedPrompt:
    prompt_id, version, project, instructions, items, created_at = row
    return SavedPrompt(prompt_id, int(version), project, instructions, json.loads(items) if items else None,
                       int(created_at))
