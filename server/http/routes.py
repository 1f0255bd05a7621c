"""HTTP routes: `POST /v1/responses` (SSE or JSON), its input token count, `GET /v1/models`, `GET /health`."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from server.serving import ServingContext, serving_context
from server.compaction import compacted_response, summary_request
from server.conversation import stored_input_items, with_history
from server.sealed_items import open_sealed_items, reasoning_sealer
from server.constraints.rules import output_rules
from server.engine.interface import SAMPLING_DEFAULT_KEYS, EngineRequest, SamplingSettings
from server.runs.echoed_settings import response_settings
from server.http.bodies import json_object
from server.http.errors import APIError, from_validation_error
from server.http.event_stream import event_stream
from server.runs.generation import ResponseRun
from server.runs.stored_run import ConversationLink, StoredRun
from server.requests import ResponsesRequest
from server.paths.chat_template import tool_definitions
from server.truncation import render_to_fit
from streaming.builder import ResponseBuilder
from streaming.sse import encode_event, stored_frames

router = APIRouter()

# How often a non-streaming request checks whether its client is still there.
_DISCONNECT_POLL_SECONDS = 1.0


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    context = serving_context(request)
    model = {"id": context.config.served_model_name, "object": "model",
             "created": context.started_at, "owned_by": "responses-server"}
    return {"object": "list", "data": [model]}


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    context = serving_context(request)
    body = await _read_body(request)
    stored = await _prepare_stored_run(context, body)
    if body.background:
        return await _start_background(context, stored, body.stream)
    if body.stream:
        return event_stream(_sse_frames(stored), context.config)
    await _drain_while_connected(stored, request)
    return JSONResponse(json.loads(stored.run.builder.response().to_json(indent=None)))


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(request: Request) -> dict[str, Any]:
    """The `usage.input_tokens` a response to the same body would report: its run is prepared, not started."""
    context = serving_context(request)
    body = await _read_body(request)
    run = _prepare_run(context, await _conversation(context, body), body)
    return {"object": "response.input_tokens", "input_tokens": len(run.request.prompt_token_ids)}


@router.post("/v1/responses/compact")
async def compact(request: Request) -> dict[str, Any]:
    """The model summarizes the conversation; the answer is one sealed `compaction` item to continue from."""
    context = serving_context(request)
    body = await _read_body(request)
    if body.model is None:
        raise APIError("model is required.", param="model")
    conversation = await _conversation(context, body)
    if not conversation.input_items():
        raise APIError("There is nothing to compact: give input or previous_response_id.", param="input")
    summarizing = summary_request(conversation)
    run = _prepare_run(context, summarizing, summarizing)
    run.slot = context.admission.admit()
    await _drain_while_connected(StoredRun(run, None, keep_event_log=False), request)
    summary = run.builder.response()
    if summary.status not in ("completed", "incomplete"):
        message = summary.error.message if summary.error else "the summary could not be generated"
        raise APIError(f"Compaction failed: {message}.", status=500, type="server_error")
    return compacted_response(summary, conversation, context.sealer, context.ids)


async def _read_body(request: Request) -> ResponsesRequest:
    raw = await json_object(request)
    try:
        return ResponsesRequest.model_validate(raw)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


async def _prepare_stored_run(context: ServingContext, body: ResponsesRequest) -> StoredRun:
    """The run, with the conversation behind `previous_response_id`, and where it will be stored."""
    store = context.store if body.store else None
    if body.background and store is None:
        raise APIError("Background responses must be stored (store: true, and a server with a store).",
                       param="background")
    run = _prepare_run(context, await _conversation(context, body), body)
    run.slot = context.admission.admit()  # last: a request refused for any other reason takes no place
    link = ConversationLink(context.store, body.conversation) if body.conversation and context.store else None
    input_items = stored_input_items(body, context.ids) if store is not None or link is not None else []
    keep_log = store is not None and (body.stream or body.background)  # the log is for stored streams
    mode = "background" if body.background else "stream" if body.stream else "json"
    return StoredRun(run, store, input_items, body.previous_response_id, keep_event_log=keep_log,
                     background=body.background, conversation=link, mode=mode)


async def _conversation(context: ServingContext, body: ResponsesRequest) -> ResponsesRequest:
    """The request with its stored history before it and sealed reasoning opened: what the model sees."""
    return open_sealed_items(await with_history(body, context.store), context.sealer)


async def _start_background(context: ServingContext, stored: StoredRun, stream: bool) -> Response:
    """Saved at once as in progress, then generated detached from this request; a stream only follows it."""
    live = await context.background.start(stored)
    if stream:
        return event_stream(stored_frames(live.follow(-1)), context.config)
    return JSONResponse(json.loads(stored.run.builder.response().to_json(indent=None)))


def _prepare_run(context: ServingContext, conversation: ResponsesRequest, body: ResponsesRequest) -> ResponseRun:
    """Everything that can reject the request happens here, before any byte of a stream is sent.

    `conversation` is the request with its stored history; `body` is the request as sent (echoed back).
    """
    served = context.config.served_model_name
    if body.model is not None and body.model != served:
        raise APIError(f"The model '{body.model}' does not exist; this server serves '{served}'.",
                       status=404, param="model", code="model_not_found")
    if not conversation.input_items():
        raise APIError("input must not be empty (unless previous_response_id continues a conversation).",
                       param="input")
    engine = context.engine
    assert engine is not None, "the engine starts with the app"
    path = context.path
    assert path is not None, "the model path is chosen when the app starts"
    rendered = render_to_fit(path.render, conversation, engine.max_model_len)
    rules = output_rules(conversation, rendered.tools, tool_definitions(conversation))
    prompt = rendered.token_ids
    room = engine.max_model_len - len(prompt)
    logprobs = (body.top_logprobs or 0) if body.wants_logprobs() else None
    sampling = SamplingSettings(
        max_tokens=min(body.max_output_tokens or room, room),
        stop_token_ids=rendered.stop_token_ids,
        logprobs=logprobs,
        structural_tag=path.structural_tag(rules),
        **_sampling_values(body, engine.sampling_defaults),
    )
    settings = response_settings(body, served) | {"temperature": sampling.temperature, "top_p": sampling.top_p}
    seal = reasoning_sealer(context.sealer) if body.wants_encrypted_reasoning() else None
    builder = ResponseBuilder(settings, ids=context.ids, clock=context.clock, seal_reasoning=seal,
                              summarize_reasoning=body.wants_reasoning_summary())
    return ResponseRun(
        engine=engine,
        request=EngineRequest(builder.response_id, prompt, sampling),
        parser=path.new_parser(rendered),
        decoder=path.new_decoder(),
        builder=builder,
        token_text=path.token_text if logprobs is not None else None,
        max_tool_calls=rules.max_calls,
    )


def _sampling_values(body: ResponsesRequest, defaults: dict[str, float]) -> dict[str, Any]:
    """The request's own sampling values, else the model's defaults (generation_config.json), as vLLM serves them."""
    values: dict[str, Any] = {key: defaults.get(key) for key in SAMPLING_DEFAULT_KEYS}
    for key in ("temperature", "top_p"):
        if getattr(body, key) is not None:
            values[key] = getattr(body, key)
    return values


async def _sse_frames(stored: StoredRun) -> AsyncIterator[Any]:
    async for event, data in stored.events():
        yield encode_event(event, data)


async def _drain_while_connected(stored: StoredRun, request: Request) -> None:
    """Run to the terminal event; a client that goes away cancels the run and so its engine request."""

    async def drain() -> None:
        async for _ in stored.events():
            pass

    task = asyncio.ensure_future(drain())
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=_DISCONNECT_POLL_SECONDS)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                break
        await task
    finally:
        task.cancel()
