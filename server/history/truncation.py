"""Fitting a conversation into the context: with `truncation: "auto"` the oldest input items are dropped.

Never dropped: the instructions, system and developer messages, and the last user message. Dropped together:
a tool call with its output, and reasoning with the item it led to. The fewest items are dropped that make the
prompt fit (a binary search over how many of the oldest groups go, a few renders in all).
"""

from __future__ import annotations

from typing import Any, Callable

from server.errors import RequestError
from server.requests import (
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
    ResponsesRequest,
)
from server.paths.base import RenderedPrompt

# With truncation "auto" and no max_output_tokens, this much room is kept for the answer (at most a quarter of
# the context).
DEFAULT_ANSWER_ROOM = 1024


def render_to_fit(render: Callable[[ResponsesRequest], RenderedPrompt], request: ResponsesRequest,
                  context_length: int) -> RenderedPrompt:
    """The rendered prompt, with the oldest items dropped under truncation "auto"; a 400 when it cannot fit."""
    rendered = render(request)
    if request.truncation != "auto":
        if len(rendered.token_ids) >= context_length:
            raise _too_long(len(rendered.token_ids), context_length, "")
        return rendered
    room = min(request.max_output_tokens or DEFAULT_ANSWER_ROOM, max(context_length // 4, 1))

    def fits(prompt: RenderedPrompt) -> bool:
        return len(prompt.token_ids) + room <= context_length

    if fits(rendered):
        return rendered
    items = request.input_items()
    groups = droppable_groups(items)

    def without(count: int) -> RenderedPrompt:
        dropped = {index for group in groups[:count] for index in group}
        return render(request.model_copy(update={"input": [item for i, item in enumerate(items)
                                                           if i not in dropped]}))

    best = without(len(groups)) if groups else rendered
    if not fits(best):
        raise _too_long(len(best.token_ids), context_length,
                        " after dropping every input item that truncation 'auto' may drop")
    low, high = 1, len(groups)  # dropping `high` groups fits (`best`); find the fewest that do
    while low < high:
        middle = (low + high) // 2
        candidate = without(middle)
        if fits(candidate):
            high, best = middle, candidate
        else:
            low = middle + 1
    return best


def fewest_items(request: ResponsesRequest) -> ResponsesRequest:
    """The request with every item truncation "auto" may drop dropped: the least of it a prompt can hold."""
    items = request.input_items()
    dropped = {index for group in droppable_groups(items) for index in group}
    return request.model_copy(update={"input": [item for i, item in enumerate(items) if i not in dropped]})


def droppable_groups(items: list[Any]) -> list[list[int]]:
    """Indices of the items truncation may drop, in groups that go together, oldest group first."""
    last_user = max((i for i, item in enumerate(items) if isinstance(item, MessageItem) and item.role == "user"),
                    default=None)
    groups: list[list[int]] = []
    group_of_call: dict[str, int] = {}
    reasoning: list[int] = []  # reasoning items waiting for the item they led to
    for index, item in enumerate(items):
        if isinstance(item, MessageItem) and (item.role in ("system", "developer") or index == last_user):
            continue
        if isinstance(item, ReasoningItem):
            reasoning.append(index)
        elif isinstance(item, (FunctionCallOutputItem, CustomToolCallOutputItem)) and item.call_id in group_of_call:
            groups[group_of_call[item.call_id]].append(index)
        else:
            if isinstance(item, (FunctionCallItem, CustomToolCallItem)):
                group_of_call[item.call_id] = len(groups)
            groups.append(reasoning + [index])
            reasoning = []
    if reasoning:
        groups.append(reasoning)
    return groups


def check_expanded_fits(prompt_length: int, context_length: int) -> None:
    """A 400 when the prompt as the engine runs it, each image placeholder grown into the image's tokens, leaves no
    room for an answer: the renders above count a placeholder as its own tokens."""
    if prompt_length >= context_length:
        raise _too_long(prompt_length, context_length, " once its images are expanded")


def _too_long(tokens: int, context_length: int, after: str) -> RequestError:
    return RequestError(f"The input is {tokens} tokens{after}; this model's context holds {context_length}, with room "
                    "for the answer. Shorten the input, or send truncation: 'auto' to drop the oldest items.",
                    param="input", code="context_length_exceeded")
