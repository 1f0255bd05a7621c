"""An OTLP/HTTP trace receiver for the tests: it takes what an exporter sends to `/v1/traces` (protobuf), decodes it
with `opentelemetry-proto`, and keeps every span as a plain record."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from tests.conftest import serve_asgi


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector received it: ids in hex, its attributes as Python values."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str
    attributes: dict[str, Any]
    status: str  # "ok", "error" or "unset"
    status_message: str
    events: tuple[str, ...]
    service: str


@dataclass
class Receiver:
    """The spans received so far, by trace."""

    url: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def named(self, name: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.name == name]

    def keep(self, body: bytes) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
        from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received = []
        for resource_spans in request.resource_spans:
            service = next((_value(a.value) for a in resource_spans.resource.attributes if a.key == "service.name"), "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(ReceivedSpan(
                        span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex() or None, span.name,
                        Span.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_").lower(),
                        {a.key: _value(a.value) for a in span.attributes},
                        Status.StatusCode.Name(span.status.code).removeprefix("STATUS_CODE_").lower(),
                        span.status.message, tuple(event.name for event in span.events), str(service)))
        with self._lock:
            self.spans.extend(received)


def _value(value: Any) -> Any:
    """An OTLP AnyValue as Python."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver on a free port (`url` is the base an exporter's OTEL_EXPORTER_OTLP_ENDPOINT names)."""
    receiver = Receiver()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/v1/traces":
            receiver.keep(body)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/x-protobuf")]})
        await send({"type": "http.response.body", "body": b""})

    with serve_asgi(app) as port:
        receiver.url = f"http://127.0.0.1:{port}"
        yield receiver
