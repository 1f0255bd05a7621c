"""Endings of stored responses that the store refused while it was out, stored again once it is back."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from server.runs.stored_run import StoredRun

logger = logging.getLogger(__name__)


@dataclass
class PendingSaves:
    """Each refused ending is retried with backoff in its own task until stored; at most `limit` wait at once."""

    limit: int = 10_000  # past it, an ending is dropped (logged): memory is not spent without bound in an outage
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def add(self, stored: StoredRun) -> None:
        if len(self._tasks) >= self.limit:
            logger.warning("response %s is not stored: %d endings already wait for the store", stored.response_id,
                           self.limit)
            return
        task = asyncio.get_running_loop().create_task(stored.keep_storing())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        """Stop retrying: what the store has not taken by now is not stored."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
