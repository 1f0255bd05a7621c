"""Storing a response as it finishes: the final response and its event log, saved before the terminal event leaves;
and its input and output added to its conversation."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, MutableMapping

from openai.types.responses import Response, ResponseFailedEvent, ResponseStreamEvent

from server.metrics import RESPONSES
from server.runs.generation import ResponseRun
from server.runs.timing import RunTiming
from server.responses.records import StoredResponse
from server.store.database import StoreRejected, StoreUnavailable
from server.responses.project_store import ProjectStore
from streaming.event_types import TERMINAL_EVENTS
from streaming.response import WireResponse
from server.tools.support import NOT_OFFERED_HEADER
from streaming.obfuscation import obfuscated
from streaming.sse import event_json

logger = logging.getLogger(__name__)
_FIRST_RETRY_SECONDS = 0.1  # the first wait before a background response's terminal save is tried again
_MAX_RETRY_SECONDS = 5.0


class TakenOver(Exception):
    """A background response is no longer this replica's to save: `record` is how the store has it (None: gone)."""

    def __init__(self, record: StoredResponse | None) -> None:
        super().__init__("the response is no longer owned by this replica")
        self.record = record


@dataclass(frozen=True)
class ConversationLink:
    """The conversation a response adds its input and output items to when it ends."""

    store: ProjectStore
    conversation_id: str

    async def add(self, items: list[dict[str, Any]], replica: str | None) -> None:
        """Add a response's items; `replica`, which generated it, becomes the conversation's home."""
        await self.store.add_conversation_items(self.conversation_id, items, replica)


@dataclass
class StoredRun:
    """A run whose events pass through here; with a store, the response is saved before its terminal event."""

    run: ResponseRun
    store: ProjectStore | None
    input_items: list[dict[str, Any]] = field(default_factory=list)
    previous_response_id: str | None = None
    keep_event_log: bool = True
    background: bool = False
    conversation: ConversationLink | None = None
    mode: str = "json"  # how the client asked: stream, json or background (a metrics label)
    tools_not_offered: tuple[str, ...] = ()  # the request's tool types accepted and not offered (a header says so)
    obfuscate: bool = False  # each delta's JSON is padded to hide its length (streamed, unless the client said not)
    _log: list[str] = field(default_factory=list)  # the events' JSON so far, when kept
    _saved: int = 0  # how many of the log's first events the store holds (a background log is written as it grows)
    _saved_status: str | None = None  # the status the store holds for it while it runs (queued, then in progress)
    owner: str | None = None  # the replica generating it, for a background response
    replica: str | None = None  # the replica generating it: where its prefix is cached (any response)
    retry_later: Callable[["StoredRun"], None] | None = None  # takes an ending the store refused, to store it later
    kept_in: MutableMapping[str, StoredResponse] | None = None  # its WebSocket connection's responses, when ended
    _end_saved: bool = False
    _conversation_added: bool = False
    _taken_over: Response | None = None  # the stored ending, when another replica failed this response

    @property
    def headers(self) -> dict[str, str]:
        """The answer's headers: the x-ratelimit-* of its project's limits per minute (none when it has none), and
        the tool types it accepted and did not offer the model."""
        headers = dict(self.run.ticket.headers) if self.run.ticket is not None else {}
        if self.tools_not_offered:
            headers[NOT_OFFERED_HEADER] = ", ".join(self.tools_not_offered)
        return headers

    @property
    def project(self) -> str | None:
        """Whose response this is (None: it is not stored)."""
        return self.store.project if self.store is not None else None

    @property
    def response_id(self) -> str:
        return self.run.response_id

    async def events(self) -> AsyncIterator[tuple[ResponseStreamEvent, str]]:
        """Each event with its JSON (encoded once, for the wire and the log)."""
        timing = RunTiming(self.mode)
        try:
            async for event in self.run.events():
                data = event_json(event)
                if self.obfuscate and event.type.endswith(".delta"):
                    data = obfuscated(data, event.sequence_number)
                if self.keep_event_log:
                    self._log.append(data)
                timing.observe(event.type)
                if event.type in TERMINAL_EVENTS:
                    timing.ended(str(self.run.response().status), self.run.output_tokens)
                    event, data = await self._stored_ending(event, data)  # before the client can see the end
                    if self.kept_in is not None:
                        self.kept_in[self.response_id] = self._record()
                yield event, data
        except (asyncio.CancelledError, GeneratorExit):
            timing.gone(self.background, self.run.output_tokens)
            raise

    @property
    def ended(self) -> bool:
        """The terminal event is made: what the client is told is settled, whether or not it is stored yet."""
        return self.run.ended

    def response(self) -> Response:
        """The terminal response (the store's, when another replica took this one over), or an in-progress
        snapshot of what is finished so far."""
        return self._taken_over or self.run.response()

    def hold_until_taken(self) -> None:
        """Its client is told nothing until an engine took its request: one that none takes raises NotTaken from
        `events()` (a 503 to retry), and is not stored. For a caller that has sent nothing yet."""
        self.run.hold_until_taken = True

    def stop(self, reason: str) -> None:
        self.run.stop(reason)

    def steer(self) -> None:
        self.run.steer()

    async def _stored_ending(self, event: ResponseStreamEvent, data: str) -> tuple[ResponseStreamEvent, str]:
        """The terminal event, once the store holds it. A response no replica owns is tried once: a store that
        fails (it logs why) does not keep the end from the client. A background response waits until the store
        takes it, or ends as the store says when another replica took it over: what a client is told is what the
        store keeps."""
        if self.owner is None:
            if not await self.store_the_end() and self.retry_later is not None:
                self.retry_later(self)  # the client is not kept waiting for the store
            return event, data
        try:
            await self.keep_storing()
        except TakenOver as lost:
            return self._as_stored(event, data, lost.record)
        return event, data

    async def keep_storing(self) -> None:
        """Try `store_the_end` with backoff until the store takes it (or it raises TakenOver)."""
        delay = _FIRST_RETRY_SECONDS
        while not await self.store_the_end():
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RETRY_SECONDS)

    def _as_stored(self, event: ResponseStreamEvent, data: str,
                   record: StoredResponse | None) -> tuple[ResponseStreamEvent, str]:
        """Our terminal event replaced by the stored ending of a response another replica failed."""
        if record is None:  # deleted meanwhile: nobody can read another ending
            return event, data
        self._taken_over = WireResponse.model_validate(record.response)
        stored = ResponseFailedEvent(type="response.failed", sequence_number=event.sequence_number,
                                     response=self._taken_over)
        data = event_json(stored)
        if self._log:
            self._log[-1] = data
        return stored, data

    async def store_the_end(self) -> bool:
        """Save the ended response and add it to its conversation, each once; True when the store holds both,
        False when it failed (and logged why). Raises TakenOver when it is no longer ours to save."""
        try:
            if self.store is not None and not self._end_saved:
                if self.owner is not None:
                    await self._finish_owned()
                else:
                    await self.save(self._log)
                self._end_saved = True
            response = self.run.response()
            if (self.conversation is not None and not self._conversation_added
                    and response.status in ("completed", "incomplete")):
                output = [item.model_dump(mode="json", by_alias=True, exclude_unset=True) for item in response.output]
                await self.conversation.add(self.input_items + output, self.replica)
                self._conversation_added = True
        except StoreUnavailable:
            return False
        except StoreRejected:  # it will never take this response: trying again would not help
            logger.warning("the store refused response %s; it is not stored", self.response_id)
            self._end_saved = self._conversation_added = True
        except TakenOver:
            raise
        except Exception:  # a fault of its own (logged): tried again later, as when the store is out
            logger.exception("saving response %s failed", self.response_id)
            return False
        return True

    async def cancelled(self) -> list[tuple[ResponseStreamEvent, str]]:
        """After the run's iteration was cancelled: its terminal event (status `cancelled`), once stored (see
        `_stored_ending`)."""
        out = [(event, event_json(event)) for event in self.run.cancelled()]
        if out:
            RESPONSES.labels("cancelled", self.mode).inc()
            self._log.extend(data for _, data in out)
            out[-1] = await self._stored_ending(*out[-1])
        return out

    async def start_owned(self, owner: str, lease_seconds: float) -> None:
        """Store a background response as it starts, owned by this replica (`owner`) under a lease."""
        assert self.store is not None
        self.owner = owner
        record = self._record()
        await self.store.start_owned(record, lease_seconds)
        self._saved_status = record.status

    async def save_new_events(self) -> bool:
        """Write the logged events the store does not hold yet, for followers on other replicas; False when the
        response is no longer this replica's (another replica failed it, or it was deleted)."""
        assert self.store is not None and self.owner is not None
        count = len(self._log)
        if count > self._saved:
            moved_on = None  # while the store holds it queued: the row moves on when its turn comes (its end is
            if self._saved_status == "queued":  # `_finish_owned`'s); a snapshot only then, not at every write
                record = self._record()
                moved_on = record if record.status == "in_progress" else None
            if not await self.store.append_events(self.run.response_id, self._log[self._saved:count], self.owner,
                                                  moved_on):
                return False
            self._saved = max(self._saved, count)  # only once committed: a follower never sees a gap
            if moved_on is not None:
                self._saved_status = moved_on.status
        return True

    async def save(self, log: list[str] | None = None) -> None:
        """Save the response as it is now (one no replica owns), with the events of `log` the store does not hold."""
        assert self.store is not None
        log = log or []
        await self.store.save(self._record(), events=log[self._saved:] or None)
        self._saved = max(self._saved, len(log))

    async def _finish_owned(self) -> None:
        assert self.store is not None
        if not await self.store.finish_owned(self._record(), self._log[self._saved:]):
            raise TakenOver(await self.store.get(self.run.response_id))
        self._saved = len(self._log)

    def _record(self) -> StoredResponse:
        response = self.run.response()
        return StoredResponse(
            id=response.id, created_at=response.created_at, status=str(response.status),
            response=response.model_dump(mode="json", by_alias=True, exclude_unset=True),
            input_items=self.input_items, previous_response_id=self.previous_response_id,
            background=self.background, owner=self.owner, replica=self.replica,
            timeline=self.run.timeline.to_json())
