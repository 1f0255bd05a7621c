"""Background responses: generation detached from the request, followable by stream, cancellable, shared by replicas.

Each one is saved at once under this replica's lease and its event log is written to the store as it grows, so any
replica can follow it; this replica renews its leases, cancels what another replica asked to cancel, and fails the
responses of replicas whose leases expired.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import AsyncIterator

from openai.types.responses import Response, ResponseFailedEvent

from server.runs.stored_run import StoredRun
from server.responses.records import Interrupt
from server.responses.response_records import ResponseRecords
from server.store.database import StoreUnavailable
from streaming.response import WireResponse
from streaming.sse import event_json

logger = logging.getLogger(__name__)

INTERRUPTED = "The server running this response stopped before it finished."
TAKEN_OVER = "Another replica failed this response while this one could not reach the store."
_CANCEL_WAIT_SECONDS = 10.0  # how long a cancel waits for the cancelled response to be stored
_RETENTION_BATCH = 500  # responses deleted per retention round (each round one short transaction)


@dataclass
class LiveResponse:
    """A background response while it runs here: the events published so far (JSON) and a signal for followers."""

    stored: StoredRun
    published: list[str] = field(default_factory=list)
    done: bool = False
    task: asyncio.Task[None] | None = None
    writer: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def response_id(self) -> str:
        return self.stored.response_id

    def response(self) -> Response:
        """The response as it stands: an in-progress snapshot until it ends."""
        return self.stored.response()

    def publish(self, data: str | None = None) -> None:
        if data is not None:
            self.published.append(data)
        self._changed.set()

    async def wait_beyond(self, count: int) -> None:
        """Until more than `count` events were published, or the response ended."""
        while len(self.published) <= count and not self.done:
            self._changed.clear()
            await self._changed.wait()

    async def follow(self, after: int) -> AsyncIterator[str]:
        """The events after sequence number `after`, then each new one until the response ends."""
        position = after + 1
        while True:
            await self.wait_beyond(position)
            while position < len(self.published):
                yield self.published[position]
                position += 1
            if self.done:
                return


@dataclass
class BackgroundRuns:
    """The background responses this replica runs, by id, and its lease on them in the store."""

    owner: str = field(default_factory=lambda: f"replica-{secrets.token_hex(4)}")
    lease_seconds: float = 30.0  # a replica that stops renewing for this long is taken for gone
    poll_seconds: float = 0.25  # how often cancel requests from other replicas are looked for
    live: dict[str, LiveResponse] = field(default_factory=dict)
    _keeper: asyncio.Task[None] | None = None
    _started: asyncio.Event = field(default_factory=asyncio.Event)  # a response began here: the keeper looks again

    async def start(self, stored: StoredRun) -> LiveResponse:
        """Save the response as in progress under this replica's lease, then generate it detached from the request."""
        if stored.store is not None:
            try:
                await stored.start_owned(self.owner, self.lease_seconds)
            except BaseException:
                stored.run.release()  # it will never run
                raise
        live = LiveResponse(stored)
        self.live[stored.response_id] = live
        self._started.set()
        loop = asyncio.get_running_loop()
        live.task = loop.create_task(self._run(live))
        if stored.store is not None:
            live.writer = loop.create_task(self._write(live))
        return live

    def get(self, response_id: str, project: str) -> LiveResponse | None:
        """The background response running here, if it is `project`'s (another project's is exactly a missing one)."""
        live = self.live.get(response_id)
        return live if live is not None and live.stored.project == project else None

    async def cancel(self, response_id: str, project: str) -> LiveResponse | None:
        """Cancel `project`'s background response running here; one whose terminal event is made has ended as it
        was told (its save may still be under way) and is left to finish."""
        return await self._cancel(self.get(response_id, project))

    async def _cancel(self, live: LiveResponse | None) -> LiveResponse | None:
        if live is None or live.done or live.task is None or live.stored.ended:
            return live
        live.task.cancel()
        await asyncio.wait({live.task}, timeout=_CANCEL_WAIT_SECONDS)  # its save may wait for the store
        return live

    async def _run(self, live: LiveResponse) -> None:
        try:
            try:
                async for _, data in live.stored.events():
                    live.publish(data)
            except asyncio.CancelledError:
                for _, data in await live.stored.cancelled():
                    live.publish(data)
            except Exception:  # pragma: no cover - run.events() ends every failure in a terminal event
                logger.exception("background response %s failed", live.response_id)
            finally:
                live.done = True
                live.publish()
        finally:
            self.live.pop(live.response_id, None)

    async def _write(self, live: LiveResponse) -> None:
        """Write the event log as it grows, a batch per store round trip, for followers on other replicas."""
        published = 0  # events published when the last write began
        while True:
            await live.wait_beyond(published)
            if published == len(live.published):
                return  # ended; the terminal save wrote the rest
            published = len(live.published)
            try:
                if not await live.stored.save_new_events():
                    live.stored.stop(TAKEN_OVER)  # its terminal event will be the store's
                    return
            except StoreUnavailable:
                await asyncio.sleep(self.poll_seconds)  # the store logged why; the terminal save writes the rest

    # -- the lease keeper -------------------------------------------------------------------------

    async def recover(self, store: ResponseRecords) -> None:
        """On start-up: fail what this replica ran before it restarted and what replicas gone for good left, then
        keep this replica's leases."""
        try:
            failed = await store.fail_interrupted(interrupt_with(INTERRUPTED), restarted_owner=self.owner)
            if failed:
                logger.warning("%d background responses were interrupted and are now failed", len(failed))
        except StoreUnavailable:
            pass  # the store logged why; the server serves, and stored routes answer 503 until it recovers
        self._keeper = asyncio.get_running_loop().create_task(self._keep(store))

    async def _keep(self, store: ResponseRecords) -> None:
        """Every `poll_seconds`: cancel what other replicas asked to cancel. Every third of a lease (elapsed time,
        not ticks, which a busy loop stretches): renew this replica's leases, fail responses whose owners stopped
        renewing, and apply retention.

        After a store outage, other replicas' responses are failed only once the store has worked for a whole lease
        again: their owners could not renew during the same outage, and get that long to do so.
        """
        last_round = time.monotonic()
        reachable_since: float | None = time.monotonic() - self.lease_seconds
        while True:
            await self._wait(last_round)
            try:
                if self.live:
                    for response_id in await store.cancel_requests(self.owner):  # asked by the project's
                        await self._cancel(self.live.get(response_id))  # own request (ProjectStore.request_cancel)
                if time.monotonic() - last_round >= self.lease_seconds / 3:
                    last_round = time.monotonic()
                    if self.live:
                        await store.renew_leases(self.owner, list(self.live), self.lease_seconds)
                    reachable_since = reachable_since if reachable_since is not None else time.monotonic()
                    if time.monotonic() - reachable_since >= self.lease_seconds:
                        await store.fail_interrupted(interrupt_with(INTERRUPTED))
                    await self._retain(store)
            except StoreUnavailable:
                reachable_since = None  # logged by the store; tried again at the next tick

    async def _wait(self, last_round: float) -> None:
        """Until the next look: a poll while responses run here (a cancel asked elsewhere is looked for), else the
        next round or a response starting, whichever comes first (an idle server does not wake every poll)."""
        if self.live:
            await asyncio.sleep(self.poll_seconds)
            return
        self._started.clear()
        until_round = max(self.poll_seconds, self.lease_seconds / 3 - (time.monotonic() - last_round))
        try:
            await asyncio.wait_for(self._started.wait(), until_round)
        except asyncio.TimeoutError:
            pass

    async def _retain(self, store: ResponseRecords) -> None:
        """Delete what the retention policy no longer keeps, a batch per transaction (never a running response)."""
        while await store.enforce_retention(_RETENTION_BATCH) >= _RETENTION_BATCH:
            await asyncio.sleep(0)  # let requests waiting for the store go first

    async def shutdown(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
        for live in list(self.live.values()):
            if live.task is not None:
                live.task.cancel()
        tasks = [task for live in self.live.values() for task in (live.task, live.writer) if task]
        await asyncio.gather(*tasks, *([self._keeper] if self._keeper else []), return_exceptions=True)


def interrupt_with(message: str) -> Interrupt:
    """How the store fails an interrupted response: status `failed` with `message`, and a `response.failed` event
    after the last one in its log, so followers see it end."""

    def interrupt(response: dict[str, object], last: int) -> tuple[dict[str, object], str | None]:
        failed = {**response, "status": "failed", "error": {"code": "server_error", "message": message}}
        if last < 0:
            return failed, None
        event = ResponseFailedEvent(type="response.failed", sequence_number=last + 1,
                                    response=WireResponse.model_validate(failed))
        return failed, event_json(event)

    return interrupt
