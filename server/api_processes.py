"""`--api-server-count N`: N API server processes accept on one port, in front of one vLLM engine core.

The parent binds the port, starts the engine core with vLLM's own multi-API-server launch and spawns the API
processes; each runs the whole app with an engine client of its own (`VllmEngine.connect`). They are replicas of
one another: responses, event logs, leases and cancel requests meet in the shared store, and `/metrics` sums every
process (prometheus_client's multiprocess mode). A replay of recorded output needs no engine core: each process
replays on its own. SIGTERM (or SIGINT) to the parent is passed on to every process, which drains as one server does.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import socket
from multiprocessing.connection import wait
from types import FrameType
from typing import Any

from server.engine import vllm_engine

_GRACE_SECONDS = 30  # beyond --shutdown-timeout, for each process's last events and its engine client


def serve_api_processes(args: argparse.Namespace) -> None:
    """Serve with `args.api_server_count` API processes until SIGTERM or SIGINT, then stop them all."""
    _stop_on_signals()
    vllm_engine.share_prometheus_directory()
    sock = vllm_engine.server_socket(args.host, args.port)
    listen_address = f"http://{args.host}:{args.port}"
    timeout = args.shutdown_timeout + _GRACE_SECONDS
    if args.replay_engine_output is not None:
        _run_replays(args, sock, listen_address, timeout)
    else:
        vllm_engine.run_api_processes(args, args.api_server_count, sock, listen_address, run_api_process, timeout)


def run_api_process(listen_address: str, sock: socket.socket, args: argparse.Namespace,
                    client_config: dict[str, Any]) -> None:
    """One API process (the target vLLM's process manager spawns): the app on the shared socket."""
    import logging

    from server.engine.recording import RecordingEngine
    from server.launch import engine_factory, serve_api_process

    index = client_config["client_index"]
    from server import logs

    logs.configure(args.log_format)
    logging.getLogger().handlers[0].addFilter(_NamedProcess(index))
    def connected() -> Any:
        """This process's client of the shared engine core, recording what it generates when asked to."""
        engine = vllm_engine.VllmEngine.connect(args, client_config)
        return RecordingEngine(engine, args.record_engine_output) if args.record_engine_output else engine

    serve_api_process(args, engine_factory(args) if args.replay_engine_output is not None else connected, index, sock)


def _run_replays(args: argparse.Namespace, sock: socket.socket, listen_address: str, timeout: float) -> None:
    spawn = multiprocessing.get_context("spawn")
    count = args.api_server_count
    processes = [spawn.Process(target=run_api_process, name=f"ApiServer_{index}",
                               args=(listen_address, sock, args, {"client_count": count, "client_index": index}))
                 for index in range(count)]
    for process in processes:
        process.start()
    stopped = False
    try:
        wait([process.sentinel for process in processes])  # one ended: stop the others
    except (SystemExit, KeyboardInterrupt):
        stopped = True
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout)
            if process.is_alive():
                process.kill()
    failed = [process for process in processes if process.exitcode]
    if failed and not stopped:
        raise SystemExit(f"API process {failed[0].name} exited with {failed[0].exitcode}")


def _stop_on_signals() -> None:
    """The first SIGTERM or SIGINT raises SystemExit in the parent, which then stops its processes in order."""
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise SystemExit

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


class _NamedProcess:
    """Names the API process a line comes from (`[api N]` before the message) when several share the port."""

    def __init__(self, index: int) -> None:
        self.index = index

    def filter(self, record: Any) -> bool:
        if not getattr(record, "_api_named", False):
            record.msg = f"[api {self.index}] {record.msg}"
            record._api_named = True
        return True
