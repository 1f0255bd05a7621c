"""A run's metrics as it goes: time to first output, duration, output tokens, and how it ended."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from server.metrics import CLIENT_DISCONNECTS, OUTPUT_TOKENS, RESPONSE_DURATION, RESPONSES, TIME_TO_FIRST_TOKEN
from streaming.event_types import FIRST_OUTPUT_EVENTS


@dataclass
class RunTiming:
    """A run's metrics: time to its first output delta, its duration, its tokens and how it ended."""

    mode: str
    started: float = field(default_factory=time.monotonic)
    first_output: bool = False
    finished: bool = False

    def observe(self, event_type: str) -> None:
        if not self.first_output and event_type in FIRST_OUTPUT_EVENTS:
            self.first_output = True
            TIME_TO_FIRST_TOKEN.observe(time.monotonic() - self.started)

    def ended(self, status: str, output_tokens: int) -> None:
        self.finished = True
        RESPONSES.labels(status, self.mode).inc()
        RESPONSE_DURATION.observe(time.monotonic() - self.started)
        OUTPUT_TOKENS.inc(output_tokens)

    def gone(self, background: bool, output_tokens: int) -> None:
        """The iteration was cancelled before the end: by a background cancel, or because the client went away."""
        if not self.finished:
            OUTPUT_TOKENS.inc(output_tokens)
            if not background:
                CLIENT_DISCONNECTS.inc()
