"""Rows of the retrieval tables as records, the same for both indexes (a JSON column arrives as text from SQLite
and decoded from PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

from server.retrieval.chunking import ChunkingStrategy
from server.retrieval.vector_stores import StoreFile, VectorStore

STORE_COLUMNS = ("id, project, name, description, metadata, embedding_model, dimensions, created_at, last_active_at, "
                 "expires_after_days")
FILE_COLUMNS = ("vector_store_id, file_id, project, filename, status, attributes, chunking, created_at, batch_id, "
                "usage_bytes, last_error")
HIT_COLUMNS = "c.id, c.file_id, f.filename, c.text, c.place, f.attributes, c.vector_store_id"


def paged(sql: str, params: list[Any], key: str, after: str | None, limit: int, order: str,
          mark: str) -> tuple[str, list[Any]]:
    """A query's page: up to `limit` + 1 rows after the row whose `key` is `after`, in `order` of `key`; `mark` is
    the driver's placeholder (`?` or `%s`)."""
    if after is not None:
        sql, params = sql + f" AND {key} {'<' if order == 'desc' else '>'} {mark}", [*params, after]
    return sql + f" ORDER BY {key} {order.upper()} LIMIT {mark}", [*params, limit + 1]


def decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def store_record(row: Any) -> VectorStore:
    return VectorStore(row[0], row[1], row[2], row[3], decoded(row[4]), row[5], row[6], row[7], row[8], row[9])


def chunking_text(strategy: ChunkingStrategy) -> str:
    return json.dumps([strategy.kind, strategy.max_tokens, strategy.overlap])


def file_record(row: Any) -> StoreFile:
    kind, size, overlap = json.loads(row[6])
    error = tuple(json.loads(row[10])) if row[10] else None
    return StoreFile(row[0], row[1], row[2], row[3], row[4], decoded(row[5]), ChunkingStrategy(kind, size, overlap),
                     row[7], row[8], row[9], error)  # type: ignore[arg-type]


def error_text(code: str, message: str) -> str:
    return json.dumps([code, message])


def hit_attributes(row: Any) -> dict[str, Any]:
    """A result's attributes: its file's, then where the chunk is (HIT_COLUMNS' place and attributes)."""
    return {**decoded(row[5]), **decoded(row[4])}
