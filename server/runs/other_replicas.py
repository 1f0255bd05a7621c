"""Background responses that another replica runs: followed through the store's event log, cancelled by a request
the running replica picks up."""

from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator

from server.store.interface import RUNNING, ResponseStore, StoredResponse
from streaming.event_types import TERMINAL_EVENTS


async def follow_stored(store: ResponseStore, response_id: str, after: int,
                        poll_seconds: float = 0.1, status_every: float = 2.0) -> AsyncIterator[str]:
    """The logged events after sequence number `after`, then new ones as the running replica writes them, until the
    terminal event (or the response is gone, or ended without one: its log is then all there is)."""
    last_status_check = time.monotonic()
    while True:
        events = await store.events_after(response_id, after)
        for data in events:
            yield data
            event = json.loads(data)
            after = int(event["sequence_number"])
            if event["type"] in TERMINAL_EVENTS:
                return
        if events:
            continue
        if time.monotonic() - last_status_check >= status_every:
            last_status_check = time.monotonic()
            record = await store.get(response_id)
            if record is None or record.status not in RUNNING:
                for data in await store.events_after(response_id, after):
                    yield data
                return
        await asyncio.sleep(poll_seconds)


async def cancel_stored(store: ResponseStore, record: StoredResponse, within: float = 10.0,
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
