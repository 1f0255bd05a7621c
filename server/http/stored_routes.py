"""Routes over stored responses: retrieve (or replay its stream), delete, and list input items."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, AsyncIterator, Literal

from fastapi import APIRouter, Depends, Query, Request

from server.http.context import required_store, serving_context
from server.http.errors import APIError
from server.http.event_stream import event_stream
from server.runs.other_replicas import cancel_stored, follow_stored
from server.responses.records import RUNNING, ResponseFilter, StoredResponse
from server.responses.project_store import ProjectStore
from server.responses.read_includes import shown_items
from server.requests import KNOWN_INCLUDES
from streaming.sse import stored_frames

router = APIRouter()
# Sequence numbers are stored as 64-bit integers; a larger `starting_after` is a 400, not an overflow.
MAX_SEQUENCE_NUMBER = 2**63 - 1


async def _stored(store: ProjectStore, response_id: str) -> StoredResponse:
    record = await store.get(response_id)
    if record is None:
        raise APIError(f"Response with id '{response_id}' not found.", status=404, type="invalid_request_error",
                       param="response_id")
    return record


@router.get("/v1/responses/{response_id}")
async def retrieve_response(request: Request, response_id: str,
                            include: Annotated[frozenset[str], Depends(read_includes)], stream: bool = False,
                            starting_after: int = Query(default=-1, ge=-1, le=MAX_SEQUENCE_NUMBER)) -> Any:
    """The response as stored (or live); `include` is checked, and shapes the input items a reusable prompt's
    `instructions` holds."""
    store, context = required_store(request), serving_context(request)
    live = context.background.get(response_id, store.project)
    if live is not None:  # still generating in the background: its live state
        if stream:
            return event_stream(stored_frames(live.follow(starting_after)), context.config)
        return _json(live.response())
    record = await _stored(store, response_id)
    if not stream:
        instructions = record.response.get("instructions")
        if isinstance(instructions, list):
            return {**record.response, "instructions": shown_items(instructions, include)}
        return record.response
    if record.background and record.status in RUNNING:  # generating on another replica: follow its event log
        events = follow_stored(store, response_id, starting_after, outage_seconds=context.background.lease_seconds)
        return event_stream(stored_frames(events), context.config)
    logged = await store.events_after(response_id, starting_after)
    if not logged and starting_after < 0:
        raise APIError(f"Response '{response_id}' was not streamed; it has no events to replay.", param="stream")
    return event_stream(stored_frames(_each(logged)), context.config)


async def _each(events: list[str]) -> AsyncIterator[str]:
    for data in events:
        yield data


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(request: Request, response_id: str) -> Any:
    store = required_store(request)
    live = await serving_context(request).background.cancel(response_id, store.project)
    if live is not None:
        return _json(live.response())
    record = await _stored(store, response_id)
    if not record.background:
        raise APIError("Only background responses can be cancelled.", param="response_id")
    return (await cancel_stored(store, record)).response  # running on another replica, or already finished


def read_includes(request: Request) -> frozenset[str]:
    """A read route's `include` (repeated, or as the openai SDK sends a list: `include[]`); an unknown value is a
    400 naming it."""
    include = frozenset(request.query_params.getlist("include") + request.query_params.getlist("include[]"))
    for value in sorted(include - KNOWN_INCLUDES):
        raise APIError(f"Unknown include value {value!r}; known: {', '.join(sorted(KNOWN_INCLUDES))}.",
                       param="include")
    return include


def _json(response: Any) -> Any:
    return json.loads(response.to_json(indent=None))


@router.delete("/v1/responses/{response_id}")
async def delete_response(request: Request, response_id: str) -> dict[str, Any]:
    """A response still generating in the background is cancelled first (here or on the replica running it), so
    its run does not write to a response that is gone."""
    store = required_store(request)
    if await serving_context(request).background.cancel(response_id, store.project) is None:
        record = await store.get(response_id)
        if record is not None and record.background and record.status in RUNNING:
            await cancel_stored(store, record)
    if not await store.delete(response_id):
        raise APIError(f"Response with id '{response_id}' not found.", status=404, param="response_id")
    return {"id": response_id, "object": "response", "deleted": True}


@dataclass
class PageQuery:
    """A list route's query: items after the one named `after`, at most `limit`, in `order`."""

    after: str | None = None
    limit: int = Query(default=20, ge=1, le=100)
    order: Literal["asc", "desc"] = "desc"


@router.get("/v1/responses")
async def list_responses(request: Request, page: Annotated[PageQuery, Depends()],
                         wanted: Annotated[ResponseFilter, Query()]) -> dict[str, Any]:
    """The caller's project's stored responses, newest first: the console's list, and the forward links of a
    chain (`previous_response_id`). Another project's responses are not there to list."""
    return list_page(*await required_store(request).list_responses(wanted, page.after, page.limit, page.order))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(request: Request, response_id: str, page: Annotated[PageQuery, Depends()],
                           include: Annotated[frozenset[str], Depends(read_includes)]) -> dict[str, Any]:
    store = required_store(request)
    await _stored(store, response_id)
    items, has_more = await store.input_items(response_id, page.after, page.limit, page.order)
    return list_page(shown_items(items, include), has_more)


@router.get("/v1/responses/{response_id}/timeline")
async def response_timeline(request: Request, response_id: str) -> dict[str, Any]:
    """The response's phases as it was served (this server's extension; the console draws them): moments (`at_ms`)
    and spans of time (`start_ms`, `end_ms`) since it was received. A response stored before timelines were kept,
    or still running, has the phases so far, or none."""
    record = await _stored(required_store(request), response_id)
    return {"object": "response.timeline", "id": record.id, "status": record.status, "phases": record.timeline or []}


def list_page(items: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A page of items in the API's list shape."""
    return {"object": "list", "data": items, "has_more": has_more,
            "first_id": items[0]["id"] if items else None, "last_id": items[-1]["id"] if items else None}
