"""Stored responses: each with its input items, output item ids and event log; a background response's ownership
(leases on the database's clock, cancel requests, failing the interrupted), retention, and where each was made.

Every read or change of one response a request names takes the project, and its query filters by it: another
project's response is a missing one (ProjectStore is how requests call them). A write by an owner lands only while
the response is running and still theirs: a replica that stalled past its lease, or whose response was deleted,
changes nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from server.responses.records import RUNNING, Interrupt, ResponseFilter, RetentionPolicy, StoredResponse
from server.responses.rows import (CHUNKS_AFTER, INSERT_CHUNK, ITEM_QUERIES, LAST_SEQUENCE, OWNED_RESPONSE, chunk_row,
                                   events_in, found_item, item_rows, output_item_rows, owned_page,
                                   responses_page_query, retention_query)
from server.store.database import Database, Order, Session, marks

# Called inside the transaction that ends a background response (its id, its status): the webhook outbox's writer.
Ended = Callable[[Session, str, str], None]
_COLUMNS = ("id, created_at, status, response, previous_response_id, background, owner, lease_expires_at, replica, "
            "project, timeline")


@dataclass
class ResponseRecords:
    """The responses in `database`; `ended`, when set, is told of each background response's ending."""

    database: Database
    retention: RetentionPolicy = RetentionPolicy()
    ended: Ended | None = None

    # -- a request's own responses ----------------------------------------------------------------------------

    async def save(self, record: StoredResponse, events: list[str] | None = None) -> None:
        """Store a response that no replica owns (one that was not generated in the background), as it ended."""
        def write(db: Session) -> None:
            _insert(db, record, None)
            _insert_events(db, record.id, events or [])

        await self.database.run("save", write)

    async def get(self, response_id: str, project: str) -> StoredResponse | None:
        def read(db: Session) -> StoredResponse | None:
            row = db.execute(f"SELECT {_COLUMNS} FROM responses WHERE id = ? AND project = ?",
                             (response_id, project)).fetchone()
            if row is None:
                return None
            items = [json.loads(item) for (item,) in db.execute(
                "SELECT item FROM input_items WHERE response_id = ? ORDER BY position", (response_id,)).fetchall()]
            return StoredResponse(row[0], row[1], row[2], json.loads(row[3]), items, row[4], bool(row[5]), row[6],
                                  row[7], row[8], row[9], json.loads(row[10]) if row[10] else None)

        return await self.database.run("get", read)

    async def events_after(self, response_id: str, after: int, project: str) -> list[str]:
        def read(db: Session) -> list[str]:
            if db.execute(OWNED_RESPONSE, (response_id, project)).fetchone() is None:
                return []
            return events_in(db.execute(CHUNKS_AFTER, (response_id, after)).fetchall(), after)

        return await self.database.run("events_after", read)

    async def delete(self, response_id: str, project: str) -> bool:
        """Delete the response if it is `project`'s."""
        return await self.database.run("delete", lambda db: db.execute(
            "DELETE FROM responses WHERE id = ? AND project = ?", (response_id, project)).rowcount > 0)

    async def stored_item(self, item_id: str, project: str) -> dict[str, Any] | None:
        """The project's stored item with this id: an output or input item of a response, or a conversation's."""
        def read(db: Session) -> dict[str, Any] | None:
            for source, query in enumerate(ITEM_QUERIES):
                row = db.execute(query, (item_id, project)).fetchone()
                if row is not None:
                    return found_item(item_id, source, row)
            return None

        return await self.database.run("stored_item", read)

    async def count_responses(self, response_ids: list[str], project: str) -> int:
        """How many of the responses are stored, and `project`'s."""
        if not response_ids:
            return 0
        return await self.database.run("count_responses", lambda db: int(db.execute(
            f"SELECT count(*) FROM responses WHERE project = ? AND id IN ({marks(len(response_ids))})",
            (project, *response_ids)).fetchone()[0]))

    async def input_items(self, response_id: str, after: str | None, limit: int, order: Order,
                          project: str) -> tuple[list[dict[str, Any]], bool]:
        return await self.database.run("input_items", lambda db: owned_page(
            db, OWNED_RESPONSE, "input_items", "response_id", response_id, project, after, limit, order))

    async def list_responses(self, project: str, wanted: ResponseFilter, after: str | None, limit: int,
                             order: Order) -> tuple[list[dict[str, Any]], bool]:
        """A page of the project's responses (their Response JSON) that `wanted` keeps, by creation time, after the
        response `after`; and whether more follow."""
        sql, parameters = responses_page_query(project, wanted, after, limit, order, self.database.dialect)
        rows = await self.database.run("list_responses", lambda db: db.execute(sql, parameters).fetchall())
        return [json.loads(response) for (response,) in rows[:limit]], len(rows) > limit

    async def request_cancel(self, response_id: str, project: str) -> bool:
        """Ask the replica running a background response to cancel it; False if it is not running."""
        return await self.database.run("request_cancel", lambda db: db.execute(
            f"UPDATE responses SET cancel_requested = TRUE WHERE id = ? AND project = ? AND background AND status IN "
            f"{RUNNING}", (response_id, project)).rowcount > 0)

    async def response_home(self, response_id: str, project: str) -> str | None:
        """The replica that generated the response (None: unknown, or no such response)."""
        row = await self.database.run("response_home", lambda db: db.execute(
            "SELECT replica FROM responses WHERE id = ? AND project = ?", (response_id, project)).fetchone())
        return row[0] if row else None

    # -- background responses shared by replicas: event log written as it grows, leases, cancel requests -----

    async def start_owned(self, record: StoredResponse, lease_seconds: float) -> None:
        """Store a background response as it starts, owned by `record.owner` for `lease_seconds`."""
        await self.database.run("start_owned", lambda db: _insert(db, record, lease_seconds))

    async def append_events(self, response_id: str, events: list[str], owner: str,
                            moved_on: StoredResponse | None = None) -> bool:
        """Add events (JSON, consecutive sequence numbers) to the log of a response `owner` runs; ones already there
        are kept; with `moved_on`, the response as it now stands (queued, then in progress). False: the response is no
        longer running under `owner` (nothing was written)."""
        share_lock = self.database.dialect.share_lock

        def write(db: Session) -> bool:
            if db.execute(f"SELECT 1 FROM responses WHERE id = ? AND owner = ? AND status IN {RUNNING}{share_lock}",
                          (response_id, owner)).fetchone() is None:
                return False
            if moved_on is not None:
                db.execute("UPDATE responses SET status = ?, response = ? WHERE id = ? AND project = ?",
                           (moved_on.status, json.dumps(moved_on.response), response_id, moved_on.project))
            _insert_events(db, response_id, events)
            return True

        return await self.database.run("append_events", write)

    async def finish_owned(self, record: StoredResponse, events: list[str]) -> bool:
        """Store how a background response ended, with the rest of its log. False: it is no longer running under
        `record.owner` (another replica failed it, or it was deleted); nothing was written."""
        def write(db: Session) -> bool:
            updated = db.execute(f"UPDATE responses SET status = ?, response = ?, timeline = ? WHERE id = ? AND "
                                 f"owner = ? AND status IN {RUNNING}", (record.status, json.dumps(record.response),
                                                                        _timeline(record), record.id,
                                                                        record.owner)).rowcount
            if updated:
                _insert_events(db, record.id, events)
                _insert_output_items(db, record)
                if self.ended is not None:
                    self.ended(db, record.id, record.status)
            return updated > 0

        return await self.database.run("finish_owned", write)

    async def renew_leases(self, owner: str, response_ids: list[str], lease_seconds: float) -> None:
        now = self.database.dialect.now
        await self.database.run("renew_leases", lambda db: db.executemany(
            f"UPDATE responses SET lease_expires_at = {now} + ? WHERE id = ? AND owner = ?",
            [(lease_seconds, response_id, owner) for response_id in response_ids]))

    async def cancel_requests(self, owner: str) -> list[str]:
        """The running responses of `owner` that some replica asked to cancel."""
        return await self.database.run("cancel_requests", lambda db: [response_id for (response_id,) in db.execute(
            f"SELECT id FROM responses WHERE owner = ? AND cancel_requested AND status IN {RUNNING}",
            (owner,)).fetchall()])

    async def fail_interrupted(self, interrupt: Interrupt, restarted_owner: str | None = None) -> list[str]:
        """Fail the running responses whose lease expired (or that `restarted_owner` held before it restarted),
        each with `interrupt`'s response and terminal event; their ids."""
        dialect = self.database.dialect

        def fail(db: Session) -> list[str]:
            rows = db.execute(f"SELECT id, response FROM responses WHERE status IN {RUNNING} AND (lease_expires_at "
                              f"IS NULL OR lease_expires_at < {dialect.now} OR owner = ?){dialect.skip_locked}",
                              (restarted_owner,)).fetchall()
            for response_id, text in rows:
                (last,) = db.execute(LAST_SEQUENCE, (response_id,)).fetchone() or (-1,)
                response, event = interrupt(json.loads(text), last)
                db.execute("UPDATE responses SET status = ?, response = ? WHERE id = ?",
                           (response["status"], json.dumps(response), response_id))
                _insert_events(db, response_id, [event] if event else [])
                if self.ended is not None:
                    self.ended(db, response_id, response["status"])
            return [response_id for response_id, _ in rows]

        return await self.database.run("fail_interrupted", fail)

    async def enforce_retention(self, batch: int) -> int:
        """Delete up to `batch` responses the retention policy no longer keeps (never a running one); how many."""
        doomed = retention_query(self.retention, batch, time.time())
        if doomed is None:
            return 0
        sql, parameters = doomed
        return await self.database.run("enforce_retention", lambda db: db.execute(
            f"DELETE FROM responses WHERE id IN ({sql})", parameters).rowcount)


def _insert(db: Session, record: StoredResponse, lease_seconds: float | None) -> None:
    """The response row and its input items; a running one owned, its lease from the database's clock."""
    db.execute(
        "INSERT INTO responses (id, created_at, status, response, previous_response_id, background, owner, "
        f"lease_expires_at, replica, project, timeline) VALUES (?, ?, ?, ?, ?, ?, ?, {db.dialect.now} + ?, ?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET status = excluded.status, response = excluded.response, "
        "timeline = excluded.timeline WHERE responses.project = excluded.project",
        (record.id, record.created_at, record.status, json.dumps(record.response), record.previous_response_id,
         record.background, record.owner, lease_seconds, record.replica, record.project, _timeline(record)))
    db.executemany("INSERT INTO input_items (response_id, position, item_id, item) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT DO NOTHING", item_rows(record.id, 0, record.input_items))
    _insert_output_items(db, record)


def _timeline(record: StoredResponse) -> str | None:
    return json.dumps(record.timeline) if record.timeline is not None else None


def _insert_output_items(db: Session, record: StoredResponse) -> None:
    db.executemany("INSERT INTO output_items (item_id, response_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                   output_item_rows(record.id, record.response))


def _insert_events(db: Session, response_id: str, events: list[str]) -> None:
    """The events as one chunk of the response's log."""
    if events:
        db.execute(INSERT_CHUNK, chunk_row(response_id, events))
