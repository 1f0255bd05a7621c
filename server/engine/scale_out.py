"""vLLM's scale-out worker protocol (`vllm serve --enable-scale-out`): an engine request as the JSON body of
`POST /inference/v1/generate`, and the SSE chunks it streams back as engine steps. Pure: no I/O here.

The worker takes token ids and vLLM's `SamplingParams` as JSON, and streams `data: {...}` chunks of token ids with a
`finish_reason` on the last, then (asked with `include_usage`) a chunk of `usage` alone, then `data: [DONE]`. Cached
prompt tokens are in that usage when the worker runs with `--enable-prompt-tokens-details`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterable, AsyncIterator, Callable

from server.engine.interface import SAMPLING_DEFAULT_KEYS, EngineRequest, EngineStep, StepLogprob, engine_finish

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATH = "/inference/v1/abort_requests"
# A JSON answer's tokens come in chunks of this many (the first and the last at once): a wake-up of the gateway a
# chunk, not a token, while its stream still shows the worker alive and resumable well within `idle_seconds`
WHOLE_OUTPUT_INTERVAL = 32
_OPTIONAL = (*SAMPLING_DEFAULT_KEYS, "presence_penalty", "frequency_penalty", "seed")


class WorkerError(Exception):
    """The worker refused the request or reported an error in its stream (the request's own failure)."""


def generate_body(request: EngineRequest, vocab_size: int | None = None,
                  content_parts: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The body of `POST /inference/v1/generate` for `request`: `token_ids` first, as routers that match the body's
    text as a prefix (vllm-router's cache_aware) expect. Banned ids past the model's `vocab_size` are left out (the
    worker refuses them; they cannot be sampled anyway). `content_parts`: the prompt's images, one for each of its
    placeholders in order, which the worker's processor expands."""
    sampling = request.sampling
    params: dict[str, Any] = {"max_tokens": sampling.max_tokens, "detokenize": False, "skip_special_tokens": False}
    for key in _OPTIONAL:
        if getattr(sampling, key) is not None:
            params[key] = getattr(sampling, key)
    if sampling.logprobs is not None:
        params["logprobs"] = sampling.logprobs
    if sampling.stop_token_ids:
        params["stop_token_ids"] = list(sampling.stop_token_ids)
    banned = [token_id for token_id in sampling.banned_token_ids if vocab_size is None or token_id < vocab_size]
    if banned:
        params["logit_bias"] = {str(token_id): -100.0 for token_id in banned}
    if request.whole_output:
        params["stream_interval"] = WHOLE_OUTPUT_INTERVAL
    if sampling.thinking_token_budget is not None:
        params["thinking_token_budget"] = sampling.thinking_token_budget
    if sampling.structural_tag is not None:
        params["structured_outputs"] = {"structural_tag": sampling.structural_tag}
    body: dict[str, Any] = {
        "token_ids": request.prompt_token_ids,
        "sampling_params": params,
        "request_id": request.request_id,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if content_parts:
        body["content_parts"] = content_parts
    if request.cache_salt is not None:
        body["cache_salt"] = request.cache_salt
    if request.priority:
        body["priority"] = request.priority
    return body


async def sse_payloads(body: AsyncIterable[bytes], heard: Callable[[], object] | None = None) -> AsyncIterator[str]:
    """The `data:` payloads of an SSE body as it arrives in pieces of any size (the worker writes one line each);
    `heard` is called as each piece arrives."""
    pending = b""
    async for piece in body:
        if heard is not None:
            heard()
        lines = (pending + piece).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if line.startswith(b"data: "):
                yield line[6:].rstrip(b"\r").decode()


@dataclass
class ChunkReader:
    """Turns the worker's SSE `data:` payloads into engine steps; the step that finishes is held until the usage
    chunk after it (or the stream's end), so that it carries the prompt's length and its cached tokens."""

    top_logprobs: int = 0  # the alternatives asked for beside each sampled token
    _held: EngineStep | None = None
    done: bool = False

    def read(self, payload: str) -> list[EngineStep]:
        """The steps one `data:` payload completes (WorkerError for an error the worker streamed)."""
        if payload == "[DONE]":
            self.done = True
            return self.flush()
        chunk = json.loads(payload)
        if "error" in chunk or chunk.get("object") == "error":
            error = chunk.get("error", chunk)
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise WorkerError(f"the worker failed the request: {message}")
        steps: list[EngineStep] = []
        for choice in chunk.get("choices") or []:
            finish = choice.get("finish_reason")
            step = EngineStep(token_ids=list(choice.get("token_ids") or []),
                              finish_reason=engine_finish(finish),
                              logprobs=_logprobs(choice.get("logprobs"), self.top_logprobs))
            if step.finish_reason is not None:
                self._held = step
            else:
                steps.append(step)
        usage = chunk.get("usage")
        if usage and self._held is not None:
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
            self._held = EngineStep(self._held.token_ids, self._held.finish_reason, cached_tokens=cached,
                                    logprobs=self._held.logprobs, prompt_tokens=usage.get("prompt_tokens"))
        return steps

    def flush(self) -> list[EngineStep]:
        """The held finishing step, if any (at the stream's end)."""
        held, self._held = self._held, None
        return [held] if held is not None else []


def _logprobs(logprobs: dict[str, Any] | None, top_k: int) -> list[StepLogprob]:
    """The worker's logprobs (the sampled token first, then candidates by rank, 1-based) as engine-neutral ones: the
    sampled token and the top k by rank, as the in-process engine gives them."""
    if not logprobs or not logprobs.get("content"):
        return []
    steps = []
    for entry in logprobs["content"]:
        candidates = entry.get("top_logprobs") or []
        ranked = sorted({(other["rank"], other["token_id"], other["logprob"]) for other in candidates
                         if other.get("rank") is not None and 0 < other["rank"] <= top_k})
        top = tuple((token_id, logprob) for _, token_id, logprob in ranked)
        steps.append(StepLogprob(token_id=entry["token_id"], logprob=entry["logprob"], top=top))
    return steps
