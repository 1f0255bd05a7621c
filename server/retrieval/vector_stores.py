"""Vector stores and their files as stored and as the API shows them (`vector_store`, `vector_store.file`,
`vector_store.files_batch`), with the checks of what a request sets on them: metadata, attributes, expiry."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from server.errors import RequestError
from server.retrieval.chunking import ChunkingStrategy
from server.retrieval.files import time_ordered_id

FileStatus = Literal["in_progress", "completed", "cancelled", "failed"]
FILE_STATUSES: tuple[FileStatus, ...] = ("in_progress", "completed", "cancelled", "failed")
ErrorCode = Literal["server_error", "unsupported_file", "invalid_file"]
MAX_ATTRIBUTES, MAX_KEY, MAX_TEXT = 16, 64, 512  # OpenAI's limits on metadata and attributes
DAY = 24 * 3600


def new_id(prefix: str) -> str:
    """A new vector store's or batch's id (`vs_...`, `vsfb_...`), ordered as uploaded files' are."""
    return time_ordered_id(f"{prefix}_")


@dataclass(frozen=True)
class FileCounts:
    """How many of a store's (or batch's) files are in each status."""

    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @classmethod
    def of(cls, statuses: dict[str, int]) -> "FileCounts":
        return cls(**{status: statuses.get(status, 0) for status in FILE_STATUSES})

    def to_api(self) -> dict[str, int]:
        return {"in_progress": self.in_progress, "completed": self.completed, "failed": self.failed,
                "cancelled": self.cancelled,
                "total": self.in_progress + self.completed + self.failed + self.cancelled}


@dataclass(frozen=True)
class VectorStore:
    """A vector store as stored: whose it is, the model its chunks were embedded with, and its counts."""

    id: str
    project: str
    name: str
    description: str | None
    metadata: dict[str, str]
    embedding_model: str
    dimensions: int
    created_at: int
    last_active_at: int
    expires_after_days: int | None = None
    file_counts: FileCounts = field(default_factory=FileCounts)
    usage_bytes: int = 0

    @property
    def expires_at(self) -> int | None:
        return self.last_active_at + self.expires_after_days * DAY if self.expires_after_days else None

    def expired(self, now: int) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def to_api(self, now: int) -> dict[str, Any]:
        """The SDK's `VectorStore`."""
        status = "expired" if self.expired(now) else "in_progress" if self.file_counts.in_progress else "completed"
        expires_after = ({"anchor": "last_active_at", "days": self.expires_after_days}
                         if self.expires_after_days else None)
        return {"id": self.id, "object": "vector_store", "created_at": self.created_at, "name": self.name,
                "description": self.description, "usage_bytes": self.usage_bytes,
                "file_counts": self.file_counts.to_api(), "status": status, "last_active_at": self.last_active_at,
                "metadata": self.metadata, "expires_after": expires_after, "expires_at": self.expires_at}


@dataclass(frozen=True)
class StoreFile:
    """A file in a vector store: its ingestion's status (and error), its attributes and how it is chunked."""

    vector_store_id: str
    file_id: str
    project: str
    filename: str
    status: FileStatus
    attributes: dict[str, str | float | bool]
    chunking: ChunkingStrategy
    created_at: int
    batch_id: str | None = None
    usage_bytes: int = 0
    last_error: tuple[ErrorCode, str] | None = None

    def to_api(self) -> dict[str, Any]:
        """The SDK's `VectorStoreFile`."""
        error = {"code": self.last_error[0], "message": self.last_error[1]} if self.last_error else None
        return {"id": self.file_id, "object": "vector_store.file", "created_at": self.created_at,
                "vector_store_id": self.vector_store_id, "status": self.status, "usage_bytes": self.usage_bytes,
                "last_error": error, "attributes": self.attributes, "chunking_strategy": self.chunking.to_api()}


@dataclass(frozen=True)
class FileBatch:
    """A batch of files added to a store together; its counts are its files'."""

    id: str
    vector_store_id: str
    project: str
    created_at: int
    cancelled: bool = False
    file_counts: FileCounts = field(default_factory=FileCounts)

    def to_api(self) -> dict[str, Any]:
        """The SDK's `VectorStoreFileBatch`."""
        counts = self.file_counts
        status = ("in_progress" if counts.in_progress else "cancelled" if self.cancelled
                  else "failed" if counts.failed and not counts.completed else "completed")
        return {"id": self.id, "object": "vector_store.files_batch", "created_at": self.created_at,
                "vector_store_id": self.vector_store_id, "status": status, "file_counts": counts.to_api()}


@dataclass(frozen=True)
class SearchHit:
    """One search result: a chunk's text, its file, its score (0 to 1, higher is better) and attributes (the file's,
    and where the chunk is in it)."""

    file_id: str
    filename: str
    score: float
    text: str
    attributes: dict[str, str | float | bool]
    vector_store_id: str = ""

    def to_api(self) -> dict[str, Any]:
        """The SDK's `VectorStoreSearchResponse`."""
        return {"file_id": self.file_id, "filename": self.filename, "score": self.score,
                "attributes": self.attributes, "content": [{"type": "text", "text": self.text}]}


def checked_metadata(value: object, param: str = "metadata") -> dict[str, str]:
    """`metadata`: at most 16 string values, keys up to 64 characters, values up to 512."""
    if value is None:
        return {}
    checked = _checked_map(value, param, (str,))
    return {key: str(item) for key, item in checked.items()}


def checked_attributes(value: object, param: str = "attributes") -> dict[str, str | float | bool]:
    """`attributes`: at most 16 values (strings up to 512 characters, numbers, booleans), keys up to 64."""
    if value is None:
        return {}
    return _checked_map(value, param, (str, int, float, bool))


def _checked_map(value: object, param: str, kinds: tuple[type, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RequestError(f"{param} must be an object.", param=param)
    if len(value) > MAX_ATTRIBUTES:
        raise RequestError(f"{param} may hold at most {MAX_ATTRIBUTES} keys.", param=param)
    for key, item in value.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY:
            raise RequestError(f"{param} keys are strings of 1 to {MAX_KEY} characters.", param=param)
        if not isinstance(item, kinds) or (isinstance(item, str) and len(item) > MAX_TEXT) \
                or (isinstance(item, float) and not math.isfinite(item)):
            names = "strings" if kinds == (str,) else "strings, numbers or booleans"
            raise RequestError(f"{param} values are {names} (strings up to {MAX_TEXT} characters).",
                               param=f"{param}.{key}")
    return dict(value)


def checked_expiry(value: object, param: str = "expires_after") -> int | None:
    """`expires_after`: {'anchor': 'last_active_at', 'days': 1..365}; the days (None: never)."""
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("anchor") != "last_active_at":
        raise RequestError("expires_after must be {'anchor': 'last_active_at', 'days': N}.", param=param)
    days = value.get("days")
    if type(days) is not int or not 1 <= days <= 365:
        raise RequestError("expires_after.days must be a whole number from 1 to 365.", param=f"{param}.days")
    return days
