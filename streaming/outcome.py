"""How a generation ended: the finish reasons, the token usage, and the `Finished` record the builder ends with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# stop: the model ended its answer; length: it hit max_output_tokens; abort: the engine aborted it; error: the
# engine or a parser failed; cancelled: a client cancelled a background response; prepared: nothing was generated (a
# WebSocket `generate: false`); steered: stopped at a safe boundary for the client's steering input.
FinishReason = Literal["stop", "length", "abort", "error", "cancelled", "prepared", "steered"]


@dataclass(frozen=True)
class Usage:
    """Token counts for the terminal response."""

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class Finished:
    """The end of generation, with why it ended and what it cost."""

    reason: FinishReason
    usage: Usage = Usage()
    error_message: str = ""
