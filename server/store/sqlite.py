"""The SQLite response store, the embedded default: one file, every statement in one worker thread, WAL mode."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from dataclasses import astuple
from typing import Any, Callable, Iterable, TypeVar

from server.store.interface import (RUNNING, Interrupt, Order, Replica, ResponseFilter, RetentionPolicy,
                                    StoreUnavailable, StoredConversation, StoredResponse, WebhookDelivery,
                                    webhook_event_id)
from server.store.migrations import migrations
from server.store.rows import api_key as _api_key
from server.store.rows import (chunk_row, chunks_after, events_in, insert_chunk, item_rows, last_sequence, page,
                               page_query, retention_query)
from server.store.rows import add_usage, spent_query, usage_between_query, usage_record, usage_row
from server.store.rows import FILE_COLUMNS, files_page_query, live_files, owned_conversation, owned_response
from server.store.rows import found_item, item_queries, output_item_rows, responses_page_query
from server.retrieval.files import StoredFile
from server.tenancy.keys import ApiKey
from server.tenancy.limits import Spent
from server.tenancy.usage import UsageRecord

T = TypeVar("T")
logger = logging.getLogger(__name__)
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # the database's clock, in Unix seconds
_MODEL = "json_extract(response, '$.model')"  # the stored response's model, for lists filtered by it


class SqliteStore:
    """A file in the data directory; one connection used from one worker thread."""

    def __init__(self, path: str | Path, retention: RetentionPolicy = RetentionPolicy(),
                 busy_timeout: float = 5.0, webhooks: bool = False) -> None:
        self.path = Path(path)
        self.retention = retention
        self.webhooks = webhooks  # background endings are written to the webhook outbox
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
            self._connection = self._open()
        with self._connection:  # one transaction per unit of work
            return work(self._connection)

    def _open(self) -> sqlite3.Connection:
        """A connection to the migrated file (kept only once the migrations are in)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, check_same_thread=False, timeout=self.busy_timeout)
        migrate_file(connection, self.busy_timeout)
        return connection

    async def save(self, record: StoredResponse, events: list[str] | None = None) -> None:
        def write(db: sqlite3.Connection) -> None:
            _insert(db, record, None)
            _insert_events(db, record.id, events or [])

        await self._run(write)

    async def start_owned(self, record: StoredResponse, lease_seconds: float) -> None:
        await self._run(lambda db: _insert(db, record, lease_seconds))

    async def finish_owned(self, record: StoredResponse, events: list[str]) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            updated = db.execute(f"UPDATE responses SET status = ?, response = ? WHERE id = ? AND owner = ? "
                                 f"AND status IN {RUNNING}", (record.status, json.dumps(record.response), record.id,
                                                              record.owner)).rowcount
            if updated:
                _insert_events(db, record.id, events)
                _insert_output_items(db, record)
                if self.webhooks:
                    _to_outbox(db, record.id, record.status)
            return updated > 0

        return await self._run(write)

    async def get(self, response_id: str, project: str) -> StoredResponse | None:
        def read(db: sqlite3.Connection) -> StoredResponse | None:
            row = db.execute("SELECT id, created_at, status, response, previous_response_id, background, project "
                             "FROM responses WHERE id = ? AND project = ?", (response_id, project)).fetchone()
            if row is None:
                return None
            items = [json.loads(item) for (item,) in db.execute(
                "SELECT item FROM input_items WHERE response_id = ? ORDER BY position", (response_id,))]
            return StoredResponse(row[0], row[1], row[2], json.loads(row[3]), items, row[4], bool(row[5]),
                                  project=row[6])

        return await self._run(read)

    async def events_after(self, response_id: str, after: int, project: str) -> list[str]:
        def read(db: sqlite3.Connection) -> list[str]:
            if db.execute(owned_response("?"), (response_id, project)).fetchone() is None:
                return []
            return events_in(db.execute(chunks_after("?"), (response_id, after)).fetchall(), after)

        return await self._run(read)

    async def delete(self, response_id: str, project: str) -> bool:
        return await self._run(lambda db: db.execute(
            "DELETE FROM responses WHERE id = ? AND project = ?", (response_id, project)).rowcount > 0)

    async def stored_item(self, item_id: str, project: str) -> dict[str, Any] | None:
        def read(db: sqlite3.Connection) -> dict[str, Any] | None:
            for source, query in enumerate(item_queries("?")):
                row = db.execute(query, (item_id, project)).fetchone()
                if row is not None:
                    return found_item(item_id, source, row)
            return None

        return await self._run(read)

    async def count_responses(self, response_ids: list[str], project: str) -> int:
        marks = ", ".join("?" * len(response_ids))
        return await self._run(lambda db: db.execute(
            f"SELECT count(*) FROM responses WHERE project = ? AND id IN ({marks})",
            (project, *response_ids)).fetchone()[0]) if response_ids else 0

    async def input_items(self, response_id: str, after: str | None, limit: int, order: Order,
                          project: str) -> tuple[list[dict[str, Any]], bool]:
        return await self._run(lambda db: _owned_page(db, owned_response("?"), "input_items", "response_id",
                                                      response_id, project, after, limit, order))

    async def list_responses(self, project: str, wanted: ResponseFilter, after: str | None, limit: int,
                             order: Order) -> tuple[list[dict[str, Any]], bool]:
        sql, parameters = responses_page_query(project, wanted, after, limit, order, "?", _MODEL, "rowid")
        rows = await self._run(lambda db: db.execute(sql, parameters).fetchall())
        return [json.loads(response) for (response,) in rows[:limit]], len(rows) > limit

    async def append_events(self, response_id: str, events: list[str], owner: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            if not _owned(db, response_id, owner):
                return False
            _insert_events(db, response_id, events)
            return True

        return await self._run(write)

    async def renew_leases(self, owner: str, response_ids: list[str], lease_seconds: float) -> None:
        await self._run(lambda db: db.executemany(
            f"UPDATE responses SET lease_expires_at = {_NOW} + ? WHERE id = ? AND owner = ?",
            [(lease_seconds, response_id, owner) for response_id in response_ids]))

    async def request_cancel(self, response_id: str, project: str) -> bool:
        return await self._run(lambda db: db.execute(
            f"UPDATE responses SET cancel_requested = 1 WHERE id = ? AND project = ? AND background AND status IN "
            f"{RUNNING}", (response_id, project)).rowcount > 0)

    async def cancel_requests(self, owner: str) -> list[str]:
        return await self._run(lambda db: [response_id for (response_id,) in db.execute(
            f"SELECT id FROM responses WHERE owner = ? AND cancel_requested AND status IN {RUNNING}", (owner,))])

    async def fail_interrupted(self, interrupt: Interrupt, restarted_owner: str | None = None) -> list[str]:
        def fail(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(f"SELECT id, response FROM responses WHERE status IN {RUNNING} AND "
                              f"(lease_expires_at IS NULL OR lease_expires_at < {_NOW} OR owner = ?)",
                              (restarted_owner,)).fetchall()
            for response_id, text in rows:
                (last,) = db.execute(last_sequence("?"), (response_id,)).fetchone()
                response, event = interrupt(json.loads(text), last)
                db.execute("UPDATE responses SET status = ?, response = ? WHERE id = ?",
                           (response["status"], json.dumps(response), response_id))
                _insert_events(db, response_id, [event] if event else [])
                if self.webhooks:
                    _to_outbox(db, response_id, response["status"])
            return [response_id for response_id, _ in rows]

        return await self._run(fail)

    async def claim_webhooks(self, owner: str, lease_seconds: float, limit: int) -> list[WebhookDelivery]:
        def claim(db: sqlite3.Connection) -> list[WebhookDelivery]:
            rows = db.execute(
                f"UPDATE webhook_outbox SET claimed_by = ?, claimed_until = {_NOW} + ? WHERE id IN (SELECT id FROM "
                f"webhook_outbox WHERE next_attempt_at <= {_NOW} AND (claimed_until IS NULL OR claimed_until < {_NOW}) "
                "ORDER BY next_attempt_at LIMIT ?) RETURNING id, response_id, type, created_at, attempts",
                (owner, lease_seconds, limit)).fetchall()
            return [WebhookDelivery(*row) for row in rows]

        return await self._run(claim)

    async def webhook_sent(self, delivery_id: str, owner: str) -> None:
        await self._run(lambda db: db.execute("DELETE FROM webhook_outbox WHERE id = ? AND claimed_by = ?",
                                              (delivery_id, owner)))

    async def webhook_failed(self, delivery_id: str, owner: str, retry_in: float) -> None:
        await self._run(lambda db: db.execute(
            f"UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = {_NOW} + ?, claimed_by = NULL, "
            "claimed_until = NULL WHERE id = ? AND claimed_by = ?", (retry_in, delivery_id, owner)))

    async def create_conversation(self, conversation: StoredConversation, items: list[dict[str, Any]]) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute("INSERT INTO conversations (id, created_at, metadata, project) VALUES (?, ?, ?, ?)",
                       (conversation.id, conversation.created_at, json.dumps(conversation.metadata),
                        conversation.project))
            _append(db, conversation.id, items)

        await self._run(write)

    async def get_conversation(self, conversation_id: str, project: str) -> StoredConversation | None:
        def read(db: sqlite3.Connection) -> StoredConversation | None:
            row = db.execute("SELECT id, created_at, metadata, project FROM conversations WHERE id = ? AND project = ?",
                             (conversation_id, project)).fetchone()
            return StoredConversation(row[0], row[1], json.loads(row[2]), row[3]) if row else None

        return await self._run(read)

    async def update_conversation(self, conversation_id: str, metadata: dict[str, str],
                                  project: str) -> StoredConversation | None:
        await self._run(lambda db: db.execute("UPDATE conversations SET metadata = ? WHERE id = ? AND project = ?",
                                              (json.dumps(metadata), conversation_id, project)))
        return await self.get_conversation(conversation_id, project)

    async def delete_conversation(self, conversation_id: str, project: str) -> bool:
        return await self._run(lambda db: db.execute(
            "DELETE FROM conversations WHERE id = ? AND project = ?", (conversation_id, project)).rowcount > 0)

    async def add_conversation_items(self, conversation_id: str, items: list[dict[str, Any]], replica: str | None,
                                     project: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            if db.execute("UPDATE conversations SET replica = COALESCE(?, replica) WHERE id = ? AND project = ?",
                          (replica, conversation_id, project)).rowcount == 0:
                return False
            _append(db, conversation_id, items)
            return True

        return await self._run(write)

    async def conversation_items(self, conversation_id: str, after: str | None, limit: int | None, order: Order,
                                 project: str) -> tuple[list[dict[str, Any]], bool]:
        return await self._run(lambda db: _owned_page(db, owned_conversation("?"), "conversation_items",
                                                      "conversation_id", conversation_id, project, after, limit, order))

    async def conversation_item(self, conversation_id: str, item_id: str, project: str) -> dict[str, Any] | None:
        row = await self._run(lambda db: db.execute(
            f"SELECT item FROM conversation_items WHERE conversation_id = ? AND item_id = ? AND EXISTS "
            f"({owned_conversation('?')})", (conversation_id, item_id, conversation_id, project)).fetchone())
        return json.loads(row[0]) if row else None

    async def count_conversation_items(self, conversation_id: str, project: str) -> int:
        return await self._run(lambda db: db.execute(
            f"SELECT count(*) FROM conversation_items WHERE conversation_id = ? AND EXISTS ({owned_conversation('?')})",
            (conversation_id, conversation_id, project)).fetchone()[0])

    async def save_file(self, record: StoredFile, parts: Iterable[bytes]) -> None:
        def write(db: sqlite3.Connection) -> None:
            db.execute(f"INSERT INTO files ({FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", astuple(record))
            for position, data in enumerate(parts):
                db.execute("INSERT INTO file_parts (file_id, position, data) VALUES (?, ?, ?)",
                           (record.id, position, data))

        await self._run(write)

    async def get_file(self, file_id: str, project: str, now: int) -> StoredFile | None:
        row = await self._run(lambda db: db.execute(
            f"SELECT {FILE_COLUMNS} FROM files WHERE id = ? AND {live_files('?')}", (file_id, project, now)).fetchone())
        return StoredFile(*row) if row else None

    async def list_files(self, project: str, now: int, purpose: str | None, after: str | None, limit: int,
                         order: Order) -> tuple[list[StoredFile], bool]:
        sql, names = files_page_query(purpose, after, limit, order, "?")
        given = {"purpose": purpose, "after": after, "project": project}
        rows = await self._run(lambda db: db.execute(sql, (project, now, *(given[n] for n in names), limit + 1))
                               .fetchall())
        return [StoredFile(*row) for row in rows[:limit]], len(rows) > limit

    async def file_part(self, file_id: str, project: str, position: int) -> bytes | None:
        row = await self._run(lambda db: db.execute(
            "SELECT data FROM file_parts WHERE file_id = ? AND position = ? AND file_id IN "
            "(SELECT id FROM files WHERE id = ? AND project = ?)", (file_id, position, file_id, project)).fetchone())
        return bytes(row[0]) if row else None

    async def delete_file(self, file_id: str, project: str) -> bool:
        return await self._run(lambda db: db.execute(
            "DELETE FROM files WHERE id = ? AND project = ?", (file_id, project)).rowcount > 0)

    async def delete_conversation_item(self, conversation_id: str, item_id: str, project: str) -> bool:
        return await self._run(lambda db: db.execute(
            f"DELETE FROM conversation_items WHERE conversation_id = ? AND item_id = ? AND EXISTS "
            f"({owned_conversation('?')})", (conversation_id, item_id, conversation_id, project)).rowcount > 0)

    async def enforce_retention(self, batch: int) -> int:
        def delete(db: sqlite3.Connection) -> int:
            doomed = retention_query(self.retention, batch, time.time(), "?")
            if doomed is None:
                return 0
            sql, parameters = doomed
            return db.execute(f"DELETE FROM responses WHERE id IN ({sql})", parameters).rowcount

        return await self._run(delete)

    async def heartbeat(self, replica: Replica, draining: bool) -> None:
        await self._run(lambda db: db.execute(
            f"INSERT INTO replicas (id, url, heartbeat_at, draining) VALUES (?, ?, {_NOW}, ?) ON CONFLICT(id) DO "
            "UPDATE SET url = excluded.url, heartbeat_at = excluded.heartbeat_at, draining = excluded.draining",
            (replica.id, replica.url, int(draining))))

    async def live_replicas(self, within_seconds: float) -> list[Replica]:
        return await self._run(lambda db: [Replica(*row) for row in db.execute(
            f"SELECT id, url FROM replicas WHERE NOT draining AND heartbeat_at >= {_NOW} - ? ORDER BY id",
            (within_seconds,))])

    # -- API keys (server/tenancy): hashes only --------------------------------------------------------------

    async def add_key(self, key: ApiKey) -> None:
        await self._run(lambda db: db.execute(
            "INSERT INTO api_keys (id, name, project, hash, admin, created_at, last_used_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (key.id, key.name, key.project, key.hash, int(key.admin), key.created_at, key.last_used_at,
             key.revoked_at)))

    async def find_key(self, digest: str) -> ApiKey | None:
        rows = await self._run(lambda db: db.execute(
            "SELECT id, name, project, hash, admin, created_at, last_used_at, revoked_at FROM api_keys WHERE hash = ? AND revoked_at IS NULL", (digest,)).fetchall())
        return _api_key(rows[0]) if rows else None

    async def list_keys(self) -> list[ApiKey]:
        return [_api_key(row) for row in await self._run(lambda db: db.execute(
            "SELECT id, name, project, hash, admin, created_at, last_used_at, revoked_at FROM api_keys ORDER BY created_at, id").fetchall())]

    async def revoke_key(self, key_id: str, at: float) -> bool:
        return await self._run(lambda db: db.execute(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (at, key_id)).rowcount) > 0

    async def touch_key(self, key_id: str, at: float) -> None:
        await self._run(lambda db: db.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (at, key_id)))

    async def has_keys(self) -> bool:
        return bool(await self._run(lambda db: db.execute("SELECT 1 FROM api_keys LIMIT 1").fetchall()))

    async def add_usage(self, record: UsageRecord) -> None:
        await self._run(lambda db: db.execute(add_usage("?"), usage_row(record)))

    async def spent(self, project: str, api_key_id: str | None, minute: int, day_start: int) -> Spent:
        parameters = (minute, minute, project, day_start) + ((api_key_id,) if api_key_id is not None else ())
        row = await self._run(lambda db: db.execute(spent_query("?", api_key_id is not None), parameters).fetchone())
        return Spent(*(int(value) for value in row))

    async def usage_between(self, start_minute: int, end_minute: int) -> list[UsageRecord]:
        rows = await self._run(lambda db: db.execute(usage_between_query("?"), (start_minute, end_minute)).fetchall())
        return [usage_record(row) for row in rows]

    async def leave(self, replica_id: str) -> None:
        await self._run(lambda db: db.execute("DELETE FROM replicas WHERE id = ?", (replica_id,)))

    async def response_home(self, response_id: str, project: str) -> str | None:
        row = await self._run(lambda db: db.execute("SELECT replica FROM responses WHERE id = ? AND project = ?",
                                                    (response_id, project)).fetchone())
        return row[0] if row else None

    async def conversation_home(self, conversation_id: str, project: str) -> str | None:
        row = await self._run(lambda db: db.execute("SELECT replica FROM conversations WHERE id = ? AND project = ?",
                                                    (conversation_id, project)).fetchone())
        return row[0] if row else None

    async def close(self) -> None:
        def close_connection(_: sqlite3.Connection) -> None:
            return None

        if self._connection is not None:
            await self._run(close_connection)
            self._connection.close()
            self._connection = None
        self._executor.shutdown(wait=True)


def migrate_file(connection: sqlite3.Connection, busy_timeout: float) -> None:
    """A new connection set up (WAL, foreign keys) and its file migrated; closed if that fails. A connection of
    another build of SQLite's module (the retrieval index's pysqlite3) is set up the same way."""
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")  # (switching a new file to WAL does not wait on a
            connection.execute("PRAGMA synchronous=NORMAL")  # lock another process holds: it is retried here)
            connection.execute("PRAGMA foreign_keys=ON")
            _migrate(connection)
            return
        except Exception as exc:  # sqlite3's OperationalError, or pysqlite3's
            if type(exc).__name__ != "OperationalError" or "locked" not in str(exc) or time.monotonic() > deadline:
                connection.close()
                raise
            time.sleep(0.05)
        except BaseException:
            connection.close()
            raise


def _migrate(db: sqlite3.Connection) -> None:
    """Apply the migrations newer than the file's `user_version` in one write transaction, taken before the version
    is read: processes opening a new file together migrate it one at a time (the others wait, then find it done)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        (version,) = db.execute("PRAGMA user_version").fetchone()
        for number, script in migrations("sqlite"):
            if number > version:
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


def _insert(db: sqlite3.Connection, record: StoredResponse, lease_seconds: float | None) -> None:
    """The response row and its input items; a running one owned, its lease from the database's clock."""
    db.execute(
        "INSERT INTO responses (id, created_at, status, response, previous_response_id, background, owner, "
        f"lease_expires_at, replica, project) VALUES (?, ?, ?, ?, ?, ?, ?, {_NOW} + ?, ?, ?) ON CONFLICT(id) DO UPDATE "
        "SET status=excluded.status, response=excluded.response WHERE responses.project = excluded.project",
        (record.id, record.created_at, record.status, json.dumps(record.response), record.previous_response_id,
         int(record.background), record.owner, lease_seconds, record.replica, record.project))
    db.executemany("INSERT OR IGNORE INTO input_items (response_id, position, item_id, item) VALUES (?, ?, ?, ?)",
                   item_rows(record.id, 0, record.input_items))
    _insert_output_items(db, record)


def _insert_output_items(db: sqlite3.Connection, record: StoredResponse) -> None:
    db.executemany("INSERT OR IGNORE INTO output_items (item_id, response_id) VALUES (?, ?)",
                   output_item_rows(record.id, record.response))


def _owned(db: sqlite3.Connection, response_id: str, owner: str) -> bool:
    return db.execute(f"SELECT 1 FROM responses WHERE id = ? AND owner = ? AND status IN {RUNNING}",
                      (response_id, owner)).fetchone() is not None


def _insert_events(db: sqlite3.Connection, response_id: str, events: list[str]) -> None:
    """The events as one chunk of the response's log."""
    if events:
        db.execute(insert_chunk("?"), chunk_row(response_id, events))


def _append(db: sqlite3.Connection, conversation_id: str, items: list[dict[str, Any]]) -> None:
    """Items after the last; an item whose id the conversation already holds is not added twice."""
    (last,) = db.execute("SELECT COALESCE(MAX(position), -1) FROM conversation_items WHERE conversation_id = ?",
                         (conversation_id,)).fetchone()
    db.executemany("INSERT OR IGNORE INTO conversation_items (conversation_id, position, item_id, item) VALUES (?, ?, ?, ?)",
                   item_rows(conversation_id, last + 1, items))


def _owned_page(db: sqlite3.Connection, owned: str, table: str, owner_column: str, owner: str, project: str,
                after: str | None, limit: int | None, order: Order) -> tuple[list[dict[str, Any]], bool]:
    """A page of an object's items if the object is `project`'s (`owned`: the query that finds it so), else none."""
    if db.execute(owned, (owner, project)).fetchone() is None:
        return [], False
    return _page(db, table, owner_column, owner, after, limit, order)


def _page(db: sqlite3.Connection, table: str, owner_column: str, owner: str, after: str | None, limit: int | None,
          order: Order) -> tuple[list[dict[str, Any]], bool]:
    sql, parameters = page_query(table, owner_column, owner, after, limit, order, "?")
    return page(db.execute(sql, parameters).fetchall(), limit)


def _to_outbox(db: sqlite3.Connection, response_id: str, status: str) -> None:
    """The webhook delivery of a background response's ending, due at once."""
    db.execute(f"INSERT INTO webhook_outbox (id, response_id, type, created_at, next_attempt_at) "
               f"VALUES (?, ?, ?, CAST({_NOW} AS INTEGER), {_NOW})", (webhook_event_id(), response_id, f"response.{status}"))
