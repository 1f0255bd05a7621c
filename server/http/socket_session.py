"""One WebSocket connection in WebSocket mode: its client events, its lanes (FIFO per `stream_id`) and the responses
made on it, which `previous_response_id` finds without the store."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable

from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from server import tracing
from server.http import steering
from server.http.bodies import parsed_object
from server.http.errors import APIError, api_error_of, from_validation_error, unexpected
from server.http.steering import Steer, SteerRefused
from server.metrics import WEBSOCKET_EVENTS
from server.requests import ResponsesRequest
from server.runs.generation import NotTaken
from server.runs.connection_responses import ConnectionResponses
from server.runs.prepare import prepare_stored_run
from server.runs.stored_run import StoredRun
from server.runs.context import ServingContext
from server.tenancy.keys import Caller

logger = logging.getLogger(__name__)
MAX_WAITING_PER_LANE = 8  # response.create events queued behind a lane's running one; past it, an error
MAX_STEERS = 16  # steering submissions queued for one response; past it, `too_many_pending_steers`
_CLIENT_EVENTS = ("response.create", "response.steer")
_HTTP_ONLY = ("background", "background_options")  # refused over the socket, as the SDK documents

Send = Callable[[str], Awaitable[None]]


@dataclass
class Lane:
    """The responses of one `stream_id`, run one at a time in the order they were asked for."""

    stream_id: str | None
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)  # FIFO: asyncio's lock wakes waiters in order
    waiting: int = 0
    running: StoredRun | None = None
    steers: list[Steer] = field(default_factory=list)  # accepted, not yet committed to a successor
    awaiting: str | None = None  # the response waiting for tool output, whose continuation takes the steers
    stubs: list[dict[str, str]] = field(default_factory=list)  # the tool outputs it waits for
    steerable: bool = True  # the running response is not bound to a conversation nor compacted automatically
    continues: str | None = None  # the previous_response_id of the response being prepared or run

    @property
    def idle(self) -> bool:
        """Nothing runs, waits or is queued for steering here: the lane can go, and come back on its next event."""
        return not self.waiting and self.running is None and not self.steers and self.awaiting is None

    def steered(self, response_id: str) -> bool:
        """Steering for `response_id` goes to this lane: it runs it, or it waits for that response's tool output."""
        return (self.running is not None and self.running.response_id == response_id) or self.awaiting == response_id

    def take_steers(self, response_id: str) -> list[Steer]:
        taken = [steer for steer in self.steers if steer.previous_response_id == response_id]
        self.steers = [steer for steer in self.steers if steer.previous_response_id != response_id]
        return taken

    def tagged(self, data: str) -> str:
        """An event's JSON with the lane's `stream_id` echoed (the JSON is an object: it ends with `}`)."""
        if self.stream_id is None:
            return data
        return f'{data[:-1]},"stream_id":{json.dumps(self.stream_id)}}}'


@dataclass
class SocketSession:
    """A connection's state; `receive` takes each text frame, `send` writes each server event."""

    context: ServingContext
    send: Send
    caller: Caller  # whose key opened the connection: its responses and their history are its project's
    traced: Any = None  # the trace context the handshake named (`traceparent`): each response's trace's parent
    responses: ConnectionResponses = field(default_factory=ConnectionResponses)  # made on it, by id (some kept)
    lanes: dict[str | None, Lane] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _steer_events: int = 0  # the sequence numbers of the connection's response.steer.* events

    async def receive(self, text: str) -> None:
        """One client frame: a `response.create` is queued on its lane; anything else wrong is an `error` event."""
        limit = self.context.config.max_body_bytes
        if len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit:  # as an HTTP body would be
            return await self.error(APIError(f"The event is larger than this server accepts ({limit} bytes).",
                                             status=413, code="request_too_large"))
        try:
            event = parsed_object(text, "client event")
        except APIError as refused:
            return await self.error(refused)
        kind = event.get("type")
        WEBSOCKET_EVENTS.labels("in", kind if kind in _CLIENT_EVENTS else "unknown").inc()
        if kind == "response.create":
            return await self._queue(event)
        if kind == "response.steer":
            return await self._steer(event)
        await self.error(APIError(f"Unknown client event type {json.dumps(kind)[:80]}; this server takes "
                                  "`response.create` and `response.steer`.", param="type", code="unknown_event"))

    async def error(self, exc: Exception, lane: Lane | None = None) -> None:
        """An `error` event in the SDK's shape (`ResponseWsError`), with the status HTTP would have answered."""
        error = api_error_of(exc)
        if unexpected(exc):
            logger.error("a WebSocket request failed", exc_info=exc)
        elif error.status >= 500:
            logger.warning("a WebSocket request failed: %s", error.message)
        error.count()
        WEBSOCKET_EVENTS.labels("out", "error").inc()
        fields = {**error.body()["error"], "code": error.code or error.type}  # the spec's error event needs a code
        if error.headers:
            fields["headers"] = error.headers
        data = json.dumps({"type": "error", "status": error.status, "error": fields})
        await self.send(lane.tagged(data) if lane is not None else data)

    async def finish(self) -> None:
        """Wait until the responses running and waiting on every lane have ended."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """The connection has closed: its running responses are cancelled (and so their engine requests)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _queue(self, event: dict[str, Any]) -> None:
        stream_id = event.get("stream_id")
        if stream_id is not None and not isinstance(stream_id, str):
            return await self.error(APIError("stream_id must be a string.", param="stream_id"))
        lane = self.lanes.setdefault(stream_id, Lane(stream_id))
        if lane.waiting >= MAX_WAITING_PER_LANE:
            return await self.error(APIError(
                f"This lane already has {MAX_WAITING_PER_LANE} responses waiting; wait for one to finish, or send "
                "on another stream_id.", status=429, type="requests", code="rate_limit_exceeded"), lane)
        lane.waiting += 1
        task = asyncio.create_task(self._turn(lane, event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _turn(self, lane: Lane, event: dict[str, Any]) -> None:
        """Prepare and stream one response when its turn on the lane comes: one trace (a server span), as an HTTP
        request's."""
        async with lane.turn:
            lane.waiting -= 1
            try:
                with tracing.span("response.create", SpanKind.SERVER, {"network.protocol.name": "websocket"},
                                  parent=self.traced):
                    await self._run(lane, event)
            except Exception as exc:  # the connection is gone: the run was closed (its engine request aborted)
                logger.info("a WebSocket response ended early: %s", exc or type(exc).__name__)
            if lane.idle and self.lanes.get(lane.stream_id) is lane:
                del self.lanes[lane.stream_id]

    async def _run(self, lane: Lane, event: dict[str, Any], steers: list[Steer] | None = None) -> None:
        """Prepare and stream one response; then start the successor its steering asks for. `steers`: those the
        response commits (it is their successor)."""
        continues = lane.awaiting is not None and event.get("previous_response_id") == lane.awaiting
        queued = list(lane.steers) if continues else []  # a copy: more may be accepted while this is prepared
        if queued:  # the explicit continuation of a response that waited for tool output: steering input first
            steering_input = [item for steer in queued for item in steer.items]
            event = {**event, "input": steering_input + _as_items(event.get("input"))}
        previous = event.get("previous_response_id")
        lane.continues = previous if isinstance(previous, str) else None  # kept while it is read and run
        try:
            body, generate = create_request(event)
            stored = await prepare_stored_run(self.context, body, self.caller, self.responses, generate)
        except Exception as exc:  # answered as HTTP would (a 4xx names the field); the socket stays open
            lane.continues = None
            if steers:
                return await self._steers_failed(lane, steers, "successor_creation_failed", api_error_of(exc).message)
            return await self.error(exc, lane)
        late: list[Steer] = []
        if queued:  # steers accepted while this was prepared were not in its input: they steer it instead
            late = [replace(steer, previous_response_id=stored.response_id) for steer in lane.steers
                    if steer not in queued]
            lane.steers, lane.awaiting, lane.stubs = late, None, []
        logger.info("WebSocket response.create -> %s (lane %s, previous_response_id %s, store %s, generate %s, "
                    "%d input items)", stored.response_id, lane.stream_id, body.previous_response_id, body.store,
                    generate, len(body.input_items()))
        lane.running = stored
        lane.steerable = body.conversation is None and not body.context_management
        if late:
            stored.steer()
        stored.hold_until_taken()
        try:
            async for sent, data in stored.events():
                WEBSOCKET_EVENTS.labels("out", sent.type).inc()
                await self.send(lane.tagged(data))
        except NotTaken as refused:  # no worker of a fleet took it: an error event as HTTP's 503, nothing stored
            return await self.error(refused, lane)
        finally:
            lane.running, lane.continues = None, None
        self.responses.ended(lane.stream_id, stored.response_id,
                             [other.continues for other in self.lanes.values() if other.continues])
        await self._after(lane, stored, event)

    async def _after(self, lane: Lane, stored: StoredRun, event: dict[str, Any]) -> None:
        """What the steering queued for a response that has ended becomes: a successor that inherits its settings and
        takes the queued input; `response.steer.pending` while it waits for tool output; else a failure."""
        steers = lane.take_steers(stored.response_id)
        if not steers:
            return
        response = stored.response()
        stubs = steering.required_input(response)
        if response.status == "completed" and stubs:
            lane.steers, lane.awaiting, lane.stubs = steers, stored.response_id, stubs
            for steer in steers:
                await self.send(lane.tagged(steering.pending(steer, stubs, self._next_number())))
            return
        if response.status not in ("completed", "incomplete"):
            return await self._steers_failed(lane, steers, "response_not_active",
                                             f"The response ended as {response.status}; nothing continues it.")
        successor = {key: value for key, value in event.items() if key != "generate"}
        successor.update(input=[item for steer in steers for item in steer.items],
                         previous_response_id=stored.response_id)
        await self._run(lane, successor, steers)

    async def _steer(self, event: dict[str, Any]) -> None:
        """A `response.steer`: accepted and queued for the response it names, which stops at its next safe step."""
        target, raw = event.get("previous_response_id"), event.get("input")
        lane = next((lane for lane in self.lanes.values() if lane.steered(target)), None) if target else None
        try:
            if not isinstance(target, str) or not target:
                raise SteerRefused("invalid_input", "previous_response_id must name the response to steer.")
            items = steering.steering_items(raw)
            if lane is None:
                ended = target in self.responses
                raise SteerRefused("response_already_completed" if ended else "response_not_found",
                                   "That response has ended; send a response.create to continue from it." if ended
                                   else "No response with that id is running on this connection.")
            if not lane.steerable:
                raise SteerRefused("steering_not_supported", "Responses bound to a conversation or compacted "
                                   "automatically cannot be steered.")
            if len(lane.steers) >= MAX_STEERS:
                raise SteerRefused("too_many_pending_steers", f"At most {MAX_STEERS} steering inputs may wait for "
                                   "one response.")
        except SteerRefused as refused:
            data = steering.failed(refused, target, raw, self._next_number())
            return await self.send(lane.tagged(data) if lane is not None else data)
        steer = Steer(self.context.ids(steering.STEER), target, raw, items)
        lane.steers.append(steer)
        await self.send(lane.tagged(steering.accepted(steer, self._next_number())))
        if lane.awaiting == target:
            await self.send(lane.tagged(steering.pending(steer, lane.stubs, self._next_number())))
        elif lane.running is not None:
            lane.running.steer()

    async def _steers_failed(self, lane: Lane, steers: list[Steer], code: str, message: str) -> None:
        for steer in steers:
            data = steering.failed(SteerRefused(code, message), steer.previous_response_id, steer.input,
                                   self._next_number(), steer.id)
            await self.send(lane.tagged(data))

    def _next_number(self) -> int:
        self._steer_events += 1
        return self._steer_events - 1


def _as_items(raw: Any) -> list[Any]:
    """A request's `input` as a list of items (a string is one user message)."""
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return list(raw) if isinstance(raw, list) else []


def create_request(event: dict[str, Any]) -> tuple[ResponsesRequest, bool]:
    """A `response.create` event as the body `POST /v1/responses` would take (streamed), and whether to generate."""
    refused = [name for name in _HTTP_ONLY if event.get(name)]
    if refused:
        raise APIError(f"{refused[0]} is not supported over WebSocket; use POST /v1/responses for background "
                       "responses.", param=refused[0])
    generate = event.get("generate")
    if generate is not None and not isinstance(generate, bool):
        raise APIError("generate must be a boolean.", param="generate")
    options = event.get("prompt_cache_options")
    prewarm = isinstance(options, dict) and options.get("prewarm") is True  # overrides generate, as documented
    body = {key: value for key, value in event.items() if key not in ("type", "stream_id", "generate")}
    try:
        request = ResponsesRequest.model_validate({**body, "stream": True})
    except ValidationError as exc:
        raise from_validation_error(exc) from None
    return request, generate is not False and not prewarm
