"""A model's workers in a fleet: each one's condition, how loaded, and the order in which a turn tries them.

A turn goes to the worker that holds its prefix: rendezvous hashing of its affinity key (its `prompt_cache_key`, its
conversation, or the first response of its chain) over the workers in rotation, so every gateway, on any replica,
picks the same worker with no word to another; the next in the hash's order is where it goes when that one fails.
When that worker runs more than `load_bound` times the mean of what this gateway runs on the model's workers (and
`load_slack` more than the least loaded), has
`max_waiting` more requests waiting than the least loaded one, or a full KV cache, the next of the order with room
goes first instead (a cache miss, never an error).

A worker's condition is one state machine (Envoy's active health checking and outlier detection in one):

    up --a failed request--> suspected --N in a row--> ejected (for a time that grows with each ejection)
    suspected --a request answered--> up            ejected --its time over, /health answers--> up
    any --connection refused, or /health failing twice--> down --/health answers (the model checked)--> up

Only up and suspected workers are in rotation. When none is, the ejected ones are tried, then the down ones (panic
mode: a fleet whose every worker looks bad is tried, not refused); at most `max_ejected_share` of a model's workers
are ejected at once. Down is the health check's word: a model whose every worker is down is a 503.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Protocol

from server.metrics import ENGINE_EJECTIONS, ENGINE_WORKERS, ENGINE_WORKERS_UP
from server.engine.fair_queue import FairQueue
from server.engine.interface import EngineUnavailable
from server.rendezvous import rendezvous_order

logger = logging.getLogger(__name__)
_WAITING = re.compile(r'^vllm:num_requests_waiting\{([^}]*)\}\s+([0-9.eE+-]+)\s*$', re.MULTILINE)
_KV_USAGE = re.compile(r'^vllm:(?:kv|gpu)_cache_usage_perc\{([^}]*)\}\s+([0-9.eE+-]+)\s*$', re.MULTILINE)


@dataclass(frozen=True)
class OutlierPolicy:
    """When failures take a worker out of rotation, and for how long (every value has a fleet file key)."""

    failures_to_eject: int = 3  # consecutive failed requests (a connect error, a reset, a timeout, a 5xx)
    ejection_seconds: float = 5.0  # the first ejection's length; the n-th lasts n times this
    max_ejection_seconds: float = 300.0  # no ejection lasts longer
    max_ejected_share: float = 0.5  # of a model's workers, ejected at once (one worker alone is never ejected)
    probe_failures_to_down: int = 2  # consecutive failed health checks (a refused connection: at once)


class Condition(Enum):
    """Where a worker stands in its model's rotation."""

    UP = "up"
    SUSPECTED = "suspected"  # a request failed on it lately; still in rotation
    EJECTED = "ejected"  # out of rotation until `ejected_until`, then back once its /health answers
    DOWN = "down"  # its health check fails, or nothing listens: back once its /health answers


class Watched(Protocol):
    """A stream in flight on a worker: told to move when its worker goes down."""

    def expire(self) -> None: ...


@dataclass(eq=False)
class Worker:
    """One worker as this gateway sees it: its condition, what waits in its queue, what this gateway runs on it."""

    url: str
    policy: OutlierPolicy = OutlierPolicy()
    condition: Condition = Condition.DOWN
    problem: str | None = "not checked yet"  # why it is out of rotation or suspected (logged once when it changes)
    failures: int = 0  # failed requests in a row
    probe_failures: int = 0  # failed health checks in a row
    ejections: int = 0  # ejections lately (each lasts longer); forgotten after a long spell in rotation
    ejected_until: float = 0.0  # time.monotonic()
    waiting: int = 0  # its own `vllm:num_requests_waiting`, last read
    kv_usage: float = 0.0  # its own `vllm:kv_cache_usage_perc` (0 to 1), last read
    running: int = 0  # the requests this gateway is streaming from it now
    max_model_len: int | None = None  # its window, as its /v1/models says
    heard_at: float = float("-inf")  # when it last sent this gateway a byte of an answer (time.monotonic())
    up_since: float = float("-inf")  # when it last became up (time.monotonic())
    streams: set[Watched] = field(default_factory=set)  # its streams in flight, moved if it goes down

    @property
    def in_rotation(self) -> bool:
        return self.condition in (Condition.UP, Condition.SUSPECTED)

    def load(self) -> int:
        """What a new request would queue behind here, as far as this gateway knows."""
        return self.waiting + self.running

    def heard(self) -> None:
        """A byte of an answer arrived: it was alive then."""
        self.heard_at = time.monotonic()

    def heard_within(self, seconds: float) -> bool:
        """It sent an answer's byte less than `seconds` ago: no health check is needed to know it is alive. A worker
        streaming nothing for longer (a long prefill, or a hung engine) is checked."""
        return self.in_rotation and time.monotonic() - self.heard_at < seconds

    def answered(self) -> None:
        """A request it ran answered (or ended) as it should: its failures are forgotten."""
        self.heard()
        self.failures = 0
        if self.condition is not Condition.UP:
            self._become(Condition.UP, None)

    def failed(self, problem: str, may_eject: bool) -> bool:
        """A request failed on it (a reset, a timeout, a 5xx); True when this ejects it."""
        self.failures += 1
        if not self.in_rotation:
            self.problem = problem
            return False
        if self.failures < self.policy.failures_to_eject or not may_eject:
            self._become(Condition.SUSPECTED, problem)
            return False
        self.ejections += 1
        seconds = min(self.policy.ejection_seconds * self.ejections, self.policy.max_ejection_seconds)
        self.ejected_until = time.monotonic() + seconds
        self._become(Condition.EJECTED, f"{problem} ({self.failures} failures in a row; out for {seconds:g} s)")
        return True

    def refused(self, problem: str) -> None:
        """Nothing listens at its address: down at once."""
        self._become(Condition.DOWN, problem)

    def probe_failed(self, problem: str, refused: bool = False) -> None:
        """Its health check failed: down when it was refused, or after `probe_failures_to_down` in a row."""
        self.probe_failures += 1
        if refused or self.probe_failures >= self.policy.probe_failures_to_down:
            self._become(Condition.DOWN, problem)

    def probe_passed(self) -> None:
        """Its /health answered 200 (and, coming back from down, it still serves the model)."""
        self.probe_failures = 0
        now = time.monotonic()
        if self.condition is Condition.DOWN or (self.condition is Condition.EJECTED and now >= self.ejected_until):
            self.failures = 0
            self._become(Condition.UP, None)
        if self.ejections and now - self.ejected_until > self.policy.max_ejection_seconds:
            self.ejections = 0  # long enough in rotation: the next ejection is a first one again

    def back_since(self, failed_at: float) -> bool:
        """Whether it has served since a failure at `failed_at` (time.monotonic()): in rotation, and up again or
        streaming to this gateway since."""
        return self.in_rotation and max(self.up_since, self.heard_at) > failed_at

    def came_up(self) -> None:
        """Seen serving (its start check passed)."""
        self.probe_failures = self.failures = 0
        self._become(Condition.UP, None)

    def _become(self, condition: Condition, problem: str | None) -> None:
        if condition is not self.condition or problem != self.problem:
            if condition is Condition.UP:
                logger.info("engine worker %s is up", self.url)
            else:
                logger.warning("engine worker %s is %s: %s", self.url, condition.value, problem)
        if condition is Condition.UP and self.condition is not Condition.UP:
            self.up_since = time.monotonic()
        self.condition, self.problem = condition, problem
        if condition is Condition.DOWN:
            for stream in list(self.streams):
                stream.expire()


@dataclass(frozen=True)
class LoadLimits:
    """When a worker has no room for a turn its key would send it, and what a gateway runs on one worker."""

    max_waiting: int = 8  # a worker with this many more waiting than the least loaded one passes its turn on
    load_bound: float = 1.25  # a worker running more than this times the mean passes its turn on (0: no bound)
    load_slack: int = 16  # ...when it also runs this many more than the least loaded (a miss costs a prefill)
    max_kv_usage: float = 0.95  # a worker whose KV cache is this full passes its turn to one less full
    max_running: int = 0  # what this gateway runs on one worker at most; more waits in the queue (0: no cap)


@dataclass
class WorkerSet:
    """The workers of one model, and the order in which a request tries them."""

    model: str
    workers: list[Worker]
    policy: OutlierPolicy = OutlierPolicy()
    limits: LoadLimits = LoadLimits()
    queue: FairQueue = field(default_factory=FairQueue)  # requests waiting for room, in turn between projects
    _by_url: dict[str, Worker] = field(init=False)

    def __post_init__(self) -> None:
        self._by_url = {worker.url: worker for worker in self.workers}
        ENGINE_WORKERS.labels(self.model).set(len(self.workers))
        ENGINE_WORKERS_UP.labels(self.model).set_function(lambda: len(self.in_rotation()))  # read when scraped

    @classmethod
    def of(cls, model: str, urls: Iterable[str], policy: OutlierPolicy = OutlierPolicy(),
           limits: LoadLimits = LoadLimits()) -> "WorkerSet":
        return cls(model, [Worker(url, policy) for url in urls], policy, limits)

    def update(self, urls: Iterable[str], policy: OutlierPolicy, limits: LoadLimits) -> None:
        """The fleet changed: workers not listed now leave (their streams in flight finish where they are), new
        ones join down, until their first health check passes; the others keep their condition."""
        urls = list(dict.fromkeys(urls))
        kept = {url: self._by_url[url] for url in urls if url in self._by_url}
        for url in urls:
            if url not in kept:
                logger.info("engine worker %s joins the model '%s'", url, self.model)
        for worker in self.workers:
            if worker.url not in kept:
                logger.info("engine worker %s leaves the model '%s'", worker.url, self.model)
        self.workers = [kept.get(url) or Worker(url, policy) for url in urls]
        for worker in self.workers:
            worker.policy = policy
        self._by_url = {worker.url: worker for worker in self.workers}
        self.policy, self.limits = policy, limits
        for _ in range(len(self.queue)):  # a cap raised or lifted, or new workers: the waiting may go
            self.queue.wake_one()
        ENGINE_WORKERS.labels(self.model).set(len(self.workers))

    def in_rotation(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.in_rotation]

    def alive(self) -> bool:
        """Whether any worker is not down (an ejected one is tried when none is in rotation)."""
        return any(worker.condition is not Condition.DOWN for worker in self.workers)

    def busy(self) -> bool:
        """Whether this gateway is streaming from any of the workers now."""
        return any(worker.running for worker in self.workers)

    def order(self, affinity: str | None) -> list[Worker]:
        """The workers a request with this affinity key tries, first choice first (None: the least loaded first).
        Those in rotation; when none is, the ejected; when none is, every worker (panic mode)."""
        pool = (self.in_rotation() or [worker for worker in self.workers if worker.condition is Condition.EJECTED]
                or list(self.workers))
        least = min(pool, key=lambda worker: (worker.load(), worker.url))
        if affinity is None:
            return sorted(pool, key=lambda worker: (worker.load(), worker.url))
        ranked = [self._by_url[url] for url in rendezvous_order(affinity, [worker.url for worker in pool])]
        first = next((worker for worker in ranked if self._has_room(worker, pool, least)), least)
        if first is not ranked[0]:
            ranked.remove(first)
            ranked.insert(0, first)  # saturated: a miss of its cache costs less than the wait
        return ranked

    def _has_room(self, worker: Worker, pool: list[Worker], least: Worker) -> bool:
        """Whether a turn may go to `worker` ahead of the rest of its order: it runs no more than `load_bound` times
        the mean this gateway runs on the pool, or no more than `load_slack` beyond the least loaded (rendezvous
        with bounded load: a hot key spills to its next choice, in the same order on every gateway), its queue is
        within `max_waiting` of the least loaded's, and its KV cache is not full while another's is not."""
        limits = self.limits
        if limits.load_bound and worker.running - least.running >= limits.load_slack and worker.running + 1 > math.ceil(
                limits.load_bound * (sum(other.running for other in pool) + 1) / len(pool)):
            return False
        if worker.waiting - least.waiting >= limits.max_waiting:
            return False
        return worker.kv_usage < limits.max_kv_usage or least.kv_usage >= limits.max_kv_usage

    def has_room(self, worker: Worker) -> bool:
        """Whether this gateway may run one more request on `worker` (under `max_running`)."""
        return not self.limits.max_running or worker.running < self.limits.max_running

    def released(self) -> None:
        """A request ended on one of the workers: a waiting one may go."""
        if self.limits.max_running:
            self.queue.wake_one()

    def choose(self, affinity: str | None) -> Worker:
        """The first worker a request with this affinity key tries (EngineUnavailable when every one is down)."""
        if not self.alive():
            raise EngineUnavailable(f"No engine worker of the model '{self.model}' is up; try again shortly.")
        return self.order(affinity)[0]

    def failed(self, worker: Worker, problem: str) -> None:
        """A request failed on `worker`: it is ejected after enough in a row, while the share allows."""
        ejected = sum(other.condition is Condition.EJECTED for other in self.workers)
        if worker.failed(problem, may_eject=ejected + 1 <= int(self.policy.max_ejected_share * len(self.workers))):
            ENGINE_EJECTIONS.labels(self.model).inc()

    def update_waiting(self, worker: Worker, metrics_text: str) -> None:
        """Reads the worker's waiting requests and KV-cache use for this model from its /metrics text."""
        waiting = self._read(_WAITING, metrics_text)
        if waiting is not None:
            worker.waiting = int(sum(waiting))
        usage = self._read(_KV_USAGE, metrics_text)
        if usage:
            worker.kv_usage = max(usage)

    def _read(self, pattern: re.Pattern[str], metrics_text: str) -> list[float] | None:
        """The values of a series for this model (each engine's), None when the text has none."""
        values = [float(value) for labels, value in pattern.findall(metrics_text)
                  if f'model_name="{self.model}"' in labels or "model_name=" not in labels]
        return values if values else None
