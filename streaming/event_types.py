"""Sets of stream event types that callers test events against."""

from __future__ import annotations

# Exactly one of these ends every stream.
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
# The first of these is the response's first output (its time to first token).
FIRST_OUTPUT_EVENTS = frozenset({"response.output_text.delta", "response.reasoning_text.delta",
                                 "response.function_call_arguments.delta", "response.refusal.delta"})
# These carry the whole Response (written as streaming.response.WireResponse, integers for its timestamps).
RESPONSE_EVENTS = TERMINAL_EVENTS | {"response.created", "response.in_progress", "response.queued"}
