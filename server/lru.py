"""A least-recently-used map bounded by the bytes of what it holds, each value's size said when it is kept."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BytesLru(Generic[K, V]):
    """Values by key; past `max_bytes`, the least recently used are dropped first. A value larger than the whole
    bound is not kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value kept under `key` (now the most recently used), or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def keep(self, key: K, value: V, size: int) -> None:
        """Keep `value` (of `size` bytes) under `key`, replacing what it held; then drop the oldest past the bound."""
        if size > self.max_bytes:
            return
        self.forget(key)
        self._entries[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.bytes -= dropped

    def forget(self, key: K) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry[1]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
