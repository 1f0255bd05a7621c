"""What both SQL stores share: the paging and retention queries, and the rows of event logs and item lists."""

from __future__ import annotations

import json
from typing import Any

from server.store.interface import RUNNING, Order, RetentionPolicy

_NO_LIMIT = 1 << 62


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


def event_rows(response_id: str, events: list[str]) -> list[tuple[str, int, str]]:
    """(response id, sequence number, JSON) of consecutive events, numbered from the first one's."""
    first = int(json.loads(events[0])["sequence_number"]) if events else 0
    return [(response_id, first + n, event) for n, event in enumerate(events)]


def item_rows(owner: str, first_position: int, items: list[dict[str, Any]]) -> list[tuple[str, int, str, str]]:
    """(owner id, position, item id, JSON) of items placed from `first_position` on."""
    return [(owner, first_position + n, item["id"], json.dumps(item)) for n, item in enumerate(items)]


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
