"""What is stored of responses and conversations: a response with its input items (its event log is read apart), a
conversation's own fields, and the rules for lists and for how long responses are kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from server.tenancy.keys import DEFAULT_PROJECT

RUNNING = ("queued", "in_progress")  # the statuses of a response some replica is still generating

# Given an interrupted response's JSON and the last sequence number in its event log (-1: none), the failed response
# and, when it has a log, the `response.failed` event that ends it (JSON): built by the runs layer, stored here.
Interrupt = Callable[[dict[str, Any], int], tuple[dict[str, Any], str | None]]


@dataclass(frozen=True)
class StoredResponse:
    """One response as stored: the final (or latest) Response JSON and what the request asked for."""

    id: str
    created_at: float
    status: str
    response: dict[str, Any]
    input_items: list[dict[str, Any]]  # this request's input items, each with an id
    previous_response_id: str | None = None
    background: bool = False
    owner: str | None = None  # the replica generating a background response, while it runs
    lease_expires_at: float | None = None  # when its owner's claim lapses unless renewed
    replica: str | None = None  # the replica that generated it: where its prefix is cached
    project: str = DEFAULT_PROJECT  # whose it is (server/tenancy): read only through that project's ProjectStore
    timeline: list[dict[str, Any]] | None = None  # its phases as it was served (server/runs/timeline.py)


class ResponseFilter(BaseModel):
    """Which of a project's stored responses a list shows: by status, model, the response they continue, and
    creation time (`created_after` inclusive, `created_before` exclusive, in Unix seconds). The list route reads it
    from its query, checked as it is declared here."""

    model_config = ConfigDict(frozen=True)

    status: Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"] | None = None
    model: str | None = Field(default=None, max_length=256)
    previous_response_id: str | None = Field(default=None, max_length=256)
    created_after: float | None = Field(default=None, ge=0, le=1e11)
    created_before: float | None = Field(default=None, ge=0, le=1e11)


@dataclass(frozen=True)
class StoredConversation:
    """A conversation's own fields; its items are read page by page."""

    id: str
    created_at: int
    metadata: dict[str, str]
    project: str = DEFAULT_PROJECT  # whose it is (server/tenancy)


@dataclass(frozen=True)
class RetentionPolicy:
    """Stored responses older than `max_age_seconds`, or beyond the newest `max_count`, are deleted."""

    max_age_seconds: float | None = None
    max_count: int | None = None
