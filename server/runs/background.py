"""Background responses: generation detached from the request, followable by stream, cancellable."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import AsyncIterator

from server.runs.persistence import StoredRun

logger = logging.getLogger(__name__)


@dataclass
class LiveResponse:
    """A background response while it runs: its events so far (JSON) and a signal for followers."""

    stored: StoredRun
    events: list[str] = field(default_factory=list)
    done: bool = False
    task: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def publish(self, data: str | None = None) -> None:
        if data is not None:
            self.events.append(data)
        self._changed.set()

    async def follow(self, after: int) -> AsyncIterator[str]:
        """The events after sequence number `after`, then each new one until the response ends."""
        position = after + 1
        while True:
            while position < len(self.events):
                yield self.events[position]
                position += 1
            if self.done:
                return
            self._changed.clear()
            if position < len(self.events) or self.done:
                continue
            await self._changed.wait()


@dataclass
class BackgroundRuns:
    """The background responses of this process, by id (finished ones are then read from the store)."""

    live: dict[str, LiveResponse] = field(default_factory=dict)

    def start(self, stored: StoredRun) -> LiveResponse:
        live = LiveResponse(stored)
        self.live[stored.run.builder.response_id] = live
        live.task = asyncio.get_running_loop().create_task(self._run(live))
        return live

    def get(self, response_id: str) -> LiveResponse | None:
        return self.live.get(response_id)

    async def cancel(self, response_id: str) -> LiveResponse | None:
        live = self.live.get(response_id)
        if live is None or live.done or live.task is None:
            return live
        live.task.cancel()
        await asyncio.gather(live.task, return_exceptions=True)
        return live

    async def _run(self, live: LiveResponse) -> None:
        try:
            async for _, data in live.stored.events():
                live.publish(data)
        except asyncio.CancelledError:
            for _, data in await live.stored.cancelled():
                live.publish(data)
        except Exception:  # pragma: no cover - run.events() ends every failure in a terminal event
            logger.exception("background response %s failed", live.stored.run.builder.response_id)
        finally:
            live.done = True
            live.publish()
            self.live.pop(live.stored.run.builder.response_id, None)

    async def shutdown(self) -> None:
        for live in list(self.live.values()):
            if live.task is not None:
                live.task.cancel()
        await asyncio.gather(*(live.task for live in self.live.values() if live.task), return_exceptions=True)
