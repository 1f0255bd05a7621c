"""CPU-heavy input work (PDF text, image decoding) off the event loop: a few worker processes, each job bounded in
time (its worker is killed past it) and each worker in memory (an address-space limit)."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import subprocess
import sys
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Callable

logger = logging.getLogger(__name__)


class WorkTooCostly(Exception):
    """A job ran past its time limit, or its worker past its memory limit; `kind` says which ("time", "memory")."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(frozen=True)
class WorkLimits:
    """How many workers run jobs at once, how long one job may take, and how much memory one worker may map."""

    workers: int = 2
    seconds: float = 10.0
    memory_bytes: int = 1 << 30


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    jobs: Connection  # this side of the worker's pipe


@dataclass
class WorkPool:
    """Runs `fn(*args)` in a worker process: at most `limits.workers` at once, the rest waiting their turn.

    Workers start when first needed (new processes: the server's own threads are not forked) and are reused; a
    worker whose job runs too long, runs out of memory or dies is replaced.
    """

    limits: WorkLimits = field(default_factory=WorkLimits)
    _idle: list[_Worker] = field(default_factory=list)
    _turns: asyncio.Semaphore | None = None
    _closed: bool = False

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` from a worker (`fn` is a module-level function, its arguments picklable); raises what it
        raised, WorkTooCostly past a limit."""
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.limits.workers)
        async with self._turns:
            worker = self._idle.pop() if self._idle else await asyncio.to_thread(self._start)
            try:
                outcome, value = await asyncio.wait_for(asyncio.to_thread(_exchange, worker, fn, args),
                                                        self.limits.seconds)
            except BaseException as exc:  # past the time limit, cancelled (its client left), or the worker died
                _stop(worker)
                if isinstance(exc, asyncio.TimeoutError):
                    raise WorkTooCostly("time") from None
                if isinstance(exc, (EOFError, OSError)):
                    raise WorkTooCostly("memory") from None  # killed by the kernel, as past a memory bound
                raise
            if self._closed:
                _stop(worker)
            else:
                self._idle.append(worker)
        if outcome == "memory":
            raise WorkTooCostly("memory")
        if outcome == "error":
            raise value
        return value

    def close(self) -> None:
        """Stop the idle workers (a running job's worker stops when its job ends)."""
        self._closed = True
        while self._idle:
            _stop(self._idle.pop())

    def _start(self) -> _Worker:
        """A worker process of its own (`python -m` this module: it imports nothing of the server's engine)."""
        ours, theirs = multiprocessing.Pipe()
        process = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno()),
                                    str(self.limits.memory_bytes)], pass_fds=[theirs.fileno()],
                                   stdin=subprocess.DEVNULL)
        theirs.close()
        return _Worker(process, ours)


def _exchange(worker: _Worker, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
    worker.jobs.send((fn, args))
    return worker.jobs.recv()


def _stop(worker: _Worker) -> None:
    worker.process.kill()
    worker.process.wait(timeout=5)
    worker.jobs.close()


def _serve(jobs: Connection, memory_bytes: int) -> None:
    """A worker's loop: each job's result, its exception, or "memory" when it ran out."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    while True:
        try:
            fn, args = jobs.recv()
        except EOFError:  # the server closed its end
            return
        try:
            jobs.send(("done", fn(*args)))
        except MemoryError:
            jobs.send(("memory", None))
        except Exception as exc:  # the job's own error, raised again in the server
            jobs.send(("error", exc))


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])), int(sys.argv[2]))
