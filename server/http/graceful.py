"""uvicorn with a graceful shutdown: on SIGTERM it stops accepting, lets running responses finish for
`--shutdown-timeout` seconds, ends the rest with response.failed (never a cut stream), closes WebSockets with 1001,
then exits 0. Once started, what start-up made is frozen out of the garbage collector's reach."""

from __future__ import annotations

import gc
import logging
import signal
import socket
from types import FrameType
from typing import Any, Awaitable, Callable

import uvicorn
from sse_starlette.sse import AppStatus

from server.runs.admission import Admission

logger = logging.getLogger(__name__)
SHUTDOWN_REASON = "the server shut down before this response finished"
_GRACE_SECONDS = 15  # beyond the drain, for stopped streams to send their last events


class GracefulServer(uvicorn.Server):
    """A uvicorn server that drains the process's responses before uvicorn's own shutdown."""

    def __init__(self, config: uvicorn.Config, admission: Admission, timeout: float,
                 close_sockets: Callable[[], Awaitable[None]]) -> None:
        config.timeout_graceful_shutdown = timeout + _GRACE_SECONDS
        super().__init__(config)
        self._admission = admission
        self._timeout = timeout
        self._close_sockets = close_sockets
        AppStatus.disable_automatic_graceful_drain()  # sse-starlette would cut every stream at the signal

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        freeze_startup_heap()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:  # shut down cleanly and exit 0, instead of re-raising SIGTERM afterwards
            getattr(self, "_captured_signals", []).clear()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connections while the running responses finish
        running = self._admission.active
        logger.info("shutting down: %d response(s) running, %.0fs to finish", running, self._timeout)
        stopped = await self._admission.drain(self._timeout, SHUTDOWN_REASON)
        if stopped:
            logger.info("shutting down: %d response(s) ended as failed after the shutdown timeout", stopped)
        AppStatus.should_exit = True  # every response has ended: streams still open (replays) may close now
        await self._close_sockets()  # WebSockets close with 1001 ("going away"), not uvicorn's 1012
        await super().shutdown(sockets)


def freeze_startup_heap() -> None:
    """What start-up made (modules, vLLM, torch, the tokenizers, the warm-up: about 600k objects) is moved out of the
    cycle collector's reach, as vLLM does in its engine core: every full collection walked all of it (0.3 s of CPU,
    and a 0.3 s stall of every stream, every few hundred requests; bench/fleet.py). Collected first: only what
    lives on is frozen."""
    gc.collect()
    gc.freeze()


def serve(app: Any, admission: Admission, host: str, port: int, log_level: str, shutdown_timeout: float,
          max_frame_bytes: int, sock: socket.socket | None = None) -> None:
    """Serve `app` (made by `create_app`) until SIGTERM or SIGINT; `max_frame_bytes` is the request body limit, and
    `sock` a listening socket shared with other API processes (default: bind host and port)."""
    # Frames a little over the body limit still arrive, to be answered with a 413 error event rather than cut off.
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, ws_max_size=max_frame_bytes + 2**20)
    GracefulServer(config, admission, shutdown_timeout, app.state.sockets.close_all).run(
        sockets=[sock] if sock is not None else None)
