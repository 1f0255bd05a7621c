"""Admission under a project's (and its key's) limits, and each response's usage counted when it ends.

Requests and tokens per minute and tokens per day are counted in the ledger (the shared store: every replica reads
and adds to the same minutes, so the limit holds across replicas; replicas admitting at the same instant may pass
it by one request each). Requests at once are counted in each API process, which takes its share of the limit: the
limit divided among the live replicas' API processes (rounded up)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from server.metrics import PROJECT_REQUESTS, PROJECT_TOKENS, RATE_LIMITED
from server.store.database import StoreUnavailable
from server.tenancy.keys import Caller
from server.tenancy.limits import DAY, MINUTE, Limits, RateLimited, Spent, rate_headers, refusal
from server.tenancy.usage import NO_KEY, UsageLedger, UsageRecord
from streaming.outcome import Usage

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Ticket:
    """One admitted request: the headers that tell its client where it stands, and its usage, counted once when
    it ends (`finish`)."""

    limiter: "Limiter"
    caller: Caller
    model: str
    counted: bool  # its request was counted at admission (its project or key has limits per minute or day)
    headers: dict[str, str] = field(default_factory=dict)
    batch: bool = False  # a batch's request: held to its batch's bounds, not the limits, and counted apart
    _finished: bool = False

    def finish(self, usage: Usage | None) -> None:
        """Count what the response used (None: it never ran) and give back its place. Once; later calls do nothing."""
        if self._finished:
            return
        self._finished = True
        self.limiter.ended(self, usage)


@dataclass
class Limiter:
    """Admits requests under each project's and key's limits and counts every response's usage in `ledger`."""

    ledger: UsageLedger
    projects: Mapping[str, Limits] = field(default_factory=dict)  # project -> its limits
    keys: Mapping[str, Limits] = field(default_factory=dict)  # key id -> its own limits (on top of its project's)
    replicas: Callable[[], int] = lambda: 1  # the processes sharing the limits on requests at once (replicas x API
    # processes)
    clock: Callable[[], float] = time.time
    _running: dict[str, int] = field(default_factory=dict)  # "project NAME" / "key ID" -> responses running here
    _writes: set[asyncio.Task[None]] = field(default_factory=set)
    # scope -> (until when, what it had spent): a scope refused for its minute's or day's counts stays refused until
    # that window turns, without reading the ledger again (a client hammering past its limit costs no store read)
    _refused: dict[str, tuple[float, Spent]] = field(default_factory=dict)

    async def admit(self, caller: Caller, model: str) -> Ticket:
        """The request's ticket; RateLimited past a limit of its project or key."""
        now = self.clock()
        scopes = self._scopes(caller)
        headers: dict[str, str] = {}
        for scope, limits, key_id in scopes:
            until, spent = self._refused.get(scope, (0.0, Spent()))
            if now >= until:
                spent = await self._spent(caller.project, key_id, limits, now)
            refused = refusal(scope, self._share(limits), spent, self._running.get(scope, 0), now)
            if refused is not None:
                RATE_LIMITED.labels(caller.project, refused.kind).inc()
                if refused.kind != "concurrency":
                    window = DAY if refused.kind == "quota" else MINUTE
                    self._refused[scope] = (now - now % window + window, spent)
                raise refused
            headers = _tighter(headers, rate_headers(limits, spent, now, admitted=True))
        counted = any(limits.counted for _, limits, _ in scopes)
        if counted:
            await self.ledger.add_usage(self._record(caller, model, now, Usage(), requests=1))
        for scope, _, _ in scopes:
            self._running[scope] = self._running.get(scope, 0) + 1
        return Ticket(self, caller, model, counted, headers)

    def admit_batch(self, caller: Caller, model: str) -> Ticket:
        """A batch request's ticket: not held to the caller's limits (a batch yields to interactive work instead:
        server/batches), its usage counted apart."""
        return Ticket(self, caller, model, counted=False, batch=True)

    def ended(self, ticket: Ticket, usage: Usage | None) -> None:
        """A ticket's response ended: its place given back, its usage added (in the background). None: it never
        ran (refused as it was prepared): nothing to add, but the request counted at admission."""
        if not ticket.batch:
            for scope, _, _ in self._scopes(ticket.caller):
                self._running[scope] = max(0, self._running.get(scope, 0) - 1)
        if usage is None:
            return
        record = self._record(ticket.caller, ticket.model, self.clock(), usage, requests=0 if ticket.counted else 1,
                              batch=ticket.batch)
        PROJECT_REQUESTS.labels(record.project).inc()
        for kind in ("input", "cached", "output", "reasoning"):
            PROJECT_TOKENS.labels(record.project, kind).inc(getattr(record, f"{kind}_tokens"))
        task = asyncio.get_running_loop().create_task(self._add(record))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def usage(self, first_minute: int, last_minute: int) -> list[UsageRecord]:
        """The usage counted in minutes [first_minute, last_minute), every project's."""
        return await self.ledger.usage_between(first_minute, last_minute)

    async def close(self) -> None:
        """Wait for the usage still being written."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    def _scopes(self, caller: Caller) -> list[tuple[str, Limits, str | None]]:
        """(scope, its limits, the key id to count by or None for the whole project) of each limit on the caller."""
        scopes: list[tuple[str, Limits, str | None]] = []
        project = self.projects.get(caller.project)
        if project:
            scopes.append((f"project {caller.project}", project, None))
        key = self.keys.get(caller.key_id) if caller.key_id is not None else None
        if key:
            scopes.append((f"key {caller.key_id}", key, caller.key_id))
        return scopes

    async def _spent(self, project: str, key_id: str | None, limits: Limits, now: float) -> Spent:
        if not limits.counted:
            return Spent()
        minute = int(now // MINUTE)
        try:
            return await self.ledger.spent(project, key_id, minute, int(now // DAY) * (DAY // MINUTE))
        except StoreUnavailable:  # limits are not worth refusing every request for: admitted, counted when it can
            logger.warning("usage could not be read to check limits; the request is admitted")
            return Spent()

    def _share(self, limits: Limits) -> Limits:
        """The limits with requests at once divided among the processes sharing it (this one's share)."""
        if limits.concurrent_requests is None:
            return limits
        share = math.ceil(limits.concurrent_requests / max(1, self.replicas()))
        return Limits(limits.requests_per_minute, limits.tokens_per_minute, share, limits.tokens_per_day)

    @staticmethod
    def _record(caller: Caller, model: str, now: float, usage: Usage, requests: int,
                batch: bool = False) -> UsageRecord:
        return UsageRecord(caller.project, caller.key_id or NO_KEY, model, int(now // MINUTE), requests=requests,
                           input_tokens=usage.input_tokens, cached_tokens=usage.cached_tokens,
                           output_tokens=usage.output_tokens, reasoning_tokens=usage.reasoning_tokens, batch=batch)

    async def _add(self, record: UsageRecord) -> None:
        try:
            await self.ledger.add_usage(record)
        except StoreUnavailable:  # (the store logs its outage once)
            logger.debug("the usage of a response was not recorded (project %s): the store is unavailable",
                         record.project)


def _tighter(first: dict[str, str], second: dict[str, str]) -> dict[str, str]:
    """Of two scopes' headers, for each of requests and tokens, the one with less remaining."""
    merged = dict(first)
    for kind in ("requests", "tokens"):
        remaining = f"x-ratelimit-remaining-{kind}"
        if remaining in second and (remaining not in merged or int(second[remaining]) < int(merged[remaining])):
            merged |= {name: value for name, value in second.items() if name.endswith(kind)}
    return merged
