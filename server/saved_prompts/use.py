"""A request's reusable prompt, filled and put before its history: the step of a run's preparation that reads it."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from server.errors import RequestError
from server.requests import InputItem, ResponsesRequest
from server.saved_prompts.project_prompts import ProjectPrompts
from server.saved_prompts.prompt import SavedPrompt
from server.saved_prompts.templates import filled


async def with_saved_prompt(conversation: ResponsesRequest, body: ResponsesRequest,
                            prompts: ProjectPrompts | None) -> tuple[ResponsesRequest, ResponsesRequest]:
    """The conversation with the prompt `body` names before it (its instructions before the request's own, its
    items before the history), and `body` echoing the prompt as used; both as they are when it names none. A
    RequestError names an unknown prompt or version, or a variable it needs and was not given."""
    reference = body.prompt
    if reference is None:
        return conversation, body
    if prompts is None:
        raise RequestError("This server stores nothing (started with --store none): it has no prompts.",
                           param="prompt.id")
    prompt = await _found(prompts, reference.id, int(reference.version) if reference.version else None)
    filling = filled(prompt, reference.variables or {})
    instructions = "\n\n".join(text for text in (filling.instructions, conversation.instructions) if text) or None
    conversation = conversation.model_copy(update={
        "instructions": instructions, "input": [*_items(filling.items), *conversation.input_items()]})
    own = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": body.instructions}]}]
    echoed = filling.echoed() + (own if body.instructions else [])
    return conversation, body.with_prompt(reference.model_copy(update={"version": str(prompt.version)}), echoed)


async def _found(prompts: ProjectPrompts, prompt_id: str, version: int | None) -> SavedPrompt:
    prompt = await prompts.get(prompt_id, version)
    if prompt is not None:
        return prompt
    if version is not None and await prompts.get(prompt_id) is not None:
        raise RequestError(f"Prompt '{prompt_id}' has no version {version}.", param="prompt.version")
    raise RequestError(f"No prompt with id '{prompt_id}' found.", param="prompt.id")


def _items(items: list[dict[str, Any]]) -> list[InputItem]:
    """The filled prompt's items, checked as a request's input is (a variable's image or file part included)."""
    try:
        return ResponsesRequest.model_validate({"input": items}).input_items()
    except ValidationError as error:
        first = error.errors()[0]
        raise RequestError(f"The prompt's input, filled, is not valid: {first['msg']}.", param="prompt") from None


def checked_content(instructions: object, items: object) -> tuple[str | None, list[dict[str, Any]] | None]:
    """A new prompt version's `instructions` (text) and `input` (a string or items, with `{{variables}}`),
    checked as a request's are: a RequestError naming what is wrong."""
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError("instructions must be a string.", param="instructions")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if items is not None and not (isinstance(items, list) and all(isinstance(item, dict) for item in items)):
        raise RequestError("input must be a string or a list of input items.", param="input")
    if not instructions and not items:
        raise RequestError("A prompt needs instructions, input, or both.", param="instructions")
    if items:
        try:
            ResponsesRequest.model_validate({"input": items})
        except ValidationError as error:
            first = error.errors()[0]
            place = ".".join(str(part) for part in first["loc"][:3])
            raise RequestError(f"Invalid prompt input: {first['msg']}.", param=place) from None
    return instructions or None, items or None
