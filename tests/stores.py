"""Records for tests: the real databases, opened on a path or URL, and a real database behind a switch or a counter."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, TypeVar

from server.records import MIGRATIONS, Records, open_records
from server.responses.records import RetentionPolicy
from server.store.database import Database, Dialect, Session, StoreUnavailable
from server.store.sqlite import SqliteDatabase

T = TypeVar("T")


def sqlite_database(path: Path, busy_timeout: float = 5.0) -> SqliteDatabase:
    """The server's SQLite database at `path`, with every room's migrations."""
    return SqliteDatabase(path, MIGRATIONS, busy_timeout=busy_timeout)


def sqlite_records(path: Path, busy_timeout: float = 5.0, retention: RetentionPolicy = RetentionPolicy(),
                   webhooks: bool = False) -> Records:
    """Every capability's records in a SQLite file, as `--store sqlite:///PATH` opens them."""
    return Records.over(sqlite_database(path, busy_timeout), retention, webhooks)


def records_at(url: str, retention: RetentionPolicy = RetentionPolicy(), webhooks: bool = False) -> Records:
    """The records at a `--store` URL (SQLite or PostgreSQL)."""
    records = open_records(url, retention, Path("unused"), webhooks)
    assert records is not None
    return records


class WrappedDatabase:
    """A real database (`inner`) that a test double sees each unit of work of: the records over it, its dialect."""

    inner: Database

    @property
    def dialect(self) -> Dialect:
        return self.inner.dialect

    @cached_property
    def records(self) -> Records:
        """Every capability's records over this database."""
        return Records.over(self)  # type: ignore[arg-type]

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class FaultyDatabase(WrappedDatabase):
    """A real database behind a switch: while `broken`, every unit of work fails as an unreachable store would."""

    inner: Database
    broken: bool = False
    failures: int = 0  # units of work that failed so far

    async def run(self, operation: str, work: Callable[[Session], T]) -> T:
        if self.broken:
            self.failures += 1
            raise StoreUnavailable("injected fault")
        return await self.inner.run(operation, work)


@dataclass
class CountingDatabase(WrappedDatabase):
    """A real database that counts its units of work, by operation, and the conversation items they read."""

    inner: Database
    calls: Counter[str] = field(default_factory=Counter)
    items_read: int = 0

    async def run(self, operation: str, work: Callable[[Session], T]) -> T:
        self.calls[operation] += 1
        result = await self.inner.run(operation, work)
        if operation == "conversation_items":
            self.items_read += len(result[0])  # type: ignore[index]
        return result


def faulty_sqlite(path: Path, busy_timeout: float = 5.0) -> FaultyDatabase:
    return FaultyDatabase(sqlite_database(path, busy_timeout))


