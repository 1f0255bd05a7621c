"""Command line: vLLM's engine flags plus the server's own; `responses-server` and `python -m server`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Sequence

from server import logs
from server.batches.batch_run import BatchSettings
from server.attachments.media import MAX_REQUEST_PIXELS
from server.attachments.work_pool import WorkLimits
from server.bundled_model import BUNDLED_DEFAULT_MAX_OUTPUT_TOKENS, BUNDLED_SAMPLING_DEFAULTS
from server.engine.interface import SAMPLING_KEYS
from server.launch import build_app, serve
from server.retrieval.files import DEFAULT_MAX_FILE_BYTES
from server.tools.mcp_servers import DEFAULT_CALL_SECONDS, DEFAULT_CONNECT_SECONDS, DEFAULT_MAX_OUTPUT_BYTES
from server.webhooks.sender import WebhookSettings


def mcp_server_flag(value: str) -> tuple[str, str]:
    """`--mcp-server LABEL=URL`."""
    label, _, url = value.partition("=")
    if not label or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected LABEL=URL with an http(s) URL, got {value!r}")
    return label, url


def sampling_defaults(value: str) -> dict[str, float]:
    """`--sampling-defaults '{"frequency_penalty": 0.5}'`."""
    try:
        values = json.loads(value)
    except ValueError:
        values = None
    if not isinstance(values, dict) or not all(key in SAMPLING_KEYS and isinstance(number, (int, float))
                                               and not isinstance(number, bool) for key, number in values.items()):
        raise argparse.ArgumentTypeError(f"expected a JSON object of numbers for {', '.join(SAMPLING_KEYS)}, "
                                         f"got {value!r}")
    return dict(values)


def tool_server_flag(value: str) -> tuple[str, str]:
    """`--tool-server browser=URL` or `--tool-server python=URL`."""
    name, url = mcp_server_flag(value)
    if name not in ("browser", "python"):
        raise argparse.ArgumentTypeError(f"the built-in tools are browser and python, not {name!r}")
    return name, url


def build_parser() -> argparse.ArgumentParser:
    from server.engine import vllm_engine

    parser = vllm_engine.new_argument_parser(
        prog="responses-server",
        description="OpenAI-compatible Responses API server in front of vLLM. "
        "Without --model it serves the bundled SmolLM2-135M-Instruct.",
    )
    server = parser.add_argument_group("responses-server")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on")
    server.add_argument("--port", type=int, default=8000, help="port to listen on")
    server.add_argument("--api-key", default=os.environ.get("RESPONSES_SERVER_API_KEY"), metavar="KEY[,KEY...]",
                        help="require 'Authorization: Bearer KEY' on every route but /health, any of these keys "
                        "(default: $RESPONSES_SERVER_API_KEY, or none)")
    server.add_argument("--api-key-file", type=Path, default=None, metavar="FILE",
                        help="more accepted keys, one per line")
    server.add_argument("--projects-file", type=Path, default=None, metavar="FILE",
                        help="projects, their limits and their keys, by SHA-256 (TOML [[projects]] tables: name, "
                        "requests_per_minute, tokens_per_minute, concurrent_requests, tokens_per_day; [[keys]] tables: "
                        "name, project, sha256, admin, and limits of their own); keys made by 'responses-server keys "
                        "create' are kept in the store")
    server.add_argument("--fleet", type=Path, default=None, metavar="FILE",
                        help="serve the models of a fleet file (TOML [[models]] tables: name, path, engines, and each "
                        "model's own parsers and defaults) on remote vLLM workers started with `vllm serve MODEL "
                        "--enable-scale-out`, instead of an engine in this process (see the docs' Fleet page)")
    server.add_argument("--shared-prefix-cache", dest="isolate_prefix_cache", action="store_false",
                        help="let every project's requests share the engine's prefix cache (by default each project's "
                        "requests carry a cache_salt of their own, so one project cannot time another's prompts)")
    server.add_argument("--tool-call-parser", default=None, help="tool-call parser name (vLLM's names)")
    server.add_argument("--keepalive-interval", type=float, default=15.0,
                        help="seconds between SSE keep-alive comments while a stream is idle")
    server.add_argument("--record-engine-output", type=Path, default=None, metavar="FILE",
                        help="append one JSON line of engine output per request to FILE")
    server.add_argument("--replay-engine-output", type=Path, default=None, metavar="FILE",
                        help="serve recorded engine output from FILE instead of running the model")
    server.add_argument("--store", default=os.environ.get("RESPONSES_SERVER_STORE"), metavar="URL",
                        help="where responses are stored: sqlite:///PATH (default: $RESPONSES_SERVER_STORE, else sqlite "
                        "in $RESPONSES_SERVER_DATA or ~/.local/share/responses-server), postgresql://USER@HOST/DB "
                        "(shared by replicas; from the environment, its password stays out of the process list), "
                        "or 'none'")
    server.add_argument("--store-max-age", type=float, default=None, metavar="SECONDS",
                        help="delete stored responses older than this")
    server.add_argument("--store-max-count", type=int, default=None, metavar="N",
                        help="keep at most the newest N stored responses")
    server.add_argument("--metrics-need-key", action="store_true",
                        help="/metrics needs the API key too (by default scrapers read it without one)")
    server.add_argument("--replica-id", default=os.environ.get("RESPONSES_SERVER_REPLICA_ID"), metavar="NAME",
                        help="this replica's name in a shared store, unique among replicas and kept across restarts "
                        "(default: $RESPONSES_SERVER_REPLICA_ID, else HOSTNAME:PORT); a replica that restarts fails "
                        "the background responses it ran")
    server.add_argument("--lease-seconds", type=float, default=30.0, metavar="SECONDS",
                        help="background responses of a replica that stops renewing its lease for this long are "
                        "failed by the others (default 30)")
    server.add_argument("--advertise-url", default=os.environ.get("RESPONSES_SERVER_ADVERTISE_URL"), metavar="URL",
                        help="where the other replicas sharing the store reach this one (http://HOST:PORT): it "
                        "registers there, and requests whose prefix it holds are forwarded to it (default: "
                        "$RESPONSES_SERVER_ADVERTISE_URL; none: it takes no forwarded requests)")
    server.add_argument("--no-forwarding", dest="forwarding", action="store_false",
                        help="serve every request where it lands, never forwarding one to its home replica")
    server.add_argument("--reasoning-key", default=os.environ.get("RESPONSES_SERVER_REASONING_KEY"),
                        metavar="SECRET[,SECRET...]",
                        help="secrets that seal reasoning as encrypted_content (the first seals, all open); default: "
                        "$RESPONSES_SERVER_REASONING_KEY, else a key file made once in the data directory")
    server.add_argument("--harmony", action="store_true",
                        help="use the harmony (gpt-oss) path; automatic for gpt_oss models, needed for replays "
                        "of gpt-oss output without the model (no Hugging Face tokenizer is loaded then)")
    server.add_argument("--max-body-bytes", type=int, default=32 * 1024 * 1024, metavar="N",
                        help="larger request bodies are a 413 (default 32 MiB; Codex sends hundreds of KiB)")
    server.add_argument("--max-file-bytes", type=int, default=DEFAULT_MAX_FILE_BYTES, metavar="N",
                        help="a larger upload to /v1/files is a 413 (default 512 MiB, as OpenAI's)")
    server.add_argument("--embedding-model", default=None, metavar="PATH|none",
                        help="the embedding model of vector stores and file_search, a checkpoint's directory run on "
                        "vLLM's pooling runner (default: the bundled all-MiniLM-L6-v2; none: no vector stores); it "
                        "starts the first time a store needs it")
    server.add_argument("--embedding-window", type=int, default=None, metavar="TOKENS",
                        help="the tokens the embedding model reads at once; longer chunks are embedded a window at a "
                        "time (default: the model's max_seq_length, 256 for all-MiniLM-L6-v2)")
    server.add_argument("--ingestion-seconds", type=float, default=300.0, metavar="SECONDS",
                        help="reading and chunking one file into a vector store may take this long; longer fails "
                        "the file (default 300)")
    server.add_argument("--batch-lines-at-once", type=int, default=BatchSettings.lines_at_once, metavar="N",
                        help="a batch's (and a project's) lines running at once in one process (default 4)")
    server.add_argument("--batch-yield-above", type=int, default=BatchSettings.yield_above, metavar="N",
                        help="while this many interactive responses run in the process, no batch line starts "
                             "(default 1: batches fill the idle time)")
    server.add_argument("--batch-step-aside", action="store_true",
                        help="and the batch lines running then stop (their engine requests aborted) to run again later")
    server.add_argument("--input-workers", type=int, default=WorkLimits.workers, metavar="N",
                        help="processes that read PDFs and decode images, off the event loop (default 2)")
    server.add_argument("--input-work-seconds", type=float, default=WorkLimits.seconds, metavar="SECONDS",
                        help="one PDF or image may take this long to read; longer is a 400 naming its part (default 10)")
    server.add_argument("--input-work-memory-mb", type=int, default=WorkLimits.memory_bytes >> 20, metavar="MB",
                        help="the memory one input worker may map; past it, a 413 naming the part (default 1024)")
    server.add_argument("--max-request-pixels", type=int, default=MAX_REQUEST_PIXELS, metavar="N",
                        help="the pixels of a request's distinct images, in all; more is a 413 (default 64,000,000)")
    server.add_argument("--webhook-url", default=None, metavar="URL",
                        help="post each background response's ending (response.completed, failed, cancelled, "
                             "incomplete) here, signed as Standard Webhooks (needs --webhook-secret-file and a store)")
    server.add_argument("--webhook-secret-file", default=None, metavar="PATH",
                        help="a file holding the webhook signing secret, whsec_ and base64, as OpenAI issues them")
    server.add_argument("--webhook-retry-seconds", type=float, default=WebhookSettings.first_retry_seconds,
                        metavar="SECONDS", help="the wait after a failed delivery, doubled after each (default 5)")
    server.add_argument("--webhook-timeout", type=float, default=WebhookSettings.timeout_seconds, metavar="SECONDS",
                        help="a delivery's time to connect and be answered; a replica's claim on a delivery lasts "
                             "three times this, then another replica may send it (default 10)")
    server.add_argument("--mcp-server", action="append", default=[], metavar="LABEL=URL", type=mcp_server_flag,
                        help="register an MCP server (repeatable): a request names it by server_label alone")
    server.add_argument("--tool-server", action="append", default=[], metavar="NAME=URL", type=tool_server_flag,
                        help="the MCP server behind a gpt-oss built-in tool, as vLLM's --tool-server: browser=URL "
                        "(search, open, find) runs web_search tools, python=URL (a python tool) code_interpreter")
    server.add_argument("--allowed-mcp-domains", default="", metavar="HOST[,HOST...]",
                        help="hosts a request's own MCP server_url may name (default: none; other URLs are a 400 and "
                        "are never contacted)")
    server.add_argument("--mcp-connect-timeout", type=float, default=DEFAULT_CONNECT_SECONDS, metavar="SECONDS",
                        help="to connect to an MCP server and list its tools (default 10)")
    server.add_argument("--mcp-call-timeout", type=float, default=DEFAULT_CALL_SECONDS, metavar="SECONDS",
                        help="for one MCP tool call; past it the call ends with an error the model reads (default 60)")
    server.add_argument("--mcp-max-output-bytes", type=int, default=DEFAULT_MAX_OUTPUT_BYTES, metavar="N",
                        help="an MCP call's output past this is cut, and says so (default 1 MiB)")
    server.add_argument("--max-concurrent-requests", type=int, default=None, metavar="N",
                        help="at most N responses generate at once; past it, a request waits --admission-wait "
                             "seconds for a place, then is a 429 with Retry-After (default: no cap)")
    server.add_argument("--history-memory-mb", type=int, default=256, metavar="MIB",
                        help="what each API process keeps of recent turns (their prompts' text and tokens; chains' "
                             "validated history), within this many MiB each, so that a session's next turn renders, "
                             "tokenizes and reads only what it adds; least recently used first out (default 256; "
                             "0: nothing kept, every turn in full)")
    server.add_argument("--admission-wait", type=float, default=30.0, metavar="SECONDS",
                        help="how long a request past --max-concurrent-requests waits for a place before its 429 "
                             "(default 30; Codex ends its thread on a 429, so a wait serves it better; 0: at once)")
    server.add_argument("--compact-on-overflow", action=argparse.BooleanOptionalAction, default=True,
                        help="a request whose history overflows the context and that leaves truncation unset is "
                             "compacted first (the model summarizes the history, as with context_management) and "
                             "answered, the compaction item first in its output; --no-compact-on-overflow: a 400 "
                             "context_length_exceeded, as OpenAI answers (default: on; clients such as Codex on "
                             "its built-in provider never learn the window, and their thread would end)")
    server.add_argument("--send-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="end a stream whose client has read nothing for this long (default 60)")
    server.add_argument("--default-max-output-tokens", type=int, default=None, metavar="N",
                        help="cap the output of a request that sets no max_output_tokens (default: none, or "
                             f"{BUNDLED_DEFAULT_MAX_OUTPUT_TOKENS} for the bundled model, which can ramble until its "
                             "context is full)")
    server.add_argument("--sampling-defaults", type=sampling_defaults, default=None, metavar="JSON",
                        help="sampling values for requests that leave them unset, before the model's "
                             "generation_config.json: a JSON object of " + ", ".join(SAMPLING_KEYS) + " (default: "
                             "none, or " + json.dumps(BUNDLED_SAMPLING_DEFAULTS) + " for the bundled model, which "
                             "loops without it; its keys are replaced by yours)")
    server.add_argument("--codex-model-info", type=Path, default=None, metavar="FILE",
                        help="a JSON object of fields of the model's entry in Codex's catalog (GET /v1/models from "
                             "Codex), over the ones the server derives (context_window, auto_compact_token_limit, "
                             "input_modalities, base_instructions, ...)")
    server.add_argument("--no-websocket", dest="websocket", action="store_false",
                        help="turn WebSocket mode off: an upgrade on /v1/responses gets a 426, and clients such as "
                        "Codex fall back to HTTP")
    server.add_argument("--websocket-max-seconds", type=float, default=3600.0, metavar="SECONDS",
                        help="a WebSocket connection's lifetime, as OpenAI's (default 60 minutes); its responses "
                        "finish, then it ends with websocket_connection_limit_reached")
    server.add_argument("--api-server-count", type=int, default=1, metavar="N",
                        help="N API server processes on one port in front of one engine core, as `vllm serve "
                        "--api-server-count` (default 1); they share the store, so use sqlite or postgresql")
    server.add_argument("--uvicorn-log-level", default="info", help="uvicorn log level")
    server.add_argument("--log-format", choices=["text", "json"], default="text",
                        help="log lines as text or as JSON objects; either way each line written while a response is "
                             "served names its trace and span ids, response id and project. Traces: set "
                             "OTEL_EXPORTER_OTLP_ENDPOINT (or --otlp-traces-endpoint, which traces the engine too)")
    vllm_engine.add_engine_arguments(parser)
    # vLLM's own --shutdown-timeout (0 = abort) also bounds how long running responses may finish on SIGTERM
    # before they end as response.failed; streams deserve a little time by default.
    parser.set_defaults(shutdown_timeout=30)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["check"]:  # `responses-server check URL`: the conformance scenarios against any endpoint
        from conformance.check import main as check

        sys.exit(check(argv[1:]))
    if argv[:1] == ["keys"]:  # `responses-server keys create | list | revoke`: the keys kept in the store
        from server.launch import data_dir
        from server.records import open_key_records
        from server.tenancy.commands import main as keys

        sys.exit(keys(argv[1:], data_dir() / "responses.db", open_key_records))
    if argv[:1] == ["prompts"]:  # `responses-server prompts create | list | show`: reusable prompts in the store
        from server.launch import data_dir
        from server.records import open_prompt_records
        from server.saved_prompts.commands import main as prompts

        sys.exit(prompts(argv[1:], data_dir() / "responses.db", open_prompt_records))
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_format)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request to an engine worker or MCP server
    try:
        app, context = build_app(args)  # with several API processes, in the parent only to check every flag
    except ValueError as exc:
        parser.error(str(exc))
    processes = f" from {args.api_server_count} API processes" if args.api_server_count > 1 else ""
    names = ", ".join(f"'{start.settings.name}'" for start in context.model_starts)
    names = names or f"'{context.config.served_model_name}'"
    print(f"[responses-server] serving {names} on http://{args.host}:{args.port}/v1{processes}", file=sys.stderr,
          flush=True)
    if args.api_server_count > 1:
        from server.api_processes import serve_api_processes

        serve_api_processes(args)
    else:
        serve(app, context, args)


