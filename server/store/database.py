"""The database every capability keeps its records in: one transaction at a time, each a named unit of work.

A unit of work is a plain function of a `Session`, run in a thread of the database's own, so SQL is written once for
SQLite and PostgreSQL: `?` marks its parameters, and the `Dialect` says what differs (the clock, locks, JSON).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Protocol, Sequence, TypeVar

from opentelemetry.trace import SpanKind

from server import tracing
from server.metrics import STORE_ERRORS, STORE_SECONDS

T = TypeVar("T")
Order = Literal["asc", "desc"]
logger = logging.getLogger(__name__)


class StoreUnavailable(Exception):
    """The store cannot read or write now (locked, read-only, disk full, unreachable); the backend logged why."""


class StoreRejected(ValueError):
    """The store cannot keep or look up a value the request holds (bad data, not an outage): a 400."""


@dataclass(frozen=True)
class Dialect:
    """What SQL says differently in each database: its clock, its row locks, and its JSON."""

    name: str  # "sqlite" or "postgresql": the store latency histogram's `backend`
    now: str  # the database's clock, in Unix seconds
    inserted: str  # the `responses` column that grows with each row inserted
    share_lock: str  # locks a selected row against changes until the transaction ends ("" where writes serialize)
    skip_locked: str  # locks selected rows for update, skipping rows another transaction holds

    def json_text(self, column: str, key: str) -> str:
        """The text at `key` of a JSON object held in `column`."""
        if self.name == "postgresql":
            return f"({column}::jsonb ->> '{key}')"
        return f"json_extract({column}, '$.{key}')"


class Result(Protocol):
    """What a statement answers: its rows, and how many rows it changed."""

    rowcount: int

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Session(Protocol):
    """One transaction's connection: statements with `?` for each parameter."""

    dialect: Dialect

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Result: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...


class Database(Protocol):
    """A database the records of every capability share; safe to call from the event loop."""

    dialect: Dialect

    async def run(self, operation: str, work: Callable[[Session], T]) -> T:
        """`work` in one transaction, off the event loop, timed as `operation`; StoreUnavailable when the database
        cannot be reached or written, StoreRejected for a value it cannot hold."""
        ...

    async def close(self) -> None: ...


def marks(count: int) -> str:
    """`?, ?, ...` for a list of `count` parameters."""
    return ", ".join("?" * count)


@dataclass
class Outage:
    """Logs a database's failure once, and its recovery once: a store that is down does not flood the log."""

    name: str  # the database, as the log names it (no password)
    backend: str  # the dialect's name, as the metrics name it
    failing: bool = False

    def failed(self, exc: BaseException) -> StoreUnavailable:
        STORE_ERRORS.labels(self.backend).inc()
        if not self.failing:
            logger.error("the response store %s failed: %s: %s (logged once until it works again)", self.name,
                         type(exc).__name__, exc)
        self.failing = True
        return StoreUnavailable(f"{type(exc).__name__}: {exc}")

    def worked(self) -> None:
        if self.failing:
            logger.warning("the response store %s works again", self.name)
            self.failing = False


def timed(dialect: Dialect, operation: str) -> Any:
    """The store latency histogram's timer for one operation."""
    return STORE_SECONDS.labels(dialect.name, operation).time()


def traced(dialect: Dialect, operation: str) -> Any:
    """A span around one operation (a unit of work: one transaction)."""
    return tracing.span(f"store {operation}", SpanKind.CLIENT, {"db.system.name": dialect.name,
                                                                 "db.operation.name": operation})
