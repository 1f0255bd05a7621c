"""Stored conversations: their fields, and their items appended in order, each with an id; every call names the project,
and its query filters by it (ProjectStore is how requests call them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server.responses.records import StoredConversation
from server.responses.rows import OWNED_CONVERSATION, item_rows, owned_page
from server.store.database import Database, Order, Session

_IN_PROJECT = f"conversation_id = ? AND item_id = ? AND EXISTS ({OWNED_CONVERSATION})"


@dataclass
class ConversationRecords:
    """The conversations in `database`."""

    database: Database

    async def create_conversation(self, conversation: StoredConversation, items: list[dict[str, Any]]) -> None:
        def write(db: Session) -> None:
            db.execute("INSERT INTO conversations (id, created_at, metadata, project) VALUES (?, ?, ?, ?)",
                       (conversation.id, conversation.created_at, json.dumps(conversation.metadata),
                        conversation.project))
            _append(db, conversation.id, items)

        await self.database.run("create_conversation", write)

    async def get_conversation(self, conversation_id: str, project: str) -> StoredConversation | None:
        row = await self.database.run("get_conversation", lambda db: db.execute(
            "SELECT id, created_at, metadata, project FROM conversations WHERE id = ? AND project = ?",
            (conversation_id, project)).fetchone())
        return _conversation(row)

    async def update_conversation(self, conversation_id: str, metadata: dict[str, str],
                                  project: str) -> StoredConversation | None:
        row = await self.database.run("update_conversation", lambda db: db.execute(
            "UPDATE conversations SET metadata = ? WHERE id = ? AND project = ? RETURNING id, created_at, metadata, "
            "project", (json.dumps(metadata), conversation_id, project)).fetchall())  # (all: SQLite's RETURNING)
        return _conversation(row[0] if row else None)

    async def delete_conversation(self, conversation_id: str, project: str) -> bool:
        """Delete the conversation if it is `project`'s."""
        return await self.database.run("delete_conversation", lambda db: db.execute(
            "DELETE FROM conversations WHERE id = ? AND project = ?", (conversation_id, project)).rowcount > 0)

    async def add_conversation_items(self, conversation_id: str, items: list[dict[str, Any]], replica: str | None,
                                     project: str) -> bool:
        """Append items; False if the conversation does not exist. `replica`: the replica whose response added them,
        now the conversation's home."""
        def write(db: Session) -> bool:  # the update locks the conversation's row until the items are in
            if db.execute("UPDATE conversations SET replica = COALESCE(?, replica) WHERE id = ? AND project = ?",
                          (replica, conversation_id, project)).rowcount == 0:
                return False
            _append(db, conversation_id, items)
            return True

        return await self.database.run("add_conversation_items", write)

    async def conversation_items(self, conversation_id: str, after: str | None, limit: int | None, order: Order,
                                 project: str) -> tuple[list[dict[str, Any]], bool]:
        """A page of items (`limit` None: all of them) and whether more follow."""
        return await self.database.run("conversation_items", lambda db: owned_page(
            db, OWNED_CONVERSATION, "conversation_items", "conversation_id", conversation_id, project, after, limit,
            order))

    async def conversation_item(self, conversation_id: str, item_id: str, project: str) -> dict[str, Any] | None:
        row = await self.database.run("conversation_item", lambda db: db.execute(
            f"SELECT item FROM conversation_items WHERE {_IN_PROJECT}",
            (conversation_id, item_id, conversation_id, project)).fetchone())
        return json.loads(row[0]) if row else None

    async def count_conversation_items(self, conversation_id: str, project: str) -> int:
        return await self.database.run("count_conversation_items", lambda db: int(db.execute(
            f"SELECT count(*) FROM conversation_items WHERE conversation_id = ? AND EXISTS ({OWNED_CONVERSATION})",
            (conversation_id, conversation_id, project)).fetchone()[0]))

    async def delete_conversation_item(self, conversation_id: str, item_id: str, project: str) -> bool:
        return await self.database.run("delete_conversation_item", lambda db: db.execute(
            f"DELETE FROM conversation_items WHERE {_IN_PROJECT}",
            (conversation_id, item_id, conversation_id, project)).rowcount > 0)

    async def conversation_home(self, conversation_id: str, project: str) -> str | None:
        """The replica whose response last added to the conversation (None: none yet, or no such conversation)."""
        row = await self.database.run("conversation_home", lambda db: db.execute(
            "SELECT replica FROM conversations WHERE id = ? AND project = ?", (conversation_id, project)).fetchone())
        return row[0] if row else None


def _conversation(row: Any) -> StoredConversation | None:
    return StoredConversation(row[0], row[1], json.loads(row[2]), row[3]) if row else None


def _append(db: Session, conversation_id: str, items: list[dict[str, Any]]) -> None:
    """Items after the last (the caller holds the conversation's row lock); an id already there is not added twice."""
    (last,) = db.execute("SELECT COALESCE(MAX(position), -1) FROM conversation_items WHERE conversation_id = ?",
                         (conversation_id,)).fetchone() or (-1,)
    db.executemany("INSERT INTO conversation_items (conversation_id, position, item_id, item) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT DO NOTHING", item_rows(conversation_id, last + 1, items))
