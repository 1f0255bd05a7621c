"""`GET /v1/responses` upgraded to a WebSocket (WebSocket mode): JSON client events in as text frames, the same stream
events out; the connections open now, so that a shutdown can close them once their responses have ended."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from fastapi import APIRouter, WebSocket
from starlette.types import Message
from starlette.websockets import WebSocketDisconnect, WebSocketState

from server.http.errors import APIError
from server.http.socket_session import SocketSession
from server.metrics import WEBSOCKET_CONNECTIONS
from server.serving import ServingContext

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
    await websocket.accept()
    try:
        with WEBSOCKET_CONNECTIONS.track_inprogress():
            await _serve(websocket, context, sockets.closing)
    finally:
        sockets.open.discard(task)


async def _serve(websocket: WebSocket, context: ServingContext, closing: asyncio.Event) -> None:
    """Read client events until the client goes, the server shuts down or the connection's time is up."""
    lock = asyncio.Lock()

    async def send(text: str) -> None:
        async with lock:  # lanes send concurrently; each frame goes whole
            await websocket.send_text(text)

    session = SocketSession(context, send)
    deadline = asyncio.get_running_loop().time() + context.config.websocket_max_seconds
    code = 1000
    try:
        while (message := await _next_message(websocket, closing, deadline)) is not None:
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") is None:
                await session.error(APIError("Binary frames are not read; send each client event as a JSON text "
                                             "frame.", code="invalid_frame"))
            else:
                await session.receive(message["text"])
        await session.finish()  # the responses running end first: a client is never cut off mid-response
        if closing.is_set():
            code = GOING_AWAY
        else:
            await session.error(APIError("This connection has reached its time limit; open a new one.",
                                         code=LIMIT_REACHED))
        await websocket.close(code)
    except WebSocketDisconnect:
        return
    finally:
        await session.close()


async def _next_message(websocket: WebSocket, closing: asyncio.Event, deadline: float) -> Message | None:
    """The client's next message; None once the server is closing or the connection's time is up."""
    if closing.is_set() or websocket.client_state != WebSocketState.CONNECTED:
        return None
    receiving = asyncio.ensure_future(websocket.receive())
    closed = asyncio.ensure_future(closing.wait())
    timeout = max(deadline - asyncio.get_running_loop().time(), 0)
    await asyncio.wait({receiving, closed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    closed.cancel()
    if receiving.done():
        return receiving.result()
    receiving.cancel()
    return None
