"""Known chains: the validated history behind recent responses, so that a turn continuing one by
`previous_response_id` reads and validates only the responses the server has not seen."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

# What one API process keeps by default (each chain counted whole, though chains of one session share their items).
DEFAULT_KNOWN_CHAIN_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class KnownChain:
    """A chain of responses as the model reads it: every earlier input and output through its last response's
    output, validated, and the responses it was read from (oldest first)."""

    response_ids: tuple[str, ...]
    items: tuple[Any, ...]
    size: int  # the bytes of the stored items it was read from, near enough to bound a cache by


class KnownChains:
    """Known chains by (project, last response id), least recently used dropped first past `max_bytes`. Per API
    process; a chain is used only once its responses are all found still stored (a deleted one is not continued)."""

    def __init__(self, max_bytes: int = DEFAULT_KNOWN_CHAIN_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._chains: OrderedDict[tuple[str, str], KnownChain] = OrderedDict()

    def find(self, project: str, response_id: str) -> KnownChain | None:
        chain = self._chains.get((project, response_id))
        if chain is not None:
            self._chains.move_to_end((project, response_id))
        return chain

    def keep(self, project: str, chain: KnownChain) -> None:
        if not chain.response_ids or chain.size > self.max_bytes:
            return
        self.forget(project, chain.response_ids[-1])
        self._chains[(project, chain.response_ids[-1])] = chain
        self.bytes += chain.size
        while self.bytes > self.max_bytes:
            _, dropped = self._chains.popitem(last=False)
            self.bytes -= dropped.size

    def forget(self, project: str, response_id: str) -> None:
        dropped = self._chains.pop((project, response_id), None)
        if dropped is not None:
            self.bytes -= dropped.size
