"""A run's metrics as it goes: time to first output, duration, output tokens, and how it ended."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from server import tracing
from server.metrics import (CLIENT_DISCONNECTS, OUTPUT_TOKENS, RESPONSE_DURATION, RESPONSES, TIME_PER_OUTPUT_TOKEN,
                            TIME_TO_FIRST_TOKEN)
from streaming.event_types import FIRST_OUTPUT_EVENTS


@dataclass
class RunTiming:
    """A run's metrics: time to its first output delta, its duration, its tokens and how it ended."""

    mode: str
    started: float = field(default_factory=time.monotonic)
    first_output: float | None = None  # when its first output delta was sent
    finished: bool = False

    def observe(self, event_type: str) -> None:
        if self.first_output is None and event_type in FIRST_OUTPUT_EVENTS:
            self.first_output = time.monotonic()
            TIME_TO_FIRST_TOKEN.observe(self.first_output - self.started, tracing.exemplar())

    def ended(self, status: str, output_tokens: int) -> None:
        self.finished = True
        now, exemplar = time.monotonic(), tracing.exemplar()  # (the trace a dashboard's outlier leads to)
        RESPONSES.labels(status, self.mode).inc()
        RESPONSE_DURATION.observe(now - self.started, exemplar)
        OUTPUT_TOKENS.inc(output_tokens)
        if self.first_output is not None and output_tokens > 1:
            TIME_PER_OUTPUT_TOKEN.observe((now - self.first_output) / (output_tokens - 1), exemplar)

    def gone(self, background: bool, output_tokens: int) -> None:
        """The iteration was cancelled before the end: by a background cancel, or because the client went away."""
        if not self.finished:
            OUTPUT_TOKENS.inc(output_tokens)
            if not background:
                CLIENT_DISCONNECTS.inc()
