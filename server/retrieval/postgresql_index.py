"""The retrieval index in the PostgreSQL store's database, shared by every replica: vectors as real[] ranked by their
dot product with the query's (unit vectors: the cosine) in SQL, keywords by a tsvector's rank, both with the filters
in the query. An exact scan of the stores searched; pgvector's index is not used (it is not packaged for Debian 12,
where this is tested)."""

from __future__ import annotations

import asyncio

import json
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import numpy as np
import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from server.retrieval.chunking import Chunk
from server.retrieval.filters import Comparison, Filter, compiled, value_kind
from server.retrieval.index import FilesQuery, Order, Ranked
from server.retrieval.rows import (FILE_COLUMNS, HIT_COLUMNS, STORE_COLUMNS, chunking_text, decoded, error_text,
                                   file_record, hit_attributes, paged, store_record)
from server.retrieval.vector_stores import ErrorCode, FileBatch, FileCounts, SearchHit, StoreFile, VectorStore
from server.store.database import StoreUnavailable
from server.store.migrations import Migrations
from server.store.postgresql import migrate_url

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Any]
# An attribute's value as text or as a number, NULL when it is of another type (SQL may evaluate a cast before the
# test beside it: a CASE keeps "red" from ever being cast to a number).
_VALUES = {"text": "CASE WHEN jsonb_typeof(a.value) = 'string' THEN a.value #>> '{}' END",
           "number": "CASE WHEN jsonb_typeof(a.value) = 'number' THEN (a.value #>> '{}')::numeric END",
           "boolean": "CASE WHEN jsonb_typeof(a.value) = 'boolean' THEN (a.value #>> '{}')::boolean END"}
_OPERATORS = {"eq": "=", "ne": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_JOINED = ("JOIN vector_store_files f ON f.vector_store_id = c.vector_store_id AND f.file_id = c.file_id "
           "JOIN vector_stores s ON s.id = c.vector_store_id")
_SEARCHED = "s.project = %s AND f.status = 'completed' AND c.vector_store_id = ANY(%s) AND {where}"


class PostgresIndex:
    """Vector stores in the database at `url` (migrated with every room's `migrations` on first use)."""

    def __init__(self, url: str, migrations: Migrations, pool_size: int = 4, connect_timeout: float = 5.0) -> None:
        self.url = url
        self.migrations = migrations
        self._pool = AsyncConnectionPool(url, min_size=1, max_size=pool_size, timeout=connect_timeout, open=False,
                                         kwargs={"autocommit": False, "connect_timeout": max(1, int(connect_timeout))})
        self._ready = False

    async def _run(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        try:
            if not self._ready:
                await self._pool.open(wait=False)
                await asyncio.to_thread(migrate_url, self.url, self.migrations)
                self._ready = True
            async with self._pool.connection() as db:
                async with db.transaction():
                    return await work(db)
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    async def ready(self) -> None:
        """Nothing to open ahead: connections come from the pool."""

    async def close(self) -> None:
        await self._pool.close()

    # -- stores -----------------------------------------------------------------------------------------------

    async def create_store(self, store: VectorStore) -> None:
        async def create(db: Connection) -> None:
            await db.execute(f"INSERT INTO vector_stores ({STORE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
                             "%s, %s)", (store.id, store.project, store.name, store.description,
                                         json.dumps(store.metadata), store.embedding_model, store.dimensions,
                                         store.created_at, store.last_active_at, store.expires_after_days))

        await self._run(create)

    async def get_store(self, store_id: str, project: str) -> VectorStore | None:
        async def read(db: Connection) -> VectorStore | None:
            row = await (await db.execute(f"SELECT {STORE_COLUMNS} FROM vector_stores WHERE id = %s AND project = %s",
                                          (store_id, project))).fetchone()
            return await _with_counts(db, store_record(row)) if row else None

        return await self._run(read)

    async def list_stores(self, project: str, after: str | None, limit: int,
                          order: Order) -> tuple[list[VectorStore], bool]:
        async def read(db: Connection) -> tuple[list[VectorStore], bool]:
            rows = await _page(db, f"SELECT {STORE_COLUMNS} FROM vector_stores WHERE project = %s", [project], "id",
                               after, limit, order)
            return [await _with_counts(db, store_record(row)) for row in rows[:limit]], len(rows) > limit

        return await self._run(read)

    async def update_store(self, store_id: str, project: str, changes: dict[str, Any]) -> bool:
        values = {key: json.dumps(value) if key == "metadata" else value for key, value in changes.items()}
        assigned = ", ".join(f"{key} = %s" for key in values)  # keys are the caller's names, not the request's

        async def update(db: Connection) -> bool:
            cursor = await db.execute(f"UPDATE vector_stores SET {assigned} WHERE id = %s AND project = %s",
                                      (*values.values(), store_id, project))
            return cursor.rowcount > 0

        return await self._run(update)

    async def delete_store(self, store_id: str, project: str) -> bool:
        async def delete(db: Connection) -> bool:
            if await (await db.execute("SELECT 1 FROM vector_stores WHERE id = %s AND project = %s FOR UPDATE",
                                       (store_id, project))).fetchone() is None:
                return False
            await db.execute("DELETE FROM chunks WHERE vector_store_id = %s", (store_id,))
            await db.execute("DELETE FROM vector_stores WHERE id = %s", (store_id,))  # files, batches: cascaded
            return True

        return await self._run(delete)

    # -- files and batches ----------------------------------------------------------------------------------------

    async def add_files(self, files: Sequence[StoreFile], batch: FileBatch | None, worker: str,
                        lease_until: float) -> None:
        async def add(db: Connection) -> None:
            if batch is not None:
                await db.execute("INSERT INTO vector_store_batches (id, vector_store_id, project, created_at) "
                                 "VALUES (%s, %s, %s, %s)",
                                 (batch.id, batch.vector_store_id, batch.project, batch.created_at))
            for file in files:
                await db.execute("DELETE FROM chunks WHERE vector_store_id = %s AND file_id = %s",
                                 (file.vector_store_id, file.file_id))
                await db.execute(
                    f"INSERT INTO vector_store_files ({FILE_COLUMNS}, worker, lease_until) VALUES (%s, %s, %s, %s, "
                    "%s, %s, %s, %s, %s, 0, NULL, %s, %s) ON CONFLICT (vector_store_id, file_id) DO UPDATE SET "
                    "status = EXCLUDED.status, attributes = EXCLUDED.attributes, chunking = EXCLUDED.chunking, "
                    "created_at = EXCLUDED.created_at, batch_id = EXCLUDED.batch_id, usage_bytes = 0, "
                    "last_error = NULL, worker = EXCLUDED.worker, lease_until = EXCLUDED.lease_until",
                    (file.vector_store_id, file.file_id, file.project, file.filename, file.status,
                     json.dumps(file.attributes), chunking_text(file.chunking), file.created_at, file.batch_id,
                     worker, lease_until))

        await self._run(add)

    async def get_file(self, store_id: str, file_id: str, project: str) -> StoreFile | None:
        async def read(db: Connection) -> StoreFile | None:
            row = await (await db.execute(f"SELECT {FILE_COLUMNS} FROM vector_store_files WHERE vector_store_id = %s "
                                          "AND file_id = %s AND project = %s", (store_id, file_id, project))).fetchone()
            return file_record(row) if row else None

        return await self._run(read)

    async def list_files(self, store_id: str, project: str, query: FilesQuery) -> tuple[list[StoreFile], bool]:
        async def read(db: Connection) -> tuple[list[StoreFile], bool]:
            sql = f"SELECT {FILE_COLUMNS} FROM vector_store_files WHERE vector_store_id = %s AND project = %s"
            params: list[Any] = [store_id, project]
            if query.batch_id is not None:
                sql, params = sql + " AND batch_id = %s", [*params, query.batch_id]
            if query.status is not None:
                sql, params = sql + " AND status = %s", [*params, query.status]
            rows = await _page(db, sql, params, "file_id", query.after, query.limit, query.order)
            return [file_record(row) for row in rows[:query.limit]], len(rows) > query.limit

        return await self._run(read)

    async def file_chunks(self, store_id: str, file_id: str, project: str) -> list[tuple[str, dict[str, Any]]]:
        async def read(db: Connection) -> list[tuple[str, dict[str, Any]]]:
            rows = await (await db.execute(
                "SELECT c.text, c.place FROM chunks c JOIN vector_stores s ON s.id = c.vector_store_id "
                "WHERE c.vector_store_id = %s AND c.file_id = %s AND s.project = %s ORDER BY c.position",
                (store_id, file_id, project))).fetchall()
            return [(text, decoded(place)) for text, place in rows]

        return await self._run(read)

    async def update_attributes(self, store_id: str, file_id: str, project: str,
                                attributes: dict[str, Any]) -> bool:
        async def update(db: Connection) -> bool:
            cursor = await db.execute("UPDATE vector_store_files SET attributes = %s WHERE vector_store_id = %s "
                                      "AND file_id = %s AND project = %s",
                                      (json.dumps(attributes), store_id, file_id, project))
            return cursor.rowcount > 0

        return await self._run(update)

    async def delete_file(self, store_id: str, file_id: str, project: str) -> bool:
        async def delete(db: Connection) -> bool:
            cursor = await db.execute("DELETE FROM vector_store_files WHERE vector_store_id = %s AND file_id = %s "
                                      "AND project = %s", (store_id, file_id, project))  # its chunks: cascaded
            return cursor.rowcount > 0

        return await self._run(delete)

    async def get_batch(self, batch_id: str, store_id: str, project: str) -> FileBatch | None:
        async def read(db: Connection) -> FileBatch | None:
            row = await (await db.execute(
                "SELECT id, vector_store_id, project, created_at, cancelled FROM vector_store_batches "
                "WHERE id = %s AND vector_store_id = %s AND project = %s", (batch_id, store_id, project))).fetchone()
            if row is None:
                return None
            return FileBatch(row[0], row[1], row[2], row[3], row[4], await _counts(db, "batch_id = %s", (batch_id,)))

        return await self._run(read)

    async def cancel_batch(self, batch_id: str, store_id: str, project: str) -> bool:
        async def cancel(db: Connection) -> bool:
            cursor = await db.execute("UPDATE vector_store_batches SET cancelled = TRUE WHERE id = %s "
                                      "AND vector_store_id = %s AND project = %s", (batch_id, store_id, project))
            if not cursor.rowcount:
                return False
            await db.execute("UPDATE vector_store_files SET status = 'cancelled', worker = NULL, lease_until = NULL "
                             "WHERE batch_id = %s AND status = 'in_progress'", (batch_id,))
            return True

        return await self._run(cancel)

    # -- ingestion -------------------------------------------------------------------------------------------------

    async def claim(self, worker: str, now: float, lease_until: float, resume: bool = False) -> list[StoreFile]:
        async def claim(db: Connection) -> list[StoreFile]:
            rows = await (await db.execute(
                f"UPDATE vector_store_files SET worker = %s, lease_until = %s WHERE (vector_store_id, file_id) IN "
                "(SELECT vector_store_id, file_id FROM vector_store_files WHERE status = 'in_progress' "
                "AND (lease_until IS NULL OR lease_until < %s OR (%s AND worker = %s)) FOR UPDATE SKIP LOCKED) "
                f"RETURNING {FILE_COLUMNS}", (worker, lease_until, now, resume, worker))).fetchall()
            await db.execute("UPDATE vector_store_files SET lease_until = %s WHERE worker = %s "
                             "AND status = 'in_progress'", (lease_until, worker))
            return [file_record(row) for row in rows]

        return await self._run(claim)

    async def finish_file(self, file: StoreFile, chunks: Sequence[Chunk], vectors: Sequence[bytes]) -> bool:
        async def finish(db: Connection) -> bool:
            usage = sum(len(chunk.text.encode()) + len(vector) for chunk, vector in zip(chunks, vectors))
            cursor = await db.execute(
                "UPDATE vector_store_files SET status = 'completed', usage_bytes = %s, worker = NULL, "
                "lease_until = NULL WHERE vector_store_id = %s AND file_id = %s AND project = %s "
                "AND status = 'in_progress'", (usage, file.vector_store_id, file.file_id, file.project))
            if not cursor.rowcount:
                return False
            async with db.cursor() as rows:
                await rows.executemany(
                    "INSERT INTO chunks (vector_store_id, file_id, position, text, place, embedding) "
                    "VALUES (%s, %s, %s, %s, %s, %s)",
                    [(file.vector_store_id, file.file_id, chunk.position, chunk.text.replace("\x00", ""),
                      json.dumps(chunk.attributes()), _floats(vector)) for chunk, vector in zip(chunks, vectors)])
            return True

        return await self._run(finish)

    async def fail_file(self, file: StoreFile, code: ErrorCode, message: str) -> None:
        async def fail(db: Connection) -> None:
            await db.execute("UPDATE vector_store_files SET status = 'failed', last_error = %s, worker = NULL, "
                             "lease_until = NULL WHERE vector_store_id = %s AND file_id = %s AND project = %s "
                             "AND status = 'in_progress'",
                             (error_text(code, message), file.vector_store_id, file.file_id, file.project))

        await self._run(fail)

    # -- search ----------------------------------------------------------------------------------------------------

    async def vector_search(self, project: str, store_ids: Sequence[str], vector: bytes, where: Filter | None,
                            limit: int) -> list[Ranked]:
        condition, params = filter_sql(where)
        sql = ("SELECT c.id, (SELECT sum(a * b) FROM unnest(c.embedding, %s::real[]) AS t(a, b)) AS similarity "
               f"FROM chunks c {_JOINED} WHERE " + _SEARCHED.format(where=condition)
               + " ORDER BY similarity DESC LIMIT %s")

        async def search(db: Connection) -> list[Ranked]:
            rows = await (await db.execute(sql, (_floats(vector), project, list(store_ids), *params, limit))).fetchall()
            return [Ranked(chunk_id, float(similarity)) for chunk_id, similarity in rows]

        return await self._run(search)

    async def keyword_search(self, project: str, store_ids: Sequence[str], words: Sequence[str],
                             where: Filter | None, limit: int) -> list[Ranked]:
        if not words:
            return []
        condition, params = filter_sql(where)
        query = " | ".join("'" + word.replace("'", "''").replace("\\", "") + "'" for word in words)
        sql = (f"SELECT c.id, ts_rank_cd(c.words, to_tsquery('simple', %s)) AS rank FROM chunks c {_JOINED} "
               "WHERE c.words @@ to_tsquery('simple', %s) AND " + _SEARCHED.format(where=condition)
               + " ORDER BY rank DESC LIMIT %s")

        async def search(db: Connection) -> list[Ranked]:
            rows = await (await db.execute(sql, (query, query, project, list(store_ids), *params, limit))).fetchall()
            return [Ranked(chunk_id, float(rank)) for chunk_id, rank in rows]

        return await self._run(search)

    async def hits(self, project: str, ranked: Sequence[tuple[int, float]]) -> list[SearchHit]:
        async def read(db: Connection) -> list[SearchHit]:
            rows = await (await db.execute(f"SELECT {HIT_COLUMNS} FROM chunks c {_JOINED} WHERE s.project = %s "
                                           "AND c.id = ANY(%s)", (project, [chunk_id for chunk_id, _ in ranked]))
                          ).fetchall()
            found = {row[0]: row for row in rows}
            return [SearchHit(row[1], row[2], score, row[3], hit_attributes(row), row[6])
                    for chunk_id, score in ranked if (row := found.get(chunk_id)) is not None]

        return await self._run(read)


def filter_sql(where: Filter | None) -> tuple[str, list[Any]]:
    """A filter as a PostgreSQL condition on the file's attributes (`f.attributes`, JSONB), with its parameters."""
    return compiled(where, _comparison_sql, "TRUE")


def _comparison_sql(where: Comparison) -> tuple[str, list[Any]]:
    exists = "EXISTS (SELECT 1 FROM jsonb_each(f.attributes) a WHERE a.key = %s AND ({}))"
    if where.op in ("in", "nin"):
        values = where.value if isinstance(where.value, tuple) else (where.value,)
        tests: list[str] = []
        params: list[Any] = []
        for kind in ("text", "number"):
            chosen = [value for value in values if value_kind(value) == kind]
            if chosen:
                cast = "::numeric[]" if kind == "number" else "::text[]"
                tests.append(f"({_VALUES[kind]}) = ANY(%s{cast})")
                params.append([str(value) for value in chosen] if kind == "text" else chosen)
        sql = exists.format(" OR ".join(tests) or "FALSE")
        return (sql if where.op == "in" else f"NOT {sql}"), [where.key, *params]
    value = where.value
    assert not isinstance(value, tuple)
    test = f"({_VALUES[value_kind(value)]}) {_OPERATORS[where.op]} %s"
    params = [value]
    sql = exists.format(test)
    return (f"NOT {sql}" if where.op == "ne" else sql), [where.key, *params]


def _floats(vector: bytes) -> list[float]:
    return np.frombuffer(vector, dtype=np.float32).tolist()


async def _page(db: Connection, sql: str, params: list[Any], key: str, after: str | None, limit: int,
                order: Order) -> list[Any]:
    return await (await db.execute(*paged(sql, params, key, after, limit, order, "%s"))).fetchall()


async def _counts(db: Connection, where: str, params: tuple[Any, ...]) -> FileCounts:
    rows = await (await db.execute(f"SELECT status, count(*) FROM vector_store_files WHERE {where} GROUP BY status",
                                   params)).fetchall()
    return FileCounts.of(dict(rows))


async def _with_counts(db: Connection, store: VectorStore) -> VectorStore:
    counts = await _counts(db, "vector_store_id = %s", (store.id,))
    row = await (await db.execute("SELECT coalesce(sum(usage_bytes), 0) FROM vector_store_files "
                                  "WHERE vector_store_id = %s", (store.id,))).fetchone()
    return VectorStore(**{**store.__dict__, "file_counts": counts, "usage_bytes": int(row[0]) if row else 0})
