"""Codex's items that are not tool calls, as the vocabulary the model paths render: messages, a compaction, or
nothing, each with its reason (tool calls are server/tools/function_view.py's); and its image tool, offered only to
a model that reads images."""

from __future__ import annotations

from typing import Any

from server.requests import (
    AdditionalToolsItem,
    AgentMessageItem,
    CompactionItem,
    CompactionTriggerItem,
    ConfigurationUpdateItem,
    ContextCompactionItem,
    ImageGenerationCallItem,
    MessageItem,
    ResponsesRequest,
)

# Codex offers this tool (its output: the image at a path) whatever its catalog says the model reads.
IMAGE_TOOL = "view_image"
_CODEX_ITEMS = (AgentMessageItem, ImageGenerationCallItem, ContextCompactionItem, CompactionTriggerItem,
                AdditionalToolsItem, ConfigurationUpdateItem)


def rendered_codex_items(request: ResponsesRequest) -> ResponsesRequest:
    """The request with Codex's own items as the items the model reads."""
    items = request.input_items()
    if not any(isinstance(item, _CODEX_ITEMS) for item in items):
        return request
    return request.model_copy(update={"input": [shown for item in items for shown in _shown(item)]})


def _shown(item: Any) -> list[Any]:
    if isinstance(item, AgentMessageItem):  # another agent's words reach this one as a user's would
        text = "".join(part.as_text() for part in item.content)  # sealed parts read as nothing
        return [MessageItem(role="user", content=f"[{item.author} to {item.recipient}] {text}")] if text else []
    if isinstance(item, ImageGenerationCallItem):  # the image itself (base64) is no text a model reads
        return [MessageItem(role="assistant", content=f"[Generated an image: {item.revised_prompt}]")] \
            if item.revised_prompt else []
    if isinstance(item, ContextCompactionItem):  # with content, it opens as our compaction does (or is a 400)
        return [CompactionItem(type="compaction", encrypted_content=item.encrypted_content, id=item.id)] \
            if item.encrypted_content else []
    # A compaction trigger asks for the response (server/runs/prepare.py), added tools are the client's to offer in
    # `tools`, and a configuration update is a setting the request's own fields already carry.
    if isinstance(item, (CompactionTriggerItem, AdditionalToolsItem, ConfigurationUpdateItem)):
        return []
    return [item]


def without_image_tool(request: ResponsesRequest, input_modalities: tuple[str, ...]) -> ResponsesRequest:
    """The request without Codex's image tool when the model reads no images: called, its output (an image) could
    not be shown to the model, and the thread would end on the refusal."""
    if "image" in input_modalities:
        return request
    tools = [tool for tool in request.tools if not (tool.get("type") == "function" and tool.get("name") == IMAGE_TOOL)]
    return request if len(tools) == len(request.tools) else request.model_copy(update={"tools": tools})
