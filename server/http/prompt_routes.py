"""The `/v1/prompts` routes (this server's extension; OpenAI keeps prompts in its dashboard): make a reusable prompt,
add versions, list and read them, each within the caller's project."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from server.http.bodies import json_object
from server.http.context import required_prompts
from server.http.errors import APIError
from server.saved_prompts.prompt import SavedPrompt
from server.saved_prompts.use import checked_content

router = APIRouter()


@router.post("/v1/prompts")
async def create_prompt(request: Request) -> dict[str, Any]:
    """A new prompt, version "1": `instructions` and/or `input`, with `{{name}}` variables."""
    body = await json_object(request)
    instructions, items = checked_content(body.get("instructions"), body.get("input"))
    return (await required_prompts(request).create(instructions, items)).to_api()


@router.post("/v1/prompts/{prompt_id}/versions")
async def add_version(request: Request, prompt_id: str) -> dict[str, Any]:
    """The prompt's next version; requests that name no version use it from now on."""
    body = await json_object(request)
    instructions, items = checked_content(body.get("instructions"), body.get("input"))
    made = await required_prompts(request).add_version(prompt_id, instructions, items)
    if made is None:
        raise _not_found(prompt_id)
    return made.to_api()


class PromptsQuery:
    """The list route's query."""

    def __init__(self, after: str | None = None, limit: int = Query(default=20, ge=1, le=100),
                 order: Literal["asc", "desc"] = "desc") -> None:
        self.after, self.limit, self.order = after, limit, order


@router.get("/v1/prompts")
async def list_prompts(request: Request, query: Annotated[PromptsQuery, Depends()]) -> dict[str, Any]:
    """The project's prompts, each at its latest version, newest first."""
    prompts, has_more = await required_prompts(request).latest(query.after, query.limit, query.order)
    return _page(prompts, has_more)


@router.get("/v1/prompts/{prompt_id}")
async def get_prompt(request: Request, prompt_id: str,
                     version: Annotated[int | None, Query(ge=1, le=999_999_999)] = None) -> dict[str, Any]:
    """The prompt at `version` (its latest when none is given)."""
    prompt = await required_prompts(request).get(prompt_id, version)
    if prompt is None:
        raise _not_found(prompt_id, version)
    return prompt.to_api()


@router.get("/v1/prompts/{prompt_id}/versions")
async def list_versions(request: Request, prompt_id: str) -> dict[str, Any]:
    """Every version of the prompt, the first first."""
    versions = await required_prompts(request).versions(prompt_id)
    if not versions:
        raise _not_found(prompt_id)
    return _page(versions, False)


def _page(prompts: list[SavedPrompt], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": [prompt.to_api() for prompt in prompts], "has_more": has_more,
            "first_id": prompts[0].id if prompts else None, "last_id": prompts[-1].id if prompts else None}


def _not_found(prompt_id: str, version: int | None = None) -> APIError:
    what = f"Prompt '{prompt_id}' has no version {version}." if version is not None else \
        f"No prompt with id '{prompt_id}' found."
    return APIError(what, status=404, param="version" if version is not None else "prompt_id")
