"""A test double for the engine: plays scripted steps of token ids, and remembers what was aborted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from server.engine.interface import TAKEN, EngineRequest, EngineStep, Prefilled


@dataclass
class ScriptedEngine:
    """Each request plays the next script (cycling): EngineSteps, where an exception in place of a step is raised."""

    tokenizer: Any
    scripts: list[Any]
    max_model_len: int = 8192
    model_type: str | None = None
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    input_modalities: tuple[str, ...] = ("text",)
    image_placeholder: str | None = None
    step_delay: float = 0.0
    first: int = 0  # the number of requests before the scripts were set: the next request plays the first script
    requests: list[EngineRequest] = field(default_factory=list)
    prefilled: list[EngineRequest] = field(default_factory=list)  # warm-ups' prompts, computed without a script
    aborted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineStep]:
        script = self.scripts[(len(self.requests) - self.first) % len(self.scripts)]
        self.requests.append(request)
        done = False
        try:
            yield TAKEN  # as the real engines do
            for step in script if isinstance(script, list) else [script]:
                await asyncio.sleep(self.step_delay)
                if isinstance(step, Exception):
                    raise step
                yield step
            done = True
        finally:
            (self.finished if done else self.aborted).append(request.request_id)

    async def prefill(self, request: EngineRequest) -> Prefilled:
        await asyncio.sleep(self.step_delay)
        self.prefilled.append(request)
        return Prefilled(len(request.prompt_token_ids))

    async def prompt_length(self, request: EngineRequest) -> int:
        return len(request.prompt_token_ids)  # scripts carry their own prompt_tokens; this engine expands nothing

    async def shutdown(self) -> None:
        return None


def steps_from_tokens(token_ids: list[int], cuts: list[int], finish: Any = "stop") -> list[Any]:
    """Split token ids into engine steps at the given cut positions; the last step carries the finish."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(token_ids)}), len(token_ids)]
    chunks = [token_ids[a:b] for a, b in zip(bounds, bounds[1:])] or [[]]
    return [EngineStep(token_ids=chunk, finish_reason=finish if i == len(chunks) - 1 else None)
            for i, chunk in enumerate(chunks)]


@dataclass
class ContinuingEngine:
    """An engine double that answers `answer` from wherever its prompt leaves off, `per_step` tokens a step: a peer
    asked to go on after a lost worker (the prompt ending with the tokens generated so far) plays the rest, as a
    deterministic model would. Its requests are kept."""

    tokenizer: Any
    answer: list[int]
    per_step: int = 2
    max_model_len: int = 8192
    model_type: str | None = None
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    input_modalities: tuple[str, ...] = ("text",)
    image_placeholder: str | None = None
    requests: list[EngineRequest] = field(default_factory=list)

    def done_already(self, prompt: list[int]) -> int:
        """How much of the answer the prompt ends with."""
        return next(count for count in range(len(self.answer), -1, -1)
                    if count == 0 or prompt[-count:] == self.answer[:count])

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineStep]:
        self.requests.append(request)
        rest = self.answer[self.done_already(request.prompt_token_ids):][:request.sampling.max_tokens]
        yield TAKEN
        for start in range(0, len(rest), self.per_step):
            await asyncio.sleep(0)
            last = start + self.per_step >= len(rest)
            yield EngineStep(rest[start:start + self.per_step], finish_reason="stop" if last else None)

    async def prefill(self, request: EngineRequest) -> Prefilled:
        return Prefilled(len(request.prompt_token_ids))

    async def prompt_length(self, request: EngineRequest) -> int:
        return len(request.prompt_token_ids)

    async def shutdown(self) -> None:
        return None
