"""A model's workers in a fleet: which are up, how loaded, and which one a turn goes to.

A turn goes to the worker that holds its prefix: rendezvous hashing of its affinity key (its `prompt_cache_key`, its
conversation, or the first response of its chain) over the workers that are up, so every gateway, on any replica,
picks the same worker with no word to another. When that worker is down, or has `max_waiting` more requests waiting
than the least loaded one, the turn goes to the least loaded instead (a cache miss, never an error).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Iterable

from server.metrics import ENGINE_WORKERS, ENGINE_WORKERS_UP
from server.engine.interface import EngineUnavailable
from server.rendezvous import rendezvous

logger = logging.getLogger(__name__)
_WAITING = re.compile(r'^vllm:num_requests_waiting\{([^}]*)\}\s+([0-9.eE+-]+)\s*$', re.MULTILINE)


@dataclass
class Worker:
    """One worker as this gateway sees it: up or down, what waits in its queue, and what this gateway runs on it."""

    url: str
    up: bool = False
    waiting: int = 0  # its own `vllm:num_requests_waiting`, last read
    running: int = 0  # the requests this gateway is streaming from it now
    max_model_len: int | None = None  # its window, as its /v1/models says
    problem: str | None = None  # why it is down, as last seen (logged once when it changes)
    heard_at: float = float("-inf")  # when it last answered a request (time.monotonic()): proof it was up then

    def load(self) -> int:
        """What a new request would queue behind here, as far as this gateway knows."""
        return self.waiting + self.running

    def went_down(self, problem: str) -> None:
        if self.up or problem != self.problem:
            logger.warning("engine worker %s is down: %s", self.url, problem)
        self.up, self.problem = False, problem

    def came_up(self) -> None:
        if not self.up:
            logger.info("engine worker %s is up", self.url)
        self.up, self.problem = True, None

    def answered(self) -> None:
        """It answered a request: up, as of now."""
        self.heard_at = time.monotonic()
        self.came_up()

    def heard_within(self, seconds: float) -> bool:
        """It is streaming to this gateway, or answered a request less than `seconds` ago: no health check is needed
        to know it is up (were it to die, its streams would break and mark it down)."""
        return self.up and (self.running > 0 or time.monotonic() - self.heard_at < seconds)


@dataclass
class WorkerSet:
    """The workers of one model, and the choice of one for each request."""

    model: str
    workers: list[Worker]
    max_waiting: int = 8
    _by_url: dict[str, Worker] = field(init=False)

    def __post_init__(self) -> None:
        self._by_url = {worker.url: worker for worker in self.workers}
        ENGINE_WORKERS.labels(self.model).set(len(self.workers))
        ENGINE_WORKERS_UP.labels(self.model).set_function(lambda: len(self.up()))  # read when scraped

    @classmethod
    def of(cls, model: str, urls: Iterable[str], max_waiting: int = 8) -> "WorkerSet":
        return cls(model, [Worker(url) for url in urls], max_waiting)

    def up(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.up]

    def busy(self) -> bool:
        """Whether this gateway is streaming from any of the workers now."""
        return any(worker.running for worker in self.workers)

    def choose(self, affinity: str | None) -> Worker:
        """The worker for a request with this affinity key (None: the least loaded); EngineUnavailable when none of
        the model's workers is up."""
        live = self.up()
        if not live:
            raise EngineUnavailable(f"No engine worker of the model '{self.model}' is up; try again shortly.")
        least = min(live, key=lambda worker: (worker.load(), worker.url))
        if affinity is None:
            return least
        home = self._by_url[rendezvous(affinity, [worker.url for worker in live])]
        if home.waiting - least.waiting >= self.max_waiting:
            return least  # saturated: a miss of its cache costs less than the wait
        return home

    def update_waiting(self, worker: Worker, metrics_text: str) -> None:
        """Reads the worker's `vllm:num_requests_waiting` for this model from its /metrics text."""
        total, found = 0.0, False
        for labels, value in _WAITING.findall(metrics_text):
            if f'model_name="{self.model}"' in labels or "model_name=" not in labels:
                total, found = total + float(value), True
        if found:
            worker.waiting = int(total)
