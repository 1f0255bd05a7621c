"""`obfuscation` on streamed deltas, as OpenAI sends it: each delta event padded so that its JSON is a whole number of
blocks, and a network observer cannot read how long each token was from the sizes of the frames."""

from __future__ import annotations

import string

BLOCK = 32  # bytes: a delta event's JSON is padded to a multiple of this (a token's text is almost always shorter)
_FIELD = ',"obfuscation":""'
_FILLER = (string.ascii_letters + string.digits) * 2  # padding is a slice of this, from an offset that varies
_OFFSETS = len(_FILLER) // 2


def obfuscated(data: str, sequence_number: int) -> str:
    """A delta event's JSON (`data`, an object) with an `obfuscation` string that brings its UTF-8 length to a multiple
    of BLOCK (1 to BLOCK characters of the filler, from an offset its `sequence_number` gives: the padding's length is
    what hides the token's, whatever its letters, so no random draw is made per token)."""
    size = len(data.encode()) + len(_FIELD)
    padding = BLOCK - size % BLOCK
    offset = sequence_number % _OFFSETS
    return f'{data[:-1]},"obfuscation":"{_FILLER[offset:offset + padding]}"}}'
