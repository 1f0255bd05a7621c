"""Incremental search for tags in streamed text, holding back a tail that could be the start of a tag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass
class TagScanner:
    """Feeds text and returns (text, tag) pieces; the work per call is proportional to the new text."""

    held: str = ""

    def scan(self, text: str, tags: Sequence[str]) -> tuple[str, str | None, str]:
        """Split held + text at the first of `tags`: (text before, the tag, text after).

        With no tag found, the text that cannot be the start of a tag is returned and the rest held.
        The caller feeds `after` back in (with the tags of its new state) via `scan(after, ...)`.
        """
        buffer = self.held + text if self.held else text
        self.held = ""
        if not any(tag[0] in buffer for tag in tags):  # the common case: no tag, nor the start of one
            return buffer, None, ""
        first, found = len(buffer), None
        for tag in tags:
            at = buffer.find(tag)
            if 0 <= at < first:
                first, found = at, tag
        if found is not None:
            return buffer[:first], found, buffer[first + len(found):]
        keep = _partial_tag_suffix(buffer, tags)
        self.held = buffer[len(buffer) - keep:] if keep else ""
        return buffer[: len(buffer) - keep], None, ""

    def flush(self) -> str:
        held, self.held = self.held, ""
        return held


def _partial_tag_suffix(text: str, tags: Sequence[str]) -> int:
    """Length of the longest end of `text` that is a proper prefix of a tag."""
    longest = 0
    for tag in tags:
        for size in range(min(len(tag) - 1, len(text)), longest, -1):
            if text.endswith(tag[:size]):
                longest = size
                break
    return longest
