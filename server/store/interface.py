"""The response store's interface: stored responses with their input items and event logs, and conversations.

It is async and small, so a shared backend for several replicas can stand behind it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Protocol

from server.retrieval.files import StoredFile
from server.tenancy.keys import DEFAULT_PROJECT

Order = Literal["asc", "desc"]
RUNNING = ("queued", "in_progress")  # the statuses of a response some replica is still generating

# Given an interrupted response's JSON and the last sequence number in its event log (-1: none), the failed response
# and, when it has a log, the `response.failed` event that ends it (JSON): built by the runs layer, stored here.
Interrupt = Callable[[dict[str, Any], int], tuple[dict[str, Any], str | None]]


class StoreUnavailable(Exception):
    """The store cannot read or write now (locked, read-only, disk full, unreachable); the backend logged why."""


class StoreRejected(ValueError):
    """The store cannot keep or look up a value the request holds (bad data, not an outage): a 400."""


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


@dataclass(frozen=True)
class ResponseFilter:
    """Which of a project's stored responses a list shows: by status, model, the response they continue, and
    creation time (`created_after` inclusive, `created_before` exclusive, in seconds)."""

    status: str | None = None
    model: str | None = None
    previous_response_id: str | None = None
    created_after: float | None = None
    created_before: float | None = None


@dataclass(frozen=True)
class WebhookDelivery:
    """A webhook event waiting to be sent: the ending (`type`, `response.completed` ...) of a background response,
    made at `created_at`, tried `attempts` times so far."""

    id: str  # the event's id (`evt_...`), the same on every attempt
    response_id: str
    type: str
    created_at: int
    attempts: int = 0


def webhook_event_id() -> str:
    """A new webhook event's id."""
    return f"evt_{secrets.token_hex(16)}"


@dataclass(frozen=True)
class StoredConversation:
    """A conversation's own fields; its items are read page by page."""

    id: str
    created_at: int
    metadata: dict[str, str]
    project: str = DEFAULT_PROJECT  # whose it is (server/tenancy)


@dataclass(frozen=True)
class Replica:
    """A live replica that takes forwarded requests, at `url` (its `--advertise-url`)."""

    id: str
    url: str


@dataclass(frozen=True)
class RetentionPolicy:
    """Stored responses older than `max_age_seconds`, or beyond the newest `max_count`, are deleted."""

    max_age_seconds: float | None = None
    max_count: int | None = None


class ResponseStore(Protocol):
    """What the server needs from a store; every method is safe to call from the event loop. Every read or change
    of one response, conversation or file a request names takes the project, and its query filters by it: another
    project's object is a missing one (server/tenancy/project_store.py is how requests call them)."""

    async def save(self, record: StoredResponse, events: list[str] | None = None) -> None:
        """Store a response that no replica owns (one that was not generated in the background), as it ended."""
        ...

    async def get(self, response_id: str, project: str) -> StoredResponse | None: ...

    async def events_after(self, response_id: str, after: int, project: str) -> list[str]: ...

    async def delete(self, response_id: str, project: str) -> bool:
        """Delete the response if it is `project`'s."""
        ...

    async def stored_item(self, item_id: str, project: str) -> dict[str, Any] | None:
        """The project's stored item with this id: an output or input item of a response, or a conversation's."""
        ...

    async def count_responses(self, response_ids: list[str], project: str) -> int:
        """How many of the responses are stored, and `project`'s."""
        ...

    async def input_items(self, response_id: str, after: str | None, limit: int, order: Order,
                          project: str) -> tuple[list[dict[str, Any]], bool]: ...

    async def list_responses(self, project: str, wanted: ResponseFilter, after: str | None, limit: int,
                             order: Order) -> tuple[list[dict[str, Any]], bool]:
        """A page of the project's responses (their Response JSON) that `wanted` keeps, by creation time, after the
        response `after`; and whether more follow."""
        ...

    # -- background responses shared by replicas: event log written as it grows, leases, cancel requests -----
    # Lease times are the database's clock, so replicas whose clocks disagree still agree on who holds what.
    # A write by an owner lands only while the response is running and still theirs: a replica that stalled past
    # its lease (another replica failed its response) or whose response was deleted changes nothing.

    async def start_owned(self, record: StoredResponse, lease_seconds: float) -> None:
        """Store a background response as it starts, owned by `record.owner` for `lease_seconds`."""
        ...

    async def append_events(self, response_id: str, events: list[str], owner: str) -> bool:
        """Add events (JSON, consecutive sequence numbers) to the log of a response `owner` runs; ones already there
        are kept. False: the response is no longer running under `owner` (nothing was written)."""
        ...

    async def finish_owned(self, record: StoredResponse, events: list[str]) -> bool:
        """Store how a background response ended, with the rest of its log. False: it is no longer running under
        `record.owner` (another replica failed it, or it was deleted); nothing was written."""
        ...

    async def renew_leases(self, owner: str, response_ids: list[str], lease_seconds: float) -> None: ...

    async def request_cancel(self, response_id: str, project: str) -> bool:
        """Ask the replica running a background response to cancel it; False if it is not running."""
        ...

    async def cancel_requests(self, owner: str) -> list[str]:
        """The running responses of `owner` that some replica asked to cancel."""
        ...

    async def fail_interrupted(self, interrupt: Interrupt, restarted_owner: str | None = None) -> list[str]:
        """Fail the running responses whose lease expired (or that `restarted_owner` held before it restarted),
        each with `interrupt`'s response and terminal event; their ids."""
        ...

    # -- webhooks: with `webhooks` on, finish_owned and fail_interrupted write each ending's delivery to an outbox in
    # the same transaction; replicas claim due deliveries under a lease, so one replica sends each attempt.

    async def claim_webhooks(self, owner: str, lease_seconds: float, limit: int) -> list[WebhookDelivery]:
        """Up to `limit` deliveries that are due and claimed by no replica (or whose claim lapsed), now `owner`'s."""
        ...

    async def webhook_sent(self, delivery_id: str, owner: str) -> None:
        """The delivery arrived (or is given up): it leaves the outbox."""
        ...

    async def webhook_failed(self, delivery_id: str, owner: str, retry_in: float) -> None:
        """The attempt failed: the delivery is due again in `retry_in` seconds, for any replica."""
        ...

    async def enforce_retention(self, batch: int) -> int:
        """Delete up to `batch` responses the retention policy no longer keeps (never a running one); how many."""
        ...

    # -- conversations: items appended in order, each with an id ------------------------------

    async def create_conversation(self, conversation: StoredConversation, items: list[dict[str, Any]]) -> None: ...

    async def get_conversation(self, conversation_id: str, project: str) -> StoredConversation | None: ...

    async def update_conversation(self, conversation_id: str, metadata: dict[str, str],
                                  project: str) -> StoredConversation | None: ...

    async def delete_conversation(self, conversation_id: str, project: str) -> bool:
        """Delete the conversation if it is `project`'s."""
        ...

    async def add_conversation_items(self, conversation_id: str, items: list[dict[str, Any]], replica: str | None,
                                     project: str) -> bool:
        """Append items; False if the conversation does not exist. `replica`: the replica whose response added them,
        now the conversation's home."""
        ...

    async def conversation_items(self, conversation_id: str, after: str | None, limit: int | None, order: Order,
                                 project: str) -> tuple[list[dict[str, Any]], bool]:
        """A page of items (`limit` None: all of them) and whether more follow."""
        ...

    async def conversation_item(self, conversation_id: str, item_id: str, project: str) -> dict[str, Any] | None: ...

    async def count_conversation_items(self, conversation_id: str, project: str) -> int: ...

    # -- files (server/retrieval/files.py): every call names the project, and sees only its live files ---------

    async def save_file(self, record: StoredFile, parts: Iterable[bytes]) -> None:
        """Store the file's record and its content, part by part, in one transaction (`parts` read as written)."""
        ...

    async def get_file(self, file_id: str, project: str, now: int) -> StoredFile | None: ...

    async def list_files(self, project: str, now: int, purpose: str | None, after: str | None, limit: int,
                         order: Order) -> tuple[list[StoredFile], bool]: ...

    async def file_part(self, file_id: str, project: str, position: int) -> bytes | None:
        """The file's content part at `position` (None: past its end, or not the project's)."""
        ...

    async def delete_file(self, file_id: str, project: str) -> bool: ...

    async def delete_conversation_item(self, conversation_id: str, item_id: str, project: str) -> bool: ...

    # -- replicas: each replica that takes forwarded requests beats here (the database's clock); a request's home is
    # the replica that generated the response it continues, or the latest response of its conversation.

    async def heartbeat(self, replica: Replica, draining: bool) -> None:
        """`replica` is alive now (draining: alive, but takes no forwarded requests)."""
        ...

    async def live_replicas(self, within_seconds: float) -> list[Replica]:
        """The replicas, not draining, whose last heartbeat is at most `within_seconds` old."""
        ...

    async def leave(self, replica_id: str) -> None:
        """The replica stops: it takes no more forwarded requests."""
        ...

    async def response_home(self, response_id: str, project: str) -> str | None:
        """The replica that generated the response (None: unknown, or no such response)."""
        ...

    async def conversation_home(self, conversation_id: str, project: str) -> str | None:
        """The replica whose response last added to the conversation (None: none yet, or no such conversation)."""
        ...

    async def close(self) -> None: ...
