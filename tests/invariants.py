"""The store's invariants, read straight from its tables: every response has at most one terminal event, its
status matches that event, its log has no gaps and starts at `response.created`, and every ending a client saw is
the one stored."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

TERMINAL = {"response.completed": ("completed",), "response.incomplete": ("incomplete",),
            "response.failed": ("failed", "cancelled")}
RUNNING = ("queued", "in_progress")
_CHUNKS = "SELECT response_id, events FROM event_chunks ORDER BY response_id, first_sequence"


def rows(url: str) -> list[tuple[str, str, str, list[str]]]:
    """(id, status, response JSON, event JSON in sequence order) of every stored response."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return _collect(db.execute("SELECT id, status, response FROM responses").fetchall(),
                            db.execute(_CHUNKS).fetchall())
    import psycopg

    with psycopg.connect(url) as db:
        return _collect(db.execute("SELECT id, status, response FROM responses").fetchall(), db.execute(_CHUNKS).fetchall())


def _collect(responses: list[Any], chunks: list[Any]) -> list[tuple[str, str, str, list[str]]]:
    logs: dict[str, list[str]] = {}
    for response_id, text in chunks:  # each chunk holds consecutive events, one JSON per line
        logs.setdefault(response_id, []).extend(text.split("\n"))
    return [(response_id, status, response, logs.get(response_id, [])) for response_id, status, response in responses]


def violations(url: str, seen: dict[str, str] | None = None) -> list[str]:
    """Every broken invariant, as a sentence naming the response; `seen` maps response ids to the status a client
    was told by a terminal event."""
    problems: list[str] = []
    stored = {response_id: status for response_id, status, _, _ in rows(url)}
    for response_id, status, response, log in rows(url):
        if json.loads(response).get("status") != status:
            problems.append(f"{response_id}: the row says {status}, its response {json.loads(response)['status']}")
        events = [json.loads(data) for data in log]
        if [event["sequence_number"] for event in events] != list(range(len(events))):
            problems.append(f"{response_id}: its log has gaps: {[e['sequence_number'] for e in events]}")
        if events and events[0]["type"] != "response.created":
            problems.append(f"{response_id}: its log starts with {events[0]['type']}")
        terminals = [index for index, event in enumerate(events) if event["type"] in TERMINAL]
        if len(terminals) > 1:
            problems.append(f"{response_id}: {len(terminals)} terminal events")
        if terminals and terminals[-1] != len(events) - 1:
            problems.append(f"{response_id}: events after its terminal event")
        if terminals and status not in TERMINAL[events[terminals[0]]["type"]]:
            problems.append(f"{response_id}: status {status} but its log ends {events[terminals[0]]['type']}")
        if terminals and events[terminals[0]]["response"]["status"] != status:
            problems.append(f"{response_id}: its terminal event says {events[terminals[0]]['response']['status']}")
    for response_id, status in (seen or {}).items():
        if response_id in stored and stored[response_id] != status:
            problems.append(f"{response_id}: a client was told {status}, the store keeps {stored[response_id]}")
    return problems
