"""The interface every output parser implements."""

from __future__ import annotations

from typing import Protocol, Sequence

from parsers.deltas import Delta


class OutputParser(Protocol):
    """Turns one request's generated tokens (and their decoded text) into neutral deltas."""

    reasoning_tokens: int
    error: str | None  # set when the output cannot be parsed further; the response then fails

    def feed(self, token_ids: Sequence[int], text: str, token_ends: Sequence[int] | None = None) -> list[Delta]:
        """Deltas for one engine step; may hold back text that could start a tag.

        `token_ends[i]` is where token i's text ends within `text` (for exact per-token accounting).
        """
        ...

    def finish(self) -> list[Delta]:
        """Deltas for whatever is held back when generation ends."""
        ...
