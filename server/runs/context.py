"""The serving context: the per-process objects (config, engine, model path, store) every request uses."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from parsers.deltas import OutputText
from server.attachments.files import FileTexts
from server.attachments.work_pool import WorkPool
from server.codex_catalog import ServedModel
from server.config import ServerConfig
from server.constraints.json_grammar import ANY_OBJECT
from server.constraints.rules import OutputRules
from server.engine.interface import Engine
from server.requests import ResponsesRequest
from server.models.registry import Model, Models, ModelStart
from server.paths.base import ModelPath
from server.paths.choice import choose_path
from server.history.chains import KnownChains
from server.prompts.known import KnownPrompts
from server.replicas.registry import ReplicaRegistry
from server.retrieval.project import ProjectRetrieval
from server.retrieval.service import Retrieval
from server.runs.admission import Admission
from server.runs.background import BackgroundRuns
from server.runs.pending_saves import PendingSaves
from server.history.sealing import Sealer
from server.tenancy.authenticator import Authenticator, declared_keys
from server.tenancy.limiter import Limiter
from server.tenancy.usage import MemoryLedger
from server.tools.tool_search import Embed
from server.responses.project_store import ProjectStore
from server.retrieval.project_files import ProjectFiles
from server.batches.project_batches import ProjectBatches
from server.saved_prompts.project_prompts import ProjectPrompts
from server.records import Records
from server.webhooks.sender import WebhookSender
from streaming.builder import ResponseBuilder
from streaming.ids import IdFactory, random_id
from streaming.outcome import Finished
from streaming.sse import event_json

EngineFactory = Callable[[], Engine]


@dataclass
class ServingContext:
    """The per-process objects every request uses; the models (each with its engine) are set once the app has
    started. `engine_factory` starts the embedded engine of the config's model, unless `model_starts` (a fleet's
    models) say otherwise."""

    config: ServerConfig
    engine_factory: EngineFactory | None = None
    model_starts: tuple[ModelStart, ...] = ()
    ids: IdFactory = random_id
    clock: Callable[[], float] = time.time
    models: Models | None = None
    engine: Engine | None = None  # the default model's
    path: ModelPath | None = None  # the default model's
    records: Records | None = None  # every capability's records, in the `--store` database (None: no store)
    background: BackgroundRuns = field(default_factory=BackgroundRuns)
    pending_saves: PendingSaves = field(default_factory=PendingSaves)
    sealer: Sealer = field(default_factory=Sealer.ephemeral)  # seals reasoning for stateless clients
    admission: Admission = field(default_factory=Admission)
    replicas: ReplicaRegistry | None = None  # this replica among those sharing the store (None: no store)
    retrieval: Retrieval | None = None  # vector stores and file_search (None: no store, or no embedding model)
    fleet_watch: Any = None  # a fleet's FleetWatch: the fleet file read again as it changes (None: no fleet)
    started_at: int = field(default_factory=lambda: int(time.time()))
    work_pool: WorkPool = field(init=False)  # CPU-heavy input work, off the event loop
    file_texts: FileTexts = field(init=False)  # files' texts, read once
    # Prompts rendered and tokenized off the event loop, one at a time: a long history takes a thread, not every
    # stream of the process (the tokenizer releases the GIL), and a tokenizer is not shared between threads at once.
    renderer: ThreadPoolExecutor = field(init=False)
    known_chains: KnownChains = field(init=False)  # recent chains' history, read and validated once
    authenticator: Authenticator = field(init=False)  # who a request comes from (server/tenancy)
    limiter: Limiter = field(init=False)  # each project's limits, and every response's usage (server/tenancy)

    def __post_init__(self) -> None:
        self.admission.limit = self.config.max_concurrent_requests
        self.work_pool = WorkPool(self.config.input_work)
        self.file_texts = FileTexts(self.work_pool)
        self.renderer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="render")
        self.known_chains = KnownChains(self.config.history_memory_bytes)
        records = self.records
        self.authenticator = Authenticator(declared_keys(self.config.api_keys, self.config.projects.keys),
                                           table=records.keys if records is not None else None, clock=self.clock)
        projects = self.config.projects
        self.limiter = Limiter(records.usage if records is not None else MemoryLedger(), projects.project_limits,
                               projects.key_limits, replicas=self._live_replicas, clock=self.clock)

    def _live_replicas(self) -> int:
        """The processes sharing the limits on requests at once: the live replicas' API processes."""
        replicas = len(self.replicas.live()) if self.replicas is not None else 1
        return max(1, replicas) * self.config.api_server_count

    def project_store(self, project: str) -> ProjectStore | None:
        """The responses and conversations as `project` sees them: its own only (None: no store)."""
        return self.records.project_store(project) if self.records is not None else None

    def project_prompts(self, project: str) -> ProjectPrompts | None:
        """The reusable prompts as `project` sees them: its own only (None: no store)."""
        return self.records.project_prompts(project) if self.records is not None else None

    def project_batches(self, project: str) -> ProjectBatches | None:
        """The batches as `project` sees them: its own only (None: no store)."""
        return self.records.project_batches(project) if self.records is not None else None

    def project_files(self, project: str) -> ProjectFiles | None:
        """The uploaded files as `project` sees them: its own only (None: no store)."""
        return self.records.project_files(project) if self.records is not None else None

    def tool_search_embedding(self) -> Embed | None:
        """What embeds a tool search's query and tools: the retrieval's embedding model (None: no such model, and
        tool search is lexical)."""
        return self.retrieval.embeddings.query_vector if self.retrieval is not None else None

    def project_retrieval(self, project: str) -> ProjectRetrieval | None:
        """The vector stores as `project` sees them (None: no store, or no embedding model)."""
        files = self.project_files(project)
        if self.retrieval is None or files is None:
            return None
        return ProjectRetrieval(self.retrieval, files, self.clock)

    def model(self, name: str | None) -> Model:
        """The served model a request names (None: the default), once `start()` has run; NotFound for another."""
        assert self.models is not None, "the models start with the app"
        return self.models.get(name)

    def served_models(self) -> list[Model]:
        """Every served model, the default first (none before the app has started)."""
        return list(self.models) if self.models is not None else []

    def input_modalities(self) -> tuple[str, ...]:
        """What the default model reads (text until the engine has started and said more)."""
        return self.engine.input_modalities if self.engine is not None else ("text",)

    def served_model(self) -> ServedModel:
        """What clients are told of the default model (Codex's catalog is made from it)."""
        return self.model(None).served()

    def webhook_sender(self) -> WebhookSender | None:
        """The sender of this process's share of webhook deliveries, when webhooks are configured (with a store)."""
        if self.config.webhooks is None or self.records is None:
            return None
        return WebhookSender(self.config.webhooks, self.records.webhooks, self.background.owner)

    def start(self) -> None:
        """Starts every model's engine and chooses its path (inside the app's event loop)."""
        starts = self.model_starts
        if not starts:
            assert self.engine_factory is not None, "an engine factory, or a fleet's models"
            starts = (ModelStart(self.config.model_settings(), self.engine_factory),)
        self.replace_models([start_model(start) for start in starts])

    def replace_models(self, models: list[Model]) -> None:
        """Serves these models from now on, the first the default (a fleet file read again)."""
        self.models = Models(models)
        self.engine, self.path = self.models.default.engine, self.models.default.path

    async def shutdown_engines(self) -> None:
        for model in self.served_models():
            await model.engine.shutdown()


def start_model(start: ModelStart) -> Model:
    """A model whose engine has started, its path chosen and warmed up."""
    engine = start.start_engine()
    path = choose_path(engine, start.settings)
    _warm_up(start.settings.name, path)
    return Model(start.settings, engine, path, KnownPrompts(start.settings.history_memory_bytes), start.workers)


def _warm_up(model: str, path: ModelPath) -> None:
    """Render and build one throwaway response, so the first real request pays no first-use costs."""
    path.render(ResponsesRequest.model_validate({"model": model, "input": "hi"}))
    path.structural_tag(OutputRules(answer_schema=ANY_OBJECT))  # loads xgrammar (seconds, the first time)
    for ending in ("stop", "length", "error"):  # each terminal event's model is built on its first use (tens of ms)
        builder = ResponseBuilder({"model": model})
        for event in builder.start() + builder.feed([OutputText("warm")]) + builder.finish(Finished(ending)):
            event_json(event)
