"""HTTP routes: `POST /v1/responses` (SSE or JSON), its input token count, compaction, `GET /v1/models`,
`GET /health`. Each reads the body, asks `server/runs/prepare.py` for the run, and answers."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.types import Receive

from server.codex_catalog import catalog as codex_catalog
from server.http.bodies import parsed_object
from server.http.context import caller, serving_context
from server.http.disconnect import client_gone, while_connected
from server.http.errors import from_validation_error
from server.http.event_stream import event_stream
from server.models.registry import Model
from server.requests import ResponsesRequest
from server.runs.prepare import input_token_count, prepare_compaction, prepare_stored_run
from server.runs.stored_run import StoredRun
from server.runs.context import ServingContext
from streaming.sse import encode_event, stored_frames

router = APIRouter()
OFF_LOOP_BYTES = 256 * 1024  # a body larger than this is parsed and validated in a thread

@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    """The OpenAI list of every served model; Codex (which asks with `client_version`) gets its own catalog, which
    tells it each model's window."""
    context = serving_context(request)
    models = context.served_models()
    if "client_version" in request.query_params:
        return codex_catalog([(model.served(), model.settings.codex_model_info) for model in models])
    return {"object": "list", "data": [_model_object(context, model) for model in models]}


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(request: Request, model_id: str) -> dict[str, Any]:
    """One served model as OpenAI answers it (`client.models.retrieve`); 404 `model_not_found` for another."""
    context = serving_context(request)
    return _model_object(context, context.model(model_id))


def _model_object(context: ServingContext, model: Model) -> dict[str, Any]:
    return {"id": model.name, "object": "model", "created": context.started_at, "owned_by": "responses-server",
            "input_modalities": list(model.engine.input_modalities)}


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    context = serving_context(request)
    body = await _read_body(request)
    forwarded = await request.app.state.forwarder.forwarded(request, body)
    if forwarded is not None:
        return forwarded
    stored = await prepare_stored_run(context, body, caller(request))
    if body.background:  # saved at once as in progress, then generated detached from this request
        live = await context.background.start(stored)
        if body.stream:  # the stream only follows it
            return event_stream(stored_frames(live.follow(-1)), context.config, stored.headers)
        return _json(stored)
    stored.hold_until_taken()  # no worker of a fleet took it: a 503 to retry, before any event is sent
    if body.stream:
        return event_stream(_sse_frames(stored), context.config, stored.headers)
    if not await _run_while_connected(stored, request.receive):
        return client_gone()
    return _json(stored)


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(request: Request) -> dict[str, Any]:
    """The `usage.input_tokens` a response to the same body would report."""
    tokens = await input_token_count(serving_context(request), await _read_body(request), caller(request).project)
    return {"object": "response.input_tokens", "input_tokens": tokens}


@router.post("/v1/responses/compact")
async def compact(request: Request) -> Any:
    """The model summarizes the conversation; the answer is one sealed `compaction` item to continue from."""
    body = await _read_body(request)
    forwarded = await request.app.state.forwarder.forwarded(request, body)
    if forwarded is not None:
        return forwarded
    compaction = await prepare_compaction(serving_context(request), body, caller(request))
    if not await _run_while_connected(compaction.stored, request.receive):
        return client_gone()
    return JSONResponse(compaction.result(), headers=compaction.stored.headers)


async def _read_body(request: Request) -> ResponsesRequest:
    """The request, read and validated: a long history's body (an agent's whole session, sent again each turn) in a
    thread, so that other streams' events are not held up behind it."""
    raw = await request.body()
    if len(raw) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(_request_of, raw)
    return _request_of(raw)


def _request_of(raw: bytes) -> ResponsesRequest:
    try:
        return ResponsesRequest.model_validate(parsed_object(raw, "request body"))
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def _json(stored: StoredRun) -> Response:
    """The response as JSON, written once (pydantic's compact JSON is what JSONResponse would write of it)."""
    return Response(stored.response().to_json(indent=None), media_type="application/json", headers=stored.headers)


async def _sse_frames(stored: StoredRun) -> AsyncIterator[Any]:
    async for event, data in stored.events():
        yield encode_event(event, data)


async def _run_while_connected(stored: StoredRun, receive: Receive) -> bool:
    """Run to the terminal event (True); a client that goes away cancels the run and so its engine request (False)."""

    async def run() -> None:
        async for _ in stored.events():
            pass

    return await while_connected(run(), receive)
