"""Conversation state: input items as stored (with ids), and the history behind `previous_response_id` or a
`conversation`."""

from __future__ import annotations

import json
from typing import Any, Mapping

from pydantic import TypeAdapter, ValidationError

from server.errors import NotFound, RequestError, invalid_value
from server.requests import CompactionItem, InputItem, MessageItem, ResponsesRequest, ToolOutput
from server.history.chains import KnownChain, KnownChains, KnownConversation
from server.responses.records import RUNNING, StoredResponse
from server.tenancy.keys import DEFAULT_PROJECT
from server.responses.project_store import ProjectStore
from streaming.ids import ITEM_PREFIXES, IdFactory

_ITEMS = TypeAdapter(list[InputItem])


def stored_input_items(request: ResponsesRequest, ids: IdFactory) -> list[dict[str, Any]]:
    """This request's input items in the shape the API lists them (each with an id, content as parts)."""
    return stored_items(request.input_items(), ids)


def stored_items(items: list[Any], ids: IdFactory) -> list[dict[str, Any]]:
    """Validated input items in the shape the API lists them (each with an id, content as parts)."""
    return [_stored_item(item, ids) for item in items]


def validated_items(raw: Any) -> list[Any]:
    """Input items as a client sends them, validated (a 400 naming the item on error)."""
    try:
        return _ITEMS.validate_python(raw)
    except ValidationError as exc:
        raise invalid_value(exc.errors(), prefix="items") from None


def _stored_item(item: Any, ids: IdFactory) -> dict[str, Any]:
    data = item.model_dump(exclude_none=True)
    data["id"] = data.get("id") or ids(ITEM_PREFIXES[item.type])
    if isinstance(item, MessageItem):
        text_type = "output_text" if item.role == "assistant" else "input_text"
        if isinstance(item.content, str):
            data["content"] = [{"type": text_type, "text": item.content}]
        if item.role == "assistant":
            for part in data["content"]:
                part.setdefault("annotations", [])
        data.setdefault("status", "completed")
    elif item.type in ("function_call", "function_call_output", "shell_call", "shell_call_output", "apply_patch_call"):
        data.setdefault("status", "completed")  # the SDK's item types require one
    parts = data.get("content") if isinstance(item, MessageItem) else data.get("output")
    for part in parts if isinstance(item, (MessageItem, ToolOutput)) and isinstance(parts, list) else ():
        if isinstance(part, dict) and part.get("type") == "input_image":
            part.setdefault("detail", "auto")  # OpenAI's default, and the SDK's type requires one
    return data


async def with_history(request: ResponsesRequest, store: ProjectStore | None,
                       earlier: Mapping[str, StoredResponse] | None = None,
                       chains: KnownChains | None = None,
                       project: str = DEFAULT_PROJECT) -> tuple[ResponsesRequest, str | None]:
    """The request with the stored conversation before it: every earlier input and output, oldest first; and where
    that history starts, the same for every turn of it: the conversation's id, or the first response of the chain
    (None: the request continues nothing).

    `earlier` holds responses kept outside the store (those made on a WebSocket connection), looked up first.
    `chains`: `project`'s known chains, so that only the responses not seen before are read and validated.
    Instructions are not inherited (as in OpenAI's API): only this request's apply.
    """
    if request.conversation is not None:
        return await _with_conversation(request, store, chains, project), request.conversation
    if request.previous_response_id is None:
        return request, None
    chain = await _chain(request.previous_response_id, store, earlier or {}, chains, project)
    return request.model_copy(update={"input": [*chain.items, *request.input_items()]}), chain.response_ids[0]


async def _chain(response_id: str, store: ProjectStore | None, earlier: Mapping[str, StoredResponse],
                 chains: KnownChains | None, project: str) -> KnownChain:
    """The chain ending at `response_id`: its responses read back to its start, or to a known chain whose
    responses are all still there (then kept, unless a response in it is still running)."""
    records: list[StoredResponse] = []
    known: KnownChain | None = None
    current: str | None = response_id
    while current is not None:
        found = chains.find(project, current) if chains is not None else None
        if isinstance(found, KnownChain) and await _still_stored(found, store, earlier):
            known = found
            break
        record = earlier.get(current) or (await store.get(current) if store is not None else None)
        if record is None:
            raise NotFound(f"Previous response with id '{current}' not found.",
                           param="previous_response_id", code="previous_response_not_found")
        records.append(record)
        current = record.previous_response_id
    records.reverse()
    added = [item for record in records for item in record.input_items + list(record.response.get("output") or [])]
    chain = KnownChain((known.response_ids if known else ()) + tuple(record.id for record in records),
                       (known.items if known else ()) + tuple(_ITEMS.validate_python(_plaintext(added))),
                       (known.size if known else 0) + len(json.dumps(added)))
    if chains is not None and records and not any(record.status in RUNNING for record in records):
        chains.keep(project, chain.response_ids[-1], chain)
    return chain


async def _still_stored(chain: KnownChain, store: ProjectStore | None, earlier: Mapping[str, StoredResponse]) -> bool:
    """Whether every response of the chain is still there (one query for those the store holds)."""
    stored = [response_id for response_id in chain.response_ids if response_id not in earlier]
    if not stored:
        return True
    return store is not None and await store.count_responses(stored) == len(stored)


def since_last_compaction(request: ResponsesRequest) -> ResponsesRequest:
    """The request from its last compaction item on: a compaction stands for everything before it."""
    items = request.input_items()
    last = max((index for index, item in enumerate(items) if isinstance(item, CompactionItem)), default=0)
    return request.model_copy(update={"input": items[last:]}) if last else request


async def _with_conversation(request: ResponsesRequest, store: ProjectStore | None, chains: KnownChains | None,
                             project: str) -> ResponsesRequest:
    """The conversation's items, oldest first, before this request's input."""
    if request.previous_response_id is not None:
        raise RequestError("conversation and previous_response_id cannot be used together.", param="conversation")
    assert request.conversation is not None
    if store is None or await store.get_conversation(request.conversation) is None:
        raise NotFound(f"Conversation with id '{request.conversation}' not found.", param="conversation")
    items = await _conversation_items(request.conversation, store, chains, project)
    return request.model_copy(update={"input": [*items, *request.input_items()]})


async def _conversation_items(conversation_id: str, store: ProjectStore, chains: KnownChains | None,
                              project: str) -> tuple[Any, ...]:
    """The conversation's items, validated: those known, and the ones added since (read after the last known one)
    when the store's count says nothing else changed; else all of them, read again."""
    known = chains.find(project, conversation_id) if chains is not None else None
    count = await store.count_conversation_items(conversation_id) if known is not None else None
    added: list[dict[str, Any]] = []
    if isinstance(known, KnownConversation) and count is not None and count >= known.count:
        added, _ = await store.conversation_items(conversation_id, known.last_item_id, None, "asc")
    if not isinstance(known, KnownConversation) or count != known.count + len(added):
        known, (added, _) = None, await store.conversation_items(conversation_id, None, None, "asc")
    if known is not None and not added:
        return known.items
    items = (known.items if known else ()) + tuple(_ITEMS.validate_python(_plaintext(added)))
    if chains is not None and items:
        last = added[-1]["id"] if added else ""
        chains.keep(project, conversation_id, KnownConversation(items, last, (known.count if known else 0) + len(added),
                                                                (known.size if known else 0) + len(json.dumps(added))))
    return items


def _plaintext(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored items as the model reads them: reasoning whose text is stored is not opened again from its
    `encrypted_content` (which a changed or unshared reasoning key could no longer open)."""
    return [{key: value for key, value in item.items() if key != "encrypted_content"}
            if item.get("type") == "reasoning" and item.get("content") else item for item in items]
