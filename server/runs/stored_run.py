"""Storing a response as it finishes: the final response and its event log, saved before the terminal event leaves;
and its input and output added to its conversation."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from openai.types.responses import ResponseStreamEvent

from server.metrics import CLIENT_DISCONNECTS, OUTPUT_TOKENS, RESPONSE_DURATION, RESPONSES, TIME_TO_FIRST_TOKEN
from server.runs.generation import ResponseRun
from server.store.interface import ResponseStore, StoreUnavailable, StoredResponse
from streaming.sse import event_json

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
FIRST_OUTPUT_EVENTS = frozenset({"response.output_text.delta", "response.reasoning_text.delta",
                                 "response.function_call_arguments.delta", "response.refusal.delta"})


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


@dataclass(frozen=True)
class ConversationLink:
    """The conversation a response adds its input and output items to when it ends."""

    store: ResponseStore
    conversation_id: str


@dataclass
class StoredRun:
    """A run whose events pass through here; with a store, the response is saved before its terminal event."""

    run: ResponseRun
    store: ResponseStore | None
    input_items: list[dict[str, Any]] = field(default_factory=list)
    previous_response_id: str | None = None
    keep_event_log: bool = True
    background: bool = False
    conversation: ConversationLink | None = None
    mode: str = "json"  # how the client asked: stream, json or background (a metrics label)
    _log: list[str] = field(default_factory=list)  # the events' JSON so far, when kept
    _saved: int = 0  # how many of the log's first events the store holds (a background log is written as it grows)

    async def events(self) -> AsyncIterator[tuple[ResponseStreamEvent, str]]:
        """Each event with its JSON (encoded once, for the wire and the log)."""
        timing = RunTiming(self.mode)
        try:
            async for event in self.run.events():
                data = event_json(event)
                if self.keep_event_log:
                    self._log.append(data)
                timing.observe(event.type)
                if event.type in TERMINAL_EVENTS:
                    timing.ended(str(self.run.builder.response().status), self.run.output_tokens)
                    await self._finish()  # before the client can see the end and ask for the response
                yield event, data
        except (asyncio.CancelledError, GeneratorExit):
            timing.gone(self.background, self.run.output_tokens)
            raise

    async def _finish(self) -> None:
        """Save the response and add it to its conversation; a store that fails (it logs why) does not keep the
        terminal event from the client."""
        try:
            if self.store is not None:
                await self.save(self._log)
            response = self.run.builder.response()
            if self.conversation is not None and response.status in ("completed", "incomplete"):
                output = [item.model_dump(mode="json", by_alias=True, exclude_unset=True) for item in response.output]
                await self.conversation.store.add_conversation_items(self.conversation.conversation_id,
                                                                     self.input_items + output)
        except StoreUnavailable:
            pass

    async def cancelled(self) -> list[tuple[ResponseStreamEvent, str]]:
        """After the run's iteration was cancelled: its terminal event, saved (status `cancelled`)."""
        out = [(event, event_json(event)) for event in self.run.cancelled()]
        if out:
            RESPONSES.labels("cancelled", self.mode).inc()
        if self.store is not None and out:
            try:
                await self.save(self._log + [data for _, data in out])
            except StoreUnavailable:
                pass  # the store logged why; the cancellation itself stands
        return out

    async def save_new_events(self) -> None:
        """Write the logged events the store does not hold yet, for followers on other replicas."""
        assert self.store is not None
        count = len(self._log)
        if count > self._saved:
            await self.store.append_events(self.run.builder.response_id, self._log[self._saved:count])
            self._saved = max(self._saved, count)  # only once committed: a follower never sees a gap

    async def save(self, log: list[str] | None = None, owner: str | None = None,
                   lease_expires_at: float | None = None) -> None:
        """Save the response as it is now, with the events of `log` the store does not hold yet; a background
        response is first saved with its owner's lease."""
        assert self.store is not None
        log = log or []
        response = self.run.builder.response()
        await self.store.save(StoredResponse(
            id=response.id, created_at=response.created_at, status=str(response.status),
            response=response.model_dump(mode="json", by_alias=True, exclude_unset=True),
            input_items=self.input_items, previous_response_id=self.previous_response_id,
            background=self.background, owner=owner, lease_expires_at=lease_expires_at,
        ), events=log[self._saved:] or None)
        self._saved = max(self._saved, len(log))
