"""`/v1/replicas` and `/v1/replicas/{id}/metrics` (the console's Live page, per replica): two replicas on one
PostgreSQL list each other, each reads the other's /metrics at the address it advertised, and a replica that left
is a 404; a server alone is one replica."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.replicas.records import Replica
from tests.conftest import serve_asgi, serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_affinity import all_live, beat, replica, seen
from tests.test_server import MODEL


def test_replicas_list_each_other_and_read_each_others_metrics(tokenizer: Any, postgres: Any) -> None:
    url = postgres.new_database()
    with replica("a", url, tokenizer) as a:
        with replica("b", url, tokenizer) as b:
            all_live(a, b)
            listed = httpx.get(f"{a.harness.base_url}/replicas").json()["data"]
            assert [(entry["id"], entry["here"]) for entry in listed] == [("a", True), ("b", False)]
            for node, other in ((a, "b"), (b, "a")):
                answer = httpx.get(f"{node.harness.base_url}/replicas/{other}/metrics")
                assert answer.status_code == 200 and "responses_server_output_tokens_total" in answer.text
                assert answer.headers["content-type"].startswith("text/plain")
                assert answer.headers["responses-server-replica"] == other, "the other replica's own answer"
            assert httpx.get(f"{a.harness.base_url}/replicas/nobody/metrics").status_code == 404
            _reads_keep_one_connection(a, url)
        deadline = time.monotonic() + 10
        while "b" in a.registry.live():  # b left the store: the next heartbeat drops it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        gone = httpx.get(f"{a.harness.base_url}/replicas/b/metrics")
        assert gone.status_code == 404 and gone.json()["error"]["param"] == "replica_id"


def _reads_keep_one_connection(node: Any, store_url: str) -> None:
    """The console polls every replica's figures each second: one replica reads another's over one kept connection,
    not a new client (and connection) per read."""
    ports: list[int] = []

    async def figures(request: Request) -> PlainTextResponse:
        ports.append(request.client.port if request.client is not None else 0)
        return PlainTextResponse("responses_server_up 1\n", headers={"responses-server-replica": "peer"})

    peer = Starlette(routes=[Route("/v1/replicas/peer/metrics", figures)])
    with serve_asgi(peer) as port:
        asyncio.run(beat(store_url, Replica("peer", f"http://127.0.0.1:{port}")))
        seen(node, "peer", f"http://127.0.0.1:{port}")
        for _ in range(4):
            assert httpx.get(f"{node.harness.base_url}/replicas/peer/metrics").status_code == 200
    assert len(ports) == 4 and len(set(ports)) == 1, ports


def test_a_server_alone_is_one_replica(tokenizer: Any) -> None:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine)
    with serve_in_thread(create_app(context)) as base_url:
        (only,) = httpx.get(f"{base_url}/replicas").json()["data"]
        assert only["here"]
        assert "responses_server_" in httpx.get(f"{base_url}/replicas/{only['id']}/metrics").text
