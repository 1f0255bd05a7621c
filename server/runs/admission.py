"""The responses running in this process: a cap on how many at once (past it, a request waits for a place up to
a bound, then is a 429 with Retry-After), and the means to stop them all at shutdown."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

from server.metrics import WAITING_REQUESTS

RETRY_AFTER_SECONDS = 1


class Overloaded(Exception):
    """Refused: this process runs its maximum of responses at once; `retry_after` seconds is a fair wait."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"This server is running its maximum of {limit} responses at once; retry shortly.")
        self.retry_after = RETRY_AFTER_SECONDS


class Draining(Exception):
    """Refused: this process is shutting down and admits no more responses."""

    def __init__(self) -> None:
        super().__init__("The server is shutting down; retry on another replica or shortly.")
        self.retry_after = RETRY_AFTER_SECONDS


@dataclass(eq=False)
class Slot:
    """One admitted response; released once, when its run ends however it ends."""

    admission: "Admission"
    stop: Callable[[str], None] | None = None  # set by the run: ends it early with a terminal event

    def release(self) -> None:
        self.admission.slots.discard(self)
        self.admission.freed.set()  # a waiting request looks again


@dataclass
class Admission:
    """Counts running responses against `limit` (None: no cap); while draining, admits none."""

    limit: int | None = None
    slots: set[Slot] = field(default_factory=set)
    draining: bool = False
    freed: asyncio.Event = field(default_factory=asyncio.Event)  # set when a place is given back
    waiting: int = 0  # requests past the cap, waiting for a place

    @property
    def active(self) -> int:
        return len(self.slots)

    def admit(self) -> Slot:
        if self.draining:
            raise Draining()
        if self.limit is not None and self.active >= self.limit:
            raise Overloaded(self.limit)
        slot = Slot(self)
        self.slots.add(slot)
        return slot

    async def admit_within(self, seconds: float) -> Slot:
        """A place, waiting up to `seconds` for one to be given back when all are taken (then Overloaded)."""
        deadline = time.monotonic() + seconds
        while True:
            self.freed.clear()  # before the look: a place given back after it wakes the wait below at once
            try:
                return self.admit()
            except Overloaded:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                self.waiting += 1
                WAITING_REQUESTS.inc()
                try:
                    await asyncio.wait_for(self.freed.wait(), min(left, 1.0))  # and a look each second regardless
                except asyncio.TimeoutError:
                    pass
                finally:
                    self.waiting -= 1
                    WAITING_REQUESTS.dec()

    async def drain(self, timeout: float, reason: str) -> int:
        """Admit no more; let running responses finish for `timeout` seconds, then stop the rest with `reason`.

        Returns how many had to be stopped.
        """
        self.draining = True
        await self._idle(time.monotonic() + timeout)
        stopped = list(self.slots)
        for slot in stopped:
            if slot.stop is not None:
                slot.stop(reason)
        await self._idle(time.monotonic() + 10)
        return len(stopped)

    async def _idle(self, deadline: float) -> None:
        while self.slots and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
