"""OpenTelemetry traces: on when the operator names an OTLP endpoint, off (the API's no-op spans) when not.

The standard variables turn it on and shape it: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `grpc`), `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`
and the others the SDK reads; `--otlp-traces-endpoint` (vLLM's flag, which also traces the embedded engine) does the
same. A span names a phase of a response; attributes follow OpenTelemetry's GenAI conventions and never hold a
prompt, an output, a tool's arguments or a key.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, MutableMapping

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

TRACER = trace.get_tracer("responses_server")
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_configured = False


def configure(endpoint: str | None = None, environ: Mapping[str, str] = os.environ) -> bool:
    """Export spans over OTLP, in batches, when `endpoint` (the flag) or the standard variables name where; whether
    tracing is on. Done once per process."""
    global _configured
    if _configured:
        return True
    if endpoint is None and not any(environ.get(name) for name in _ENDPOINTS):
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "responses-server"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter(endpoint, environ)))
    trace.set_tracer_provider(provider)
    _configured = True
    return True


def _exporter(endpoint: str | None, environ: Mapping[str, str]) -> Any:
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=endpoint) if endpoint else GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    if endpoint and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"  # the flag names the collector, as the base variable does
    return HttpExporter(endpoint=endpoint) if endpoint else HttpExporter()


def shutdown() -> None:
    """Send the spans still batched (at exit)."""
    provider = trace.get_tracer_provider()
    if hasattr(provider, "shutdown"):
        provider.shutdown()


@contextmanager
def span(name: str, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None,
         parent: otel_context.Context | None = None) -> Iterator[Span]:
    """A span around a phase, the current one inside it; an exception ends it with an error status."""
    with TRACER.start_as_current_span(name, context=parent, kind=kind, attributes=_kept(attributes)) as current:
        yield current


def start(name: str, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, Any] | None = None) -> Span:
    """A span begun now, a child of the current one, not made current: for a phase that outlives a `with` block
    (an engine request read a step at a time). Its owner ends it."""
    return TRACER.start_span(name, kind=kind, attributes=_kept(attributes))


def headers_of(current: Span) -> dict[str, str] | None:
    """The W3C headers (`traceparent`) that make a call another service makes a child of `current` (None: the span
    is not recorded, so there is nothing to join)."""
    if not current.get_span_context().is_valid:
        return None
    headers: dict[str, str] = {}
    propagate.inject(headers, context=trace.set_span_in_context(current))
    return headers


def failed(current: Span, why: str) -> None:
    """Mark a span as failed, with a reason in the client's terms (never a prompt, an output or an argument)."""
    current.set_status(Status(StatusCode.ERROR, why))


def annotate(attributes: Mapping[str, Any]) -> None:
    """Attributes on the current span (the request's, where the domain learns them: the response id, the model)."""
    trace.get_current_span().set_attributes(_kept(attributes) or {})


def set_attributes(current: Span, attributes: Mapping[str, Any]) -> None:
    current.set_attributes(_kept(attributes) or {})


def _kept(attributes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The attributes with a value (OpenTelemetry takes no None)."""
    return {key: value for key, value in attributes.items() if value is not None} if attributes else None


def inject(headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """`headers` with the current span's context (W3C `traceparent`), for a call to another service."""
    propagate.inject(headers)
    return headers


def extract(headers: Mapping[str, str]) -> otel_context.Context:
    """The context a caller's `traceparent` names (an empty one when there is none)."""
    return propagate.extract(headers)


def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids, in hex (None: no span is being recorded)."""
    found = trace.get_current_span().get_span_context()
    if not found.is_valid:
        return None
    return f"{found.trace_id:032x}", f"{found.span_id:016x}"


def exemplar() -> dict[str, str] | None:
    """The current trace, as an exemplar of a histogram's observation (OpenMetrics: a scraper that asks for it sees
    which trace a bucket's value came from); None when no trace is recorded."""
    ids = current_ids()
    return {"trace_id": ids[0]} if ids is not None else None
