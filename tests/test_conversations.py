"""Conversations: the store's conversation tables, the /v1/conversations routes through the SDK, and
`conversation` on POST /v1/responses (history prepended, input and output appended)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from server.responses.records import StoredConversation
from tests.test_server import MODEL, Harness
from tests.test_store import CALL, TOOLS, open_url, say, stateful  # noqa: F401  (the fixture)
from tests.scripted_engine import steps_from_tokens


def test_store_keeps_conversation_items_in_order_and_pages_them(store_url: str) -> None:
    async def scenario() -> None:
        records = open_url(store_url)
        store = records.conversations
        await store.create_conversation(StoredConversation("conv_1", 7, {"k": "v"}),
                                        [{"id": f"msg_{n}", "type": "message"} for n in range(3)])
        assert await store.add_conversation_items("conv_1", [{"id": "msg_3", "type": "message"}], None, "default")
        assert not await store.add_conversation_items("conv_missing", [{"id": "x", "type": "message"}], None, "default")
        page, more = await store.conversation_items("conv_1", None, 2, "desc", "default")
        assert [i["id"] for i in page] == ["msg_3", "msg_2"] and more
        page, more = await store.conversation_items("conv_1", "msg_2", 2, "desc", "default")
        assert [i["id"] for i in page] == ["msg_1", "msg_0"] and not more
        everything, more = await store.conversation_items("conv_1", None, None, "asc", "default")
        assert [i["id"] for i in everything] == ["msg_0", "msg_1", "msg_2", "msg_3"] and not more
        assert await store.delete_conversation_item("conv_1", "msg_1", "default")
        assert await store.conversation_item("conv_1", "msg_1", "default") is None
        assert (await store.update_conversation("conv_1", {"a": "b"}, "default")).metadata == {"a": "b"}  # type: ignore[union-attr]
        await records.close()
        reopened_records = open_url(store_url)
        reopened = reopened_records.conversations
        assert (await reopened.get_conversation("conv_1", "default")).created_at == 7  # type: ignore[union-attr]
        assert await reopened.delete_conversation("conv_1", "default")
        assert await reopened.conversation_items("conv_1", None, None, "asc", "default") == ([], False)
        await reopened_records.close()

    asyncio.run(scenario())


def test_conversation_routes_through_the_sdk(stateful: Harness) -> None:  # noqa: F811
    client = stateful.client  # strict response validation
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": f"note {n}"} for n in range(5)], metadata={"topic": "t"})
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "t"}
    assert client.conversations.retrieve(conversation.id).id == conversation.id
    assert client.conversations.update(conversation.id, metadata={"topic": "u"}).metadata == {"topic": "u"}
    first = client.conversations.items.list(conversation.id, limit=2, order="asc")
    assert [item.content[0].text for item in first.data] == ["note 0", "note 1"] and first.has_more  # type: ignore[union-attr]
    every = [item.content[0].text for item in client.conversations.items.list(conversation.id, limit=2, order="asc")]  # type: ignore[union-attr]
    assert every == [f"note {n}" for n in range(5)]  # the SDK's auto-pagination follows `after`
    added = client.conversations.items.create(conversation.id, items=[
        {"type": "message", "role": "assistant", "content": "noted"}])
    item = client.conversations.items.retrieve(added.data[0].id, conversation_id=conversation.id)
    assert item.type == "message" and item.role == "assistant"  # type: ignore[union-attr]
    assert client.conversations.items.delete(item.id, conversation_id=conversation.id).id == conversation.id  # type: ignore[union-attr]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(item.id, conversation_id=conversation.id)  # type: ignore[union-attr]
    assert client.conversations.delete(conversation.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation.id)


def test_bad_conversation_requests_are_4xx_with_the_error_body(stateful: Harness) -> None:  # noqa: F811
    base = stateful.base_url
    bad_item = httpx.post(f"{base}/conversations", json={"items": [{"type": "message", "role": "robot",
                                                                    "content": "x"}]})
    assert bad_item.status_code == 400 and bad_item.json()["error"]["param"].startswith("items[0]")
    assert httpx.post(f"{base}/conversations", json={"metadata": {"k": 1}}).json()["error"]["param"] == "metadata"
    assert httpx.post(f"{base}/conversations", content=b"[1]").status_code == 400
    assert httpx.get(f"{base}/conversations/conv_nope/items").status_code == 404
    bad_limit = httpx.get(f"{base}/conversations/conv_nope/items", params={"limit": 0})
    assert bad_limit.status_code == 400 and bad_limit.json()["error"]["param"] == "limit"
    assert httpx.post(f"{base}/conversations/conv_nope/items", json={"items": []}).status_code == 404
    missing = stateful.post(input="hi", conversation="conv_nope")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "conversation"


def test_a_response_in_a_conversation_sees_its_items_and_adds_to_them(stateful: Harness, tokenizer: Any) -> None:  # noqa: F811
    client = stateful.client
    conversation = client.conversations.create(items=[{"role": "user", "content": "My name is Ada."}])
    stateful.play(steps_from_tokens(tokenizer.encode(CALL, add_special_tokens=False), cuts=[3]))
    first = client.responses.create(model=MODEL, input="Weather in Paris?", tools=TOOLS,  # type: ignore[arg-type]
                                    conversation=conversation.id, store=False)
    assert first.conversation is not None and first.conversation.id == conversation.id
    assert "My name is Ada." in tokenizer.decode(stateful.engine.requests[-1].prompt_token_ids)
    call = first.output[0]
    stateful.play(say(tokenizer, "Sunny, Ada."))
    client.responses.create(model=MODEL, conversation={"id": conversation.id}, tools=TOOLS,  # type: ignore[arg-type]
                            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])  # type: ignore[union-attr]
    prompt = tokenizer.decode(stateful.engine.requests[-1].prompt_token_ids)
    for text in ("My name is Ada.", "Weather in Paris?", '"city": "Paris"', "sunny"):
        assert text in prompt
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == ["message", "message", "function_call", "function_call_output",
                                             "message"]
    assert items[2].id == call.id and items[-1].content[0].text == "Sunny, Ada."  # type: ignore[union-attr]


def test_conversation_with_previous_response_id_is_a_400(stateful: Harness, tokenizer: Any) -> None:  # noqa: F811
    conversation = stateful.client.conversations.create()
    stateful.play(say(tokenizer, "ok"))
    previous = stateful.client.responses.create(model=MODEL, input="x")
    both = stateful.post(input="y", conversation=conversation.id, previous_response_id=previous.id)
    assert both.status_code == 400 and both.json()["error"]["param"] == "conversation"
