"""Every capability's records over one database: the rooms that keep them, opened together on `--store`.

The store (server/store) keeps the database and knows none of these; each room keeps its records, their queries and
its migrations. This module is where they meet: it names the rooms whose migrations make the schema, and wires the
one link between them (a background response's ending goes to the webhook outbox in the same transaction).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from server.batches.project_batches import ProjectBatches
from server.batches.records import BatchRecords
from server.replicas.records import ReplicaRecords
from server.responses.conversation_records import ConversationRecords
from server.responses.project_store import ProjectStore
from server.responses.records import RetentionPolicy
from server.responses.response_records import ResponseRecords
from server.retrieval.file_records import FileRecords
from server.retrieval.project_files import ProjectFiles
from server.saved_prompts.project_prompts import ProjectPrompts
from server.saved_prompts.records import PromptRecords
from server.store.database import Database
from server.store.factory import open_database
from server.store.migrations import Migrations
from server.tenancy.key_records import KeyRecords
from server.tenancy.usage_records import UsageRecords
from server.webhooks.outbox import WebhookOutbox, enqueue_ending

# The rooms whose migrations make the schema (a version's scripts may come from several of them).
MIGRATIONS = Migrations(("server.responses", "server.webhooks", "server.replicas", "server.tenancy",
                         "server.retrieval", "server.saved_prompts", "server.batches"))


@dataclass(frozen=True)
class Records:
    """The records of every capability, in one database."""

    database: Database
    responses: ResponseRecords
    conversations: ConversationRecords
    keys: KeyRecords
    usage: UsageRecords
    files: FileRecords
    replicas: ReplicaRecords
    webhooks: WebhookOutbox
    prompts: PromptRecords
    batches: BatchRecords

    @classmethod
    def over(cls, database: Database, retention: RetentionPolicy = RetentionPolicy(),
             webhooks: bool = False) -> "Records":
        """The rooms over `database`. With `webhooks`, each background response's ending is written to the webhook
        outbox in the transaction that ends it."""
        return cls(database, ResponseRecords(database, retention, enqueue_ending if webhooks else None),
                   ConversationRecords(database), KeyRecords(database), UsageRecords(database),
                   FileRecords(database), ReplicaRecords(database), WebhookOutbox(database),
                   PromptRecords(database), BatchRecords(database))

    def project_store(self, project: str) -> ProjectStore:
        """The responses and conversations as `project` sees them."""
        return ProjectStore(self.responses, self.conversations, project)

    def project_files(self, project: str) -> ProjectFiles:
        """The uploaded files as `project` sees them."""
        return ProjectFiles(self.files, project)

    def project_prompts(self, project: str) -> ProjectPrompts:
        """The reusable prompts as `project` sees them."""
        return ProjectPrompts(self.prompts, project)

    def project_batches(self, project: str) -> ProjectBatches:
        """The batches as `project` sees them (and its files, which they read and write)."""
        return ProjectBatches(self.batches, self.project_files(project), project)

    async def close(self) -> None:
        await self.database.close()


def open_records(url: str | None, retention: RetentionPolicy, default_path: Path,
                 webhooks: bool = False) -> Records | None:
    """The records in the database `--store` names (`sqlite:///PATH`, `postgresql://...`, `none`; no URL: SQLite at
    `default_path`); None for `none`."""
    database = open_database(url, default_path, MIGRATIONS)
    return Records.over(database, retention, webhooks) if database is not None else None


def open_key_records(url: str | None, default_path: Path) -> KeyRecords | None:
    """The API keys in the `--store` database, for `responses-server keys` (None for `none`)."""
    records = open_records(url, RetentionPolicy(), default_path)
    return records.keys if records is not None else None


def open_prompt_records(url: str | None, default_path: Path) -> PromptRecords | None:
    """The reusable prompts in the `--store` database, for `responses-server prompts` (None for `none`)."""
    records = open_records(url, RetentionPolicy(), default_path)
    return records.prompts if records is not None else None
