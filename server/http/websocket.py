"""`GET /v1/responses` upgraded to a WebSocket (WebSocket mode): JSON client events in as text frames, the same stream
events out; the connections open now, so that a shutdown can close them once their responses have ended."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from fastapi import APIRouter, WebSocket
from starlette.types import Message
from starlette.websockets import WebSocketDisconnect, WebSocketState

from server import tracing
from server.http.auth import browser_subprotocol
from server.http.context import caller
from server.http.errors import APIError
from server.http.socket_session import SocketSession
from server.metrics import WEBSOCKET_CONNECTIONS
from server.runs.context import ServingContext

router = APIRouter()
logger = logging.getLogger(__name__)
GOING_AWAY = 1001  # the server is shutting down
LIMIT_REACHED = "websocket_connection_limit_reached"


@dataclass
class OpenSockets:
    """The WebSocket connections open now; `close_all` asks each to close (1001) and waits until they have."""

    closing: asyncio.Event = field(default_factory=asyncio.Event)
    open: set[asyncio.Task[None]] = field(default_factory=set)

    async def close_all(self) -> None:
        self.closing.set()
        await asyncio.gather(*self.open, return_exceptions=True)


@router.websocket("/v1/responses")
async def responses_socket(websocket: WebSocket) -> None:
    context: ServingContext = websocket.app.state.context
    if not context.config.websocket:
        refusal = APIError("WebSocket mode is off on this server (--no-websocket); use POST /v1/responses.",
                           status=426, code="websocket_not_supported")
        await websocket.send_denial_response(refusal.response())
        return
    sockets: OpenSockets = websocket.app.state.sockets
    if sockets.closing.is_set():
        await websocket.close(GOING_AWAY)
        return
    task = asyncio.current_task()
    assert task is not None
    sockets.open.add(task)
    await websocket.accept(subprotocol=browser_subprotocol(websocket.scope.get("subprotocols") or []))
    try:
        with WEBSOCKET_CONNECTIONS.track_inprogress():
            await _serve(websocket, context, sockets.closing)
    finally:
        sockets.open.discard(task)


@dataclass
class _Writer:
    """Sends frames one at a time (lanes send concurrently; each frame goes whole); a client that reads nothing for
    `timeout` seconds stalls the connection, which then ends, and the response being sent with it."""

    websocket: WebSocket
    timeout: float | None
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def send(self, text: str) -> None:
        async with self._lock:
            try:
                await asyncio.wait_for(self.websocket.send_text(text), self.timeout)
            except TimeoutError:
                self.stalled.set()
                raise TimeoutError(f"the client read nothing for {self.timeout}s") from None


async def _serve(websocket: WebSocket, context: ServingContext, closing: asyncio.Event) -> None:
    """Read client events until the client goes, the server shuts down or the connection's time is up."""
    writer = _Writer(websocket, context.config.send_timeout_seconds)
    session = SocketSession(context, writer.send, caller(websocket), traced=tracing.extract(dict(websocket.headers)))
    deadline = asyncio.get_running_loop().time() + context.config.websocket_max_seconds
    try:
        while (message := await _next_message(websocket, (closing, writer.stalled), deadline)) is not None:
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") is None:
                await session.error(APIError("Binary frames are not read; send each client event as a JSON text "
                                             "frame.", code="invalid_frame"))
            else:
                await session.receive(message["text"])
        if writer.stalled.is_set():
            logger.info("a WebSocket client stopped reading for %ss; its connection was ended", writer.timeout)
            return
        await session.finish()  # the responses running end first: a client is never cut off mid-response
        if not closing.is_set():
            await session.error(APIError("This connection has reached its time limit; open a new one.",
                                         code=LIMIT_REACHED))
        await websocket.close(GOING_AWAY if closing.is_set() else 1000)
    except (WebSocketDisconnect, TimeoutError):
        return
    finally:
        await session.close()


async def _next_message(websocket: WebSocket, stops: tuple[asyncio.Event, ...], deadline: float) -> Message | None:
    """The client's next message; None once one of `stops` is set (the server is closing, the client stopped
    reading) or the connection's time is up."""
    if any(stop.is_set() for stop in stops) or websocket.client_state != WebSocketState.CONNECTED:
        return None
    receiving = asyncio.ensure_future(websocket.receive())
    stopped = [asyncio.ensure_future(stop.wait()) for stop in stops]
    timeout = max(deadline - asyncio.get_running_loop().time(), 0)
    await asyncio.wait({receiving, *stopped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for waiter in stopped:
        waiter.cancel()
    if receiving.done():
        return receiving.result()
    receiving.cancel()
    return None
