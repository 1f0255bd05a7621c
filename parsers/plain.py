"""The parser for models with no reasoning or tool-call syntax: all text is answer text."""

from __future__ import annotations

from typing import Sequence

from parsers.deltas import Delta, OutputText


class PlainTextParser:
    """Every decoded piece of text becomes output text."""

    reasoning_tokens = 0

    def feed(self, token_ids: Sequence[int], text: str) -> list[Delta]:
        return [OutputText(text)] if text else []

    def finish(self) -> list[Delta]:
        return []
