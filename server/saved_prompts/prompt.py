"""A reusable prompt as stored: one version of a project's prompt, its instructions and input items, and the
`{{variables}}` they hold."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any, Iterator

VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")  # `{{name}}`, spaces inside the braces allowed


def new_prompt_id() -> str:
    """A new prompt's id (`pmpt_...`, as OpenAI's)."""
    return f"pmpt_{secrets.token_hex(24)}"


@dataclass(frozen=True)
class SavedPrompt:
    """One version of a prompt: `instructions` and/or `input` items (JSON, as a request sends them)."""

    id: str
    version: int
    project: str
    instructions: str | None
    input: list[dict[str, Any]] | None
    created_at: int

    def variables(self) -> list[str]:
        """The names of its `{{variables}}`, each once, in the order they first appear."""
        found: dict[str, None] = {}
        for text in self.texts():
            found.update((name, None) for name in VARIABLE.findall(text))
        return list(found)

    def texts(self) -> Iterator[str]:
        """Every text a variable may be in: the instructions, and the input items' text (strings and text parts)."""
        if self.instructions:
            yield self.instructions
        for item in self.input or []:
            for key in ("content", "output"):
                value = item.get(key)
                if isinstance(value, str):
                    yield value
                elif isinstance(value, list):
                    yield from (part["text"] for part in value if isinstance(part, dict)
                                and isinstance(part.get("text"), str))

    def to_api(self) -> dict[str, Any]:
        """The prompt as this server's `/v1/prompts` shows it (its version as a string, as requests name it)."""
        return {"id": self.id, "object": "prompt", "version": str(self.version), "created_at": self.created_at,
                "instructions": self.instructions, "input": self.input, "variables": self.variables()}
