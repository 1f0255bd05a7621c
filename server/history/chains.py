"""Known chains: the validated history behind recent responses and conversations, so that a turn continuing one
(by `previous_response_id` or `conversation`) reads and validates only what the server has not seen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.lru import BytesLru

# What one API process keeps by default (each chain counted whole, though chains of one session share their items).
DEFAULT_KNOWN_CHAIN_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class KnownChain:
    """A chain of responses as the model reads it: every earlier input and output through its last response's
    output, validated, and the responses it was read from (oldest first)."""

    response_ids: tuple[str, ...]
    items: tuple[Any, ...]
    size: int  # the bytes of the stored items it was read from, near enough to bound a cache by


@dataclass(frozen=True)
class KnownConversation:
    """A conversation's items as the model reads them, validated, through the item `last_item_id`, the
    conversation's `count`-th."""

    items: tuple[Any, ...]
    last_item_id: str
    count: int
    size: int


Known = KnownChain | KnownConversation


class KnownChains:
    """Known chains by (project, the id of the last response, or of the conversation), least recently used dropped
    first past `max_bytes`. Per API process; what is known is used only once the store confirms it still holds it
    (a deleted response is not continued, a conversation whose items were deleted is read again)."""

    def __init__(self, max_bytes: int = DEFAULT_KNOWN_CHAIN_BYTES) -> None:
        self._known: BytesLru[tuple[str, str], Known] = BytesLru(max_bytes)

    @property
    def bytes(self) -> int:
        return self._known.bytes

    def find(self, project: str, key: str) -> Known | None:
        return self._known.get((project, key))

    def keep(self, project: str, key: str, known: Known) -> None:
        self._known.keep((project, key), known, known.size)

    def forget(self, project: str, key: str) -> None:
        self._known.forget((project, key))
