"""A batch (`/v1/batches`): its record as stored, its lifecycle, and the SDK's `Batch` it is shown as."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from server.retrieval.files import time_ordered_id

ENDPOINTS = ("/v1/responses",)  # the batch endpoints this server serves (of those OpenAI's batches take)
COMPLETION_WINDOWS = {"24h": 24 * 3600}
MAX_LINES = 50_000  # OpenAI's most requests in one batch

# Statuses a runner works on (each replica takes one under a lease), and those that are final.
RUNNABLE = ("validating", "in_progress", "finalizing", "cancelling")
FINAL = ("completed", "failed", "cancelled", "expired")


@dataclass(frozen=True)
class Counts:
    """A batch's requests: all of them, those answered 200, and those that ended in an error."""

    total: int = 0
    completed: int = 0
    failed: int = 0


@dataclass(frozen=True)
class Batch:
    """A batch as stored: whose it is (`project`, and the key that made it: its lines run as that caller), what it
    runs, where it stands, and the times of each step (Unix seconds, None: not reached)."""

    id: str
    project: str
    api_key_id: str | None
    endpoint: str
    input_file_id: str
    completion_window: str
    created_at: int
    status: str = "validating"
    metadata: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)  # why it failed: the SDK's BatchError each
    times: dict[str, int] = field(default_factory=dict)  # "in_progress_at", "completed_at", ...
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: Counts = Counts()
    usage: dict[str, int] = field(default_factory=dict)  # tokens of its answered lines, summed when it is finalized

    @property
    def expires_at(self) -> int:
        return self.created_at + COMPLETION_WINDOWS[self.completion_window]

    def moved(self, status: str, now: int, **changes: Any) -> "Batch":
        """The batch in `status` from `now` (its `<status>_at` time set)."""
        return replace(self, status=status, times={**self.times, f"{status}_at": now}, **changes)

    def details(self) -> dict[str, Any]:
        """What is stored as JSON beside the columns."""
        return {"metadata": self.metadata, "model": self.model, "errors": self.errors, "times": self.times,
                "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
                "total": self.counts.total, "usage": self.usage}

    @classmethod
    def of_details(cls, columns: tuple[Any, ...], details: dict[str, Any], counts: Counts) -> "Batch":
        batch_id, project, key_id, endpoint, input_file_id, window, created_at, status = columns
        return cls(batch_id, project, key_id or None, endpoint, input_file_id, window, int(created_at), status,
                   details.get("metadata") or {}, details.get("model"), details.get("errors") or [],
                   details.get("times") or {}, details.get("output_file_id"), details.get("error_file_id"),
                   Counts(details.get("total", 0), counts.completed, counts.failed), details.get("usage") or {})

    def to_api(self) -> dict[str, Any]:
        """The SDK's `Batch`."""
        times = {name: self.times.get(name) for name in (
            "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
            "cancelled_at")}
        return {"id": self.id, "object": "batch", "endpoint": self.endpoint, "model": self.model,
                "errors": {"object": "list", "data": self.errors} if self.errors else None,
                "input_file_id": self.input_file_id, "completion_window": self.completion_window,
                "status": self.status, "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
                "created_at": self.created_at, "expires_at": self.expires_at, **times,
                "request_counts": {"total": self.counts.total, "completed": self.counts.completed,
                                   "failed": self.counts.failed},
                "usage": _usage(self.usage) if self.usage else None, "metadata": self.metadata or None}


def _usage(tokens: dict[str, int]) -> dict[str, Any]:
    """The SDK's `BatchUsage` from summed tokens."""
    inputs, outputs = tokens.get("input_tokens", 0), tokens.get("output_tokens", 0)
    return {"input_tokens": inputs, "input_tokens_details": {"cached_tokens": tokens.get("cached_tokens", 0)},
            "output_tokens": outputs, "output_tokens_details": {"reasoning_tokens": tokens.get("reasoning_tokens", 0)},
            "total_tokens": inputs + outputs}


def new_batch_id() -> str:
    """A new batch's id (`batch_...`, as OpenAI's), in the order batches are made."""
    return time_ordered_id("batch_")
