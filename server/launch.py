"""Building and serving the app from parsed flags: the engine (vLLM, or a replay), the store, the context, and
uvicorn; one API process of several serves its own app on their shared socket."""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path
from typing import Any

from parsers.registry import check_reasoning_parser
from server.batches.batch_run import BatchSettings
from server.attachments.work_pool import WorkLimits
from server.bundled_model import BUNDLED_DEFAULT_MAX_OUTPUT_TOKENS, BUNDLED_SAMPLING_DEFAULTS
from server.codex_catalog import read_overrides
from server.config import ServerConfig
from server.history.sealing import sealer_from
from server.http.auth import api_keys
from server.paths.chat_template import check_tool_call_parser
from server.replicas.registry import ReplicaRegistry
from server.records import MIGRATIONS, open_records
from server import tracing
from server.tenancy.projects_file import ProjectsFile, read_projects_file
from server.responses.records import RetentionPolicy
from server.tools.mcp_servers import McpSettings
from server.webhooks.sender import WebhookSettings
from server.webhooks.signing import WebhookSecret


def resolve_model(args: argparse.Namespace) -> None:
    """No --model: the bundled model, converted once into the cache (a harmony replay needs no model)."""
    if args.model is None and args.harmony and args.replay_engine_output is not None:
        args.served_model_name = args.served_model_name or ["gpt-oss"]
        return
    if args.model is None:
        from server.bundled_model import BUNDLED_MODEL_NAME, ensure_bundled_model  # converts on first use

        args.model = str(ensure_bundled_model())
        if not args.served_model_name:
            args.served_model_name = [BUNDLED_MODEL_NAME]
        if args.default_max_output_tokens is None:
            args.default_max_output_tokens = BUNDLED_DEFAULT_MAX_OUTPUT_TOKENS
        args.sampling_defaults = {**BUNDLED_SAMPLING_DEFAULTS, **(args.sampling_defaults or {})}


def served_name(args: argparse.Namespace) -> str:
    names = args.served_model_name
    if isinstance(names, str):
        return names
    return names[0] if names else args.model


def engine_factory(args: argparse.Namespace) -> Any:
    """A callable that starts the engine (inside the app's event loop): vLLM, or a replay of a recording."""
    from server.engine import vllm_engine
    from server.engine.recording import ReplayEngine, RecordingEngine, read_recordings

    if args.replay_engine_output is not None:
        recordings = read_recordings(args.replay_engine_output)

        def replay() -> Any:
            name = args.tokenizer or args.model
            tokenizer = vllm_engine.load_tokenizer(name) if name and not args.harmony else None
            defaults = vllm_engine.model_sampling_defaults(args.model) if args.model else {}
            engine = ReplayEngine(recordings, tokenizer, max_model_len=args.max_model_len or 1 << 17,
                                  sampling_defaults=defaults)
            # Recording a replay keeps each request's prompt: what a test asserts the model was shown.
            return RecordingEngine(engine, args.record_engine_output) if args.record_engine_output else engine

        return replay

    engine_args = vllm_engine.engine_args(args)

    def live() -> Any:
        engine = vllm_engine.VllmEngine.start(engine_args, harmony=args.harmony)
        if args.record_engine_output is not None:
            return RecordingEngine(engine, args.record_engine_output)
        return engine

    return live


def data_dir() -> Path:
    """Where the server keeps its data: $RESPONSES_SERVER_DATA, else ~/.local/share/responses-server."""
    return Path(os.environ.get("RESPONSES_SERVER_DATA") or Path.home() / ".local" / "share" / "responses-server")


def serve_api_process(args: argparse.Namespace, engine: Any, process: int, sock: socket.socket) -> None:
    """API process `process` of several: its own app, accepting on their shared listening `sock`."""
    app, context = build_app(args, engine, process)
    serve(app, context, args, sock)


def serve(app: Any, context: Any, args: argparse.Namespace, sock: socket.socket | None = None) -> None:
    from server.http.graceful import serve

    try:
        serve(app, context.admission, args.host, args.port, args.uvicorn_log_level, args.shutdown_timeout,
              max_frame_bytes=args.max_body_bytes, sock=sock)
    finally:
        tracing.shutdown()  # the last spans, sent


def _hosts(value: str) -> tuple[str, ...]:
    return tuple(host.strip().lower() for host in value.split(",") if host.strip())


def webhook_settings(args: argparse.Namespace) -> WebhookSettings | None:
    """The webhook flags, checked (ValueError for a combination that cannot work)."""
    if args.webhook_url is None:
        if args.webhook_secret_file is not None:
            raise ValueError("--webhook-secret-file needs --webhook-url")
        return None
    if not args.webhook_url.startswith(("http://", "https://")):
        raise ValueError("--webhook-url must be an http:// or https:// URL")
    if args.webhook_secret_file is None:
        raise ValueError("--webhook-url needs --webhook-secret-file (a whsec_... secret)")
    if args.store == "none":
        raise ValueError("--webhook-url needs a store: deliveries wait in it until they arrive")
    try:
        secret = WebhookSecret.from_file(args.webhook_secret_file)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--webhook-secret-file: {exc}") from exc
    return WebhookSettings(args.webhook_url, secret, first_retry_seconds=args.webhook_retry_seconds,
                           timeout_seconds=args.webhook_timeout)


def advertise_url(url: str | None) -> str | None:
    """The --advertise-url, checked (ValueError unless an http:// or https:// URL with a host)."""
    if url is None:
        return None
    if not url.startswith(("http://", "https://")) or not url.split("://", 1)[1].strip("/"):
        raise ValueError("--advertise-url must be an http:// or https:// URL at which the other replicas reach this one")
    return url.rstrip("/")


def open_retrieval(args: argparse.Namespace, context: Any) -> Any:
    """Vector stores, in the store's database, with the embedding model of `--embedding-model` (None: no store,
    or no embedding model)."""
    from server.retrieval.service import Retrieval, open_index, retrieval_settings

    if context.records is None:
        return None
    settings = retrieval_settings(args.embedding_model, args.embedding_window, args.ingestion_seconds)
    index = open_index(args.store, data_dir() / "responses.db", MIGRATIONS)
    if settings.model is None or index is None:
        return None

    async def start_engine(model: Any) -> Any:
        from server.engine.vllm_embedder import VllmEmbedder

        return await VllmEmbedder.start(model.path, model.name, model.window)

    return Retrieval.open(settings, index, context.records.project_files, context.background.owner, args.lease_seconds,
                          start_engine)


def fleet_starts(args: argparse.Namespace) -> tuple[Any, ...]:
    """The fleet file's models, each started on its remote workers (ValueError for a fleet that cannot be served)."""
    from server.models.fleet_file import read_fleet_file

    if args.api_server_count > 1:
        raise ValueError("--fleet runs one API process per gateway: run more gateways instead of --api-server-count")
    if args.replay_engine_output is not None or args.model is not None:
        raise ValueError("--fleet serves the fleet file's models: drop --model and --replay-engine-output")
    fleet = read_fleet_file(args.fleet)
    memory = args.history_memory_mb * 1024 * 1024
    return tuple(_fleet_start(model, fleet, memory, args.record_engine_output) for model in fleet.models)


def fleet_watch(args: argparse.Namespace, context: Any) -> Any:
    """What reads the fleet file again as it changes, and applies it to the context's models."""
    from functools import partial

    from server.models.fleet_file import read_fleet_file
    from server.models.fleet_watch import FleetWatch
    from server.runs.context import start_model

    memory = args.history_memory_mb * 1024 * 1024
    start_of = partial(_fleet_start, memory=memory, record=args.record_engine_output)
    return FleetWatch(args.fleet, read_fleet_file(args.fleet), context,
                      lambda model, fleet, urls: start_of(model, fleet, urls=urls), start_model)


def _fleet_start(model: Any, fleet: Any, memory: int, record: Path | None = None,
                 urls: list[str] | None = None) -> Any:
    """The model's start on its workers (`urls`, else its `engines` as written); with `record`, each request's
    engine output appended there (as for an engine in this process)."""
    from dataclasses import replace

    from server.engine.recording import RecordingEngine
    from server.engine.remote import RemoteEngine
    from server.engine.retries import RetryBudget
    from server.engine.workers import WorkerSet
    from server.models.registry import ModelStart

    check_reasoning_parser(model.settings.reasoning_parser)
    check_tool_call_parser(model.settings.tool_call_parser)

    workers = WorkerSet.of(model.settings.name, urls or model.engines, fleet.outliers, fleet.load)

    def start() -> Any:
        engine = RemoteEngine.for_model(model.path, workers, model.max_model_len, fleet.health_seconds, model.limits,
                                        RetryBudget(fleet.retry_budget, fleet.min_retries), model.access)
        engine.probe_all()
        engine.watch()
        return RecordingEngine(engine, record) if record is not None else engine

    return ModelStart(replace(model.settings, history_memory_bytes=memory), start, workers)


def build_app(args: argparse.Namespace, engine: Any = None, process: int | None = None) -> tuple[Any, Any]:
    """The app and its serving context from parsed flags (raises ValueError for a flag that cannot work).

    `engine` starts the engine (default: from the flags); `process` is this API process's index when there are
    several, which names it as a replica of its own in the shared store.
    """
    from server.http.app import create_app
    from server.runs.context import ServingContext
    from server.runs.background import BackgroundRuns

    check_reasoning_parser(args.reasoning_parser or None)
    check_tool_call_parser(args.tool_call_parser)
    tracing.configure(getattr(args, "otlp_traces_endpoint", None))
    if args.api_server_count < 1:
        raise ValueError("--api-server-count must be 1 or more")
    starts = fleet_starts(args) if args.fleet is not None else ()
    if starts:
        args.served_model_name = [starts[0].settings.name]
    else:
        resolve_model(args)
    try:
        keys = api_keys(args.api_key, args.api_key_file)
    except OSError as exc:
        raise ValueError(f"--api-key-file: {exc}") from exc
    config = ServerConfig(
        served_model_name=served_name(args),
        api_keys=keys,
        projects=read_projects_file(args.projects_file) if args.projects_file else ProjectsFile(),
        metrics_need_key=args.metrics_need_key,
        keepalive_seconds=args.keepalive_interval,
        reasoning_parser=args.reasoning_parser or None,
        tool_call_parser=args.tool_call_parser,
        harmony=args.harmony,
        max_body_bytes=args.max_body_bytes,
        max_file_bytes=args.max_file_bytes,
        max_concurrent_requests=args.max_concurrent_requests,
        history_memory_bytes=args.history_memory_mb * 1024 * 1024,
        admission_wait_seconds=args.admission_wait,
        compact_on_overflow=args.compact_on_overflow,
        send_timeout_seconds=args.send_timeout,
        default_max_output_tokens=args.default_max_output_tokens,
        sampling_defaults=dict(args.sampling_defaults or {}),
        codex_model_info=read_overrides(args.codex_model_info) if args.codex_model_info else {},
        allowed_media_domains=tuple(getattr(args, "allowed_media_domains", None) or ()),  # vLLM's flag, read too
        websocket=args.websocket,
        websocket_max_seconds=args.websocket_max_seconds,
        api_process=process,
        api_server_count=args.api_server_count,
        input_work=WorkLimits(args.input_workers, args.input_work_seconds, args.input_work_memory_mb << 20),
        batches=BatchSettings(max(1, args.batch_lines_at_once), max(1, args.batch_yield_above), args.batch_step_aside),
        max_request_pixels=args.max_request_pixels,
        webhooks=webhook_settings(args),
        forwarding=args.forwarding and not starts,  # a fleet's gateways all send a turn to the same worker
        isolate_prefix_cache=args.isolate_prefix_cache,
        mcp=McpSettings(dict(args.mcp_server), _hosts(args.allowed_mcp_domains), args.mcp_connect_timeout,
                        args.mcp_call_timeout, args.mcp_max_output_bytes, dict(args.tool_server)),
    )
    records = open_records(args.store, RetentionPolicy(args.store_max_age, args.store_max_count),
                           data_dir() / "responses.db", webhooks=args.webhook_url is not None)
    sealer = sealer_from(args.reasoning_key, data_dir())
    replica = args.replica_id or f"{socket.gethostname()}:{args.port}"
    background = BackgroundRuns(owner=replica if process is None else f"{replica}/{process}",
                                lease_seconds=args.lease_seconds)
    context = ServingContext(config=config, engine_factory=None if starts else engine or engine_factory(args),
                             model_starts=starts, records=records, sealer=sealer, background=background)
    context.retrieval = open_retrieval(args, context)
    if starts:
        context.fleet_watch = fleet_watch(args, context)
    if records is not None:
        context.replicas = ReplicaRegistry(records.replicas, replica, advertise_url(args.advertise_url),
                                           draining=lambda: context.admission.draining)
    return create_app(context), context
