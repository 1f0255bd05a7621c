"""The served models by name: each with its engine, its model path and the prompts its recent turns rendered.

One model (the embedded engine's) by default; a fleet file's models otherwise. A request names its model; an unknown
name is OpenAI's 404 (`model_not_found`), and a model none of whose workers is up is a 503 the client retries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from server.codex_catalog import ServedModel
from server.engine.interface import Engine, EngineUnavailable
from server.engine.workers import WorkerSet
from server.errors import NotFound
from server.model_settings import ModelSettings
from server.paths.base import ModelPath
from server.prompts.known import KnownPrompts


@dataclass(frozen=True)
class ModelStart:
    """How a served model starts: its settings, and a callable that starts its engine (inside the event loop)."""

    settings: ModelSettings
    start_engine: Callable[[], Engine]
    workers: WorkerSet | None = None  # a fleet model's workers (None: the engine runs in this process)


@dataclass
class Model:
    """One served model: its settings, engine and path, and the prompts of its recent turns (a prompt rendered for
    one model is never reused for another)."""

    settings: ModelSettings
    engine: Engine
    path: ModelPath
    known_prompts: KnownPrompts
    workers: WorkerSet | None = None  # a fleet model's workers (None: the engine runs in this process)

    @property
    def name(self) -> str:
        return self.settings.name

    def served(self) -> ServedModel:
        """What clients are told of it (Codex's catalog entry is made from it)."""
        return ServedModel(self.name, self.engine.max_model_len, self.engine.input_modalities,
                           self.path.reasoning_efforts, self.settings.default_max_output_tokens)

    def check_up(self) -> None:
        """EngineUnavailable when the model runs on workers and every one of them is down (an ejected one is tried)."""
        if self.workers is not None and not self.workers.alive():
            raise EngineUnavailable(f"No engine worker of the model '{self.name}' is up; try again shortly.")


class Models:
    """The served models by name; the first is the default of a request that names none."""

    def __init__(self, models: Sequence[Model]) -> None:
        assert models, "a server serves one model or more"
        self._by_name = {model.name: model for model in models}
        self.default = models[0]

    def get(self, name: str | None) -> Model:
        """The model a request names (None: the default); NotFound (`model_not_found`) for one not served."""
        if name is None:
            return self.default
        model = self._by_name.get(name)
        if model is None:
            served = ", ".join(f"'{known}'" for known in self._by_name)
            raise NotFound(f"The model '{name}' does not exist; this server serves {served}.", param="model",
                           code="model_not_found")
        return model

    def find(self, name: str) -> Model | None:
        return self._by_name.get(name)

    def __iter__(self) -> Iterator[Model]:
        return iter(self._by_name.values())
