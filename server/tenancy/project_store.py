"""One project's view of the store: the only way requests read or change stored responses and conversations.

Another project's object is exactly a missing one: every read, change and delete passes the project to the store,
whose query filters by it, and what is saved is stamped with this project. No update touches an object's project.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import time
from typing import Any, Iterable

from server.retrieval.files import StoredFile
from server.store.interface import Order, ResponseFilter, ResponseStore, StoredConversation, StoredResponse


@dataclass(frozen=True)
class ProjectStore:
    """The store as `project` sees it: the methods of ResponseStore that requests use, each within the project."""

    store: ResponseStore
    project: str

    # -- responses -------------------------------------------------------------------------------------------

    async def save(self, record: StoredResponse, events: list[str] | None = None) -> None:
        await self.store.save(replace(record, project=self.project), events)

    async def start_owned(self, record: StoredResponse, lease_seconds: float) -> None:
        await self.store.start_owned(replace(record, project=self.project), lease_seconds)

    async def append_events(self, response_id: str, events: list[str], owner: str) -> bool:
        return await self.store.append_events(response_id, events, owner)  # only the running replica's own

    async def finish_owned(self, record: StoredResponse, events: list[str]) -> bool:
        return await self.store.finish_owned(replace(record, project=self.project), events)

    async def get(self, response_id: str) -> StoredResponse | None:
        return await self.store.get(response_id, self.project)

    async def events_after(self, response_id: str, after: int) -> list[str]:
        return await self.store.events_after(response_id, after, self.project)

    async def delete(self, response_id: str) -> bool:
        return await self.store.delete(response_id, self.project)

    async def stored_item(self, item_id: str) -> dict[str, Any] | None:
        return await self.store.stored_item(item_id, self.project)

    async def count_responses(self, response_ids: list[str]) -> int:
        return await self.store.count_responses(response_ids, self.project)

    async def input_items(self, response_id: str, after: str | None, limit: int,
                          order: Order) -> tuple[list[dict[str, Any]], bool]:
        return await self.store.input_items(response_id, after, limit, order, self.project)

    async def list_responses(self, wanted: ResponseFilter, after: str | None, limit: int,
                             order: Order) -> tuple[list[dict[str, Any]], bool]:
        return await self.store.list_responses(self.project, wanted, after, limit, order)

    async def request_cancel(self, response_id: str) -> bool:
        return await self.store.request_cancel(response_id, self.project)

    async def response_home(self, response_id: str) -> str | None:
        return await self.store.response_home(response_id, self.project)

    # -- conversations -------------------------------------------------------------------------------------

    async def create_conversation(self, conversation: StoredConversation, items: list[dict[str, Any]]) -> None:
        await self.store.create_conversation(replace(conversation, project=self.project), items)

    async def get_conversation(self, conversation_id: str) -> StoredConversation | None:
        return await self.store.get_conversation(conversation_id, self.project)

    async def update_conversation(self, conversation_id: str, metadata: dict[str, str]) -> StoredConversation | None:
        return await self.store.update_conversation(conversation_id, metadata, self.project)

    async def delete_conversation(self, conversation_id: str) -> bool:
        return await self.store.delete_conversation(conversation_id, self.project)

    async def add_conversation_items(self, conversation_id: str, items: list[dict[str, Any]],
                                     replica: str | None = None) -> bool:
        return await self.store.add_conversation_items(conversation_id, items, replica, self.project)

    async def conversation_items(self, conversation_id: str, after: str | None, limit: int | None,
                                 order: Order) -> tuple[list[dict[str, Any]], bool]:
        return await self.store.conversation_items(conversation_id, after, limit, order, self.project)

    async def count_conversation_items(self, conversation_id: str) -> int:
        return await self.store.count_conversation_items(conversation_id, self.project)

    async def conversation_item(self, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        return await self.store.conversation_item(conversation_id, item_id, self.project)

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        return await self.store.delete_conversation_item(conversation_id, item_id, self.project)

    async def conversation_home(self, conversation_id: str) -> str | None:
        return await self.store.conversation_home(conversation_id, self.project)

    # -- files: the store filters by project in each query ----------------------------------------------------

    async def save_file(self, record: StoredFile, parts: Iterable[bytes]) -> None:
        await self.store.save_file(replace(record, project=self.project), parts)

    async def get_file(self, file_id: str) -> StoredFile | None:
        return await self.store.get_file(file_id, self.project, int(time.time()))

    async def list_files(self, purpose: str | None, after: str | None, limit: int,
                         order: Order) -> tuple[list[StoredFile], bool]:
        return await self.store.list_files(self.project, int(time.time()), purpose, after, limit, order)

    async def file_part(self, file_id: str, position: int) -> bytes | None:
        return await self.store.file_part(file_id, self.project, position)

    async def file_content(self, file_id: str, max_bytes: int) -> tuple[StoredFile, bytes | None] | None:
        """The file and its content, read a part at a time (None content: larger than `max_bytes`)."""
        record = await self.get_file(file_id)
        if record is None or record.bytes > max_bytes:
            return (record, None) if record is not None else None
        parts, position = [], 0
        while (part := await self.file_part(file_id, position)) is not None:
            parts.append(part)
            position += 1
        return record, b"".join(parts)

    async def delete_file(self, file_id: str) -> bool:
        return await self.store.delete_file(file_id, self.project)
