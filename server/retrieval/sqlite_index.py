"""The retrieval index in the SQLite store's file: vectors ranked by sqlite-vec's cosine distance, keywords by FTS5's
BM25, both with the filters in the query. A connection of its own (pysqlite3, which may load extensions), used from
a thread of its own: a search's scan never waits behind the response store, nor holds it up."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from server.retrieval.chunking import Chunk
from server.retrieval.filters import Comparison, Filter, compiled, value_kind
from server.retrieval.index import FilesQuery, Order, Ranked
from server.retrieval.rows import (FILE_COLUMNS, HIT_COLUMNS, STORE_COLUMNS, chunking_text, decoded, error_text,
                                   file_record, hit_attributes, paged, store_record)
from server.retrieval.vector_stores import ErrorCode, FileBatch, FileCounts, SearchHit, StoreFile, VectorStore
from server.store.database import StoreUnavailable
from server.store.migrations import Migrations

T = TypeVar("T")
# Which attributes a value compares with (json_each's `type`).
_JSON_TYPES = {"text": "a.type = 'text'", "number": "a.type IN ('integer', 'real')"}
_OPERATORS = {"eq": "=", "ne": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
# A search's chunks: of the project's stores named, of files completed and matching the filter.
_JOINED = ("JOIN vector_store_files f ON f.vector_store_id = c.vector_store_id AND f.file_id = c.file_id "
           "JOIN vector_stores s ON s.id = c.vector_store_id")
_SEARCHED = "s.project = ? AND f.status = 'completed' AND c.vector_store_id IN ({stores}) AND {where}"


class SqliteIndex:
    """Vector stores in the SQLite file at `path` (migrated with every room's `migrations` when first opened)."""

    def __init__(self, path: str | Path, migrations: Migrations, busy_timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.migrations = migrations
        self.busy_timeout = busy_timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vector-index")
        self._connection: Any = None

    async def _run(self, work: Callable[[Any], T]) -> T:
        from pysqlite3 import dbapi2 as sqlite3

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, self._in_thread, work)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc

    def _in_thread(self, work: Callable[[Any], T]) -> T:
        if self._connection is None:
            self._connection = self._open()
        with self._connection:  # one transaction per unit of work
            return work(self._connection)

    def _open(self) -> Any:
        import sqlite_vec
        from pysqlite3 import dbapi2 as sqlite3

        from server.store.sqlite import migrate_file

        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, check_same_thread=False, timeout=self.busy_timeout)
        connection.enable_load_extension(True)
        sqlite_vec.load(connection)
        connection.enable_load_extension(False)
        migrate_file(connection, self.migrations, self.busy_timeout)
        return connection

    async def ready(self) -> None:
        """Open the connection now. Its module is another build of SQLite than the store's, in the same process: the
        two do not see each other's locks, so the one that opens second resets the file's shared memory as if it
        were alone. Opened at start, one after the other and before anything else uses the file, neither is using
        it then (a store access during that reset was a SIGBUS)."""
        await self._run(lambda db: None)

    async def close(self) -> None:
        def close(db: Any) -> None:
            db.close()
            self._connection = None

        if self._connection is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, close, self._connection)
        self._executor.shutdown(wait=False)

    # -- stores -----------------------------------------------------------------------------------------------

    async def create_store(self, store: VectorStore) -> None:
        await self._run(lambda db: db.execute(
            f"INSERT INTO vector_stores ({STORE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (store.id, store.project, store.name, store.description, json.dumps(store.metadata),
             store.embedding_model, store.dimensions, store.created_at, store.last_active_at,
             store.expires_after_days)))

    async def get_store(self, store_id: str, project: str) -> VectorStore | None:
        def read(db: Any) -> VectorStore | None:
            row = db.execute(f"SELECT {STORE_COLUMNS} FROM vector_stores WHERE id = ? AND project = ?",
                             (store_id, project)).fetchone()
            return _with_counts(db, store_record(row)) if row else None

        return await self._run(read)

    async def list_stores(self, project: str, after: str | None, limit: int,
                          order: Order) -> tuple[list[VectorStore], bool]:
        def read(db: Any) -> tuple[list[VectorStore], bool]:
            sql, params = f"SELECT {STORE_COLUMNS} FROM vector_stores WHERE project = ?", [project]
            rows = _page(db, sql, params, "id", after, limit, order)
            return [_with_counts(db, store_record(row)) for row in rows[:limit]], len(rows) > limit

        return await self._run(read)

    async def update_store(self, store_id: str, project: str, changes: dict[str, Any]) -> bool:
        values = {key: json.dumps(value) if key == "metadata" else value for key, value in changes.items()}
        assigned = ", ".join(f"{key} = ?" for key in values)  # keys are the caller's names, not the request's
        return await self._run(lambda db: db.execute(
            f"UPDATE vector_stores SET {assigned} WHERE id = ? AND project = ?",
            (*values.values(), store_id, project)).rowcount > 0)

    async def delete_store(self, store_id: str, project: str) -> bool:
        def delete(db: Any) -> bool:
            if db.execute("SELECT 1 FROM vector_stores WHERE id = ? AND project = ?",
                          (store_id, project)).fetchone() is None:
                return False
            _delete_chunks(db, "vector_store_id = ?", (store_id,))
            db.execute("DELETE FROM vector_store_files WHERE vector_store_id = ?", (store_id,))
            db.execute("DELETE FROM vector_store_batches WHERE vector_store_id = ?", (store_id,))
            db.execute("DELETE FROM vector_stores WHERE id = ?", (store_id,))
            return True

        return await self._run(delete)

    # -- files and batches ----------------------------------------------------------------------------------------

    async def add_files(self, files: Sequence[StoreFile], batch: FileBatch | None, worker: str,
                        lease_until: float) -> None:
        def add(db: Any) -> None:
            if batch is not None:
                db.execute("INSERT INTO vector_store_batches (id, vector_store_id, project, created_at) "
                           "VALUES (?, ?, ?, ?)", (batch.id, batch.vector_store_id, batch.project, batch.created_at))
            for file in files:
                _delete_chunks(db, "vector_store_id = ? AND file_id = ?", (file.vector_store_id, file.file_id))
                db.execute(f"INSERT OR REPLACE INTO vector_store_files ({FILE_COLUMNS}, worker, lease_until) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?)",
                           (file.vector_store_id, file.file_id, file.project, file.filename, file.status,
                            json.dumps(file.attributes), chunking_text(file.chunking), file.created_at, file.batch_id,
                            worker, lease_until))

        await self._run(add)

    async def get_file(self, store_id: str, file_id: str, project: str) -> StoreFile | None:
        row = await self._run(lambda db: db.execute(
            f"SELECT {FILE_COLUMNS} FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? "
            "AND project = ?", (store_id, file_id, project)).fetchone())
        return file_record(row) if row else None

    async def list_files(self, store_id: str, project: str, query: FilesQuery) -> tuple[list[StoreFile], bool]:
        def read(db: Any) -> tuple[list[StoreFile], bool]:
            sql = f"SELECT {FILE_COLUMNS} FROM vector_store_files WHERE vector_store_id = ? AND project = ?"
            params: list[Any] = [store_id, project]
            if query.batch_id is not None:
                sql, params = sql + " AND batch_id = ?", [*params, query.batch_id]
            if query.status is not None:
                sql, params = sql + " AND status = ?", [*params, query.status]
            rows = _page(db, sql, params, "file_id", query.after, query.limit, query.order)
            return [file_record(row) for row in rows[:query.limit]], len(rows) > query.limit

        return await self._run(read)

    async def file_chunks(self, store_id: str, file_id: str, project: str) -> list[tuple[str, dict[str, Any]]]:
        rows = await self._run(lambda db: db.execute(
            "SELECT c.text, c.place FROM chunks c JOIN vector_stores s ON s.id = c.vector_store_id "
            "WHERE c.vector_store_id = ? AND c.file_id = ? AND s.project = ? ORDER BY c.position",
            (store_id, file_id, project)).fetchall())
        return [(text, decoded(place)) for text, place in rows]

    async def update_attributes(self, store_id: str, file_id: str, project: str,
                                attributes: dict[str, Any]) -> bool:
        return await self._run(lambda db: db.execute(
            "UPDATE vector_store_files SET attributes = ? WHERE vector_store_id = ? AND file_id = ? AND project = ?",
            (json.dumps(attributes), store_id, file_id, project)).rowcount > 0)

    async def delete_file(self, store_id: str, file_id: str, project: str) -> bool:
        def delete(db: Any) -> bool:
            if not db.execute("DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? "
                              "AND project = ?", (store_id, file_id, project)).rowcount:
                return False
            _delete_chunks(db, "vector_store_id = ? AND file_id = ?", (store_id, file_id))
            return True

        return await self._run(delete)

    async def get_batch(self, batch_id: str, store_id: str, project: str) -> FileBatch | None:
        def read(db: Any) -> FileBatch | None:
            row = db.execute("SELECT id, vector_store_id, project, created_at, cancelled FROM vector_store_batches "
                             "WHERE id = ? AND vector_store_id = ? AND project = ?",
                             (batch_id, store_id, project)).fetchone()
            if row is None:
                return None
            counts = _counts(db, "batch_id = ?", (batch_id,))
            return FileBatch(row[0], row[1], row[2], row[3], bool(row[4]), counts)

        return await self._run(read)

    async def cancel_batch(self, batch_id: str, store_id: str, project: str) -> bool:
        def cancel(db: Any) -> bool:
            if not db.execute("UPDATE vector_store_batches SET cancelled = 1 WHERE id = ? AND vector_store_id = ? "
                              "AND project = ?", (batch_id, store_id, project)).rowcount:
                return False
            db.execute("UPDATE vector_store_files SET status = 'cancelled', worker = NULL, lease_until = NULL "
                       "WHERE batch_id = ? AND status = 'in_progress'", (batch_id,))
            return True

        return await self._run(cancel)

    # -- ingestion -------------------------------------------------------------------------------------------------

    async def claim(self, worker: str, now: float, lease_until: float, resume: bool = False) -> list[StoreFile]:
        def claim(db: Any) -> list[StoreFile]:
            rows = db.execute(f"SELECT {FILE_COLUMNS} FROM vector_store_files WHERE status = 'in_progress' "
                              "AND (lease_until IS NULL OR lease_until < ? OR (? AND worker = ?))",
                              (now, resume, worker)).fetchall()
            db.execute("UPDATE vector_store_files SET lease_until = ? WHERE worker = ? AND status = 'in_progress'",
                       (lease_until, worker))
            for row in rows:
                db.execute("UPDATE vector_store_files SET worker = ?, lease_until = ? WHERE vector_store_id = ? "
                           "AND file_id = ?", (worker, lease_until, row[0], row[1]))
            return [file_record(row) for row in rows]

        return await self._run(claim)

    async def finish_file(self, file: StoreFile, chunks: Sequence[Chunk], vectors: Sequence[bytes]) -> bool:
        def finish(db: Any) -> bool:
            usage = sum(len(chunk.text.encode()) + len(vector) for chunk, vector in zip(chunks, vectors))
            if not db.execute("UPDATE vector_store_files SET status = 'completed', usage_bytes = ?, worker = NULL, "
                              "lease_until = NULL WHERE vector_store_id = ? AND file_id = ? AND project = ? "
                              "AND status = 'in_progress'",
                              (usage, file.vector_store_id, file.file_id, file.project)).rowcount:
                return False
            for chunk, vector in zip(chunks, vectors):
                chunk_id = db.execute("INSERT INTO chunks (vector_store_id, file_id, position, text, place, embedding) "
                                      "VALUES (?, ?, ?, ?, ?, ?)",
                                      (file.vector_store_id, file.file_id, chunk.position, chunk.text,
                                       json.dumps(chunk.attributes()), vector)).lastrowid
                db.execute("INSERT INTO chunk_words (rowid, text) VALUES (?, ?)", (chunk_id, chunk.text))
            return True

        return await self._run(finish)

    async def fail_file(self, file: StoreFile, code: ErrorCode, message: str) -> None:
        await self._run(lambda db: db.execute(
            "UPDATE vector_store_files SET status = 'failed', last_error = ?, worker = NULL, lease_until = NULL "
            "WHERE vector_store_id = ? AND file_id = ? AND project = ? AND status = 'in_progress'",
            (error_text(code, message), file.vector_store_id, file.file_id, file.project)))

    # -- search ----------------------------------------------------------------------------------------------------

    async def vector_search(self, project: str, store_ids: Sequence[str], vector: bytes, where: Filter | None,
                            limit: int) -> list[Ranked]:
        condition, params = filter_sql(where)
        sql = (f"SELECT c.id, vec_distance_cosine(c.embedding, ?) AS distance FROM chunks c {_JOINED} WHERE "
               + _SEARCHED.format(stores=_marks(store_ids), where=condition) + " ORDER BY distance LIMIT ?")
        rows = await self._run(lambda db: db.execute(sql, (vector, project, *store_ids, *params, limit)).fetchall())
        return [Ranked(chunk_id, 1.0 - distance) for chunk_id, distance in rows]

    async def keyword_search(self, project: str, store_ids: Sequence[str], words: Sequence[str],
                             where: Filter | None, limit: int) -> list[Ranked]:
        if not words:
            return []
        condition, params = filter_sql(where)
        match = " OR ".join('"' + word.replace('"', '""') + '"' for word in words)
        # The full-text query runs once, materialized (joined as it is, SQLite ran it again for every chunk row).
        sql = ("WITH matched AS MATERIALIZED (SELECT rowid AS id, bm25(chunk_words) AS rank FROM chunk_words "
               f"WHERE chunk_words MATCH ?) SELECT c.id, m.rank FROM matched m JOIN chunks c ON c.id = m.id {_JOINED} "
               "WHERE " + _SEARCHED.format(stores=_marks(store_ids), where=condition) + " ORDER BY m.rank LIMIT ?")
        rows = await self._run(lambda db: db.execute(sql, (match, project, *store_ids, *params, limit)).fetchall())
        return [Ranked(chunk_id, -rank) for chunk_id, rank in rows]  # FTS5's bm25 is lower for better matches

    async def hits(self, project: str, ranked: Sequence[tuple[int, float]]) -> list[SearchHit]:
        def read(db: Any) -> list[SearchHit]:
            ids = [chunk_id for chunk_id, _ in ranked]
            rows = db.execute(f"SELECT {HIT_COLUMNS} FROM chunks c {_JOINED} WHERE s.project = ? "
                              f"AND c.id IN ({_marks(ids)})", (project, *ids)).fetchall()
            found = {row[0]: row for row in rows}
            return [SearchHit(row[1], row[2], score, row[3], hit_attributes(row), row[6])
                    for chunk_id, score in ranked if (row := found.get(chunk_id)) is not None]

        return await self._run(read)


def filter_sql(where: Filter | None) -> tuple[str, list[Any]]:
    """A filter as a SQLite condition on the file's attributes (`f.attributes`, JSON), with its parameters."""
    return compiled(where, _comparison_sql, "1")


def _comparison_sql(where: Comparison) -> tuple[str, list[Any]]:
    exists = "EXISTS (SELECT 1 FROM json_each(f.attributes) a WHERE a.key = ? AND ({}))"
    if where.op in ("in", "nin"):
        values = where.value if isinstance(where.value, tuple) else (where.value,)
        tests, params = [], []
        for kind in ("text", "number"):
            chosen = [value for value in values if value_kind(value) == kind]
            if chosen:
                tests.append(f"({_JSON_TYPES[kind]} AND a.value IN ({_marks(chosen)}))")
                params += chosen
        sql = exists.format(" OR ".join(tests) or "0")
        return (sql if where.op == "in" else f"NOT {sql}"), [where.key, *params]
    value = where.value
    assert not isinstance(value, tuple)
    if isinstance(value, bool):
        test, params = f"a.type = '{'true' if value else 'false'}'", []
    else:
        test, params = f"{_JSON_TYPES[value_kind(value)]} AND a.value {_OPERATORS[where.op]} ?", [value]
    sql = exists.format(test)
    return (f"NOT {sql}" if where.op == "ne" else sql), [where.key, *params]


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values) or "NULL"


def _page(db: Any, sql: str, params: list[Any], key: str, after: str | None, limit: int, order: Order) -> list[Any]:
    return db.execute(*paged(sql, params, key, after, limit, order, "?")).fetchall()


def _delete_chunks(db: Any, where: str, params: tuple[Any, ...]) -> None:
    db.execute(f"DELETE FROM chunk_words WHERE rowid IN (SELECT id FROM chunks WHERE {where})", params)
    db.execute(f"DELETE FROM chunks WHERE {where}", params)


def _counts(db: Any, where: str, params: tuple[Any, ...]) -> FileCounts:
    rows = db.execute(f"SELECT status, count(*) FROM vector_store_files WHERE {where} GROUP BY status", params)
    return FileCounts.of(dict(rows.fetchall()))


def _with_counts(db: Any, store: VectorStore) -> VectorStore:
    counts = _counts(db, "vector_store_id = ?", (store.id,))
    (usage,) = db.execute("SELECT coalesce(sum(usage_bytes), 0) FROM vector_store_files WHERE vector_store_id = ?",
                          (store.id,)).fetchone()
    return VectorStore(**{**store.__dict__, "file_counts": counts, "usage_bytes": usage})
