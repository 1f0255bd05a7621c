"""A run's prompt: rendered off the event loop, extending the known prompt its turn names, and kept for the next."""

from __future__ import annotations

import asyncio
from functools import partial

from server import tracing
from server.history.truncation import render_to_fit
from server.metrics import PROMPT_RENDERS, PROMPT_TOKENS
from server.models.registry import Model
from server.paths.base import RenderedPrompt
from server.prompts.known import PromptKeys
from server.requests import ResponsesRequest
from server.runs.context import ServingContext


async def rendered_prompt(context: ServingContext, model: Model, conversation: ResponsesRequest,
                          keys: PromptKeys | None) -> RenderedPrompt:
    """The conversation's prompt for `model`, fitted to its context (truncation), rendered in the render thread; the
    tokens of the prompt its keys find (of this model) are reused where the render repeats it."""
    known = model.known_prompts.find(keys.finding()) if keys is not None else None
    with tracing.span("render") as render:
        rendered = await asyncio.get_running_loop().run_in_executor(
            context.renderer, render_to_fit, partial(model.path.render, known=known), conversation,
            model.engine.max_model_len)
        tracing.set_attributes(render, {"responses_server.prompt.outcome": rendered.outcome,
                                        "responses_server.prompt.reused_tokens": rendered.reused_tokens,
                                        "responses_server.prompt.tokens": len(rendered.token_ids)})
    PROMPT_RENDERS.labels(rendered.outcome).inc()
    PROMPT_TOKENS.labels("reused").inc(rendered.reused_tokens)
    PROMPT_TOKENS.labels("tokenized").inc(len(rendered.token_ids) - rendered.reused_tokens)
    return rendered


def remember_prompt(model: Model, keys: PromptKeys | None, response_id: str, rendered: RenderedPrompt) -> None:
    """Files the prompt for the turns of `model` that will extend it (the path keeps none itself: the chat
    template's)."""
    if keys is not None and rendered.known is not None:
        model.known_prompts.keep(keys.keeping(response_id), rendered.known)
