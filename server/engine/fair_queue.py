"""Requests waiting for room on a model's workers (a per-worker cap on what a gateway runs), taken in turn between
projects: the waiting project served least recently goes first, so one that sends a hundred requests at once waits
behind its own, not in front of everyone's."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field


@dataclass
class FairQueue:
    """Waiters by project; `wake_one` wakes the first waiter of the waiting project served least recently."""

    _waiting: dict[str, deque[asyncio.Future[None]]] = field(default_factory=dict)
    _served: dict[str, int] = field(default_factory=dict)  # each project's last start, as a count of starts
    _starts: int = 0

    def __len__(self) -> int:
        return sum(len(waiters) for waiters in self._waiting.values())

    def started(self, project: str) -> None:
        """A request of `project` got its room (waiting or not)."""
        self._starts += 1
        self._served[project] = self._starts

    async def wait(self, project: str) -> None:
        """Until woken (cancellable: a client that goes away leaves the queue)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(project, deque()).append(waiter)
        try:
            await waiter
        finally:
            waiters = self._waiting.get(project)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiting[project]

    def wake_one(self) -> None:
        """Room for one more: the first waiter of the project served least recently goes."""
        while self._waiting:
            project = min(self._waiting, key=lambda name: self._served.get(name, 0))
            waiters = self._waiting[project]
            waiter = waiters.popleft()
            if not waiters:
                del self._waiting[project]
            if not waiter.done():
                waiter.set_result(None)
                return
