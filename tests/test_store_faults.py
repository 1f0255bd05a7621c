"""Store faults: a locked SQLite file and a failing store interface. Streams still end with a terminal event,
reads answer 503 (never 500), the failure is logged once, and nothing already stored is lost."""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.config import ServerConfig
from server.http.app import create_app
from server.serving import ServingContext
from server.store.interface import StoreUnavailable
from server.store.sqlite import SqliteStore
from tests.conftest import serve_in_thread
from tests.scripted_engine import ScriptedEngine
from tests.test_server import MODEL, Harness
from tests.test_store import say
from tests.validator import validate_events


def serve(tokenizer: Any, store: Any) -> Any:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             store=store)
    return engine, serve_in_thread(create_app(context))


def test_a_locked_database_still_ends_streams_and_loses_nothing(tokenizer: Any, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "responses.db"
    engine, server = serve(tokenizer, SqliteStore(db, busy_timeout=0.3))
    caplog.set_level(logging.INFO, logger="server")
    with server as base_url:
        harness = Harness(engine, base_url)
        harness.play(say(tokenizer, "Stored before."))
        before = harness.raw_stream(input="one")[-1]["response"]
        locker = sqlite3.connect(db, isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")  # another writer holds the database
        try:
            for text in ("While locked.", "Still locked."):
                harness.play(say(tokenizer, text))
                events = harness.raw_stream(input="two")
                assert validate_events(events).status == "completed" and events[-1]["type"] == "response.completed"
            assert httpx.get(f"{base_url}/responses/{before['id']}").json()["output"] == before["output"]
        finally:
            locker.rollback()
            locker.close()
        harness.play(say(tokenizer, "Stored after."))
        after = harness.raw_stream(input="three")[-1]["response"]
        assert httpx.get(f"{base_url}/responses/{after['id']}").json()["output"] == after["output"]
        assert httpx.get(f"{base_url}/responses/{before['id']}").json()["output"] == before["output"]
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(failures) == 1 and "locked" in failures[0].getMessage() and failures[0].exc_info is None
    assert any("works again" in r.getMessage() for r in caplog.records)


@dataclass
class FaultyStore:
    """A real store behind a switch: while `broken`, every call fails as an unreachable store would."""

    inner: SqliteStore
    broken: bool = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.broken and name != "close":
                raise StoreUnavailable("injected fault")
            return await method(*args, **kwargs)

        return call


def test_a_failing_store_is_a_503_and_streams_still_end(tokenizer: Any, tmp_path: Path) -> None:
    store = FaultyStore(SqliteStore(tmp_path / "responses.db"))
    engine, server = serve(tokenizer, store)
    with server as base_url:
        harness = Harness(engine, base_url)
        harness.play(say(tokenizer, "Kept."))
        kept = harness.raw_stream(input="one")[-1]["response"]
        store.broken = True
        reads = [httpx.get(f"{base_url}/responses/{kept['id']}"),
                 httpx.get(f"{base_url}/responses/{kept['id']}/input_items"),
                 httpx.delete(f"{base_url}/responses/{kept['id']}"),
                 harness.post(input="two", previous_response_id=kept["id"]),
                 harness.post(input="three", background=True),
                 httpx.post(f"{base_url}/conversations", json={}),
                 httpx.get(f"{base_url}/conversations/conv_1/items")]
        for response in reads:
            assert response.status_code == 503, response.text
            assert response.json()["error"]["code"] == "store_unavailable" and response.headers["retry-after"]
        harness.play(say(tokenizer, "Not stored, still answered."))
        assert validate_events(harness.raw_stream(input="four")).status == "completed"
        assert harness.post(input="five").status_code == 200
        assert httpx.get(base_url.removesuffix("/v1") + "/health").status_code == 200
        store.broken = False
        assert httpx.get(f"{base_url}/responses/{kept['id']}").json()["output"] == kept["output"]
