"""Background responses that another replica runs: followed through the store's event log, cancelled by a request
the running replica picks up."""

from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator

from server.responses.records import RUNNING, StoredResponse

from server.store.database import StoreUnavailable
from server.responses.project_store import ProjectStore
from streaming.event_types import TERMINAL_EVENTS
from streaming.sse import error_event_json

STORE_GONE = ("The response store has been unavailable for too long to follow this response, which may still be "
              "running; retrieve it again later.")


async def follow_stored(store: ProjectStore, response_id: str, after: int, poll_seconds: float = 0.1,
                        status_every: float = 2.0, outage_seconds: float = 30.0) -> AsyncIterator[str]:
    """The logged events after sequence number `after`, then new ones as the running replica writes them, until the
    terminal event (or the response is gone, or ended without one: its log is then all there is).

    While the store is unavailable it keeps asking, and the events go on from where they were once it answers; a
    store unavailable for `outage_seconds` (a lease: the running replica cannot renew it either) ends the stream with
    an `error` event, since the response itself may still run."""
    last_status_check = time.monotonic()
    outage_since: float | None = None
    while True:
        try:
            events, ended = await store.events_after(response_id, after), False
            if not events and time.monotonic() - last_status_check >= status_every:
                last_status_check = time.monotonic()
                record = await store.get(response_id)
                if record is None or record.status not in RUNNING:
                    events, ended = await store.events_after(response_id, after), True
        except StoreUnavailable:  # the store logged why
            outage_since = outage_since if outage_since is not None else time.monotonic()
            if time.monotonic() - outage_since >= outage_seconds:
                yield error_event_json(after + 1, "store_unavailable", STORE_GONE)
                return
            await asyncio.sleep(poll_seconds)
            continue
        outage_since = None
        for data in events:
            yield data
            event = json.loads(data)
            after = int(event["sequence_number"])
            if event["type"] in TERMINAL_EVENTS:
                return
        if ended:
            return
        if not events:
            await asyncio.sleep(poll_seconds)


async def cancel_stored(store: ProjectStore, record: StoredResponse, within: float = 10.0,
                        poll_seconds: float = 0.1) -> StoredResponse:
    """Ask the replica running `record` to cancel it and wait (up to `within`) until it has; the latest record."""
    if record.status not in RUNNING or not await store.request_cancel(record.id):
        return record
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await asyncio.sleep(poll_seconds)
        latest = await store.get(record.id)
        if latest is None or latest.status not in RUNNING:
            return latest or record
    return await store.get(record.id) or record
