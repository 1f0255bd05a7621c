"""How the check sends a request: a JSON body, an SSE stream, or a WebSocket `response.create`; each returns the
final response after checking what came back against the streaming contract, the SDK's types and the spec."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

import httpx
from openai import OpenAI
from openai.types.responses import Response

from conformance.contract import validate_events
from conformance.openresponses import check_response

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class CheckFailed(AssertionError):
    """A scenario's expectation did not hold."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


@dataclass
class Endpoint:
    """The server under check: its base URL (ending in /v1), key and model."""

    base_url: str
    api_key: str
    model: str
    timeout: float = 600.0
    extra: dict[str, Any] = field(default_factory=dict)  # sent in every request for a response (e.g. a `seed`)
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.base_url, timeout=self.timeout,
                                 headers={"Authorization": f"Bearer {self.api_key}"})

    def get(self, path: str) -> dict[str, Any]:
        response = self.http.get(path)
        expect(response.status_code == 200, f"GET {path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(path, json=body)

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        """A request for a response: the model and the extra fields, then the scenario's own."""
        return {"model": self.model, **self.extra, **body}


class Transport(Protocol):
    """Sends one response request; returns the final response (as JSON) once checked."""

    name: str

    def create(self, body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass
class JsonTransport:
    """`POST /responses` without streaming: the body is checked against the spec and the SDK's Response."""

    endpoint: Endpoint
    name: str = "http"

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.endpoint.post("/responses", self.endpoint.request(body))
        expect(response.status_code == 200, f"status {response.status_code}: {response.text[:300]}")
        final = response.json()
        check_response(final)
        Response.model_validate(final)
        return final


@dataclass
class SseTransport:
    """`POST /responses` with `stream: true`: every event is checked, and a stored response must read back as
    it streamed."""

    endpoint: Endpoint
    name: str = "sse"

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        request = {**self.endpoint.request(body), "stream": True}
        with self.endpoint.http.stream("POST", "/responses", json=request) as response:
            expect(response.status_code == 200, f"status {response.status_code}: {response.read()[:300]!r}")
            events = list(_sse_events(response.iter_lines()))
        return _checked_stream(self.endpoint, events, body)


@dataclass
class WebSocketTransport:
    """One `response.create` on a WebSocket (the SDK's `responses.connect()`), or several on one connection."""

    endpoint: Endpoint
    name: str = "websocket"

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.turns([body])[-1]

    def turns(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each body in turn on one connection; `"previous_response_id": "PREVIOUS"` chains to the turn before."""
        client = OpenAI(base_url=self.endpoint.base_url, api_key=self.endpoint.api_key, max_retries=0)
        finals: list[dict[str, Any]] = []
        with client.responses.connect() as connection:
            for body in bodies:
                if body.get("previous_response_id") == "PREVIOUS":
                    body = {**body, "previous_response_id": finals[-1]["id"]}
                connection.send({"type": "response.create", **self.endpoint.request(body)})
                events = []
                while not events or events[-1]["type"] not in TERMINAL:
                    event = connection.recv().to_dict()
                    expect(event["type"] != "error", f"error event: {json.dumps(event)[:300]}")
                    if event["type"].startswith("response."):
                        events.append(event)
                finals.append(_checked_stream(self.endpoint, events, body))
        return finals


def _checked_stream(endpoint: Endpoint, events: list[dict[str, Any]], body: dict[str, Any]) -> dict[str, Any]:
    try:
        validate_events(events)
    except AssertionError as exc:
        raise CheckFailed(f"the stream breaks the contract: {exc}") from exc
    final = events[-1]["response"]
    if body.get("store", True) and not body.get("background"):
        stored = endpoint.get(f"/responses/{final['id']}")
        expect(stored == final, "the stored response differs from the streamed one")
    return final


def _sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON of each `data:` line (comments and `event:` lines skipped; the contract checks names match)."""
    for line in lines:
        if line.startswith("data:"):
            yield json.loads(line[5:].strip())
