"""docker/nginx.conf run by a real nginx (Debian's nginx-light) in front of two stand-in replicas: a draining
replica's 503 sends a POST to the other one, and a POST whose replica dropped it after receiving it is never sent
twice (it may be generating there)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


class Replica(ThreadingHTTPServer):
    """A stand-in replica that counts the requests it got and answers POSTs as `mode` says."""

    def __init__(self, mode: str) -> None:
        self.mode = mode  # "serve", "draining" (503 to POSTs) or "drop" (POSTs read, then the connection closed)
        self.got: Counter[str] = Counter()
        super().__init__(("127.0.0.1", free_port()), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Replica
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.server.got["GET"] += 1
        self._answer(200, b'{"ok": true}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.server.got["POST"] += 1
        if self.server.mode == "drop":
            self.close_connection = True
            self.connection.close()  # as a replica that crashed mid-generation
        elif self.server.mode == "draining":
            self._answer(503, b'{"error": {"message": "shutting down", "type": "server_error", "param": null, '
                              b'"code": "server_shutting_down"}}')
        else:
            self._answer(200, b'{"status": "completed"}')

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return None


@pytest.fixture
def balanced(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Replica, Replica]]:
    first, second = Replica(request.param), Replica("serve")
    for replica in (first, second):
        threading.Thread(target=replica.serve_forever, daemon=True).start()
    port = free_port()
    config = (ROOT / "docker" / "nginx.conf").read_text()
    config = config.replace("server replica-a:8000", f"server 127.0.0.1:{first.server_port}")
    config = config.replace("server replica-b:8000", f"server 127.0.0.1:{second.server_port}")
    config = config.replace("listen 8000;", f"listen 127.0.0.1:{port};")
    config = config.replace("events {}", f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}")
    config = config.replace("http {", f"http {{\n    access_log off;\n    client_body_temp_path {tmp_path}/body;\n"
                                      f"    proxy_temp_path {tmp_path}/proxy;", 1)
    (tmp_path / "nginx.conf").write_text(config)
    shutil.copy(ROOT / "docker" / "proxy.conf", tmp_path / "proxy.conf")
    nginx = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"])
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            httpx.get(f"{base}/health", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline and nginx.poll() is None, (tmp_path / "error.log").read_text()
            time.sleep(0.05)
    first.got.clear()
    second.got.clear()
    try:
        yield base, first, second
    finally:
        nginx.terminate()
        nginx.wait(10)
        for replica in (first, second):
            replica.shutdown()


@pytest.mark.parametrize("balanced", ["draining"], indirect=True)
def test_a_draining_replicas_503_sends_the_post_to_the_other(balanced: tuple[str, Replica, Replica]) -> None:
    """Integrity point 15: nginx did not retry a draining replica's 503 on POST, as docs/storage.md promises."""
    base, draining, serving = balanced
    answers = [httpx.post(f"{base}/v1/responses?x=1", json={"input": "hi"}, timeout=10) for _ in range(6)]
    assert [answer.status_code for answer in answers] == [200] * 6
    assert draining.got["POST"] >= 1 and serving.got["POST"] == 6  # every refused one ran on the other replica


@pytest.mark.parametrize("balanced", ["drop"], indirect=True)
def test_a_post_its_replica_dropped_is_never_sent_twice(balanced: tuple[str, Replica, Replica]) -> None:
    base, dropping, serving = balanced
    answers = [httpx.post(f"{base}/v1/responses", json={"input": "hi"}, timeout=10) for _ in range(4)]
    dropped = sum(answer.status_code == 502 for answer in answers)
    assert dropped >= 1 and dropping.got["POST"] == dropped
    assert serving.got["POST"] == len(answers) - dropped  # no POST reached both replicas
    for _ in range(4):  # reads still go round a dead replica
        assert httpx.get(f"{base}/v1/responses/resp_1", timeout=10).status_code == 200
