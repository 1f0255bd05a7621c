"""The engine interface the server talks to: token ids in, steps of token ids out."""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Callable, Literal, Protocol

EngineFinish = Literal["stop", "length", "abort", "error"]
_VLLM_FINISHES: dict[str, EngineFinish] = {"stop": "stop", "length": "length", "abort": "abort"}


def engine_finish(vllm_reason: str | None) -> EngineFinish | None:
    """vLLM's finish reason (in process or from a worker) as the engine's: any other than these three is an error."""
    return _VLLM_FINISHES.get(vllm_reason, "error") if vllm_reason else None


# The sampling settings a model's generation_config.json may set, which apply when a request does not.
SAMPLING_DEFAULT_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
# The sampling settings a server may default (--sampling-defaults): the model's, and the penalties on the output.
SAMPLING_KEYS = (*SAMPLING_DEFAULT_KEYS, "presence_penalty", "frequency_penalty")
PENALTIES = ("repetition_penalty", "presence_penalty", "frequency_penalty")


@dataclass(frozen=True)
class SamplingSettings:
    """The request's sampling knobs, in engine-neutral form (None: the engine's neutral default)."""

    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None  # the request's own random sequence: the same prompt and seed sample the same tokens
    logprobs: int | None = None  # None: not requested; k: the chosen token plus k alternatives
    stop_token_ids: tuple[int, ...] = ()
    banned_token_ids: tuple[int, ...] = ()  # never sampled (ids past the model's vocabulary are ignored)
    structural_tag: str | None = None  # an xgrammar structural tag (JSON) the output must follow
    thinking_token_budget: int | None = None  # reasoning tokens before the engine ends the reasoning (vLLM's)


@dataclass(frozen=True)
class EngineRequest:
    """One generation: a rendered prompt and how to sample."""

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingSettings
    images: tuple[Any, ...] = ()  # PIL images, one for each image placeholder in the prompt, in order
    # The prefix cache's partition: requests share cached prefixes only with requests of the same salt (None: all)
    cache_salt: str | None = None
    priority: int = 0  # vLLM's priority scheduling (lower runs first), where the engine runs with it
    affinity: str | None = None  # what keeps a conversation's turns on one worker of a fleet (its prefix is there)
    project: str = "default"  # whose request: a fleet's queue takes waiting requests in turn between projects
    # The W3C trace context of the span this request runs under (`traceparent`): the engine's own span joins it
    trace_headers: dict[str, str] | None = None
    # Its reader takes the output only at its end (a JSON answer): an engine may give it in one step, not token by
    # token (vLLM then makes one output for it instead of one a step)
    whole_output: bool = False


@dataclass(slots=True)
class StepLogprob:
    """Log probabilities for one generated token: the chosen one first, then the alternatives."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(slots=True)
class EngineStep:
    """What one engine step produced for a request (one or several tokens); one is made per step, so it is slotted,
    not frozen (parsers/deltas.py says why), and never changed once made."""

    token_ids: list[int]
    finish_reason: EngineFinish | None = None
    cached_tokens: int = 0
    logprobs: list[StepLogprob] = field(default_factory=list)
    prompt_tokens: int | None = None  # the prompt's length as the engine ran it (images expanded), first step


TAKEN = EngineStep([])  # an engine's first step: it took the request (no token yet)


@dataclass(frozen=True)
class Prefilled:
    """A prompt the engine computed without generating (a warm-up): its length as run, and how much was cached."""

    prompt_tokens: int
    cached_tokens: int = 0


async def prefill_by_generating(generate: Callable[[EngineRequest], AsyncIterator[EngineStep]],
                                request: EngineRequest) -> Prefilled:
    """A prefill for an engine that can only generate: the prompt is computed as for generation, with one token
    sampled and dropped (closing the steps aborts the rest)."""
    sampling = replace(request.sampling, max_tokens=1, logprobs=None, structural_tag=None, thinking_token_budget=None)
    prompt_tokens, cached = len(request.prompt_token_ids), 0
    async with aclosing(generate(replace(request, sampling=sampling))) as steps:
        async for step in steps:
            prompt_tokens, cached = step.prompt_tokens or prompt_tokens, max(cached, step.cached_tokens)
    return Prefilled(prompt_tokens, cached)


class EngineUnavailable(Exception):
    """The engine could not run the request: no worker of the model is up or took it (before its first step, TAKEN:
    nothing of it ran), or the one running it went away."""


class Engine(Protocol):
    """A running model: streams steps for a request, the first TAKEN once the engine took it (a fleet's workers may
    all refuse it first); closing the iterator aborts the request."""

    tokenizer: Any
    max_model_len: int
    model_type: str | None  # the model config's `model_type` (e.g. "gpt_oss", which chooses the harmony path)
    sampling_defaults: dict[str, float]  # the model's own defaults (generation_config.json), by SAMPLING_DEFAULT_KEYS
    input_modalities: tuple[str, ...]  # what the model reads: "text", and "image" or "audio" for one that sees or hears
    image_placeholder: str | None  # the text that stands for one image in a prompt (vLLM expands it), if it sees

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineStep]: ...

    async def prefill(self, request: EngineRequest) -> Prefilled:
        """Compute the request's prompt so the engine's prefix cache holds it for a request that extends it."""
        ...

    async def prompt_length(self, request: EngineRequest) -> int:
        """The prompt's length as the engine would run it (each image placeholder expanded), computing nothing."""
        ...

    async def shutdown(self) -> None: ...
