"""The SQLite database: a file in the data directory, one connection used from one worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

from server.store.database import Dialect, Outage, timed, traced
from server.store.migrations import Migrations

T = TypeVar("T")
SQLITE = Dialect(name="sqlite", now="((julianday('now') - 2440587.5) * 86400.0)", inserted="rowid", share_lock="",
                 skip_locked="")


class SqliteSession:
    """A transaction on the connection (SQLite's `?` marks are the dialect's own)."""

    dialect = SQLITE

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.connection.execute(sql, parameters)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.connection.executemany(sql, rows)


class SqliteDatabase:
    """A file at `path`, migrated with `migrations` when first opened; its work runs in one thread, in order."""

    dialect = SQLITE

    def __init__(self, path: str | Path, migrations: Migrations, busy_timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.migrations = migrations
        self.busy_timeout = busy_timeout  # how long a write waits for another writer's lock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-store")
        self._connection: sqlite3.Connection | None = None
        self._outage = Outage(str(self.path), SQLITE.name)
        self._closed = False

    async def run(self, operation: str, work: Callable[[SqliteSession], T]) -> T:
        with timed(SQLITE, operation), traced(SQLITE, operation):
            try:
                result = await asyncio.get_running_loop().run_in_executor(self._executor, self._in_thread, work)
            except (sqlite3.Error, OSError) as exc:
                raise self._outage.failed(exc) from exc
        self._outage.worked()
        return result

    def _in_thread(self, work: Callable[[SqliteSession], T]) -> T:
        if self._connection is None:
            self._connection = self._open()
        with self._connection:  # one transaction per unit of work
            return work(SqliteSession(self._connection))

    def _open(self) -> sqlite3.Connection:
        """A connection to the migrated file (kept only once the migrations are in)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, check_same_thread=False, timeout=self.busy_timeout)
        migrate_file(connection, self.migrations, self.busy_timeout)
        return connection

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def close_connection() -> None:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close_connection)
        self._executor.shutdown(wait=True)


def migrate_file(connection: Any, migrations: Migrations, busy_timeout: float) -> None:
    """A new connection set up (WAL, foreign keys) and its file migrated; closed if that fails. A connection of
    another build of SQLite's module (the retrieval index's pysqlite3) is set up the same way."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")  # (switching a new file to WAL does not wait on a
            connection.execute("PRAGMA synchronous=NORMAL")  # lock another process holds: it is retried here)
            connection.execute("PRAGMA foreign_keys=ON")
            _migrate(connection, migrations)
            return
        except Exception as exc:  # sqlite3's OperationalError, or pysqlite3's
            if type(exc).__name__ != "OperationalError" or "locked" not in str(exc) or time.monotonic() > deadline:
                connection.close()
                raise
            time.sleep(0.05)
        except BaseException:
            connection.close()
            raise


def _migrate(db: Any, migrations: Migrations) -> None:
    """Apply the migrations newer than the file's `user_version` in one write transaction, taken before the version
    is read: processes opening a new file together migrate it one at a time (the others wait, then find it done)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        for number, scripts in migrations.of("sqlite"):
            if number > version:
                for script in scripts:
                    for statement in _statements(script):
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")
    except BaseException:
        db.rollback()
        raise
    db.commit()


def _statements(script: str) -> list[str]:
    """A script's statements, each whole (`executescript` would commit the transaction the migration holds)."""
    statements, pending = [], ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    return statements + ([pending.strip()] if pending.strip() else [])
