"""How a batch's line is answered: as `POST /v1/responses` answers it (the same preparation and run, at the batch
priority), its status and body as the line's result; an error is the answer the route would give."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from pydantic import ValidationError

from server.batches.batch_run import LineAnswer, Room
from server.batches.runner import BatchRunner
from server.errors import NotFound, RequestError
from server.http.errors import api_error_of, from_validation_error, unexpected
from server.requests import ResponsesRequest
from server.runs.context import ServingContext
from server.runs.prepare import prepare_stored_run
from server.tenancy.keys import Caller

logger = logging.getLogger(__name__)


def line_answer(context: ServingContext) -> LineAnswer:
    """Answers a batch's lines on `context`'s models."""

    async def answer(who: Caller, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        try:
            return 200, await _response(context, who, body)
        except asyncio.CancelledError:
            raise
        except ValidationError as exc:
            error = from_validation_error(exc)
        except Exception as exc:  # every failure is the line's answer, as the route's would be
            error = api_error_of(exc)
            if unexpected(exc):
                logger.error("a batch line failed", exc_info=exc)
        return error.status, error.body()

    return answer


async def _response(context: ServingContext, who: Caller, body: dict[str, Any]) -> dict[str, Any]:
    request = ResponsesRequest.model_validate(body)
    if request.stream or request.background:
        raise RequestError("A batch's request is answered whole: `stream` and `background` are not taken.",
                           param="body.stream" if request.stream else "body.background")
    stored = await prepare_stored_run(context, request, who, batch=True)
    stored.hold_until_taken()  # no worker took it: a 503, and the line is tried again later
    async for _ in stored.events():
        pass
    return json.loads(stored.response().to_json(indent=None))


def batch_runner(context: ServingContext) -> BatchRunner | None:
    """This process's batch runner (None: a server without a store keeps no batch)."""
    records = context.records
    if records is None:
        return None
    room = Room(lambda: context.admission.active - sum(room.lines.values()), context.config.batches)
    return BatchRunner(records.batches, records.project_batches, line_answer(context), room,
                       lambda name: _served(context, name), context.background.owner,
                       context.background.lease_seconds)


def _served(context: ServingContext, name: str) -> bool:
    try:
        context.model(name)
    except NotFound:
        return False
    return True
