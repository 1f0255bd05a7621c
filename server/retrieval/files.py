"""Uploaded files (`/v1/files`): their records as stored and as the API shows them, purposes and expiry. A file's
content is kept in the database in parts, so that every replica sharing the store serves it."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from server.errors import RequestError

PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
PART_BYTES = 1024 * 1024  # a file is stored in parts of this size: written and read a part at a time
DEFAULT_MAX_FILE_BYTES = 512 * 1024 * 1024  # OpenAI's limit for one file
EXPIRY_SECONDS = (3600, 30 * 24 * 3600)  # expires_after.seconds: from an hour to thirty days, as OpenAI's


@dataclass(frozen=True)
class StoredFile:
    """An uploaded file as stored: whose it is, its name, purpose, size, and when it was made and expires."""

    id: str
    project: str
    filename: str
    purpose: str
    bytes: int
    created_at: int
    expires_at: int | None = None

    def to_api(self) -> dict[str, Any]:
        """The SDK's `FileObject`."""
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": self.created_at,
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "expires_at": self.expires_at, "status_details": None}


def time_ordered_id(prefix: str) -> str:
    """A new id after `prefix` (with its separator): the microsecond first, so that ids sort as they were made (a
    list's order within a second of `created_at`), then randomness."""
    return f"{prefix}{time.time_ns() // 1000:014x}{secrets.token_hex(6)}"


def new_file_id() -> str:
    """A new file's id (`file-...`, as OpenAI's)."""
    return time_ordered_id("file-")


def checked_purpose(purpose: object) -> str:
    if not isinstance(purpose, str) or purpose not in PURPOSES:
        raise RequestError(f"purpose must be one of: {', '.join(PURPOSES)}.", param="purpose")
    return purpose


def expires_at(anchor: object, seconds: object, created_at: int) -> int | None:
    """When a file uploaded at `created_at` expires, from the form's `expires_after[anchor]` and
    `expires_after[seconds]` (neither: never)."""
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise RequestError("expires_after[anchor] must be 'created_at'.", param="expires_after.anchor")
    low, high = EXPIRY_SECONDS
    if not isinstance(seconds, str) or not seconds.isdigit() or not low <= int(seconds) <= high:
        raise RequestError(f"expires_after[seconds] must be a whole number from {low} to {high}.",
                           param="expires_after.seconds")
    return created_at + int(seconds)

