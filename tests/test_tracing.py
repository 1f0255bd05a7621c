"""OpenTelemetry traces (issue 56): the server's spans, received over OTLP/HTTP and decoded with opentelemetry-proto,
form one tree per response: the request, its history, rendering, admission, each inference round, each hosted call,
a compaction, the store's work and a forward to another replica; a client's `traceparent` is the parent, and the
server's context goes on to MCP servers. No attribute holds a prompt, an output, a tool's arguments or a key."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from opentelemetry import trace

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.context import ServingContext
from server.tools.mcp_servers import McpSettings
from tests.conftest import serve_in_thread
from tests.mcp_servers import RunningMcp, mcp  # noqa: F401  (the fixture)
from tests.otlp import ReceivedSpan, Receiver
from tests.scripted_engine import ScriptedEngine
from tests.stores import sqlite_records
from tests.test_hosted_tools import call_text, mcp_tool, script
from tests.test_server import MODEL, SEALER, Harness
from tests.test_store import say

WEATHER = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.fixture(scope="module")
def served(tokenizer: Any, traces: Receiver, mcp: RunningMcp, tmp_path_factory: pytest.TempPathFactory,  # noqa: F811
           ) -> Iterator[Harness]:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    settings = McpSettings(servers={"calc": mcp.url}, allowed_domains=("127.0.0.1",), connect_seconds=5,
                           call_seconds=10)
    config = ServerConfig(served_model_name=MODEL, tool_call_parser="hermes", mcp=settings, compact_on_overflow=True)
    # Random ids (the default): every server of the session exports to the receiver, and counted ids repeat.
    context = ServingContext(config=config, engine_factory=lambda: engine, sealer=SEALER,
                             records=sqlite_records(tmp_path_factory.mktemp("traced") / "responses.db"))
    with serve_in_thread(create_app(context)) as base_url:
        yield Harness(engine, base_url)


def trace_of(traces: Receiver, response_id: str, settled: float = 0.3) -> list[ReceivedSpan]:
    """Every span of the trace a response was made in, once the batch with its last spans has arrived."""
    deadline = time.monotonic() + 30
    while True:
        trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]
        named = [span for span in traces.spans if span.attributes.get("gen_ai.response.id") == response_id]
        if named:
            spans = traces.trace(named[0].trace_id)
            time.sleep(settled)  # (spans that end just after the answer: the final save)
            trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]
            if len(traces.trace(named[0].trace_id)) == len(spans):
                return spans
        assert time.monotonic() < deadline, f"no trace of {response_id}"
        time.sleep(0.05)


def parent_of(spans: list[ReceivedSpan], span: ReceivedSpan) -> ReceivedSpan | None:
    return next((other for other in spans if other.span_id == span.parent_id), None)


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, (name, [span.name for span in spans])
    return found[0]


def assert_clean(spans: list[ReceivedSpan], *markers: str) -> None:
    """No attribute (nor status message) of any span holds a marker: a prompt, an output, arguments, a key."""
    for span in spans:
        values = json.dumps([span.attributes, span.status_message, span.name])
        for marker in markers:
            assert marker not in values, (marker, span.name)


def test_a_streamed_turn_with_a_function_call_is_one_trace(served: Harness, tokenizer: Any,
                                                           traces: Receiver) -> None:
    marker = f"Weather where the marker {secrets.token_hex(4)} is?"
    served.play(script(tokenizer, call_text("get_weather", {"city": "Zanzibar-arg"})))
    events = served.raw_stream(input=marker, tools=WEATHER, include=["reasoning.encrypted_content"])
    response = events[-1]["response"]
    spans = trace_of(traces, response["id"])
    root = one(spans, "POST /v1/responses")
    assert (root.kind, root.parent_id, root.attributes["http.response.status_code"]) == ("server", None, 200)
    assert root.attributes["gen_ai.response.id"] == response["id"]
    assert root.attributes["responses_server.project"] == "default"
    chat = one(spans, f"chat {MODEL}")
    assert chat.kind == "client" and parent_of(spans, chat) == root
    assert chat.attributes["gen_ai.request.model"] == MODEL and chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.usage.output_tokens"] == response["usage"]["output_tokens"]
    assert chat.attributes["gen_ai.usage.input_tokens"] == response["usage"]["input_tokens"]
    assert "gen_ai.first_token" in chat.events
    for phase in ("history", "render", "admission", "store save"):
        assert parent_of(spans, one(spans, phase)) == root, phase
    assert one(spans, "store save").attributes["db.system.name"] == "sqlite"
    assert_clean(spans, marker, "Zanzibar-arg", "get_weather\", \"arguments")


def test_a_chained_turn_reads_its_history_under_the_history_span(served: Harness, tokenizer: Any,
                                                                 traces: Receiver) -> None:
    served.play(say(tokenizer, "Paris."), say(tokenizer, "Rome."))
    first = served.post(input="Capital of France?").json()
    second = served.post(input="And Italy?", previous_response_id=first["id"]).json()
    spans = trace_of(traces, second["id"])
    history = one(spans, "history")
    reads = [span for span in spans if span.name.startswith("store ") and parent_of(spans, span) == history]
    assert reads, [span.name for span in spans]
    assert first["id"] not in {span.trace_id for span in spans}
    assert len({span.trace_id for span in spans}) == 1 and trace_of(traces, first["id"])[0].trace_id != \
        spans[0].trace_id, "each response is a trace of its own"
    assert_clean(spans, "Capital of France", "And Italy", "Paris.", "Rome.")


def test_an_approved_mcp_call_is_a_tool_span_and_the_mcp_server_joins_the_clients_trace(
        served: Harness, tokenizer: Any, traces: Receiver, mcp: RunningMcp) -> None:  # noqa: F811
    """The approval's turn is sent with the client's own `traceparent`: the trace is the client's, and the MCP
    server's request carries this server's span as its parent."""
    served.play(script(tokenizer, call_text("calc__add", {"a": 20, "b": 22})), script(tokenizer, "It is 42."))
    tool = mcp_tool(mcp.url, require_approval="always")
    asked = served.post(input="20+22?", tools=[tool]).json()
    assert one(trace_of(traces, asked["id"]), "mcp list_tools").status == "unset"
    client_trace, client_span = secrets.token_hex(16), secrets.token_hex(8)
    served.play(script(tokenizer, "It is 42."))
    heard = len(mcp.recorder.headers)
    answer = httpx.post(f"{served.base_url}/responses", timeout=60,
                        headers={"traceparent": f"00-{client_trace}-{client_span}-01"},
                        json={"model": MODEL, "previous_response_id": asked["id"], "tools": [tool], "input": [
                            {"type": "mcp_approval_response", "approval_request_id": asked["output"][1]["id"],
                             "approve": True}]}).json()
    spans = trace_of(traces, answer["id"])
    root = one(spans, "POST /v1/responses")
    assert (root.trace_id, root.parent_id) == (client_trace, client_span)
    call = one(spans, "execute_tool add")
    assert call.attributes["gen_ai.tool.type"] == "mcp" and call.attributes["gen_ai.tool.call.id"]
    assert call.attributes["responses_server.mcp.server_label"] == "calc" and call.status == "unset"
    parents = [headers["traceparent"].split("-") for headers in mcp.recorder.headers[heard:]
               if "traceparent" in headers]
    assert parents and all(part[1] == client_trace and part[2] == call.span_id for part in parents), parents
    assert_clean(spans, "20+22", '"a": 20', "It is 42")


def test_a_failed_mcp_call_marks_its_span(served: Harness, tokenizer: Any, traces: Receiver) -> None:
    served.play(script(tokenizer, call_text("calc__explode", {"reason": "secret-reason-77"})),
                script(tokenizer, "It failed."))
    response = served.post(input="Explode.", tools=[mcp_tool()]).json()
    spans = trace_of(traces, response["id"])
    call = one(spans, "execute_tool explode")
    assert call.status == "error" and "mcp_tool_execution_error" in call.status_message
    assert one(spans, "POST /v1/responses").status == "unset"  # the model read the error and answered
    assert_clean(spans, "secret-reason-77", "exploded")


def test_an_automatic_compaction_holds_its_summary_round(served: Harness, tokenizer: Any,
                                                         traces: Receiver) -> None:
    from tests.test_compaction import huge_session

    served.play(say(tokenizer, "The cat is Miso."), say(tokenizer, "Miso."))
    response = served.client.responses.create(model=MODEL, input=huge_session(), store=False)  # type: ignore[arg-type]
    assert [item.type for item in response.output] == ["compaction", "message"]
    spans = trace_of(traces, response.id)
    compaction = one(spans, "compaction")
    rounds = [span for span in spans if span.name == f"chat {MODEL}"]
    assert len(rounds) == 2 and [parent_of(spans, span) == compaction for span in rounds].count(True) == 1
    assert_clean(spans, "What is my cat called", "The cat is Miso", "line 2")


def test_a_turn_forwarded_to_its_home_replica_is_one_trace(tokenizer: Any, postgres: Any,
                                                            traces: Receiver) -> None:
    from tests.test_affinity import all_live, replica

    url = postgres.new_database()
    with replica("a", url, tokenizer) as a, replica("b", url, tokenizer) as b:
        all_live(a, b)
        a.engine.scripts = b.engine.scripts = [say(tokenizer, "Paris."), say(tokenizer, "Rome.")]
        first = a.harness.post(input="Capital of France?").json()
        second = b.harness.post(input="And Italy?", previous_response_id=first["id"]).json()
    spans = trace_of(traces, second["id"])
    forward = one(spans, "forward")
    assert forward.attributes["responses_server.replica"] == "a"
    servers = [span for span in spans if span.name == "POST /v1/responses"]
    assert len(servers) == 2, "the replica the client reached, and the home it forwarded to: one trace"
    home = next(span for span in servers if span.parent_id == forward.span_id)
    assert parent_of(spans, forward) in servers and home.attributes["gen_ai.response.id"] == second["id"]
    assert parent_of(spans, one(spans, f"chat {MODEL}")) == home


def test_tracing_on_is_configured_from_the_standard_variables(tmp_path: Path) -> None:
    """The standard variables turn tracing on in a server process and name its service (checked in a child, whose
    exporter sends to a receiver of this test's own)."""
    import subprocess
    import sys

    from tests.otlp import receiving

    program = ("from server import tracing\nassert tracing.configure()\n"
               "with tracing.span('probe', attributes={'a': 1}): pass\ntracing.shutdown()\n")
    with receiving() as receiver:
        subprocess.run([sys.executable, "-c", program], check=True, timeout=120, env={
            "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "gateway-7"})
        [probe] = receiver.named("probe")
    assert probe.service == "gateway-7" and probe.attributes == {"a": 1}


def test_every_log_line_of_a_request_names_it_and_a_failure_says_why_in_one_line(
        served: Harness, tokenizer: Any, traces: Receiver) -> None:
    """`--log-format json`: the lines a response's serving writes carry its trace and span ids, its response id and
    its project; a response that failed says why in one line."""
    import logging

    from server.logs import JsonLines, RequestFields

    lines: list[str] = []

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    kept = Kept()
    kept.setFormatter(JsonLines())
    kept.addFilter(RequestFields())
    logging.getLogger().addHandler(kept)
    try:
        served.play([*say(tokenizer, "Half")[:1], RuntimeError("the engine broke")])
        failed = validate(served.raw_stream(input="Break, please."))
    finally:
        logging.getLogger().removeHandler(kept)
    spans = trace_of(traces, failed["id"])
    records = [json.loads(line) for line in lines]
    about = [record for record in records if record.get("response_id") == failed["id"]]
    assert about and all(record["project"] == "default" and record["trace_id"] == spans[0].trace_id
                         and record["span_id"] for record in about), records
    [why] = [record for record in about if record["message"].startswith(f"response {failed['id']} failed:")]
    assert why["level"] == "WARNING" and failed["error"]["message"] in why["message"]


def validate(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert events[-1]["type"] == "response.failed", events[-1]
    return dict(events[-1]["response"])


def test_the_metrics_a_dashboard_needs_with_exemplars_that_name_traces(served: Harness, tokenizer: Any,
                                                                      traces: Receiver) -> None:
    """Time per output token, admission wait and hosted calls by tool type beside the latency histograms; scraped as
    OpenMetrics, an observation's bucket names the trace it came from."""
    served.play(script(tokenizer, call_text("calc__add", {"a": 1, "b": 2})), script(tokenizer, "It is three, dear."))
    response = served.post(input="1+2?", tools=[mcp_tool()]).json()
    trace_id = trace_of(traces, response["id"])[0].trace_id
    scraped = httpx.get(served.base_url.removesuffix("/v1") + "/metrics",
                        headers={"Accept": "application/openmetrics-text; version=1.0.0"}).text
    for series in ("responses_server_time_per_output_token_seconds_count", "responses_server_admission_wait_seconds_count",
                   'responses_server_tool_call_seconds_count{outcome="output",tool="mcp"}'):
        assert series in scraped, series
    exemplars = [line for line in scraped.splitlines() if line.startswith("responses_server_response_duration_seconds_bucket")
                 and f'trace_id="{trace_id}"' in line]
    assert exemplars, "the duration histogram's bucket names the last response's trace"
