"""Usage by the minute in the shared database: every replica counts into the same rows (the Limiter's UsageLedger)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.store.database import Database, marks
from server.tenancy.limits import Spent
from server.tenancy.usage import COUNTS, UsageRecord

_COLUMNS = ("project", "api_key_id", "model", "minute", "batch", *COUNTS)
# Adds a record's counts to its minute's row.
_ADD = (f"INSERT INTO usage_minutes ({', '.join(_COLUMNS)}) VALUES ({marks(len(_COLUMNS))}) "
        "ON CONFLICT (project, api_key_id, model, minute, batch) DO UPDATE SET "
        + ", ".join(f"{name} = usage_minutes.{name} + excluded.{name}" for name in COUNTS))
_TOKENS = "input_tokens + output_tokens"
# A project's requests and tokens in a minute, and its tokens since a minute, batch work not counted (parameters:
# minute, minute, project, since; then the key, when one is asked for).
_SPENT = (f"SELECT COALESCE(SUM(CASE WHEN minute = ? THEN requests ELSE 0 END), 0), "
          f"COALESCE(SUM(CASE WHEN minute = ? THEN {_TOKENS} ELSE 0 END), 0), COALESCE(SUM({_TOKENS}), 0) "
          "FROM usage_minutes WHERE project = ? AND minute >= ? AND batch = 0")


@dataclass
class UsageRecords:
    """The usage minutes in `database`."""

    database: Database

    async def add_usage(self, record: UsageRecord) -> None:
        """Add the record's counts to its project's, key's and model's minute."""
        row = (record.project, record.api_key_id, record.model, record.minute, int(record.batch),
               *(getattr(record, name) for name in COUNTS))
        await self.database.run("add_usage", lambda db: db.execute(_ADD, row))

    async def spent(self, project: str, api_key_id: str | None, minute: int, day_start: int) -> Spent:
        """The project's (only its key's, when `api_key_id` is given) requests and tokens in `minute`, and its
        tokens since minute `day_start`."""
        sql, parameters = _SPENT, (minute, minute, project, day_start)
        if api_key_id is not None:
            sql, parameters = sql + " AND api_key_id = ?", (*parameters, api_key_id)
        row = await self.database.run("spent", lambda db: db.execute(sql, parameters).fetchone())
        return Spent(*(int(value) for value in row))

    async def usage_between(self, start_minute: int, end_minute: int) -> list[UsageRecord]:
        """Every minute's record in [start_minute, end_minute)."""
        rows = await self.database.run("usage_between", lambda db: db.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM usage_minutes WHERE minute >= ? AND minute < ?",
            (start_minute, end_minute)).fetchall())
        return [_usage_record(row) for row in rows]


def _usage_record(row: Any) -> UsageRecord:
    project, key_id, model, minute, batch, *counts = row
    return UsageRecord(project, key_id, model, int(minute), *(int(count) for count in counts), batch=bool(batch))
