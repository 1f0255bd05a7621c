"""Storing a response as it finishes: the final response and its event log, saved before the terminal event leaves;
and its input and output added to its conversation."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from openai.types.responses import Response, ResponseStreamEvent

from server.metrics import RESPONSES
from server.runs.generation import ResponseRun
from server.runs.timing import RunTiming
from server.store.interface import ResponseStore, StoreUnavailable, StoredResponse
from streaming.event_types import TERMINAL_EVENTS
from streaming.sse import event_json



@dataclass(frozen=True)
class ConversationLink:
    """The conversation a response adds its input and output items to when it ends."""

    store: ResponseStore
    conversation_id: str

    async def add(self, items: list[dict[str, Any]]) -> None:
        await self.store.add_conversation_items(self.conversation_id, items)


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
    _end_saved: bool = False
    _conversation_added: bool = False

    @property
    def response_id(self) -> str:
        return self.run.response_id

    def response(self) -> Response:
        """The terminal response, or an in-progress snapshot of what is finished so far."""
        return self.run.response()

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
                    timing.ended(str(self.run.response().status), self.run.output_tokens)
                    await self.store_the_end()  # before the client can see the end and ask for the response
                yield event, data
        except (asyncio.CancelledError, GeneratorExit):
            timing.gone(self.background, self.run.output_tokens)
            raise

    @property
    def ended(self) -> bool:
        """The terminal event is made: what the client is told is settled, whether or not it is stored yet."""
        return self.run.ended

    async def store_the_end(self) -> bool:
        """Save the ended response and add it to its conversation, each once; True when the store holds both.

        A store that fails (it logs why) does not keep the terminal event from the client; the caller may call
        again until it is stored.
        """
        try:
            if self.store is not None and not self._end_saved:
                await self.save(self._log)
                self._end_saved = True
            response = self.run.response()
            if (self.conversation is not None and not self._conversation_added
                    and response.status in ("completed", "incomplete")):
                output = [item.model_dump(mode="json", by_alias=True, exclude_unset=True) for item in response.output]
                await self.conversation.add(self.input_items + output)
                self._conversation_added = True
        except StoreUnavailable:
            return False
        return True

    async def cancelled(self) -> list[tuple[ResponseStreamEvent, str]]:
        """After the run's iteration was cancelled: its terminal event (status `cancelled`), stored once the store
        takes it (see `store_the_end`)."""
        out = [(event, event_json(event)) for event in self.run.cancelled()]
        if out:
            RESPONSES.labels("cancelled", self.mode).inc()
            self._log.extend(data for _, data in out)
            await self.store_the_end()
        return out

    async def save_new_events(self) -> None:
        """Write the logged events the store does not hold yet, for followers on other replicas."""
        assert self.store is not None
        count = len(self._log)
        if count > self._saved:
            await self.store.append_events(self.run.response_id, self._log[self._saved:count])
            self._saved = max(self._saved, count)  # only once committed: a follower never sees a gap

    async def save(self, log: list[str] | None = None, owner: str | None = None,
                   lease_expires_at: float | None = None) -> None:
        """Save the response as it is now, with the events of `log` the store does not hold yet; a background
        response is first saved with its owner's lease."""
        assert self.store is not None
        log = log or []
        response = self.run.response()
        await self.store.save(StoredResponse(
            id=response.id, created_at=response.created_at, status=str(response.status),
            response=response.model_dump(mode="json", by_alias=True, exclude_unset=True),
            input_items=self.input_items, previous_response_id=self.previous_response_id,
            background=self.background, owner=owner, lease_expires_at=lease_expires_at,
        ), events=log[self._saved:] or None)
        self._saved = max(self._saved, len(log))
