"""The SQLite response store, the embedded default: one file, every statement in one worker thread, WAL mode."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from server.store.interface import Order, RetentionPolicy, StoreUnavailable, StoredConversation, StoredResponse

T = TypeVar("T")
logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    status TEXT NOT NULL,
    response TEXT NOT NULL,
    previous_response_id TEXT,
    background INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS input_items (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (response_id, position)
);
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
    sequence_number INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (response_id, sequence_number)
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses(created_at);
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL,
    metadata TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS conversation_items (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
CREATE UNIQUE INDEX IF NOT EXISTS conversation_items_by_id ON conversation_items(conversation_id, item_id);
"""


class SqliteStore:
    """A file in the data directory; one connection used from one worker thread."""

    def __init__(self, path: str | Path, retention: RetentionPolicy = RetentionPolicy(),
                 busy_timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.retention = retention
        self.busy_timeout = busy_timeout  # how long a write waits for another writer's lock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="response-store")
        self._connection: sqlite3.Connection | None = None
        self._failing = False

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` in the store's thread; a database or disk error is logged once and raised as StoreUnavailable."""
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._executor, self._in_thread, work)
        except (sqlite3.Error, OSError) as exc:
            if not self._failing:
                logger.error("the response store %s failed: %s: %s (logged once until it works again)",
                             self.path, type(exc).__name__, exc)
            self._failing = True
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if self._failing:
            logger.warning("the response store %s works again", self.path)
            self._failing = False
        return result

    def _in_thread(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._connection = sqlite3.connect(self.path, check_same_thread=False, timeout=self.busy_timeout)
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=NORMAL")
            self._connection.execute("PRAGMA foreign_keys=ON")
            self._connection.executescript(_SCHEMA)
        with self._connection:  # one transaction per unit of work
            return work(self._connection)

    async def save(self, record: StoredResponse, events: list[str] | None = None) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO responses (id, created_at, status, response, previous_response_id, background) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET status=excluded.status, "
                "response=excluded.response",
                (record.id, record.created_at, record.status, json.dumps(record.response),
                 record.previous_response_id, int(record.background)))
            db.executemany(
                "INSERT OR IGNORE INTO input_items (response_id, position, item_id, item) VALUES (?, ?, ?, ?)",
                [(record.id, n, item["id"], json.dumps(item)) for n, item in enumerate(record.input_items)])
            if events:
                first = _sequence_number(events[0])
                db.executemany(
                    "INSERT OR IGNORE INTO events (response_id, sequence_number, event) VALUES (?, ?, ?)",
                    [(record.id, first + n, event) for n, event in enumerate(events)])
            self._enforce_retention(db)

        await self._run(write)

    async def get(self, response_id: str) -> StoredResponse | None:
        def read(db: sqlite3.Connection) -> StoredResponse | None:
            row = db.execute("SELECT id, created_at, status, response, previous_response_id, background "
                             "FROM responses WHERE id = ?", (response_id,)).fetchone()
            if row is None:
                return None
            items = [json.loads(item) for (item,) in db.execute(
                "SELECT item FROM input_items WHERE response_id = ? ORDER BY position", (response_id,))]
            return StoredResponse(row[0], row[1], row[2], json.loads(row[3]), items, row[4], bool(row[5]))

        return await self._run(read)

    async def events_after(self, response_id: str, after: int) -> list[str]:
        return await self._run(lambda db: [event for (event,) in db.execute(
            "SELECT event FROM events WHERE response_id = ? AND sequence_number > ? ORDER BY sequence_number",
            (response_id, after))])

    async def delete(self, response_id: str) -> bool:
        return await self._run(lambda db: db.execute(
            "DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0)

    async def input_items(self, response_id: str, after: str | None, limit: int,
                          order: Order) -> tuple[list[dict[str, Any]], bool]:
        return await self._run(lambda db: _page(db, "input_items", "response_id", response_id, after, limit, order))

    async def mark_interrupted(self, message: str) -> int:
        """On start-up: responses that were running when the server stopped are failed, with why."""

        def mark(db: sqlite3.Connection) -> int:
            rows = db.execute("SELECT id, response FROM responses WHERE status IN ('queued', 'in_progress')").fetchall()
            for response_id, text in rows:
                response = json.loads(text)
                response.update(status="failed", error={"code": "server_error", "message": message})
                db.execute("UPDATE responses SET status = 'failed', response = ? WHERE id = ?",
                           (json.dumps(response), response_id))
            return len(rows)

        return await self._run(mark)

    async def create_conversation(self, conversation: StoredConversation, items: list[dict[str, Any]]) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute("INSERT INTO conversations (id, created_at, metadata) VALUES (?, ?, ?)",
                       (conversation.id, conversation.created_at, json.dumps(conversation.metadata)))
            _append(db, conversation.id, items)

        await self._run(write)

    async def get_conversation(self, conversation_id: str) -> StoredConversation | None:
        def read(db: sqlite3.Connection) -> StoredConversation | None:
            row = db.execute("SELECT id, created_at, metadata FROM conversations WHERE id = ?",
                             (conversation_id,)).fetchone()
            return StoredConversation(row[0], row[1], json.loads(row[2])) if row else None

        return await self._run(read)

    async def update_conversation(self, conversation_id: str, metadata: dict[str, str]) -> StoredConversation | None:
        await self._run(lambda db: db.execute("UPDATE conversations SET metadata = ? WHERE id = ?",
                                              (json.dumps(metadata), conversation_id)))
        return await self.get_conversation(conversation_id)

    async def delete_conversation(self, conversation_id: str) -> bool:
        return await self._run(lambda db: db.execute(
            "DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0)

    async def add_conversation_items(self, conversation_id: str, items: list[dict[str, Any]]) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            if db.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)).fetchone() is None:
                return False
            _append(db, conversation_id, items)
            return True

        return await self._run(write)

    async def conversation_items(self, conversation_id: str, after: str | None, limit: int | None,
                                 order: Order) -> tuple[list[dict[str, Any]], bool]:
        return await self._run(lambda db: _page(db, "conversation_items", "conversation_id", conversation_id,
                                                after, limit, order))

    async def conversation_item(self, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        row = await self._run(lambda db: db.execute(
            "SELECT item FROM conversation_items WHERE conversation_id = ? AND item_id = ?",
            (conversation_id, item_id)).fetchone())
        return json.loads(row[0]) if row else None

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        return await self._run(lambda db: db.execute(
            "DELETE FROM conversation_items WHERE conversation_id = ? AND item_id = ?",
            (conversation_id, item_id)).rowcount > 0)

    def _enforce_retention(self, db: sqlite3.Connection) -> None:
        if self.retention.max_age_seconds is not None:
            db.execute("DELETE FROM responses WHERE created_at < ?", (time.time() - self.retention.max_age_seconds,))
        if self.retention.max_count is not None:
            db.execute("DELETE FROM responses WHERE id NOT IN (SELECT id FROM responses "
                       "ORDER BY created_at DESC LIMIT ?)", (self.retention.max_count,))

    async def close(self) -> None:
        def close_connection(_: sqlite3.Connection) -> None:
            return None

        if self._connection is not None:
            await self._run(close_connection)
            self._connection.close()
            self._connection = None
        self._executor.shutdown(wait=True)


def _append(db: sqlite3.Connection, conversation_id: str, items: list[dict[str, Any]]) -> None:
    """Items after the last; an item whose id the conversation already holds is not added twice."""
    (last,) = db.execute("SELECT COALESCE(MAX(position), -1) FROM conversation_items WHERE conversation_id = ?",
                         (conversation_id,)).fetchone()
    db.executemany("INSERT OR IGNORE INTO conversation_items (conversation_id, position, item_id, item) VALUES (?, ?, ?, ?)",
                   [(conversation_id, last + 1 + n, item["id"], json.dumps(item)) for n, item in enumerate(items)])


def _page(db: sqlite3.Connection, table: str, owner_column: str, owner: str, after: str | None, limit: int | None,
          order: Order) -> tuple[list[dict[str, Any]], bool]:
    """Items of one owner in position order, after the item `after`; `limit` None reads them all."""
    direction, compare = ("ASC", ">") if order == "asc" else ("DESC", "<")
    start = ""
    parameters: list[Any] = [owner]
    if after is not None:
        start = f" AND position {compare} (SELECT position FROM {table} WHERE {owner_column} = ? AND item_id = ?)"
        parameters += [owner, after]
    rows = db.execute(f"SELECT item FROM {table} WHERE {owner_column} = ?{start} ORDER BY position {direction} "
                      "LIMIT ?", (*parameters, -1 if limit is None else limit + 1)).fetchall()
    cut = len(rows) if limit is None else limit
    return [json.loads(item) for (item,) in rows[:cut]], len(rows) > cut


def _sequence_number(event: str) -> int:
    return int(json.loads(event)["sequence_number"])
