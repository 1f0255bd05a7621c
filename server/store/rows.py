"""What both SQL stores share: the paging and retention queries, the event log's chunks, and the rows of item lists."""

from __future__ import annotations

import json
from typing import Any

from server.store.interface import RUNNING, Order, ResponseFilter, RetentionPolicy
from server.tenancy.keys import ApiKey
from server.tenancy.usage import COUNTS, UsageRecord

_NO_LIMIT = 1 << 62


def api_key(row: Any) -> ApiKey:
    """An `api_keys` row (id, name, project, hash, admin, created_at, last_used_at, revoked_at) as an ApiKey."""
    key_id, name, project, digest, admin, created_at, last_used_at, revoked_at = row
    return ApiKey(key_id, name, project, digest, bool(admin), created_at, last_used_at, revoked_at)


def page_query(table: str, owner_column: str, owner: str, after: str | None, limit: int | None, order: Order,
               mark: str) -> tuple[str, tuple[Any, ...]]:
    """The query for one owner's items in position order, after the item `after`, one more than `limit` (None: all);
    `mark` is the driver's placeholder (`?` or `%s`)."""
    direction, compare = ("ASC", ">") if order == "asc" else ("DESC", "<")
    start = ""
    parameters: list[Any] = [owner]
    if after is not None:
        start = (f" AND position {compare} (SELECT MIN(position) FROM {table} WHERE {owner_column} = {mark} "
                 f"AND item_id = {mark})")  # of items sent twice with one id, after the first
        parameters += [owner, after]
    sql = (f"SELECT item FROM {table} WHERE {owner_column} = {mark}{start} ORDER BY position {direction} "
           f"LIMIT {mark}")
    return sql, (*parameters, _NO_LIMIT if limit is None else limit + 1)


def page(rows: list[tuple[str]], limit: int | None) -> tuple[list[dict[str, Any]], bool]:
    """The page `page_query`'s rows make, and whether more follow."""
    cut = len(rows) if limit is None else limit
    return [json.loads(item) for (item,) in rows[:cut]], len(rows) > cut


def insert_chunk(mark: str) -> str:
    """The statement that writes one chunk of a log (`chunk_row`). A chunk written again from the same first event
    (a write whose commit was made but whose answer was lost, repeated with what came since) keeps the longer one."""
    return (f"INSERT INTO event_chunks (response_id, first_sequence, last_sequence, events) VALUES ({mark}, {mark}, "
            f"{mark}, {mark}) ON CONFLICT (response_id, first_sequence) DO UPDATE SET "
            "last_sequence = excluded.last_sequence, events = excluded.events "
            "WHERE excluded.last_sequence > event_chunks.last_sequence")


def chunk_row(response_id: str, events: list[str]) -> tuple[str, int, int, str]:
    """(response id, first and last sequence number, the JSON one event per line) of consecutive events, numbered
    from the first one's. Compact JSON holds no line break (it escapes them), so a line is an event."""
    first = int(json.loads(events[0])["sequence_number"])
    return response_id, first, first + len(events) - 1, "\n".join(events)


def chunks_after(mark: str) -> str:
    """The query for the chunks holding a response's events after a sequence number (`events_in` reads them)."""
    return (f"SELECT first_sequence, events FROM event_chunks WHERE response_id = {mark} AND last_sequence > {mark} "
            "ORDER BY first_sequence")


def last_sequence(mark: str) -> str:
    """The query for the sequence number of a response's last logged event (-1: none)."""
    return f"SELECT COALESCE(MAX(last_sequence), -1) FROM event_chunks WHERE response_id = {mark}"


def events_in(chunks: list[tuple[int, str]], after: int) -> list[str]:
    """The events of `chunks_after`'s rows numbered after `after`, each once, in order."""
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


def item_queries(mark: str) -> tuple[str, str, str]:
    """The project's stored item with an id (parameters: item id, project), wherever it is: a response's output (the
    row is the whole response), a response's input items, a conversation's items; each query a row or none."""
    return (f"SELECT r.response FROM output_items o JOIN responses r ON r.id = o.response_id "
            f"WHERE o.item_id = {mark} AND r.project = {mark} LIMIT 1",
            f"SELECT i.item FROM input_items i JOIN responses r ON r.id = i.response_id "
            f"WHERE i.item_id = {mark} AND r.project = {mark} LIMIT 1",
            f"SELECT ci.item FROM conversation_items ci JOIN conversations c ON c.id = ci.conversation_id "
            f"WHERE ci.item_id = {mark} AND c.project = {mark} LIMIT 1")


def found_item(item_id: str, source: int, row: Any) -> dict[str, Any] | None:
    """The item a row of `item_queries`' `source`-th query holds (an output item is found inside its response)."""
    value = json.loads(row[0]) if isinstance(row[0], str) else row[0]
    if source > 0:
        return value
    return next((item for item in value.get("output") or [] if item.get("id") == item_id), None)


def retention_query(policy: RetentionPolicy, batch: int, now: float, mark: str) -> tuple[str, tuple[Any, ...]] | None:
    """The ids (at most `batch` per rule) of finished responses the policy no longer keeps: older than its age, or
    beyond its newest count; None when the policy keeps everything. Running responses are never among them."""
    parts: list[str] = []
    parameters: list[Any] = []
    finished = f"status NOT IN {RUNNING}"
    if policy.max_age_seconds is not None:
        parts.append(f"SELECT id FROM (SELECT id FROM responses WHERE {finished} AND created_at < {mark} "
                     f"LIMIT {mark}) AS too_old")
        parameters += [now - policy.max_age_seconds, batch]
    if policy.max_count is not None:
        parts.append(f"SELECT id FROM (SELECT id FROM responses WHERE {finished} ORDER BY created_at DESC "
                     f"LIMIT {mark} OFFSET {mark}) AS too_many")
        parameters += [batch, policy.max_count]
    return (" UNION ".join(parts), tuple(parameters)) if parts else None


def add_usage(mark: str) -> str:
    """The upsert that adds a UsageRecord's counts to its minute's row."""
    columns = ("project", "api_key_id", "model", "minute", *COUNTS)
    added = ", ".join(f"{name} = usage_minutes.{name} + excluded.{name}" for name in COUNTS)
    return (f"INSERT INTO usage_minutes ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))}) "
            f"ON CONFLICT (project, api_key_id, model, minute) DO UPDATE SET {added}")


def usage_row(record: UsageRecord) -> tuple[Any, ...]:
    return (record.project, record.api_key_id, record.model, record.minute,
            *(getattr(record, name) for name in COUNTS))


def spent_query(mark: str, by_key: bool) -> str:
    """A project's (or one of its keys') requests and tokens in a minute, and its tokens since a minute; parameters
    (minute, minute, project, since[, key])."""
    tokens = "input_tokens + output_tokens"
    return (f"SELECT COALESCE(SUM(CASE WHEN minute = {mark} THEN requests ELSE 0 END), 0), "
            f"COALESCE(SUM(CASE WHEN minute = {mark} THEN {tokens} ELSE 0 END), 0), COALESCE(SUM({tokens}), 0) "
            f"FROM usage_minutes WHERE project = {mark} AND minute >= {mark}"
            + (f" AND api_key_id = {mark}" if by_key else ""))


def usage_between_query(mark: str) -> str:
    return (f"SELECT project, api_key_id, model, minute, {', '.join(COUNTS)} FROM usage_minutes "
            f"WHERE minute >= {mark} AND minute < {mark}")


def usage_record(row: Any) -> UsageRecord:
    project, key_id, model, minute, *counts = row
    return UsageRecord(project, key_id, model, int(minute), *(int(count) for count in counts))


FILE_COLUMNS = "id, project, filename, purpose, bytes, created_at, expires_at"


def live_files(mark: str) -> str:
    """The condition on `files` rows a project sees now: its own, not expired (parameters: project, now)."""
    return f"project = {mark} AND (expires_at IS NULL OR expires_at > {mark})"


def files_page_query(purpose: str | None, after: str | None, limit: int, order: Order,
                     mark: str) -> tuple[str, list[str]]:
    """The query for a page of a project's live files, newest first (or oldest), after the file `after`, one more
    than `limit`; its parameters after (project, now): purpose, after's id twice, as given."""
    direction, compare = ("DESC", "<") if order == "desc" else ("ASC", ">")
    where, names = live_files(mark), []
    if purpose is not None:
        where, names = where + f" AND purpose = {mark}", ["purpose"]
    if after is not None:
        where += (f" AND (created_at, id) {compare} (SELECT created_at, id FROM files WHERE id = {mark} AND "
                  f"project = {mark})")
        names += ["after", "project"]
    return (f"SELECT {FILE_COLUMNS} FROM files WHERE {where} ORDER BY created_at {direction}, id {direction} "
            f"LIMIT {mark}"), names


def responses_page_query(project: str, wanted: ResponseFilter, after: str | None, limit: int, order: Order,
                         mark: str, model_of: str, inserted: str) -> tuple[str, list[Any]]:
    """The query for a page of the project's responses, newest first (or oldest), after the response `after`, one
    more than `limit`, and its parameters. `model_of` is the driver's SQL for the stored response's `model`;
    `inserted`, its column that grows with each row inserted (creation times are whole seconds: it orders a
    second's responses)."""
    direction, compare = ("DESC", "<") if order == "desc" else ("ASC", ">")
    where, parameters = f"project = {mark}", [project]
    for condition, value in ((f"status = {mark}", wanted.status), (f"{model_of} = {mark}", wanted.model),
                             (f"previous_response_id = {mark}", wanted.previous_response_id),
                             (f"created_at >= {mark}", wanted.created_after),
                             (f"created_at < {mark}", wanted.created_before)):
        if value is not None:
            where, parameters = f"{where} AND {condition}", [*parameters, value]
    if after is not None:
        where += (f" AND (created_at, {inserted}) {compare} (SELECT created_at, {inserted} FROM responses WHERE "
                  f"id = {mark} AND project = {mark})")
        parameters += [after, project]
    return (f"SELECT response FROM responses WHERE {where} ORDER BY created_at {direction}, {inserted} {direction} "
            f"LIMIT {mark}"), [*parameters, limit + 1]


def owned_response(mark: str) -> str:
    """A response's row if it is the project's (parameters: response id, project)."""
    return f"SELECT 1 FROM responses WHERE id = {mark} AND project = {mark}"


def owned_conversation(mark: str) -> str:
    """A conversation's row if it is the project's (parameters: conversation id, project)."""
    return f"SELECT 1 FROM conversations WHERE id = {mark} AND project = {mark}"
