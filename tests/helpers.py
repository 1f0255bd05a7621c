"""Shared test helpers: running a builder over deltas, folding events, collapsing delta runs."""

from __future__ import annotations

import json
from typing import Any, Iterable

from parsers.deltas import Delta
from streaming.builder import ResponseBuilder
from streaming.ids import counting_ids
from streaming.outcome import Finished


def build_events(deltas: Iterable[Delta], finished: Finished, settings: dict[str, Any] | None = None,
                 batches: list[list[Delta]] | None = None, summarize: bool = False) -> list[dict[str, Any]]:
    """All events (as wire JSON objects) of a builder fed `deltas` (or the given batches), then finished."""
    builder = ResponseBuilder(settings or {"model": "test-model"}, ids=counting_ids(), clock=lambda: 1_700_000_000,
                              summarize_reasoning=summarize)
    events = builder.start()
    for batch in batches if batches is not None else [list(deltas)]:
        events += builder.feed(batch)
    events += builder.finish(finished)
    return [json.loads(event.to_json(indent=None)) for event in events]


def collapsed_types(events: list[dict[str, Any]]) -> list[str]:
    """Event types with each run of deltas kept once per type (chunking changes how many deltas there are).

    A run is the deltas between two other events: reasoning with a summary alternates two delta types.
    """
    types: list[str] = []
    run: set[str] = set()
    for event in events:
        kind = event["type"]
        if not kind.endswith(".delta"):
            run = set()
        elif kind in run:
            continue
        else:
            run.add(kind)
        types.append(kind)
    return types


def without_volatile(response: dict[str, Any]) -> dict[str, Any]:
    """A response with what differs between two runs of the same output (ids, clocks) blanked."""
    data = json.loads(json.dumps(response))
    for key in ("id", "created_at", "completed_at"):
        data.pop(key, None)
    for item in data.get("output", []):
        item.pop("id", None)
        item.pop("call_id", None)
    return data
