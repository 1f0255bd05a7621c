"""`GET /v1/replicas` and `GET /v1/replicas/{id}/metrics`: the live replicas sharing the store, and each one's
Prometheus figures read through this one, so that the console's Live page charts every replica from one origin."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from server.http.context import serving_context
from server.http.errors import APIError
from server.metrics import metrics_registry

router = APIRouter()
ALONE = "this"  # the replica id of a server that shares no store
METRICS_SECONDS = 5.0  # how long another replica's /metrics may take
REPLICA_HEADER = "responses-server-replica"  # whose figures an answer holds


class PeerClient:
    """One HTTP client for reading other replicas' figures: its connections kept between the console's polls. Made on
    first use (inside the app's event loop) and closed with the app."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=METRICS_SECONDS)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _here(request: Request) -> str:
    registry = serving_context(request).replicas
    return registry.replica_id if registry is not None else ALONE


@router.get("/v1/replicas")
async def list_replicas(request: Request) -> dict[str, Any]:
    """This replica and the live ones it knows (those that advertise an address, as last read from the store)."""
    registry = serving_context(request).replicas
    here = _here(request)
    ids = sorted({here, *(registry.live() if registry is not None else ())})
    return {"object": "list", "data": [{"object": "replica", "id": replica, "here": replica == here}
                                       for replica in ids]}


@router.get("/v1/replicas/{replica_id}/metrics")
async def replica_metrics(request: Request, replica_id: str) -> Response:
    """The replica's `/metrics`: this one's from its registry; another's asked of it at the address it advertised
    (never at an address the request gives), with the caller's key (the replicas share their keys)."""
    if replica_id == _here(request):
        return Response(generate_latest(metrics_registry()), media_type=CONTENT_TYPE_LATEST,
                        headers={REPLICA_HEADER: replica_id})
    registry = serving_context(request).replicas
    url = registry.url_of(replica_id) if registry is not None else None
    if url is None:
        raise APIError(f"No live replica '{replica_id}'.", status=404, param="replica_id")
    headers = {"Authorization": request.headers["authorization"]} if "authorization" in request.headers else {}
    try:
        peers: PeerClient = request.app.state.peers
        answer = await peers.client().get(f"{url}/v1/replicas/{replica_id}/metrics", headers=headers)
    except httpx.HTTPError as error:
        raise APIError(f"Replica '{replica_id}' did not answer: {type(error).__name__}.", status=502,
                       type="server_error") from None
    if answer.status_code != 200:
        raise APIError(f"Replica '{replica_id}' answered {answer.status_code}.", status=502, type="server_error")
    return Response(answer.content, media_type=answer.headers.get("content-type", CONTENT_TYPE_LATEST),
                    headers={REPLICA_HEADER: answer.headers.get(REPLICA_HEADER, "")})
