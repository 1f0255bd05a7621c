"""Work that lasts only while its HTTP client is connected."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

from starlette.responses import Response
from starlette.types import Receive

CLIENT_CLOSED_REQUEST = 499  # nginx's "client closed request"


async def while_connected(work: Coroutine[Any, Any, None], receive: Receive) -> bool:
    """Run `work` to its end (True); a client that goes away first (`http.disconnect`, awaited as Starlette's
    StreamingResponse does) cancels it (False)."""

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    task, listener = asyncio.ensure_future(work), asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, listener}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return False
        await task
        return True
    finally:
        task.cancel()
        listener.cancel()


def client_gone() -> Response:
    """The answer to a client that went away before its response was ready: nobody reads it; 499 keeps it out of the
    server-error counts."""
    return Response(status_code=CLIENT_CLOSED_REQUEST)
