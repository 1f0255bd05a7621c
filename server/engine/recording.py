"""Record and replay of engine output (JSON lines), to reproduce streaming bugs without the model."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, get_args

from server.engine.interface import TAKEN, Engine, EngineFinish, EngineRequest, EngineStep, Prefilled


@dataclass(frozen=True)
class Recording:
    """One request's engine output: its prompt and the token ids of each step, grouping kept."""

    prompt_token_ids: list[int]
    steps: list[list[int]]
    finish_reason: str
    images: list[list[int]] = field(default_factory=list)  # the size (width, height) of each image sent along

    def to_json(self) -> str:
        return json.dumps({"prompt_token_ids": self.prompt_token_ids, "steps": self.steps,
                           "finish_reason": self.finish_reason, "images": self.images})

    @classmethod
    def from_json(cls, line: str) -> "Recording":
        data = json.loads(line)
        return cls(list(data.get("prompt_token_ids", [])), [list(s) for s in data["steps"]],
                   data.get("finish_reason", "stop"), [list(size) for size in data.get("images", [])])


def read_recordings(path: str | Path) -> list[Recording]:
    lines = Path(path).read_text().splitlines()
    recordings = [Recording.from_json(line) for line in lines if line.strip()]
    if not recordings:
        raise ValueError(f"{path} holds no recorded engine output")
    return recordings


@dataclass
class RecordingEngine:
    """Wraps an engine and appends one JSON line per finished request to a file."""

    inner: Engine
    path: Path
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.inner.max_model_len

    @property
    def model_type(self) -> str | None:
        return self.inner.model_type

    @property
    def sampling_defaults(self) -> dict[str, float]:
        return self.inner.sampling_defaults

    @property
    def input_modalities(self) -> tuple[str, ...]:
        return self.inner.input_modalities

    @property
    def image_placeholder(self) -> str | None:
        return self.inner.image_placeholder

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineStep]:
        steps: list[list[int]] = []
        finish = "abort"
        try:
            async for step in self.inner.generate(request):
                if step is not TAKEN:
                    steps.append(list(step.token_ids))
                finish = step.finish_reason or finish
                yield step
        finally:
            images = [list(image.size) for image in request.images]
            line = Recording(list(request.prompt_token_ids), steps, finish, images).to_json()
            async with self._lock:
                _append_line(self.path, line)

    async def prefill(self, request: EngineRequest) -> Prefilled:
        """Not recorded: a recording is one generation, and a replay has nothing to compute."""
        return await self.inner.prefill(request)

    async def prompt_length(self, request: EngineRequest) -> int:
        return await self.inner.prompt_length(request)

    async def shutdown(self) -> None:
        await self.inner.shutdown()

    def reconfigure(self, *settings: Any) -> None:
        """A fleet model's settings changed (RemoteEngine.reconfigure)."""
        self.inner.reconfigure(*settings)  # type: ignore[attr-defined]


class ReplayEngine:
    """Serves recorded steps instead of running a model: request k gets recording k, cycling."""

    def __init__(self, recordings: list[Recording], tokenizer: Any, max_model_len: int,
                 sampling_defaults: dict[str, float] | None = None) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.sampling_defaults = sampling_defaults or {}
        self.model_type: str | None = None  # replays choose their path by --harmony
        self.input_modalities: tuple[str, ...] = ("text",)
        self.image_placeholder: str | None = None
        self._next = itertools.cycle(recordings)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineStep]:
        recording = next(self._next)
        budget = request.sampling.max_tokens
        steps = [s for s in recording.steps if s] or [[]]
        yield TAKEN
        for index, tokens in enumerate(steps):
            await asyncio.sleep(0)  # let the server interleave work like a live engine would
            last = index == len(steps) - 1
            if len(tokens) > budget or (len(tokens) == budget and not last):
                yield EngineStep(token_ids=tokens[:budget], finish_reason="length")
                return
            budget -= len(tokens)
            yield EngineStep(token_ids=tokens, finish_reason=_replayed_finish(recording) if last else None)

    async def prefill(self, request: EngineRequest) -> Prefilled:
        """Nothing to compute: recorded output needs no cache, and no recording is used up."""
        return Prefilled(len(request.prompt_token_ids))

    async def prompt_length(self, request: EngineRequest) -> int:
        return len(request.prompt_token_ids)  # a replay reads text only

    async def shutdown(self) -> None:
        return None


def _replayed_finish(recording: Recording) -> Any:
    return recording.finish_reason if recording.finish_reason in get_args(EngineFinish) else "stop"


def _append_line(path: Path, line: str) -> None:
    """One line appended in one write: API processes recording to one file never interleave their lines."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\n").encode())
    finally:
        os.close(descriptor)
