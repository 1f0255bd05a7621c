"""Prometheus metrics of the server, in the same registry as vLLM's engine metrics; served at `/metrics`."""

from __future__ import annotations

import asyncio
import os

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, multiprocess

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80)
_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)
_STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

HTTP_REQUESTS = Counter("responses_server_http_requests", "HTTP requests answered, by method, route and status code",
                        ["method", "route", "status"])
CLIENT_ERRORS = Counter("responses_server_client_errors", "4xx answers, by status and OpenAI error code (or type)",
                        ["status", "code"])
RESPONSES = Counter("responses_server_responses", "Responses that ended, by terminal status and how they were asked "
                    "for (stream, json, background, websocket)", ["status", "mode"])
TIME_TO_FIRST_TOKEN = Histogram("responses_server_time_to_first_token_seconds",
                                "From the start of a response to its first output delta", buckets=_LATENCY_BUCKETS)
RESPONSE_DURATION = Histogram("responses_server_response_duration_seconds",
                              "From the start of a response to its terminal event", buckets=_DURATION_BUCKETS)
OUTPUT_TOKENS = Counter("responses_server_output_tokens", "Tokens generated for responses")
TIME_PER_OUTPUT_TOKEN = Histogram("responses_server_time_per_output_token_seconds",
                                  "A response's time from its first output delta to its end, per later output token",
                                  buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28))
ADMISSION_WAIT = Histogram("responses_server_admission_wait_seconds", "How long a response waited for a place under "
                           "--max-concurrent-requests (0 when one was free)", buckets=_LATENCY_BUCKETS)
TOOL_CALL_SECONDS = Histogram("responses_server_tool_call_seconds", "How long the hosted tool calls the server ran "
                              "took, by tool type (mcp, file_search, web_search, code_interpreter) and outcome",
                              ["tool", "outcome"], buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
WEBSOCKET_CONNECTIONS = Gauge("responses_server_websocket_connections", "WebSocket connections open now",
                              multiprocess_mode="livesum")
WEBSOCKET_EVENTS = Counter("responses_server_websocket_events", "WebSocket events, by direction (in: client events, "
                           "out: server events) and type", ["direction", "type"])
ACTIVE_STREAMS = Gauge("responses_server_active_streams", "SSE streams open now", multiprocess_mode="livesum")
WAITING_REQUESTS = Gauge("responses_server_waiting_requests", "Requests past --max-concurrent-requests waiting for a "
                         "place now", multiprocess_mode="livesum")
CLIENT_DISCONNECTS = Counter("responses_server_client_disconnects",
                             "Responses whose client went away before the end (their engine requests were aborted)")
STORE_SECONDS = Histogram("responses_server_store_operation_seconds", "Response store calls, by backend and operation",
                          ["backend", "operation"], buckets=_STORE_BUCKETS)
STORE_ERRORS = Counter("responses_server_store_errors", "Store operations that failed because the database could not "
                       "be reached or written (each a 503 or a retried save), by backend", ["backend"])
WEBHOOK_DELIVERIES = Counter("responses_server_webhook_deliveries", "Webhook delivery attempts, by outcome "
                             "(delivered, failed_attempt: to be tried again, given_up)", ["outcome"])
MCP_CALLS = Counter("responses_server_mcp_calls", "Calls the server made to MCP servers, by server (a registered "
                    "server's label, else the allowed host) and outcome (output, error)", ["server", "outcome"])
MCP_CALL_SECONDS = Histogram("responses_server_mcp_call_seconds", "How long MCP calls took, by server", ["server"],
                             buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
FORWARDING = Counter("responses_server_forwarding", "Requests by what named their home replica (previous_response, "
                     "conversation, prompt_cache_key, none) and what became of them: forwarded; served here because "
                     "the home is here (home_here), is not live (home_gone), took no connection (unreachable), "
                     "answered 429 (overloaded) or 503 (draining); none: served where it landed (served_here)",
                     ["key", "outcome"])
ENGINE_WORKERS_UP = Gauge("responses_server_engine_workers_up", "A fleet model's engine workers that are up, as this "
                          "gateway last saw them", ["model"], multiprocess_mode="max")
ENGINE_WORKERS = Gauge("responses_server_engine_workers", "A fleet model's engine workers (its fleet file's list)",
                       ["model"], multiprocess_mode="max")
ENGINE_EJECTIONS = Counter("responses_server_engine_worker_ejections", "Fleet workers taken out of rotation after "
                           "consecutive failed requests (outlier detection), by model", ["model"])
ENGINE_RETRIES = Counter("responses_server_engine_retries", "Requests sent to another worker after one failed before "
                         "answering, by model and reason (refused, reset, timeout, status), or not sent for want of "
                         "retry budget (reason: over_budget)", ["model", "reason"])
ENGINE_STREAMS_MOVED = Counter("responses_server_engine_streams_moved", "Streams whose worker was lost after it "
                               "answered, by model and outcome: resumed on a peer from the tokens already generated, "
                               "restarted on a peer (nothing generated yet), or lost (a grammar that cannot be restated "
                               "constrains what is left, or no peer answered)", ["model", "outcome"])
LIVE_REPLICAS = Gauge("responses_server_live_replicas", "Replicas taking forwarded requests (this one among them when "
                      "it advertises an address), as last read from the shared store", multiprocess_mode="max")
PROJECT_REQUESTS = Counter("responses_server_project_requests", "Responses that ended, by project (the operator "
                           "declares projects: the label set is theirs)", ["project"])
PROJECT_TOKENS = Counter("responses_server_project_tokens", "Tokens of responses that ended, by project and kind "
                         "(input, cached, output, reasoning)", ["project", "kind"])
RATE_LIMITED = Counter("responses_server_rate_limited", "Requests refused past a limit, by project and limit "
                       "(requests, tokens, concurrency, quota)", ["project", "limit"])
PROMPT_RENDERS = Counter("responses_server_prompt_renders", "Prompts rendered, by what they reused of the known "
                         "prompt their turn extends: extended (all of it), fallback (the render changed it: reused up "
                         "to the change), full (none known)", ["outcome"])
PROMPT_TOKENS = Counter("responses_server_prompt_tokens", "Prompt tokens rendered, by source: reused from a known "
                        "prompt, or tokenized", ["source"])
EVENT_LOOP_LAG = Histogram("responses_server_event_loop_lag_seconds", "How late the event loop ran a timer that was "
                           "due (sampled every 0.1 s): what every stream's next event waited", buckets=_LAG_BUCKETS)


async def watch_event_loop_lag(interval: float = 0.1) -> None:
    """Every `interval` seconds, observe how late the running loop woke a sleeper, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval
        await asyncio.sleep(interval)
        EVENT_LOOP_LAG.observe(max(0.0, loop.time() - due))


def metrics_registry() -> CollectorRegistry:
    """The registry `/metrics` serves: the process's, where vLLM registers its engine metrics too (or, when vLLM
    runs several API processes, the collector over their shared directory, as `vllm serve` does)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY
