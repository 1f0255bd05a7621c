"""Usage per project, key and model, counted by the minute: what limits are checked against and what the usage API
reads. Kept in the shared store (every replica counts into the same rows), or in memory for a server without one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from server.tenancy.limits import Spent

NO_KEY = ""  # the api_key_id of requests made with no key (a server that asks for none)
COUNTS = ("requests", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")  # a record's counts


@dataclass(frozen=True)
class UsageRecord:
    """Counts of one project, key and model in one minute (`minute`: Unix seconds // 60); added to what is there."""

    project: str
    api_key_id: str
    model: str
    minute: int
    requests: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    batch: bool = False  # the counts of batch requests (server/batches), kept apart: limits do not count them

    def plus(self, other: "UsageRecord") -> "UsageRecord":
        counts = {name: getattr(self, name) + getattr(other, name) for name in COUNTS}
        return UsageRecord(self.project, self.api_key_id, self.model, self.minute, **counts, batch=self.batch)




class UsageLedger(Protocol):
    """Where usage is counted (the stores, and MemoryLedger)."""

    async def add_usage(self, record: UsageRecord) -> None:
        """Add the record's counts to its project's, key's and model's minute."""
        ...

    async def spent(self, project: str, api_key_id: str | None, minute: int, day_start: int) -> Spent:
        """The project's (only its key's, when `api_key_id` is given) requests and tokens in `minute`, and its
        tokens since minute `day_start` (batch work not counted)."""
        ...

    async def usage_between(self, start_minute: int, end_minute: int) -> list[UsageRecord]:
        """Every minute's record in [start_minute, end_minute)."""
        ...


@dataclass
class MemoryLedger:
    """Usage counted in this process (a server without a store); a day of minutes is kept."""

    minutes: dict[tuple[str, str, str, int, bool], UsageRecord]

    def __init__(self) -> None:
        self.minutes = {}

    async def add_usage(self, record: UsageRecord) -> None:
        key = (record.project, record.api_key_id, record.model, record.minute, record.batch)
        held = self.minutes.get(key)
        self.minutes[key] = held.plus(record) if held is not None else record
        if len(self.minutes) > 10_000:  # forget what is older than a day
            self.minutes = {k: v for k, v in self.minutes.items() if v.minute > record.minute - 1440}

    async def spent(self, project: str, api_key_id: str | None, minute: int, day_start: int) -> Spent:
        rows = [row for row in self.minutes.values() if row.project == project and row.minute >= day_start
                and not row.batch and (api_key_id is None or row.api_key_id == api_key_id)]
        now = [row for row in rows if row.minute == minute]
        return Spent(requests=sum(row.requests for row in now),
                     tokens=sum(row.input_tokens + row.output_tokens for row in now),
                     day_tokens=sum(row.input_tokens + row.output_tokens for row in rows))

    async def usage_between(self, start_minute: int, end_minute: int) -> list[UsageRecord]:
        return [row for row in self.minutes.values() if start_minute <= row.minute < end_minute]
