"""The SQL of stored responses and conversations, written once for both databases: paging and retention queries,
the event log's chunks, and the rows of item lists."""

from __future__ import annotations

import json
from typing import Any

from server.responses.records import RUNNING, ResponseFilter, RetentionPolicy
from server.store.database import Dialect, Order, Session

_NO_LIMIT = 1 << 62


def page_query(table: str, owner_column: str, owner: str, after: str | None, limit: int | None,
               order: Order) -> tuple[str, tuple[Any, ...]]:
    """The query for one owner's items in position order, after the item `after`, one more than `limit` (None: all)."""
    direction, compare = ("ASC", ">") if order == "asc" else ("DESC", "<")
    start = ""
    parameters: list[Any] = [owner]
    if after is not None:
        start = (f" AND position {compare} (SELECT MIN(position) FROM {table} WHERE {owner_column} = ? "
                 f"AND item_id = ?)")  # of items sent twice with one id, after the first
        parameters += [owner, after]
    sql = f"SELECT item FROM {table} WHERE {owner_column} = ?{start} ORDER BY position {direction} LIMIT ?"
    return sql, (*parameters, _NO_LIMIT if limit is None else limit + 1)


def page(rows: list[tuple[str]], limit: int | None) -> tuple[list[dict[str, Any]], bool]:
    """The page `page_query`'s rows make, and whether more follow."""
    cut = len(rows) if limit is None else limit
    return [json.loads(item) for (item,) in rows[:cut]], len(rows) > cut


# Writes one chunk of a log (`chunk_row`). A chunk written again from the same first event (a write whose commit was
# made but whose answer was lost, repeated with what came since) keeps the longer one.
INSERT_CHUNK = ("INSERT INTO event_chunks (response_id, first_sequence, last_sequence, events) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (response_id, first_sequence) DO UPDATE SET last_sequence = excluded.last_sequence, "
                "events = excluded.events WHERE excluded.last_sequence > event_chunks.last_sequence")
# The chunks holding a response's events after a sequence number (`events_in` reads them).
CHUNKS_AFTER = ("SELECT first_sequence, events FROM event_chunks WHERE response_id = ? AND last_sequence > ? "
                "ORDER BY first_sequence")
# The sequence number of a response's last logged event (-1: none).
LAST_SEQUENCE = "SELECT COALESCE(MAX(last_sequence), -1) FROM event_chunks WHERE response_id = ?"
# A response's or a conversation's row if it is the project's (parameters: its id, the project).
OWNED_RESPONSE = "SELECT 1 FROM responses WHERE id = ? AND project = ?"
OWNED_CONVERSATION = "SELECT 1 FROM conversations WHERE id = ? AND project = ?"
# The project's stored item with an id (parameters: item id, project), wherever it is: a response's output (the row
# is the whole response), a response's input items, a conversation's items; each query a row or none.
ITEM_QUERIES = ("SELECT r.response FROM output_items o JOIN responses r ON r.id = o.response_id "
                "WHERE o.item_id = ? AND r.project = ? LIMIT 1",
                "SELECT i.item FROM input_items i JOIN responses r ON r.id = i.response_id "
                "WHERE i.item_id = ? AND r.project = ? LIMIT 1",
                "SELECT ci.item FROM conversation_items ci JOIN conversations c ON c.id = ci.conversation_id "
                "WHERE ci.item_id = ? AND c.project = ? LIMIT 1")


def chunk_row(response_id: str, events: list[str]) -> tuple[str, int, int, str]:
    """(response id, first and last sequence number, the JSON one event per line) of consecutive events, numbered
    from the first one's. Compact JSON holds no line break (it escapes them), so a line is an event."""
    first = int(json.loads(events[0])["sequence_number"])
    return response_id, first, first + len(events) - 1, "\n".join(events)


def events_in(chunks: list[tuple[int, str]], after: int) -> list[str]:
    """The events of CHUNKS_AFTER's rows numbered after `after`, each once, in order."""
    events: list[str] = []
    for first, text in chunks:
        lines = text.split("\n")
        skip = max(0, after + 1 - first)
        events += lines[skip:]
        after = max(after, first + len(lines) - 1)
    return events


def item_rows(owner: str, first_position: int, items: list[dict[str, Any]]) -> list[tuple[str, int, str, str]]:
    """(owner id, position, item id, JSON) of items placed from `first_position` on."""
    return [(owner, first_position + n, item["id"], json.dumps(item)) for n, item in enumerate(items)]


def output_item_rows(response_id: str, response: dict[str, Any]) -> list[tuple[str, str]]:
    """(item id, response id) of each output item of a response, by which an item reference finds it."""
    return [(item["id"], response_id) for item in response.get("output") or [] if isinstance(item, dict)
            and isinstance(item.get("id"), str)]


def found_item(item_id: str, source: int, row: Any) -> dict[str, Any] | None:
    """The item a row of ITEM_QUERIES' `source`-th query holds (an output item is found inside its response)."""
    value = json.loads(row[0]) if isinstance(row[0], str) else row[0]
    if source > 0:
        return value
    return next((item for item in value.get("output") or [] if item.get("id") == item_id), None)


def retention_query(policy: RetentionPolicy, batch: int, now: float) -> tuple[str, tuple[Any, ...]] | None:
    """The ids (at most `batch` per rule) of finished responses the policy no longer keeps: older than its age, or
    beyond its newest count; None when the policy keeps everything. Running responses are never among them."""
    parts: list[str] = []
    parameters: list[Any] = []
    finished = f"status NOT IN {RUNNING}"
    if policy.max_age_seconds is not None:
        parts.append(f"SELECT id FROM (SELECT id FROM responses WHERE {finished} AND created_at < ? LIMIT ?) AS too_old")
        parameters += [now - policy.max_age_seconds, batch]
    if policy.max_count is not None:
        parts.append(f"SELECT id FROM (SELECT id FROM responses WHERE {finished} ORDER BY created_at DESC "
                     "LIMIT ? OFFSET ?) AS too_many")
        parameters += [batch, policy.max_count]
    return (" UNION ".join(parts), tuple(parameters)) if parts else None


def responses_page_query(project: str, wanted: ResponseFilter, after: str | None, limit: int, order: Order,
                         dialect: Dialect) -> tuple[str, list[Any]]:
    """The query for a page of the project's responses, newest first (or oldest), after the response `after`, one
    more than `limit`, and its parameters. The dialect's `inserted` column grows with each row inserted (creation
    times are whole seconds: it orders a second's responses)."""
    model_of, inserted = dialect.json_text("response", "model"), dialect.inserted
    direction, compare = ("DESC", "<") if order == "desc" else ("ASC", ">")
    where, parameters = "project = ?", [project]
    for condition, value in (("status = ?", wanted.status), (f"{model_of} = ?", wanted.model),
                             ("previous_response_id = ?", wanted.previous_response_id),
                             ("created_at >= ?", wanted.created_after),
                             ("created_at < ?", wanted.created_before)):
        if value is not None:
            where, parameters = f"{where} AND {condition}", [*parameters, value]
    if after is not None:
        where += (f" AND (created_at, {inserted}) {compare} (SELECT created_at, {inserted} FROM responses WHERE "
                  "id = ? AND project = ?)")
        parameters += [after, project]
    return (f"SELECT response FROM responses WHERE {where} ORDER BY created_at {direction}, {inserted} {direction} "
            "LIMIT ?"), [*parameters, limit + 1]



def owned_page(db: Session, owned: str, table: str, owner_column: str, owner: str, project: str, after: str | None,
               limit: int | None, order: Order) -> tuple[list[dict[str, Any]], bool]:
    """A page of an object's items if the object is `project`'s (`owned`: the query that finds it so), else none."""
    if db.execute(owned, (owner, project)).fetchone() is None:
        return [], False
    sql, parameters = page_query(table, owner_column, owner, after, limit, order)
    return page(db.execute(sql, parameters).fetchall(), limit)
