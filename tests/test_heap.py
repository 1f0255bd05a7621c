"""A serving process keeps what start-up made out of the garbage collector's reach: a full collection walks what
serving made since, not the modules and models loaded before it (vLLM, torch, tokenizers: hundreds of thousands of
objects, 0.3 s of CPU and of a stalled event loop per collection)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import httpx

from tests.conftest import free_port

# A process served as the server's processes are (server/http/graceful.py), whose start-up imports what a gateway
# imports, and whose one route says what a full collection would walk now, and what start-up left.
PROCESS = textwrap.dedent("""
    import gc, sys
    from fastapi import FastAPI
    import server.launch, server.http.app, transformers  # what a gateway's start-up loads
    from server.http.graceful import serve
    from server.http.websocket import OpenSockets
    from server.runs.admission import Admission

    app = FastAPI()
    app.state.sockets = OpenSockets()

    @app.get("/heap")
    def heap() -> dict[str, int]:
        return {"walked": len(gc.get_objects()), "frozen": gc.get_freeze_count()}

    serve(app, Admission(), "127.0.0.1", int(sys.argv[1]), "warning", 1.0, max_frame_bytes=2**20)
""")


def test_a_full_collection_walks_what_serving_made_not_what_start_up_loaded() -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", PROCESS, str(port)])
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                heap = httpx.get(f"http://127.0.0.1:{port}/heap", timeout=5).json()
                break
            except httpx.HTTPError:
                assert process.poll() is None and time.monotonic() < deadline, "the process did not serve"
                time.sleep(0.5)
    finally:
        process.terminate()
        process.wait(30)
    assert heap["frozen"] > 100_000  # start-up's modules, frozen
    assert heap["walked"] < heap["frozen"] / 10, heap  # a full collection walks a small part of the heap
