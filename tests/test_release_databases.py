"""A database the last release wrote opens in place with this one, on both backends: every kind of record it kept
reads back as it was written, and new records go beside them.

`tests/data/release_databases/` holds what release 58 (before each capability kept its own records) wrote: a SQLite
file, and PostgreSQL's `pg_dump`: a response with its log, a background response whose ending waits in the webhook
outbox, a conversation, an API key, a minute of usage, an uploaded file and a replica's heartbeat.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from server.records import Records
from server.responses.records import ResponseFilter, StoredResponse
from tests.stores import records_at

RELEASE = Path(__file__).parent / "data" / "release_databases"


@pytest.fixture(params=["sqlite", "postgresql"])
def release_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A copy of the release's database."""
    if request.param == "sqlite":
        shutil.copy(RELEASE / "responses.db", tmp_path / "responses.db")
        return f"sqlite:///{tmp_path / 'responses.db'}"
    url: str = request.getfixturevalue("postgres").new_database()
    subprocess.run(["psql", "--quiet", "-v", "ON_ERROR_STOP=1", "-f", str(RELEASE / "postgresql.sql"), url],
                   check=True, capture_output=True)
    return url


def test_a_release_database_opens_in_place_with_every_record_it_kept(release_url: str) -> None:
    async def scenario() -> None:
        records = records_at(release_url, webhooks=True)
        try:
            await _the_release_records_read_back(records)
            await _new_records_go_beside_them(records)
        finally:
            await records.close()

    asyncio.run(scenario())


async def _the_release_records_read_back(records: Records) -> None:
    project = "team-a"
    kept = await records.responses.get("resp_old", project)
    assert kept is not None and kept.response["output"][0]["content"][0]["text"] == "hello"
    assert [item["id"] for item in kept.input_items] == ["msg_in"] and kept.replica == "r1"
    assert await records.responses.get("resp_old", "default") is None  # still the project's alone
    assert [event.split('"type": "')[1].split('"')[0]
            for event in await records.responses.events_after("resp_old", -1, project)] == \
        ["response.created", "response.completed"]
    assert (await records.responses.stored_item("msg_out", project) or {}).get("type") == "message"
    assert await records.responses.response_home("resp_old", project) == "r1"
    conversation = await records.conversations.get_conversation("conv_old", project)
    assert conversation is not None and conversation.metadata == {"k": "v"}
    items, _ = await records.conversations.conversation_items("conv_old", None, None, "asc", project)
    assert [item["id"] for item in items] == ["msg_c1"]
    key = await records.keys.find_key("ab" * 32)
    assert key is not None and (key.id, key.project, key.admin) == ("key_old", project, False)
    [usage] = await records.usage.usage_between(0, 10**9)
    assert (usage.project, usage.requests, usage.input_tokens, usage.output_tokens) == (project, 1, 10, 2)
    stored = await records.files.get_file("file-old", project, now=1700000005)
    assert stored is not None and stored.filename == "notes.txt"
    assert await records.files.file_part("file-old", project, 0) == b"hello"
    assert [replica.id for replica in await records.replicas.live_replicas(10**10)] == ["r1"]
    [ending] = await records.webhooks.claim("replica-new", 30, 10)
    assert (ending.response_id, ending.type) == ("resp_bg", "response.completed")


async def _new_records_go_beside_them(records: Records) -> None:
    response: dict[str, Any] = {"id": "resp_new", "object": "response", "created_at": 1800000000, "model": "m",
                                "status": "completed", "output": [], "tools": []}
    await records.responses.save(StoredResponse("resp_new", 1800000000, "completed", response, [], project="team-a"))
    listed, _ = await records.responses.list_responses("team-a", ResponseFilter(), None, 10, "asc")
    assert [listed_response["id"] for listed_response in listed] == ["resp_old", "resp_bg", "resp_new"]



def test_a_new_database_has_the_schema_a_release_database_has(release_url: str, tmp_path: Path,
                                                              request: pytest.FixtureRequest) -> None:
    """Each room's migrations, gathered and applied in their order, make the schema the release's file had."""
    fresh_url = (f"sqlite:///{tmp_path / 'fresh.db'}" if release_url.startswith("sqlite")
                 else request.getfixturevalue("postgres").new_database())

    async def opened(url: str) -> None:
        records = records_at(url)
        await records.keys.has_keys()  # opens the database, and migrates it
        await records.close()

    for url in (release_url, fresh_url):
        asyncio.run(opened(url))
    assert _schema(fresh_url) == _schema(release_url)


def _schema(url: str) -> set[tuple[Any, ...]]:
    """Every table's columns (name, type, nullability, default), and every index, of the database at `url`."""
    if url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            names = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            columns = {(table, *column[1:]) for table in names
                       for column in db.execute(f"PRAGMA table_info('{table}')")}
            indexes = set(db.execute("SELECT type, name, tbl_name FROM sqlite_master WHERE type = 'index'"))
            version = set(db.execute("PRAGMA user_version"))
        return columns | indexes | version
    import psycopg

    with psycopg.connect(url) as db:
        columns = set(db.execute("SELECT table_name, column_name, data_type, is_nullable, column_default FROM "
                                 "information_schema.columns WHERE table_schema = 'public'").fetchall())
        indexes = set(db.execute("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'")
                      .fetchall())
        versions = set(db.execute("SELECT version FROM schema_migrations").fetchall())
    return columns | indexes | versions
