"""Incremental detokenization: token ids in, text out, holding back bytes of a split character."""

from __future__ import annotations

from typing import Any, Sequence


class IncrementalDecoder:
    """Decodes a growing token sequence step by step; work per step is independent of output length.

    Nothing is ever emitted as U+FFFD: bytes of an unfinished character wait for the next step, and those still
    waiting when generation ends are dropped (so there is nothing to flush).
    """

    # Tokens of context kept for the fallback path (as vLLM's incremental detokenizer does).
    _WINDOW = 6

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        backend = getattr(tokenizer, "_tokenizer", None)
        self._backend = backend
        self._stream: Any = None
        if backend is not None:
            from tokenizers.decoders import DecodeStream

            self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self._window: list[int] = []
        self._pending: list[int] = []
        # Keeping special tokens (for parsers whose markers are special) still hides the sequence markers.
        self._hidden = set() if skip_special_tokens else {
            getattr(tokenizer, name, None) for name in ("eos_token_id", "bos_token_id", "pad_token_id")} - {None}

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text that the new tokens complete; incomplete characters wait for the next call."""
        return self.decode_step(token_ids)[0]

    def decode_step(self, token_ids: Sequence[int]) -> tuple[str, list[int]]:
        """The step's text and, for each token, where its text ends in it (a held-back token ends where it began)."""
        if len(token_ids) == 1:  # the common step
            piece = self._decode_one(token_ids[0])
            return piece, [len(piece)]
        pieces = [self._decode_one(token_id) for token_id in token_ids]
        ends, total = [], 0
        for piece in pieces:
            total += len(piece)
            ends.append(total)
        return "".join(pieces), ends

    def _decode_one(self, token_id: int) -> str:
        if token_id in self._hidden:
            return ""
        if self._stream is not None:
            return self._stream.step(self._backend, token_id) or ""
        return self._decode_windowed([token_id])

    def _decode_windowed(self, token_ids: Sequence[int]) -> str:
        self._pending.extend(token_ids)
        before = self._tokenizer.decode(self._window, skip_special_tokens=self._skip_special)
        after = self._tokenizer.decode(self._window + self._pending, skip_special_tokens=self._skip_special)
        if after.endswith("\ufffd"):
            return ""  # a character is still incomplete
        self._window = (self._window + self._pending)[-self._WINDOW:]
        self._pending = []
        return after[len(before):] if after.startswith(before) else after
