"""Known prompts: the rendered prompts of recent turns, found again by what the next turn names (its previous
response, its conversation, its `prompt_cache_key`), in a cache bounded by bytes."""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from typing import Hashable, Literal

# What one API process keeps by default: about 80 prompts of 150k tokens (text, and ids at 4 bytes each).
DEFAULT_KNOWN_PROMPT_BYTES = 256 * 1024 * 1024

# What a render did with a known prompt: extended it whole, reused it only up to where the render changed it (the
# template rewrote an earlier turn: the fallback, counted in /metrics), or had none to use.
Outcome = Literal["extended", "fallback", "full"]


@dataclass(frozen=True)
class KnownPrompt:
    """A rendered prompt kept for the turns that extend it: its text, its token ids, and the places where it can be
    cut (`cut_chars[k]` characters of text are exactly `cut_tokens[k]` tokens, whatever text follows)."""

    text: str
    token_ids: array  # 'l': ids at a machine word each, not a Python int each
    cut_chars: array
    cut_tokens: array

    @property
    def size(self) -> int:
        """Its bytes in memory, near enough to bound a cache by."""
        arrays = (self.token_ids, self.cut_chars, self.cut_tokens)
        return sys.getsizeof(self.text) + sum(part.itemsize * len(part) for part in arrays)

    def last_cut_within(self, characters: int) -> tuple[int, int]:
        """The last cut at or before `characters` of text: (characters, tokens); (0, 0) when there is none."""
        index = bisect_right(self.cut_chars, characters) - 1
        return (self.cut_chars[index], self.cut_tokens[index]) if index >= 0 else (0, 0)


class KnownPrompts:
    """Known prompts by key, least recently used dropped first once they hold more than `max_bytes`.

    Per API process (a prompt is a few MB, and a turn finds its session's on the replica prefix affinity sends it
    to): a turn that lands on another process renders in full, with the same tokens. A prompt filed under several
    keys is counted once."""

    def __init__(self, max_bytes: int = DEFAULT_KNOWN_PROMPT_BYTES) -> None:
        self.max_bytes = max_bytes
        self._by_key: OrderedDict[Hashable, KnownPrompt] = OrderedDict()
        self._keys_of: dict[int, int] = {}  # id(prompt) -> how many keys hold it
        self.bytes = 0

    def find(self, keys: list[Hashable]) -> KnownPrompt | None:
        """The prompt of the first key that has one."""
        for key in keys:
            prompt = self._by_key.get(key)
            if prompt is not None:
                self._by_key.move_to_end(key)
                return prompt
        return None

    def keep(self, keys: list[Hashable], prompt: KnownPrompt) -> None:
        """Files `prompt` under each key (replacing what they held), then drops the oldest past the bound."""
        if prompt.size > self.max_bytes:
            return
        for key in keys:
            self._drop(key)
            self._by_key[key] = prompt
            held = self._keys_of.get(id(prompt), 0)
            self._keys_of[id(prompt)] = held + 1
            if not held:
                self.bytes += prompt.size
        while self.bytes > self.max_bytes and self._by_key:
            self._drop(next(iter(self._by_key)))

    def __len__(self) -> int:
        return len(self._by_key)

    def _drop(self, key: Hashable) -> None:
        prompt = self._by_key.pop(key, None)
        if prompt is None:
            return
        left = self._keys_of.pop(id(prompt)) - 1
        if left:
            self._keys_of[id(prompt)] = left
        else:
            self.bytes -= prompt.size


@dataclass(frozen=True)
class PromptKeys:
    """Where a turn finds the prompt it may extend (its previous response's, its conversation's, its
    `prompt_cache_key`'s: within its project) and where its own prompt is filed for the turn after."""

    project: str
    previous_response_id: str | None = None
    conversation: str | None = None
    cache_key: str | None = None
    continuable: bool = False  # its response can be named by the next turn (stored, or on a WebSocket)

    def finding(self) -> list[Hashable]:
        named = [("response", self.previous_response_id), ("conversation", self.conversation),
                 ("cache_key", self.cache_key)]
        return [(self.project, kind, value) for kind, value in named if value is not None]

    def keeping(self, response_id: str) -> list[Hashable]:
        named = [("response", response_id if self.continuable else None), ("conversation", self.conversation),
                 ("cache_key", self.cache_key)]
        return [(self.project, kind, value) for kind, value in named if value is not None]
