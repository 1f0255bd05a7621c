"""The PostgreSQL database: one shared by every replica, through psycopg 3's connection pool, each unit of work in a
thread of the pool's size (psycopg releases the GIL while it waits on the server)."""

from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Sequence, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from server.store.database import Dialect, Outage, StoreRejected, timed, traced
from server.store.migrations import Migrations

T = TypeVar("T")
logger = logging.getLogger(__name__)
POSTGRESQL = Dialect(name="postgresql", now="extract(epoch from clock_timestamp())::double precision",
                     inserted="inserted", share_lock=" FOR SHARE", skip_locked=" FOR UPDATE SKIP LOCKED")
_MIGRATION_LOCK = 0x7265_7370  # pg_advisory_xact_lock key: replicas starting together migrate one at a time


@functools.lru_cache(maxsize=1024)
def postgres_sql(sql: str) -> str:
    """A statement with `?` marks in psycopg's `%s` (a literal `%` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresSession:
    """A transaction on a pooled connection."""

    dialect = POSTGRESQL

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self.connection.execute(postgres_sql(sql), tuple(parameters))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            with self.connection.cursor() as cursor:
                cursor.executemany(postgres_sql(sql), rows)


class PostgresDatabase:
    """A PostgreSQL database named by a `postgresql://` URL; its schema is migrated on first use."""

    dialect = POSTGRESQL

    def __init__(self, url: str, migrations: Migrations, pool_size: int = 10, connect_timeout: float = 5.0) -> None:
        self.url = url
        self.migrations = migrations
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, timeout=connect_timeout, open=False,
                                    kwargs={"autocommit": False, "connect_timeout": max(1, int(connect_timeout))})
        self._executor = ThreadPoolExecutor(max_workers=pool_size, thread_name_prefix="response-store")
        self._pool_open = False
        self._migrated = False
        self._outage = Outage(_redacted(url), POSTGRESQL.name)

    async def run(self, operation: str, work: Callable[[PostgresSession], T]) -> T:
        with timed(POSTGRESQL, operation), traced(POSTGRESQL, operation):
            try:
                result = await asyncio.get_running_loop().run_in_executor(self._executor, self._in_thread, work)
            except (psycopg.DataError, psycopg.errors.CardinalityViolation) as exc:
                logger.info("the response store rejected a value: %s: %s", type(exc).__name__, exc)
                raise StoreRejected(type(exc).__name__) from exc
            except (psycopg.Error, PoolTimeout, OSError) as exc:
                raise self._outage.failed(exc) from exc
        self._outage.worked()
        return result

    def _in_thread(self, work: Callable[[PostgresSession], T]) -> T:
        if not self._pool_open:
            self._pool.open(wait=False)
            self._pool_open = True
        if not self._migrated:
            with self._pool.connection() as db:
                migrate(db, self.migrations)
            self._migrated = True
        with self._pool.connection() as db:
            with db.transaction():
                return work(PostgresSession(db))

    async def close(self) -> None:
        if self._pool_open:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._pool.close)
            self._pool_open = False
        self._executor.shutdown(wait=False)


def migrate(db: psycopg.Connection[Any], migrations: Migrations) -> None:
    """Apply the migrations newer than the database's version, under a lock so replicas starting together agree."""
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                   "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        (version,) = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone() or (0,)
        for number, scripts in migrations.of("postgresql"):
            if number > version:
                for script in scripts:
                    db.execute(script)  # several statements, no parameters: sent as one simple query
                db.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (number,))


def migrate_url(url: str, migrations: Migrations, connect_timeout: float = 5.0) -> None:
    """Migrate the database at `url` on a connection of its own (for another pool over the same database)."""
    with psycopg.connect(url, autocommit=False, connect_timeout=max(1, int(connect_timeout))) as db:
        migrate(db, migrations)


def _redacted(url: str) -> str:
    """The URL without its password, for logs."""
    return psycopg.conninfo.make_conninfo(url, password="***") if "@" in url else url
