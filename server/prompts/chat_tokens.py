"""Tokenizing a chat template's prompt by what it adds to a known one.

A Hugging Face tokenizer splits its text at its added tokens before anything else, so the tokens before such a
token's end do not depend on what follows it: the known prompt's tokens up to the last split both prompts share
are kept, and only the text after it is tokenized. Which added tokens split so is not assumed: each is probed when
the tokenizer is first used (a tokenizer that prefixes the first piece of its input, as SentencePiece does, fails
the probe), and only those that pass are cut at.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from server.prompts.known import KnownPrompt, Outcome

# Text that follows a split in the probe: each must tokenize alone as it does after the added token.
_PROBES = ("assistant\n", "user", " hello", "\n\nHello world", "Hello", "  x", "\u00e9t\u00e9", "1 2 3", "")


@dataclass(frozen=True)
class Tokenized:
    """A prompt's token ids, the prompt to keep for the next turn, and what was reused."""

    token_ids: list[int]
    known: KnownPrompt
    outcome: Outcome
    reused_tokens: int


class IncrementalTokenizer:
    """Tokenizes prompts, reusing the tokens of a known prompt's text up to the last split they share."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._splits = _splitting_tokens(tokenizer, self._encode)  # id -> its text

    def tokenize(self, text: str, known: KnownPrompt | None) -> Tokenized:
        """`text`'s token ids, as `tokenizer.encode(text)` gives them."""
        if known is None:
            return Tokenized(*self._tokenized(text, 0, array("l"), array("l"), array("l")), "full", 0)
        shared = common_prefix_length(known.text, text)
        characters, tokens = known.last_cut_within(shared)
        outcome: Outcome = "extended" if shared == len(known.text) else "fallback"
        kept = bisect_right(known.cut_chars, characters)  # the cuts within the reused tokens
        ids, prompt = self._tokenized(text, characters, known.token_ids[:tokens], known.cut_chars[:kept],
                                      known.cut_tokens[:kept])
        return Tokenized(ids, prompt, outcome, tokens)

    def _tokenized(self, text: str, start: int, prefix: array, cut_chars: array,
                   cut_tokens: array) -> tuple[list[int], KnownPrompt]:
        """The ids of `text` from character `start` on after `prefix` (the ids of the text before it), and the
        prompt to keep, its cuts found in the new tokens."""
        added = self._encode(text[start:])
        cursor = start
        for index, token_id in enumerate(added):
            split = self._splits.get(token_id)
            if split is None:
                continue
            found = text.find(split, cursor)
            if found < 0:  # not where the tokenizer put it: no cut is trusted past here
                break
            cursor = found + len(split)
            cut_chars.append(cursor)
            cut_tokens.append(len(prefix) + index + 1)
        token_ids = prefix + array("l", added)
        return token_ids.tolist(), KnownPrompt(text, token_ids, cut_chars, cut_tokens)

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))


def common_prefix_length(first: str, second: str) -> int:
    """How many leading characters the two strings share (compared a block at a time, in C)."""
    limit = min(len(first), len(second))
    if first[:limit] == second[:limit]:
        return limit
    low, high = 0, limit  # first[:low] == second[:low]; first[:high] != second[:high]
    while high - low > 64:
        middle = (low + high) // 2
        if first[low:middle] == second[low:middle]:
            low = middle
        else:
            high = middle
    while low < high and first[low] == second[low]:
        low += 1
    return low


def _splitting_tokens(tokenizer: Any, encode: Any) -> dict[int, str]:
    """The added tokens whose end splits the tokenization: each alone is one token, and the text after it
    tokenizes the same with it or without it before (probed)."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    contents = [getattr(token, "content", str(token)) for token in added.values()]
    splits: dict[int, str] = {}
    for token_id, token in added.items():
        content = getattr(token, "content", str(token))
        if getattr(token, "rstrip", False) or getattr(token, "single_word", False) or not content:
            continue  # it takes the spaces after it, or matches only as a word: what follows depends on it
        if any(content in other and content != other for other in contents):
            continue  # its text inside another added token's would be found where that token is
        if encode(content) != [token_id]:
            continue
        if all(encode("x" + content + probe) == encode("x" + content) + encode(probe) for probe in _PROBES):
            splits[token_id] = content
    return splits
