"""A fault proxy between the gateway and a worker: TCP through asyncio, in a thread, whose `fault` can change at any
time, for the connections open then and the ones that come after.

    pass        forward both ways
    black_hole  accept and forward nothing (a node cut off without a reset: packets dropped)
    reset       reset every connection, open ones at once (TCP RST)
    reset_once  reset the connection of the next generate request (new or pooled), then pass
    status_503  answer every generate request `503 Service Unavailable` (a router with no worker free); the
                health checks pass
    drip        forward the worker's answers one byte every `drip_seconds`
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Iterator

FAULTS = ("pass", "black_hole", "reset", "reset_once", "status_503", "drip")
_503 = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
        b"connection: close\r\n\r\n{}")


@dataclass(eq=False)
class _Link:
    """One client connection and its upstream one."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None

    def reset(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            with suppress(OSError):
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


@dataclass
class FaultProxy:
    """Listens on 127.0.0.1:`port` and forwards to `target_port` with the fault set now."""

    target_port: int
    fault: str = "pass"
    drip_seconds: float = 0.05
    port: int = 0
    connections: int = 0  # accepted so far
    _links: set[_Link] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop | None = None
    _changed: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set(self, fault: str) -> None:
        """Changes the fault, for open connections too."""
        assert fault in FAULTS, fault
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._set, fault)

    def _set(self, fault: str) -> None:
        self.fault = fault
        if fault == "reset":
            for link in list(self._links):
                link.reset()
        assert self._changed is not None
        self._changed.set()
        self._changed = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        link = _Link(writer)
        self._links.add(link)
        try:
            first = await reader.read(65536)
            if not first:
                return
            if self.fault == "reset":
                link.reset()
                return
            up_reader, link.upstream = await asyncio.open_connection("127.0.0.1", self.target_port)
            await self._held()
            if await self._intercepted(first, link):
                return
            link.upstream.write(first)
            await asyncio.gather(self._requests(reader, link), self._pump(up_reader, writer, drip=True))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a reset, or the proxy stopping
        finally:
            self._links.discard(link)
            for end in (writer, link.upstream):
                if end is not None:
                    end.close()

    async def _held(self) -> None:
        """Waits while the fault is a black hole."""
        while self.fault == "black_hole":
            assert self._changed is not None
            await self._changed.wait()

    async def _intercepted(self, data: bytes, link: _Link) -> bool:
        """Whether the fault answers this piece of a request itself (a generate request under reset_once or
        status_503)."""
        if not data.startswith(b"POST /inference/v1/generate") or self.fault not in ("reset_once", "status_503"):
            return False
        if self.fault == "reset_once":
            self.fault = "pass"
            link.reset()
            return True
        link.client.write(_503)
        await link.client.drain()
        return True

    async def _requests(self, reader: asyncio.StreamReader, link: _Link) -> None:
        """The client's bytes to the worker, each request looked at first."""
        assert link.upstream is not None
        while True:
            data = await reader.read(65536)
            await self._held()
            if not data:
                with suppress(OSError):
                    link.upstream.write_eof()
                return
            if await self._intercepted(data, link):
                return
            link.upstream.write(data)
            await link.upstream.drain()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, drip: bool) -> None:
        """The worker's bytes to the client."""
        while True:
            data = await source.read(65536)
            await self._held()
            if not data:
                with suppress(OSError):
                    sink.write_eof()
                return
            if drip and self.fault == "drip":
                for index in range(len(data)):
                    sink.write(data[index:index + 1])
                    await sink.drain()
                    await asyncio.sleep(self.drip_seconds)
                continue
            sink.write(data)
            await sink.drain()

    def run(self, started: threading.Event) -> None:
        async def main() -> None:
            self._loop, self._changed = asyncio.get_running_loop(), asyncio.Event()
            server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
            self.port = server.sockets[0].getsockname()[1]
            started.set()
            self._stop = asyncio.Event()
            await self._stop.wait()
            server.close()
            for link in list(self._links):
                link.reset()

        asyncio.run(main())

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)


def fault_proxy(target_port: int) -> Iterator[FaultProxy]:
    """A running proxy to `target_port` (a generator for contextlib.contextmanager or a pytest fixture)."""
    proxy = FaultProxy(target_port)
    started = threading.Event()
    thread = threading.Thread(target=proxy.run, args=(started,), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield proxy
    finally:
        proxy.stop()
        thread.join(10)
