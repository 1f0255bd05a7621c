"""This replica among the others: its heartbeat in the shared database, and the live replicas as last read there."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable

from server.metrics import LIVE_REPLICAS
from server.replicas.records import Replica, ReplicaRecords
from server.store.database import StoreUnavailable

logger = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 2.0  # how often a replica says it is alive, and reads who else is
LIVE_SECONDS = 10.0  # a replica silent for longer is taken for dead


@dataclass
class ReplicaRegistry:
    """Beats for this replica (when others can reach it: `url` set) and keeps the live set fresh, every `interval`.

    The live set is what the last heartbeat read; a store that stops answering leaves it empty once it is older than
    `live_seconds`, so requests are then served where they land."""

    records: ReplicaRecords
    replica_id: str
    url: str | None = None  # the --advertise-url; None: this replica takes no forwarded requests
    interval: float = HEARTBEAT_SECONDS
    live_seconds: float = LIVE_SECONDS
    draining: Callable[[], bool] = lambda: False
    _live: dict[str, str] = field(default_factory=dict)  # replica id -> url
    _task: asyncio.Task[None] | None = None

    def url_of(self, replica_id: str) -> str | None:
        """Where a live replica takes forwarded requests (None: it is not live)."""
        return self._live.get(replica_id)

    def live(self) -> list[str]:
        """The live replicas' ids."""
        return list(self._live)

    async def beat(self) -> None:
        """Say this replica is alive, and read the live set."""
        if self.url is not None:
            await self.records.heartbeat(Replica(self.replica_id, self.url), self.draining())
        self._live = {replica.id: replica.url for replica in await self.records.live_replicas(self.live_seconds)}
        LIVE_REPLICAS.set(len(self._live))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop beating and leave the live set, so no replica forwards here any more."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.url is not None:
            try:
                await self.records.leave(self.replica_id)
            except StoreUnavailable:  # the others see the heartbeat stop instead
                pass

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_read = loop.time()
        while True:
            try:
                await self.beat()
                last_read = loop.time()
            except StoreUnavailable:  # the store logged why
                if loop.time() - last_read > self.live_seconds:
                    self._live = {}
                    LIVE_REPLICAS.set(0)
            except Exception:  # a fault of its own: logged, and the next beat tries again
                logger.exception("the replica heartbeat failed")
            await asyncio.sleep(self.interval)
