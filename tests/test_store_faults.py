"""Store faults: a locked SQLite file and a failing store interface. Streams still end with a terminal event,
reads answer 503 (never 500), the failure is logged once, and nothing already stored is lost."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import ResponseErrorEvent

from server.config import ServerConfig
from server.http.app import create_app
from server.runs.background import BackgroundRuns
from server.runs.context import ServingContext
from server.records import MIGRATIONS
from tests.stores import faulty_sqlite, sqlite_records
from tests.conftest import serve_in_thread
from conformance.openresponses import check_event
from tests.scripted_engine import ScriptedEngine
from tests.sse import events_of, parse_frames
from tests.test_replicas import first_events
from tests.test_server import MODEL, Harness
from tests.test_store import say, slow, wait_for_status
from conformance.contract import validate_events


def serve(tokenizer: Any, records: Any, lease_seconds: float = 30.0) -> Any:
    engine = ScriptedEngine(tokenizer=tokenizer, scripts=[[]])
    context = ServingContext(config=ServerConfig(served_model_name=MODEL), engine_factory=lambda: engine,
                             records=records, background=BackgroundRuns(lease_seconds=lease_seconds))
    return engine, serve_in_thread(create_app(context))


def test_a_locked_database_still_ends_streams_and_loses_nothing(tokenizer: Any, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "responses.db"
    engine, server = serve(tokenizer, sqlite_records(db, busy_timeout=0.3))
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


def test_a_failing_store_is_a_503_and_streams_still_end(tokenizer: Any, tmp_path: Path) -> None:
    store = faulty_sqlite(tmp_path / "responses.db")
    engine, server = serve(tokenizer, store.records)
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


def test_a_follower_on_another_replica_rides_out_a_store_outage_or_ends_with_an_error_event(
        tokenizer: Any, tmp_path: Path) -> None:
    """B follows a background response that A runs, through the store they share. A short outage of B's store is
    not seen by B's client (the events stay gapless up to the terminal one); one that outlasts a lease ends the
    stream with an `error` event (the spec's and the SDK's), not a cut connection."""
    db = tmp_path / "responses.db"
    a_engine, a_server = serve(tokenizer, sqlite_records(db))
    faulty = faulty_sqlite(db)
    b_engine, b_server = serve(tokenizer, faulty.records, lease_seconds=3.0)
    with a_server as a_url, b_server as b_url:
        a, b = Harness(a_engine, a_url), Harness(b_engine, b_url)

        def outage_until(failed_calls: int) -> None:
            faulty.broken, faulty.failures = True, 0
            deadline = time.monotonic() + 60
            while faulty.failures < failed_calls and time.monotonic() < deadline:
                time.sleep(0.01)
            faulty.broken = False

        slow(a, tokenizer, words=60, delay=0.03)
        first = first_events(a, 6, input="Count.", background=True)
        response_id = first[0]["response"]["id"]
        with httpx.stream("GET", f"{b_url}/responses/{response_id}", timeout=60,
                          params={"stream": "true", "starting_after": first[-1]["sequence_number"]}) as response:
            restorer = threading.Thread(target=outage_until, args=(3,))
            restorer.start()
            rest = events_of(parse_frames(response.iter_lines()))
            restorer.join()
        assert faulty.failures >= 3
        final = validate_events(first + rest)
        assert final.status == "completed" and final.output_text.startswith("word0 word1")

        slow(a, tokenizer, words=60, delay=0.1)
        first = first_events(a, 6, input="Count again.", background=True)
        response_id = first[0]["response"]["id"]
        stream = b.client.responses.retrieve(response_id, stream=True, starting_after=first[-1]["sequence_number"])
        with httpx.stream("GET", f"{b_url}/responses/{response_id}", timeout=60,
                          params={"stream": "true", "starting_after": first[-1]["sequence_number"]}) as response:
            faulty.broken = True
            events = events_of(parse_frames(response.iter_lines()))
        ended = events[-1]
        assert ended["type"] == "error" and ended["error"]["code"] == "store_unavailable", ended
        check_event(ended)
        error = ResponseErrorEvent.model_validate(ended)
        assert error.sequence_number == first[-1]["sequence_number"] + len(events)
        with pytest.raises(openai.APIError, match="store"):
            for _ in stream:
                pass
        faulty.broken = False
        assert wait_for_status(b, response_id, {"completed"}, within=60).output_text.startswith("word0 word1")



def test_stores_opening_a_new_database_at_once_all_find_it_migrated(tmp_path: Path) -> None:
    """`--api-server-count N` opens one new file from N processes at the same moment: each migrates it or waits for
    the one that does (one that lost the race started with the store unavailable and refused every key)."""
    import asyncio

    def first_read(store: Any, ready: threading.Barrier) -> bool:
        ready.wait()
        return asyncio.run(store.has_keys())

    for attempt in range(10):
        path = tmp_path / f"new-{attempt}.db"
        stores = [sqlite_records(path).keys for _ in range(12)]
        ready = threading.Barrier(len(stores))
        results: list[Any] = []
        threads = [threading.Thread(target=lambda s=store: results.append(_outcome(first_read, s, ready)))
                   for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [False] * len(stores), results
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS.latest("sqlite")
        db.close()


def _outcome(work: Any, *args: Any) -> Any:
    try:
        return work(*args)
    except Exception as exc:  # noqa: BLE001 - the test reports what each store met
        return repr(exc)
