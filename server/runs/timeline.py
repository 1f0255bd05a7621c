"""A response's timeline: its phases as it was served (received, prepared, each inference round, the first token,
each hosted call, a compaction, its end), in milliseconds since it was received; stored with it, so the console
draws it with no trace collector (`GET /v1/responses/{id}/timeline`, this server's extension)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


@dataclass
class Timeline:
    """The phases so far: a moment (`at_ms`) or a span of time (`start_ms`, `end_ms`), each with its details."""

    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    phases: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()
        self.mark("received")

    def _ms(self) -> float:
        return round((self.clock() - self.started) * 1000, 1)

    def mark(self, name: str, **details: Any) -> None:
        """A moment: the response was prepared, its first token came, it ended."""
        self.phases.append({"name": name, "at_ms": self._ms(), **details})

    def marked(self, name: str) -> bool:
        return any(phase["name"] == name for phase in self.phases)

    @contextmanager
    def phase(self, name: str, **details: Any) -> Iterator[dict[str, Any]]:
        """A span of time (an inference round, a tool call, a compaction); its entry may gain details inside."""
        entry = self.begin(name, **details)
        try:
            yield entry
        finally:
            self.end(entry)

    def begin(self, name: str, **details: Any) -> dict[str, Any]:
        """A span of time begun now, ended by `end` (for one that is not a `with` block: an engine request read a
        step at a time)."""
        entry: dict[str, Any] = {"name": name, "start_ms": self._ms(), **details}
        self.phases.append(entry)
        return entry

    def end(self, entry: dict[str, Any], **details: Any) -> None:
        entry.update(details, end_ms=self._ms())

    def to_json(self) -> list[dict[str, Any]]:
        return [dict(phase) for phase in self.phases]
