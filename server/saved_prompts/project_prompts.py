"""One project's reusable prompts: the only way requests, routes and the command line read or add them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from server.saved_prompts.prompt import SavedPrompt, new_prompt_id
from server.saved_prompts.records import PromptRecords
from server.store.database import Order


@dataclass(frozen=True)
class ProjectPrompts:
    """The prompts as `project` sees them: its own only."""

    records: PromptRecords
    project: str

    async def create(self, instructions: str | None, items: list[dict[str, Any]] | None) -> SavedPrompt:
        """A new prompt, at version 1."""
        made = await self.records.add(SavedPrompt(new_prompt_id(), 0, self.project, instructions, items,
                                                  int(time.time())))
        assert made is not None, "a new id is no other project's"
        return made

    async def add_version(self, prompt_id: str, instructions: str | None,
                          items: list[dict[str, Any]] | None) -> SavedPrompt | None:
        """The prompt's next version (None: the project has no such prompt)."""
        if await self.records.get(prompt_id, self.project, None) is None:
            return None
        return await self.records.add(SavedPrompt(prompt_id, 0, self.project, instructions, items,
                                                  int(time.time())))

    async def get(self, prompt_id: str, version: int | None = None) -> SavedPrompt | None:
        return await self.records.get(prompt_id, self.project, version)

    async def versions(self, prompt_id: str) -> list[SavedPrompt]:
        return await self.records.versions(prompt_id, self.project)

    async def latest(self, after: str | None, limit: int, order: Order) -> tuple[list[SavedPrompt], bool]:
        return await self.records.latest(self.project, after, limit, order)
