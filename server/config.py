"""Server settings that are not engine settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from server.batches.batch_run import BatchSettings
from server.attachments.media import MAX_REQUEST_PIXELS
from server.attachments.work_pool import WorkLimits
from server.model_settings import ModelSettings
from server.retrieval.files import DEFAULT_MAX_FILE_BYTES
from server.tenancy.projects_file import ProjectsFile
from server.tools.mcp_servers import McpSettings
from server.webhooks.sender import WebhookSettings


@dataclass(frozen=True)
class ServerConfig:
    """What the HTTP layer needs to know, fixed at start-up; the model fields are the embedded engine's model's (a
    fleet's models carry their own: `server/models/fleet_file.py`)."""

    served_model_name: str
    api_keys: tuple[str, ...] = ()  # keys of the default project (--api-key); none, nor any other: no key needed
    projects: ProjectsFile = ProjectsFile()  # the projects file: keys by hash, limits (server/tenancy)
    metrics_need_key: bool = False  # /metrics is open to scrapers unless this is set
    keepalive_seconds: float = 15.0
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    harmony: bool = False  # force the harmony (gpt-oss) path
    max_body_bytes: int = 32 * 1024 * 1024  # Codex sends hundreds of KiB; far more is a mistake or an attack
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES  # one uploaded file (/v1/files), as OpenAI's
    max_concurrent_requests: int | None = None  # responses generating at once; past it, a wait, then 429
    # What an API process keeps of recent turns so the next renders and reads only what it adds: known prompts (and
    # harmony's rendered messages), and known chains, each within this many bytes
    history_memory_bytes: int = 256 * 1024 * 1024
    admission_wait_seconds: float = 0.0  # how long a request past the cap waits for a place (0: a 429 at once)
    # A request whose history overflows the context, truncation unset: compacted first and answered (False: a 400)
    compact_on_overflow: bool = False
    send_timeout_seconds: float | None = 60.0  # a stream whose client reads nothing for this long is ended
    default_max_output_tokens: int | None = None  # the cap of a request that sets no max_output_tokens
    # Sampling values for requests that leave them unset, before the model's generation_config.json's
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    codex_model_info: dict[str, Any] = field(default_factory=dict)  # the operator's fields of Codex's catalog entry
    allowed_media_domains: tuple[str, ...] = ()  # hosts image URLs may be fetched from (none: data URLs only)
    websocket: bool = True  # WebSocket mode on GET /v1/responses (off: an upgrade gets 426, clients fall back to HTTP)
    websocket_max_seconds: float = 3600.0  # a connection's lifetime, as OpenAI's; then it ends with an error
    api_process: int | None = None  # this process's index when several API processes share the port
    api_server_count: int = 1  # the API processes sharing the port (each takes its share of per-process limits)
    input_work: WorkLimits = field(default_factory=WorkLimits)  # PDF text and image decoding: workers, time, memory
    batches: BatchSettings = field(default_factory=BatchSettings)  # how much of the server batches may take
    max_request_pixels: int = MAX_REQUEST_PIXELS  # of a request's distinct images, in all
    webhooks: WebhookSettings | None = None  # where background responses' endings are posted (None: nowhere)
    # Each project's requests carry a cache_salt of their own, so one project cannot time another's prompts through
    # the engine's prefix cache (False: --shared-prefix-cache, every project shares it, as a common prompt may want)
    isolate_prefix_cache: bool = True
    forwarding: bool = True  # requests go to the replica that holds their prefix (--no-forwarding: off)
    mcp: McpSettings = field(default_factory=McpSettings)  # MCP servers a request may use, and the bounds of a call

    def model_settings(self) -> ModelSettings:
        """The embedded engine's model's settings."""
        return ModelSettings(self.served_model_name, self.reasoning_parser, self.tool_call_parser, self.harmony,
                             self.default_max_output_tokens, dict(self.sampling_defaults), dict(self.codex_model_info),
                             self.history_memory_bytes)
