"""The incremental decoder: any grouping of tokens decodes to the same text, never with U+FFFD mid-stream."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from parsers.decoder import IncrementalDecoder

SAMPLES = ["Ça va? 日本語のテキスト 🎉🎉 naïve café", "plain ascii text", "emoji 👩‍👩‍👧 and ∑∫", "\n\n  spaced\t"]


def decode_in_groups(tokenizer: Any, token_ids: list[int], cuts: list[int]) -> list[str]:
    decoder = IncrementalDecoder(tokenizer)
    bounds = [0, *sorted({c % (len(token_ids) + 1) for c in cuts}), len(token_ids)]
    pieces = [decoder.decode(token_ids[a:b]) for a, b in zip(bounds, bounds[1:])]
    return pieces


@settings(max_examples=200, deadline=None)
@given(sample=st.sampled_from(SAMPLES), cuts=st.lists(st.integers(0, 200), max_size=30))
def test_any_grouping_decodes_to_the_same_text(tokenizer: Any, sample: str, cuts: list[int]) -> None:
    token_ids = tokenizer.encode(sample, add_special_tokens=False)
    pieces = decode_in_groups(tokenizer, token_ids, cuts)
    assert "".join(pieces) == tokenizer.decode(token_ids) == sample
    assert not any("\ufffd" in piece for piece in pieces)


def test_split_character_is_held_back_until_complete(tokenizer: Any) -> None:
    token_ids = tokenizer.encode("🎉", add_special_tokens=False)
    assert len(token_ids) > 1, "the emoji spans several byte tokens in this vocabulary"
    decoder = IncrementalDecoder(tokenizer)
    assert [decoder.decode([t]) for t in token_ids] == [""] * (len(token_ids) - 1) + ["🎉"]


def test_special_tokens_are_not_text(tokenizer: Any) -> None:
    decoder = IncrementalDecoder(tokenizer)
    assert decoder.decode(tokenizer.encode("Hi", add_special_tokens=False) + [tokenizer.eos_token_id]) == "Hi"


class _SlowTokenizer:
    """A tokenizer without a Rust backend, to exercise the windowed fallback."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._inner.decode(ids, skip_special_tokens=skip_special_tokens)


@settings(max_examples=100, deadline=None)
@given(sample=st.sampled_from(SAMPLES), cuts=st.lists(st.integers(0, 200), max_size=30))
def test_fallback_decoder_agrees(tokenizer: Any, sample: str, cuts: list[int]) -> None:
    token_ids = tokenizer.encode(sample, add_special_tokens=False)
    pieces = decode_in_groups(_SlowTokenizer(tokenizer), token_ids, cuts)
    assert "".join(pieces) == sample
    assert not any("\ufffd" in piece for piece in pieces)
