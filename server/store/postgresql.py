"""The PostgreSQL response store: one database shared by every replica, through psycopg 3's async connection pool."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import astuple
from typing import Any, Awaitable, Callable, Iterable, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from server.store.interface import (RUNNING, Interrupt, Order, Replica, ResponseFilter, RetentionPolicy,
                                    StoreRejected, StoreUnavailable, StoredConversation, StoredResponse,
                                    WebhookDelivery, webhook_event_id)
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
Connection = psycopg.AsyncConnection[Any]
logger = logging.getLogger(__name__)

_NOW = "extract(epoch from clock_timestamp())::double precision"  # the database's clock, in Unix seconds
_MIGRATION_LOCK = 0x7265_7370  # pg_advisory_xact_lock key: replicas starting together migrate one at a time
_MODEL = "(response::jsonb ->> 'model')"  # the stored response's model, for lists filtered by it


class PostgresStore:
    """A PostgreSQL database named by a `postgresql://` URL; its schema is migrated on first use."""

    def __init__(self, url: str, retention: RetentionPolicy = RetentionPolicy(), pool_size: int = 10,
                 connect_timeout: float = 5.0, webhooks: bool = False) -> None:
        self.url = url
        self.retention = retention
        self.webhooks = webhooks  # background endings are written to the webhook outbox
        self._pool = AsyncConnectionPool(url, min_size=1, max_size=pool_size, timeout=connect_timeout, open=False,
                                         kwargs={"autocommit": False, "connect_timeout": max(1, int(connect_timeout))})
        self._pool_open = False
        self._migrated = False
        self._failing = False

    async def _run(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """Run `work` in one transaction; a database or connection error is logged once and raised as StoreUnavailable."""
        try:
            if not self._pool_open:
                await self._pool.open(wait=False)
                self._pool_open = True
            if not self._migrated:
                async with self._pool.connection() as db:
                    await migrate(db)
                self._migrated = True
            async with self._pool.connection() as db:
                async with db.transaction():
                    result = await work(db)
        except (psycopg.DataError, psycopg.errors.CardinalityViolation) as exc:
            logger.info("the response store rejected a value: %s: %s", type(exc).__name__, exc)
            raise StoreRejected(type(exc).__name__) from exc
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            if not self._failing:
                logger.error("the response store %s failed: %s: %s (logged once until it works again)",
                             _redacted(self.url), type(exc).__name__, exc)
            self._failing = True
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if self._failing:
            logger.warning("the response store %s works again", _redacted(self.url))
            self._failing = False
        return result

    async def save(self, record: StoredResponse, events: list[str] | None = None) -> None:
        async def write(db: Connection) -> None:
            await _insert(db, record, None)
            await _insert_events(db, record.id, events or [])

        await self._run(write)

    async def start_owned(self, record: StoredResponse, lease_seconds: float) -> None:
        await self._run(lambda db: _insert(db, record, lease_seconds))

    async def finish_owned(self, record: StoredResponse, events: list[str]) -> bool:
        async def write(db: Connection) -> bool:
            cursor = await db.execute(f"UPDATE responses SET status = %s, response = %s WHERE id = %s AND owner = %s "
                                      f"AND status IN {RUNNING}", (record.status, json.dumps(record.response),
                                                                   record.id, record.owner))
            if cursor.rowcount:
                await _insert_events(db, record.id, events)
                await _insert_output_items(db, record)
                if self.webhooks:
                    await _to_outbox(db, record.id, record.status)
            return cursor.rowcount > 0

        return await self._run(write)

    async def get(self, response_id: str, project: str) -> StoredResponse | None:
        async def read(db: Connection) -> StoredResponse | None:
            row = await (await db.execute(
                "SELECT id, created_at, status, response, previous_response_id, background, owner, lease_expires_at, "
                "project FROM responses WHERE id = %s AND project = %s", (response_id, project))).fetchone()
            if row is None:
                return None
            items = await (await db.execute(
                "SELECT item FROM input_items WHERE response_id = %s ORDER BY position", (response_id,))).fetchall()
            return StoredResponse(row[0], row[1], row[2], json.loads(row[3]), [json.loads(item) for (item,) in items],
                                  row[4], row[5], row[6], row[7], project=row[8])

        return await self._run(read)

    async def events_after(self, response_id: str, after: int, project: str) -> list[str]:
        async def read(db: Connection) -> list[str]:
            if await (await db.execute(owned_response("%s"), (response_id, project))).fetchone() is None:
                return []
            return events_in(await (await db.execute(chunks_after("%s"), (response_id, after))).fetchall(), after)

        return await self._run(read)

    async def delete(self, response_id: str, project: str) -> bool:
        return await self._count("DELETE FROM responses WHERE id = %s AND project = %s", (response_id, project)) > 0

    async def stored_item(self, item_id: str, project: str) -> dict[str, Any] | None:
        async def read(db: Connection) -> dict[str, Any] | None:
            for source, query in enumerate(item_queries("%s")):
                row = await (await db.execute(query, (item_id, project))).fetchone()
                if row is not None:
                    return found_item(item_id, source, row)
            return None

        return await self._run(read)

    async def count_responses(self, response_ids: list[str], project: str) -> int:
        async def read(db: Connection) -> int:
            row = await (await db.execute("SELECT count(*) FROM responses WHERE project = %s AND id = ANY(%s)",
                                          (project, response_ids))).fetchone()
            return int(row[0])

        return await self._run(read)

    async def input_items(self, response_id: str, after: str | None, limit: int, order: Order,
                          project: str) -> tuple[list[dict[str, Any]], bool]:
        return await self._run(lambda db: _owned_page(db, owned_response("%s"), "input_items", "response_id",
                                                      response_id, project, after, limit, order))

    async def list_responses(self, project: str, wanted: ResponseFilter, after: str | None, limit: int,
                             order: Order) -> tuple[list[dict[str, Any]], bool]:
        sql, parameters = responses_page_query(project, wanted, after, limit, order, "%s", _MODEL, "inserted")
        rows = await self._rows(sql, tuple(parameters))
        return [json.loads(response) for (response,) in rows[:limit]], len(rows) > limit

    async def append_events(self, response_id: str, events: list[str], owner: str) -> bool:
        async def write(db: Connection) -> bool:
            owned = await (await db.execute(
                f"SELECT 1 FROM responses WHERE id = %s AND owner = %s AND status IN {RUNNING} FOR SHARE",
                (response_id, owner))).fetchone()
            if owned is None:
                return False
            await _insert_events(db, response_id, events)
            return True

        return await self._run(write)

    async def renew_leases(self, owner: str, response_ids: list[str], lease_seconds: float) -> None:
        await self._count(f"UPDATE responses SET lease_expires_at = {_NOW} + %s WHERE owner = %s AND id = ANY(%s)",
                          (lease_seconds, owner, response_ids))

    async def request_cancel(self, response_id: str, project: str) -> bool:
        return await self._count(f"UPDATE responses SET cancel_requested = TRUE WHERE id = %s AND project = %s AND "
                                 f"background AND status IN {RUNNING}", (response_id, project)) > 0

    async def cancel_requests(self, owner: str) -> list[str]:
        return [response_id for (response_id,) in await self._rows(
            f"SELECT id FROM responses WHERE owner = %s AND cancel_requested AND status IN {RUNNING}", (owner,))]

    async def fail_interrupted(self, interrupt: Interrupt, restarted_owner: str | None = None) -> list[str]:
        async def fail(db: Connection) -> list[str]:
            rows = await (await db.execute(
                f"SELECT id, response FROM responses WHERE status IN {RUNNING} AND (lease_expires_at IS NULL "
                f"OR lease_expires_at < {_NOW} OR owner = %s) FOR UPDATE SKIP LOCKED", (restarted_owner,))).fetchall()
            for response_id, text in rows:
                (last,) = await (await db.execute(last_sequence("%s"), (response_id,))).fetchone() or (-1,)
                response, event = interrupt(json.loads(text), last)
                await db.execute("UPDATE responses SET status = %s, response = %s WHERE id = %s",
                                 (response["status"], json.dumps(response), response_id))
                await _insert_events(db, response_id, [event] if event else [])
                if self.webhooks:
                    await _to_outbox(db, response_id, response["status"])
            return [response_id for response_id, _ in rows]

        return await self._run(fail)

    async def claim_webhooks(self, owner: str, lease_seconds: float, limit: int) -> list[WebhookDelivery]:
        rows = await self._rows(
            f"UPDATE webhook_outbox SET claimed_by = %s, claimed_until = {_NOW} + %s WHERE id IN (SELECT id FROM "
            f"webhook_outbox WHERE next_attempt_at <= {_NOW} AND (claimed_until IS NULL OR claimed_until < {_NOW}) "
            "ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED) "
            "RETURNING id, response_id, type, created_at, attempts", (owner, lease_seconds, limit))
        return [WebhookDelivery(*row) for row in rows]

    async def webhook_sent(self, delivery_id: str, owner: str) -> None:
        await self._count("DELETE FROM webhook_outbox WHERE id = %s AND claimed_by = %s", (delivery_id, owner))

    async def webhook_failed(self, delivery_id: str, owner: str, retry_in: float) -> None:
        await self._count(f"UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = {_NOW} + %s, "
                          "claimed_by = NULL, claimed_until = NULL WHERE id = %s AND claimed_by = %s",
                          (retry_in, delivery_id, owner))

    async def create_conversation(self, conversation: StoredConversation, items: list[dict[str, Any]]) -> None:
        async def write(db: Connection) -> None:
            await db.execute("INSERT INTO conversations (id, created_at, metadata, project) VALUES (%s, %s, %s, %s)",
                             (conversation.id, conversation.created_at, json.dumps(conversation.metadata),
                              conversation.project))
            await _append(db, conversation.id, items)

        await self._run(write)

    async def get_conversation(self, conversation_id: str, project: str) -> StoredConversation | None:
        rows = await self._rows("SELECT id, created_at, metadata, project FROM conversations WHERE id = %s AND "
                                "project = %s", (conversation_id, project))
        return StoredConversation(rows[0][0], rows[0][1], json.loads(rows[0][2]), rows[0][3]) if rows else None

    async def update_conversation(self, conversation_id: str, metadata: dict[str, str],
                                  project: str) -> StoredConversation | None:
        rows = await self._rows("UPDATE conversations SET metadata = %s WHERE id = %s AND project = %s RETURNING id, "
                                "created_at, metadata, project", (json.dumps(metadata), conversation_id, project))
        return StoredConversation(rows[0][0], rows[0][1], json.loads(rows[0][2]), rows[0][3]) if rows else None

    async def delete_conversation(self, conversation_id: str, project: str) -> bool:
        return await self._count("DELETE FROM conversations WHERE id = %s AND project = %s",
                                 (conversation_id, project)) > 0

    async def add_conversation_items(self, conversation_id: str, items: list[dict[str, Any]], replica: str | None,
                                     project: str) -> bool:
        async def write(db: Connection) -> bool:  # the update locks the conversation's row until the items are in
            found = await db.execute("UPDATE conversations SET replica = COALESCE(%s, replica) WHERE id = %s AND "
                                     "project = %s", (replica, conversation_id, project))
            if found.rowcount == 0:
                return False
            await _append(db, conversation_id, items)
            return True

        return await self._run(write)

    async def conversation_items(self, conversation_id: str, after: str | None, limit: int | None, order: Order,
                                 project: str) -> tuple[list[dict[str, Any]], bool]:
        return await self._run(lambda db: _owned_page(db, owned_conversation("%s"), "conversation_items",
                                                      "conversation_id", conversation_id, project, after, limit, order))

    async def count_conversation_items(self, conversation_id: str, project: str) -> int:
        rows = await self._rows(f"SELECT count(*) FROM conversation_items WHERE conversation_id = %s AND EXISTS "
                                f"({owned_conversation('%s')})", (conversation_id, conversation_id, project))
        return int(rows[0][0])

    async def save_file(self, record: StoredFile, parts: Iterable[bytes]) -> None:
        async def write(db: Connection) -> None:
            await db.execute(f"INSERT INTO files ({FILE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)", astuple(record))
            for position, data in enumerate(parts):
                await db.execute("INSERT INTO file_parts (file_id, position, data) VALUES (%s, %s, %s)",
                                 (record.id, position, data))

        await self._run(write)

    async def get_file(self, file_id: str, project: str, now: int) -> StoredFile | None:
        rows = await self._rows(f"SELECT {FILE_COLUMNS} FROM files WHERE id = %s AND {live_files('%s')}",
                                (file_id, project, now))
        return StoredFile(*rows[0]) if rows else None

    async def list_files(self, project: str, now: int, purpose: str | None, after: str | None, limit: int,
                         order: Order) -> tuple[list[StoredFile], bool]:
        sql, names = files_page_query(purpose, after, limit, order, "%s")
        given = {"purpose": purpose, "after": after, "project": project}
        rows = await self._rows(sql, (project, now, *(given[n] for n in names), limit + 1))
        return [StoredFile(*row) for row in rows[:limit]], len(rows) > limit

    async def file_part(self, file_id: str, project: str, position: int) -> bytes | None:
        rows = await self._rows("SELECT data FROM file_parts WHERE file_id = %s AND position = %s AND file_id IN "
                                "(SELECT id FROM files WHERE id = %s AND project = %s)",
                                (file_id, position, file_id, project))
        return bytes(rows[0][0]) if rows else None

    async def delete_file(self, file_id: str, project: str) -> bool:
        return await self._count("DELETE FROM files WHERE id = %s AND project = %s", (file_id, project)) > 0

    async def conversation_item(self, conversation_id: str, item_id: str, project: str) -> dict[str, Any] | None:
        rows = await self._rows(f"SELECT item FROM conversation_items WHERE conversation_id = %s AND item_id = %s AND "
                                f"EXISTS ({owned_conversation('%s')})", (conversation_id, item_id, conversation_id, project))
        return json.loads(rows[0][0]) if rows else None

    async def delete_conversation_item(self, conversation_id: str, item_id: str, project: str) -> bool:
        return await self._count(f"DELETE FROM conversation_items WHERE conversation_id = %s AND item_id = %s AND "
                                 f"EXISTS ({owned_conversation('%s')})", (conversation_id, item_id, conversation_id,
                                                                            project)) > 0

    async def heartbeat(self, replica: Replica, draining: bool) -> None:
        await self._count(f"INSERT INTO replicas (id, url, heartbeat_at, draining) VALUES (%s, %s, {_NOW}, %s) "
                          "ON CONFLICT (id) DO UPDATE SET url = excluded.url, heartbeat_at = excluded.heartbeat_at, "
                          "draining = excluded.draining", (replica.id, replica.url, draining))

    async def live_replicas(self, within_seconds: float) -> list[Replica]:
        return [Replica(*row) for row in await self._rows(
            f"SELECT id, url FROM replicas WHERE NOT draining AND heartbeat_at >= {_NOW} - %s ORDER BY id",
            (within_seconds,))]

    # -- API keys (server/tenancy): hashes only --------------------------------------------------------------

    async def add_key(self, key: ApiKey) -> None:
        await self._count("INSERT INTO api_keys (id, name, project, hash, admin, created_at, last_used_at, revoked_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                          (key.id, key.name, key.project, key.hash, key.admin, key.created_at, key.last_used_at,
                           key.revoked_at))

    async def find_key(self, digest: str) -> ApiKey | None:
        rows = await self._rows("SELECT id, name, project, hash, admin, created_at, last_used_at, revoked_at FROM api_keys WHERE hash = %s AND revoked_at IS NULL", (digest,))
        return _api_key(rows[0]) if rows else None

    async def list_keys(self) -> list[ApiKey]:
        return [_api_key(row) for row in await self._rows("SELECT id, name, project, hash, admin, created_at, last_used_at, revoked_at FROM api_keys ORDER BY created_at, id", ())]

    async def revoke_key(self, key_id: str, at: float) -> bool:
        return await self._count("UPDATE api_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL",
                                 (at, key_id)) > 0

    async def touch_key(self, key_id: str, at: float) -> None:
        await self._count("UPDATE api_keys SET last_used_at = %s WHERE id = %s", (at, key_id))

    async def has_keys(self) -> bool:
        return bool(await self._rows("SELECT 1 FROM api_keys LIMIT 1", ()))

    async def add_usage(self, record: UsageRecord) -> None:
        await self._count(add_usage("%s"), usage_row(record))

    async def spent(self, project: str, api_key_id: str | None, minute: int, day_start: int) -> Spent:
        parameters = (minute, minute, project, day_start) + ((api_key_id,) if api_key_id is not None else ())
        (row,) = await self._rows(spent_query("%s", api_key_id is not None), parameters)
        return Spent(*(int(value) for value in row))

    async def usage_between(self, start_minute: int, end_minute: int) -> list[UsageRecord]:
        return [usage_record(row) for row in await self._rows(usage_between_query("%s"), (start_minute, end_minute))]

    async def leave(self, replica_id: str) -> None:
        await self._count("DELETE FROM replicas WHERE id = %s", (replica_id,))

    async def response_home(self, response_id: str, project: str) -> str | None:
        rows = await self._rows("SELECT replica FROM responses WHERE id = %s AND project = %s", (response_id, project))
        return rows[0][0] if rows else None

    async def conversation_home(self, conversation_id: str, project: str) -> str | None:
        rows = await self._rows("SELECT replica FROM conversations WHERE id = %s AND project = %s",
                                (conversation_id, project))
        return rows[0][0] if rows else None

    async def close(self) -> None:
        if self._pool_open:
            await self._pool.close()
            self._pool_open = False

    # -- helpers --------------------------------------------------------------------------------

    async def _rows(self, sql: str, parameters: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        async def read(db: Connection) -> list[tuple[Any, ...]]:
            return await (await db.execute(sql, parameters)).fetchall()

        return await self._run(read)

    async def _count(self, sql: str, parameters: tuple[Any, ...]) -> int:
        async def write(db: Connection) -> int:
            return (await db.execute(sql, parameters)).rowcount

        return await self._run(write)

    async def enforce_retention(self, batch: int) -> int:
        doomed = retention_query(self.retention, batch, time.time(), "%s")
        if doomed is None:
            return 0
        sql, parameters = doomed
        return await self._count(f"DELETE FROM responses WHERE id IN ({sql})", parameters)


async def _insert(db: Connection, record: StoredResponse, lease_seconds: float | None) -> None:
    """The response row and its input items; a running one owned, its lease from the database's clock."""
    await db.execute(
        "INSERT INTO responses (id, created_at, status, response, previous_response_id, background, owner, "
        f"lease_expires_at, replica, project) VALUES (%s, %s, %s, %s, %s, %s, %s, {_NOW} + %s, %s, %s) ON CONFLICT (id) "
        "DO UPDATE SET status = excluded.status, response = excluded.response WHERE responses.project = excluded.project",
        (record.id, record.created_at, record.status, json.dumps(record.response), record.previous_response_id,
         record.background, record.owner, lease_seconds, record.replica, record.project))
    async with db.cursor() as cursor:
        await cursor.executemany(
            "INSERT INTO input_items (response_id, position, item_id, item) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING", item_rows(record.id, 0, record.input_items))
    await _insert_output_items(db, record)


async def _insert_output_items(db: Connection, record: StoredResponse) -> None:
    rows = output_item_rows(record.id, record.response)
    if rows:
        async with db.cursor() as cursor:
            await cursor.executemany("INSERT INTO output_items (item_id, response_id) VALUES (%s, %s) "
                                     "ON CONFLICT DO NOTHING", rows)


async def migrate(db: Connection) -> None:
    """Apply the migrations newer than the database's version, under a lock so replicas starting together agree."""
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                         "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        (version,) = await (await db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")).fetchone() or (0,)
        for number, script in migrations("postgresql"):
            if number > version:
                await db.execute(script)  # several statements: without parameters, sent as one simple query
                await db.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (number,))


async def _insert_events(db: Connection, response_id: str, events: list[str]) -> None:
    """The events as one chunk of the response's log."""
    if events:
        await db.execute(insert_chunk("%s"), chunk_row(response_id, events))


async def _append(db: Connection, conversation_id: str, items: list[dict[str, Any]]) -> None:
    """Items after the last (the caller holds the conversation's row lock); an id already there is not added twice."""
    (last,) = await (await db.execute(
        "SELECT COALESCE(MAX(position), -1) FROM conversation_items WHERE conversation_id = %s",
        (conversation_id,))).fetchone() or (-1,)
    async with db.cursor() as cursor:
        await cursor.executemany(
            "INSERT INTO conversation_items (conversation_id, position, item_id, item) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING", item_rows(conversation_id, last + 1, items))


async def _owned_page(db: Connection, owned: str, table: str, owner_column: str, owner: str, project: str,
                      after: str | None, limit: int | None, order: Order) -> tuple[list[dict[str, Any]], bool]:
    """A page of an object's items if the object is `project`'s (`owned`: the query that finds it so), else none."""
    if await (await db.execute(owned, (owner, project))).fetchone() is None:
        return [], False
    return await _page(db, table, owner_column, owner, after, limit, order)


async def _page(db: Connection, table: str, owner_column: str, owner: str, after: str | None, limit: int | None,
                order: Order) -> tuple[list[dict[str, Any]], bool]:
    sql, parameters = page_query(table, owner_column, owner, after, limit, order, "%s")
    return page(await (await db.execute(sql, parameters)).fetchall(), limit)


def _redacted(url: str) -> str:
    """The URL without its password, for logs."""
    return psycopg.conninfo.make_conninfo(url, password="***") if "@" in url else url


async def _to_outbox(db: Connection, response_id: str, status: str) -> None:
    """The webhook delivery of a background response's ending, due at once."""
    await db.execute(f"INSERT INTO webhook_outbox (id, response_id, type, created_at, next_attempt_at) "
                     f"VALUES (%s, %s, %s, {_NOW}::bigint, {_NOW})", (webhook_event_id(), response_id,
                                                                      f"response.{status}"))
