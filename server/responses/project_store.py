"""One project's view of its responses and conversations: the only way requests read or change them.

Another project's object is exactly a missing one: every read, change and delete passes the project to the records,
whose query filters by it, and what is saved is stamped with this project. No update touches an object's project.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from server.responses.conversation_records import ConversationRecords
from server.responses.records import ResponseFilter, StoredConversation, StoredResponse
from server.responses.response_records import ResponseRecords
from server.store.database import Order


@dataclass(frozen=True)
class ProjectStore:
    """The responses and conversations as `project` sees them: the calls requests make, each within the project."""

    responses: ResponseRecords
    conversations: ConversationRecords
    project: str

    # -- responses -------------------------------------------------------------------------------------------

    async def save(self, record: StoredResponse, events: list[str] | None = None) -> None:
        await self.responses.save(replace(record, project=self.project), events)

    async def start_owned(self, record: StoredResponse, lease_seconds: float) -> None:
        await self.responses.start_owned(replace(record, project=self.project), lease_seconds)

    async def append_events(self, response_id: str, events: list[str], owner: str,
                            moved_on: StoredResponse | None = None) -> bool:
        return await self.responses.append_events(  # only the running replica's own
            response_id, events, owner, replace(moved_on, project=self.project) if moved_on is not None else None)

    async def finish_owned(self, record: StoredResponse, events: list[str]) -> bool:
        return await self.responses.finish_owned(replace(record, project=self.project), events)

    async def get(self, response_id: str) -> StoredResponse | None:
        return await self.responses.get(response_id, self.project)

    async def events_after(self, response_id: str, after: int) -> list[str]:
        return await self.responses.events_after(response_id, after, self.project)

    async def delete(self, response_id: str) -> bool:
        return await self.responses.delete(response_id, self.project)

    async def stored_item(self, item_id: str) -> dict[str, Any] | None:
        return await self.responses.stored_item(item_id, self.project)

    async def count_responses(self, response_ids: list[str]) -> int:
        return await self.responses.count_responses(response_ids, self.project)

    async def input_items(self, response_id: str, after: str | None, limit: int,
                          order: Order) -> tuple[list[dict[str, Any]], bool]:
        return await self.responses.input_items(response_id, after, limit, order, self.project)

    async def list_responses(self, wanted: ResponseFilter, after: str | None, limit: int,
                             order: Order) -> tuple[list[dict[str, Any]], bool]:
        return await self.responses.list_responses(self.project, wanted, after, limit, order)

    async def request_cancel(self, response_id: str) -> bool:
        return await self.responses.request_cancel(response_id, self.project)

    async def response_home(self, response_id: str) -> str | None:
        return await self.responses.response_home(response_id, self.project)

    # -- conversations -------------------------------------------------------------------------------------

    async def create_conversation(self, conversation: StoredConversation, items: list[dict[str, Any]]) -> None:
        await self.conversations.create_conversation(replace(conversation, project=self.project), items)

    async def get_conversation(self, conversation_id: str) -> StoredConversation | None:
        return await self.conversations.get_conversation(conversation_id, self.project)

    async def update_conversation(self, conversation_id: str, metadata: dict[str, str]) -> StoredConversation | None:
        return await self.conversations.update_conversation(conversation_id, metadata, self.project)

    async def delete_conversation(self, conversation_id: str) -> bool:
        return await self.conversations.delete_conversation(conversation_id, self.project)

    async def add_conversation_items(self, conversation_id: str, items: list[dict[str, Any]],
                                     replica: str | None = None) -> bool:
        return await self.conversations.add_conversation_items(conversation_id, items, replica, self.project)

    async def conversation_items(self, conversation_id: str, after: str | None, limit: int | None,
                                 order: Order) -> tuple[list[dict[str, Any]], bool]:
        return await self.conversations.conversation_items(conversation_id, after, limit, order, self.project)

    async def count_conversation_items(self, conversation_id: str) -> int:
        return await self.conversations.count_conversation_items(conversation_id, self.project)

    async def conversation_item(self, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        return await self.conversations.conversation_item(conversation_id, item_id, self.project)

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        return await self.conversations.delete_conversation_item(conversation_id, item_id, self.project)

    async def conversation_home(self, conversation_id: str) -> str | None:
        return await self.conversations.conversation_home(conversation_id, self.project)
