"""Conversations: create, retrieve, update and delete them, and list, add, retrieve and delete their items."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from server.history.conversation import stored_items, validated_items
from server.http.bodies import json_object
from server.http.context import required_store, serving_context
from server.http.errors import APIError
from server.http.stored_routes import PageQuery, list_page, read_includes
from server.responses.records import StoredConversation
from server.responses.project_store import ProjectStore
from server.responses.read_includes import shown_item, shown_items
from streaming.ids import CONVERSATION

router = APIRouter()


@router.post("/v1/conversations")
async def create_conversation(request: Request) -> dict[str, Any]:
    store = required_store(request)
    context = serving_context(request)
    body = await json_object(request, empty={})
    items = stored_items(validated_items(body.get("items") or []), context.ids)
    conversation = StoredConversation(context.ids(CONVERSATION), int(context.clock()),
                                      _metadata(body.get("metadata")))
    await store.create_conversation(conversation, items)
    return _conversation_json(conversation)


@router.get("/v1/conversations/{conversation_id}")
async def retrieve_conversation(request: Request, conversation_id: str) -> dict[str, Any]:
    return _conversation_json(await _existing(required_store(request), conversation_id))


@router.post("/v1/conversations/{conversation_id}")
async def update_conversation(request: Request, conversation_id: str) -> dict[str, Any]:
    store = required_store(request)
    body = await json_object(request, empty={})
    if "metadata" not in body:
        raise APIError("metadata is required.", param="metadata")
    await _existing(store, conversation_id)
    updated = await store.update_conversation(conversation_id, _metadata(body["metadata"]))
    return _conversation_json(updated or await _existing(store, conversation_id))


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(request: Request, conversation_id: str) -> dict[str, Any]:
    if not await required_store(request).delete_conversation(conversation_id):
        raise _not_found(conversation_id)
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(request: Request, conversation_id: str, page: Annotated[PageQuery, Depends()],
                     include: Annotated[frozenset[str], Depends(read_includes)]) -> dict[str, Any]:
    store = required_store(request)
    await _existing(store, conversation_id)
    items, has_more = await store.conversation_items(conversation_id, page.after, page.limit, page.order)
    return list_page(shown_items(items, include), has_more)


@router.post("/v1/conversations/{conversation_id}/items")
async def add_items(request: Request, conversation_id: str) -> dict[str, Any]:
    store = required_store(request)
    body = await json_object(request, empty={})
    if not isinstance(body.get("items"), list):
        raise APIError("items must be a list of input items.", param="items")
    items = stored_items(validated_items(body["items"]), serving_context(request).ids)
    if not await store.add_conversation_items(conversation_id, items):
        raise _not_found(conversation_id)
    return list_page(items, False)


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def retrieve_item(request: Request, conversation_id: str, item_id: str,
                        include: Annotated[frozenset[str], Depends(read_includes)]) -> dict[str, Any]:
    store = required_store(request)
    await _existing(store, conversation_id)
    item = await store.conversation_item(conversation_id, item_id)
    if item is None:
        raise APIError(f"Item with id '{item_id}' not found.", status=404, param="item_id")
    return shown_item(item, include)


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(request: Request, conversation_id: str, item_id: str) -> dict[str, Any]:
    store = required_store(request)
    conversation = await _existing(store, conversation_id)
    if not await store.delete_conversation_item(conversation_id, item_id):
        raise APIError(f"Item with id '{item_id}' not found.", status=404, param="item_id")
    return _conversation_json(conversation)


def _metadata(value: Any) -> dict[str, str]:
    """Up to 16 string pairs, as in OpenAI's API."""
    value = value or {}
    if not isinstance(value, dict) or len(value) > 16 or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512 for k, v in value.items()):
        raise APIError("metadata must map at most 16 keys (up to 64 characters) to strings (up to 512).",
                       param="metadata")
    return value


async def _existing(store: ProjectStore, conversation_id: str) -> StoredConversation:
    conversation = await store.get_conversation(conversation_id)
    if conversation is None:
        raise _not_found(conversation_id)
    return conversation


def _not_found(conversation_id: str) -> APIError:
    return APIError(f"Conversation with id '{conversation_id}' not found.", status=404, param="conversation_id")


def _conversation_json(conversation: StoredConversation) -> dict[str, Any]:
    return {"id": conversation.id, "object": "conversation", "created_at": conversation.created_at,
            "metadata": conversation.metadata}
