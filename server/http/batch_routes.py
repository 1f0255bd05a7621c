"""The `/v1/batches` routes: create a batch from an uploaded file of requests, retrieve, list and cancel it, each
within the caller's project (server/batches runs it)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from server.batches.batch import Batch
from server.http.bodies import json_object
from server.http.context import caller, required_batches
from server.http.errors import APIError

router = APIRouter()


@router.post("/v1/batches")
async def create_batch(request: Request) -> dict[str, Any]:
    """A new batch, `validating` until a runner takes it (within a poll, on any replica)."""
    body = await json_object(request)
    return (await required_batches(request).create(body, caller(request).key_id)).to_api()


class BatchesQuery:
    """The list route's query."""

    def __init__(self, after: str | None = None, limit: int = Query(default=20, ge=1, le=100)) -> None:
        self.after, self.limit = after, limit


@router.get("/v1/batches")
async def list_batches(request: Request, query: Annotated[BatchesQuery, Depends()]) -> dict[str, Any]:
    """The project's batches, newest first (`after` the last one seen)."""
    batches, has_more = await required_batches(request).list(query.after, query.limit)
    return {"object": "list", "data": [batch.to_api() for batch in batches], "has_more": has_more,
            "first_id": batches[0].id if batches else None, "last_id": batches[-1].id if batches else None}


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(request: Request, batch_id: str) -> dict[str, Any]:
    return _found(await required_batches(request).get(batch_id), batch_id).to_api()


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(request: Request, batch_id: str) -> dict[str, Any]:
    """`cancelling` at once: no new line starts; those running finish and are kept; then `cancelled`."""
    return _found(await required_batches(request).cancel(batch_id), batch_id).to_api()


def _found(batch: Batch | None, batch_id: str) -> Batch:
    if batch is None:
        raise APIError(f"No batch found with id '{batch_id}'.", status=404, type="invalid_request_error",
                       param="batch_id", code="not_found")
    return batch
