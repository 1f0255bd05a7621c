"""A watch on a stream from a worker: nothing heard for too long, and the task reading it is stopped."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType


@dataclass(frozen=True)
class StallLimits:
    """How long a worker's stream may send nothing (a fleet model's keys; defaults sized for a long prefill on a
    GPU behind a queue)."""

    first_token_seconds: float = 300.0  # from the request to the first byte of output
    idle_seconds: float = 60.0  # between two bytes after that


class StallWatch:
    """Stops the task reading a worker's stream (TimeoutError) when no byte came for `first_token_seconds` before
    the first one and `idle_seconds` between later ones, or when told to `expire` (its worker went down). Only the
    time spent waiting for the worker counts: not the time its steps spend with the reader's caller (a slow client).

    Per piece heard it costs one clock read: the timer is armed for the deadline as first computed (armed anew once,
    at the first piece, for the idle limit) and, when it fires, armed again for whatever time the stream earned
    since (cancelling as asyncio.timeout does)."""

    def __init__(self, limits: StallLimits) -> None:
        self._idle = limits.idle_seconds
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._heard = self._loop.time()
        self._limit = limits.first_token_seconds
        self._waiting = True  # reading the worker (False: a step is with the caller)
        self._expiring = False
        self._cancelled = False  # this watch cancelled the task
        self.expired = False  # the watch stopped the task: its stream is to move

    async def __aenter__(self) -> "StallWatch":
        self._task = asyncio.current_task()
        self._heard = self._loop.time()
        self._handle = self._loop.call_at(self._heard + self._limit, self._check)
        return self

    def heard(self) -> float:
        """A piece arrived: the next is due within `idle_seconds`. Returns the time (time.monotonic())."""
        self._heard = self._loop.time()
        if self._limit != self._idle:  # the first piece: from now on the idle limit, which may be due sooner
            self._limit = self._idle
            if self._handle is not None:
                self._handle.cancel()
                self._handle = self._loop.call_at(self._heard + self._limit, self._check)
        return self._heard

    def handing_over(self) -> None:
        """A step goes to the caller: the time until `reading` is the caller's, not the worker's."""
        self._waiting = False

    def reading(self) -> None:
        """Back to reading the worker (TimeoutError if it went down meanwhile)."""
        self._waiting, self._heard = True, self._loop.time()
        if self._expiring:
            self.expired = True
            raise TimeoutError("its worker went down")

    def expire(self) -> None:
        """Stop the stream now (its worker is down); a step with the caller, once it is back."""
        if self.expired or self._expiring or self._task is None:
            return
        self._expiring = True
        if self._waiting:
            self.expired = True
            if self._handle is not None:
                self._handle.cancel()
            self._cancel()

    def _check(self) -> None:
        due = self._heard + self._limit
        if not self._waiting:
            due = max(due, self._loop.time() + self._limit)
        if self._waiting and self._loop.time() >= due:
            self._handle = None
            self.expired = True
            self._cancel()
        else:
            self._handle = self._loop.call_at(due, self._check)

    def _cancel(self) -> None:
        assert self._task is not None
        self._cancelled = True
        self._task.cancel()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        task, self._task = self._task, None  # over: `expire` does nothing now
        if self._cancelled and task is not None and task.uncancel() == 0 and kind is asyncio.CancelledError:
            raise TimeoutError("the worker sent nothing for too long") from exc
